"""kill -9 during heavy list/watch writes, 20 times: the cache opens, verifies, no half list."""

from __future__ import annotations

import asyncio
import collections
import pathlib
import random
import signal
import subprocess
import sys

import pytest
from cache_writer import LIST, SCOPE

from yurthub.cache import store, verifying

pytestmark = pytest.mark.slow

WRITER = pathlib.Path(__file__).with_name("cache_writer.py")


async def test_kill_9_twenty_times(tmp_path: pathlib.Path) -> None:
    cache = tmp_path / "cache"
    rng = random.Random(4)
    generations: list[str] = []
    for _ in range(20):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WRITER),
            str(cache),
            "500",
            stdout=subprocess.PIPE,
            cwd=WRITER.parent,
        )
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(30):
                assert (await proc.stdout.readline()).strip() == b"ready"
            await asyncio.sleep(rng.uniform(0.0, 0.3))
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        assert proc.returncode == -signal.SIGKILL

        con = verifying.connect(cache)
        try:
            report = verifying.verify(con)
        finally:
            con.close()
        assert report.ok, report.problems[:5]

        s = await store.Store.open(cache)
        try:
            record = s.list_record(LIST)
            assert record is not None
            members = [(k, e) for k, e in s.objects(SCOPE) if str(LIST) in e.owners]
            gens = collections.Counter((e.labels or {}).get("gen") for _, e in members)
            assert len(gens) == 1, gens  # one generation, whole
            assert len(members) == record.members == 500
            generations.append(next(iter(gens)) or "")
        finally:
            await s.close()
    # The writer really was interrupted at different points.
    assert len(set(generations)) > 1


def test_verify_command_on_the_killed_cache(tmp_path: pathlib.Path) -> None:
    cache = tmp_path / "cache"
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(cache), "500"], stdout=subprocess.PIPE, cwd=WRITER.parent
    )
    assert proc.stdout is not None
    with proc.stdout:
        try:
            assert proc.stdout.readline().strip() == b"ready"
        finally:
            proc.kill()
            proc.wait()
    edgehub = pathlib.Path(sys.executable).with_name("edgehub")
    done = subprocess.run(
        [str(edgehub), "cache", "verify", "--disk-cache-path", str(cache)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok: ")
