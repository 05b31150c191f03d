"""The outage history on disk (real SQLite): the last outages only, oldest first out; an Event's
state that a later save of the record never undoes; a damaged file started anew; 0600."""

from __future__ import annotations

import os
import pathlib
import sqlite3
import stat

from yurthub import metrics
from yurthub.outages import history, recording, records

T0 = 1_767_225_600.0


def ended(i: int) -> records.Outage:
    o = records.begin(T0 + 100 * i, "refused", "connection refused")
    o.answered(("kubelet", "get", "nodes"), "cache", 200)
    o.end(T0 + 100 * i + 10, 0)
    return o


async def test_the_history_keeps_the_last_outages_oldest_first_out(tmp_path: pathlib.Path) -> None:
    h = await history.open_history(tmp_path)
    try:
        for i in range(history.LIMIT + 10):
            await h.save(ended(i))
        kept = await h.newest()
        assert len(kept) == history.LIMIT
        assert [o.id for o in kept] == [
            ended(i).id for i in reversed(range(10, history.LIMIT + 10))
        ]
        assert kept[0] == ended(history.LIMIT + 9)
    finally:
        await h.close()
    mode = stat.S_IMODE((tmp_path / history.FILE_NAME).stat().st_mode)
    assert mode == 0o600


async def test_an_events_state_survives_later_saves_and_a_reopen(tmp_path: pathlib.Path) -> None:
    h = await history.open_history(tmp_path, limit=3)
    first, second = ended(1), ended(2)
    ongoing = records.begin(T0 + 1000, "silent", "no answer")
    for o in (first, second, ongoing):
        await h.save(o)
    assert [o.id for o in await h.unposted()] == [first.id, second.id]  # oldest first
    await h.set_event(first.id, records.POSTED)
    first.answered(("kubelet", "list", "pods"), "cache", 200)  # a late answer, saved again
    await h.save(first)
    assert [o.id for o in await h.unposted()] == [second.id]
    await h.close()

    h = await history.open_history(tmp_path, limit=3)
    try:
        newest = await h.newest()
        assert [o.id for o in newest] == [ongoing.id, second.id, first.id]
        assert newest[0].ended is None
        assert newest[2].event == records.POSTED and newest[2].answered_total == 2
        # A fourth outage pushes the oldest out.
        await h.save(ended(3))
        assert first.id not in {o.id for o in await h.newest()}
    finally:
        await h.close()


async def test_a_damaged_history_is_started_anew(tmp_path: pathlib.Path) -> None:
    (tmp_path / history.FILE_NAME).write_bytes(b"not a database" * 100)
    h = await history.open_history(tmp_path)
    try:
        assert await h.newest() == []
        await h.save(ended(1))
        assert len(await h.newest()) == 1
    finally:
        await h.close()


async def test_a_history_with_damaged_pages_under_a_sound_header_is_started_anew(
    tmp_path: pathlib.Path,
) -> None:
    """SQLite opens such a file and fails every query after: the hub must start all the same
    (the restarted hub reads the history before it serves)."""
    h = await history.open_history(tmp_path)
    for i in range(20):
        big = ended(i)
        for k in range(records.MAX_KEYS):
            big.answered(("kubelet", "get", f"r{k}"), "cache", 200)
        await h.save(big)
    await h.close()
    path = tmp_path / history.FILE_NAME
    pages = path.stat().st_size // 4096
    assert pages > 8  # the header page stays whole, the table's pages do not
    with path.open("r+b") as f:
        for page in range(2, pages, 2):
            f.seek(page * 4096 + 100)
            f.write(os.urandom(2000))

    recorder = recording.Recorder(await history.open_history(tmp_path), metrics.Metrics())
    try:
        await recorder.open()
        assert recorder.current is None and recorder.last is None
        assert await recorder.history.newest() == []
        await recorder.history.save(ended(30))
        assert [o.id for o in await recorder.history.newest()] == [ended(30).id]
    finally:
        await recorder.close()
        await recorder.history.close()


async def test_a_history_that_fails_to_read_does_not_stop_the_hub(
    tmp_path: pathlib.Path,
) -> None:
    h = await history.open_history(tmp_path)
    await h.save(records.begin(T0, "silent", "no answer"))  # an ongoing one to pick up
    h._db._conn.close()  # every query now raises sqlite3.ProgrammingError
    recorder = recording.Recorder(h, metrics.Metrics())
    await recorder.open()
    assert recorder.current is None and recorder.last is None
    await h.close()


async def test_a_row_that_is_no_record_is_skipped(tmp_path: pathlib.Path) -> None:
    h = await history.open_history(tmp_path)
    try:
        await h.save(ended(1))
        with sqlite3.connect(tmp_path / history.FILE_NAME) as con:
            con.execute(
                "INSERT INTO outages (id, began, ended, record) VALUES ('x', ?, ?, ?)",
                (T0 + 500, T0 + 501, b'{"id": 1}'),
            )
        con.close()
        assert [o.id for o in await h.newest()] == [ended(1).id]
    finally:
        await h.close()


async def test_in_memory_without_a_directory() -> None:
    h = await history.open_history(None)
    try:
        await h.save(ended(1))
        assert [o.id for o in await h.newest()] == [ended(1).id]
    finally:
        await h.close()
