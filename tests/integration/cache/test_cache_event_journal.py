"""The offline Event journal on a real SQLite file: folding, bounds, removal, kill -9."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import sqlite3
import subprocess
import sys
from typing import Any

import pytest

from yurthub.cache import eventfolding, eventjournal

CORE = eventfolding.CORE
WRITER = pathlib.Path(__file__).with_name("event_journal_writer.py")


def event(name: str, reason: str = "BackOff", **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web"},
        "reason": reason,
        "message": "m",
        "source": {"component": "kubelet", "host": "n1"},
        "count": 1,
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        **extra,
    }


async def opened(
    tmp_path: pathlib.Path, bounds: eventfolding.Bounds | None = None
) -> eventjournal.Journal:
    return await eventjournal.open_journal(
        tmp_path, bounds or eventfolding.Bounds(), clock=lambda: 1767225600.0
    )


async def test_a_recreate_after_a_kubelet_restart_folds_under_the_new_name(
    tmp_path: pathlib.Path,
) -> None:
    journal = await opened(tmp_path)
    try:
        await journal.create(CORE, "default", event("web.1"))
        # kubelet restarted offline: its recorder forgot, the same Event comes with a new name.
        await journal.create(CORE, "default", event("web.2", lastTimestamp="2026-01-01T00:01:00Z"))
        assert journal.pending == 1
        patched = await journal.patch(
            CORE, "default", "web.2", {"count": 5, "lastTimestamp": "2026-01-01T00:02:00Z"}
        )
        assert patched is not None and patched["count"] == 5
        assert patched["metadata"]["name"] == "web.1"
        # The restarted recorder patches by the new name; the old one is forgotten (bounded).
        assert await journal.patch(CORE, "default", "web.1", {"count": 6}) is None
        assert await journal.patch(CORE, "default", "unknown", {"count": 6}) is None
        assert await journal.patch(CORE, "other", "web.2", {"count": 6}) is None
        assert await journal.patch(CORE, "default", "web.2", {"count": 6}) is not None
        (entry,) = await journal.head(10)
        assert entry.body["count"] == 6
        assert entry.body["firstTimestamp"] == "2026-01-01T00:00:00Z"
        assert entry.body["lastTimestamp"] == "2026-01-01T00:02:00Z"
    finally:
        await journal.close()


async def test_bounds_drop_the_oldest_and_count_them(tmp_path: pathlib.Path) -> None:
    journal = await opened(tmp_path, eventfolding.Bounds(events=3, bytes=1 << 20))
    try:
        for i in range(5):
            await journal.create(CORE, "default", event(f"e{i}", reason=f"R{i}"))
        assert journal.pending == 3 and journal.dropped == 2
        assert [e.body["metadata"]["name"] for e in await journal.head(10)] == ["e2", "e3", "e4"]
        assert await journal.patch(CORE, "default", "e0", {"count": 2}) is None  # gone
        drops = await journal.drops()
        assert drops is not None and drops.count == 2
        await journal.create(CORE, "default", event("e5", reason="R5"))
        await journal.told(2)  # the summary of the first two was posted meanwhile
        assert journal.dropped == 1
    finally:
        await journal.close()


async def test_an_entry_changed_while_posting_is_kept(tmp_path: pathlib.Path) -> None:
    journal = await opened(tmp_path)
    try:
        await journal.create(CORE, "default", event("e"))
        (entry,) = await journal.head(1)
        await journal.patch(CORE, "default", "e", {"count": 2})
        assert not await journal.remove(entry)
        assert journal.pending == 1
        assert await journal.remove(entry, unless_changed=False)
        assert journal.pending == 0
    finally:
        await journal.close()


async def test_a_damaged_journal_starts_empty(tmp_path: pathlib.Path) -> None:
    (tmp_path / eventjournal.FILE_NAME).write_bytes(b"this is not a database" * 100)
    journal = await opened(tmp_path)
    try:
        assert journal.pending == 0
        await journal.create(CORE, "default", event("e"))
        assert journal.pending == 1
    finally:
        await journal.close()


async def test_a_journal_with_damaged_pages_under_a_sound_header_starts_empty(
    tmp_path: pathlib.Path,
) -> None:
    """SQLite opens such a file and fails every query after (the hub then ran without a
    journal, its offline Events kept nowhere, until someone removed the file)."""
    journal = await opened(tmp_path, eventfolding.Bounds(events=500, bytes=16 << 20))
    for i in range(200):
        await journal.create(CORE, "default", event(f"e{i}", reason=f"R{i}", message="m" * 400))
    await journal.close()
    path = tmp_path / eventjournal.FILE_NAME
    pages = path.stat().st_size // 4096
    assert pages > 8  # the header page stays whole, the table's pages do not
    with path.open("r+b") as f:
        for page in range(2, pages, 2):
            f.seek(page * 4096 + 100)
            f.write(os.urandom(2000))
    journal = await opened(tmp_path)
    try:
        assert journal.pending == 0
        await journal.create(CORE, "default", event("e"))
        assert journal.pending == 1
    finally:
        await journal.close()


@pytest.mark.slow
async def test_kill_9_mid_write_leaves_a_consistent_journal(tmp_path: pathlib.Path) -> None:
    for round_ in range(5):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(WRITER), str(tmp_path), stdout=subprocess.PIPE
        )
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(30):
                # Killed while appending: after some writes, at no chosen moment.
                for _ in range(20 + 7 * round_):
                    assert (await proc.stdout.readline()).strip() == b"wrote"
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        con = sqlite3.connect(tmp_path / eventjournal.FILE_NAME)
        try:
            assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            # Every name points at an entry: no half-written fold or eviction.
            orphans = con.execute(
                "SELECT COUNT(*) FROM names WHERE seq NOT IN (SELECT seq FROM entries)"
            ).fetchone()
            assert orphans == (0,)
            count = con.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
            assert 0 < count <= 50
        finally:
            con.close()
        journal = await opened(tmp_path, eventfolding.Bounds(events=50))
        await journal.close()
