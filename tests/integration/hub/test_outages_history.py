"""The outage history on disk (real SQLite): the last outages only, oldest inserted first out
(never by the wall clock); an Event's state that a later save of the record never undoes; a
restarted hub's pick-up by stored state; a file of an older hub; a damaged file started anew;
0600."""

from __future__ import annotations

import contextlib
import os
import pathlib
import sqlite3
import stat
import zlib

import orjson
import pytest

from yurthub import metrics
from yurthub.outages import history, recording, records

T0 = 1_767_225_600.0


def at(seconds: float) -> records.Instant:
    """``seconds`` after T0 on both clocks, in one boot."""
    return records.Instant(T0 + seconds, "boot-1", 1000.0 + seconds)


def ended(i: int) -> records.Outage:
    o = records.begin(at(100 * i), f"id-{i}", "refused", "connection refused")
    o.answered(("kubelet", "get", "nodes"), "cache", 200)
    o.end(at(100 * i + 10), 0)
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
    ongoing = records.begin(at(1000), "ongoing", "silent", "no answer")
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
        for _ in range(records.MAX_KEYS):
            # random names: the stored records (compressed) still fill many pages
            big.answered(("kubelet", "get", os.urandom(24).hex()), "cache", 200)
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
    await h.save(records.begin(at(0), "ongoing", "silent", "no answer"))  # one to pick up
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


def wall(o: records.Outage, when: float) -> records.Outage:
    """``o`` as if the wall clock read ``when`` as it began (nothing else about it changes)."""
    o.began = when
    if o.ended is not None:
        o.ended = when + 10
    return o


async def test_order_and_cap_follow_insertion_not_the_wall_clock(tmp_path: pathlib.Path) -> None:
    """A full history, then an outage begun with the wall clock far behind (a node without a
    battery-backed clock booted in 1970): it is the newest, kept, and the oldest inserted goes."""
    h = await history.open_history(tmp_path, limit=3)
    try:
        first, second, third = ended(1), ended(2), ended(3)
        for o in (first, second, third):
            await h.save(o)
        behind = wall(records.begin(at(400), "behind", "silent", "no answer"), 5.0)
        await h.save(behind)
        assert [o.id for o in await h.newest()] == ["behind", third.id, second.id]
        behind.end(at(500), 0)
        await h.save(behind)  # an update keeps its place
        ahead = wall(ended(4), T0 + 3650 * 86400.0)
        await h.save(ahead)
        assert [o.id for o in await h.newest()] == [ahead.id, "behind", third.id]
        assert [o.id for o in await h.unposted()] == [third.id, "behind", ahead.id]
    finally:
        await h.close()


async def test_a_restart_picks_up_the_ongoing_outage_by_its_state_not_its_time(
    tmp_path: pathlib.Path,
) -> None:
    """The last ended outage shows a wall time far ahead of the ongoing one's (the clock was
    stepped back between them): the restarted hub still goes on with the ongoing one."""
    h = await history.open_history(tmp_path)
    last = wall(ended(1), T0 + 86400.0)
    await h.save(last)
    ongoing = wall(records.begin(at(200), "now", "refused", "connection refused"), T0 - 86400.0)
    ongoing.answered(("kubelet", "get", "nodes"), "cache", 200)
    await h.save(ongoing)
    await h.close()

    recorder = recording.Recorder(
        await history.open_history(tmp_path), metrics.Metrics(), clock=lambda: at(260)
    )
    try:
        await recorder.open()
        assert recorder.current is not None and recorder.current.id == "now"
        assert recorder.current.restarts == 1 and recorder.current.answered_total == 1
        assert recorder.current.seconds(at(260)) == 60  # same boot: the time away counts
        assert recorder.last is not None and recorder.last.id == last.id
    finally:
        await recorder.close()
        await recorder.history.close()


async def test_an_ongoing_record_left_behind_a_newer_one_is_ended_not_resumed(
    tmp_path: pathlib.Path,
) -> None:
    h = await history.open_history(tmp_path)
    stale = records.begin(at(0), "stale", "refused", "connection refused")
    stale.touch(at(30))
    await h.save(stale)  # its end was never saved
    await h.save(ended(5))
    await h.close()
    recorder = recording.Recorder(
        await history.open_history(tmp_path), metrics.Metrics(), clock=lambda: at(900)
    )
    try:
        await recorder.open()
        assert recorder.current is None
        await recorder.save()
        (found,) = [o for o in await recorder.history.newest() if o.id == "stale"]
        assert found.ended is not None and found.lasted == 30
        assert [o.id for o in await recorder.unposted()] == ["stale", ended(5).id]
    finally:
        await recorder.close()
        await recorder.history.close()


async def test_a_history_from_an_older_hub_keeps_its_order(tmp_path: pathlib.Path) -> None:
    """The file an older hub wrote (no ``seq``, records as plain JSON): opened, ordered by the
    rows' insertion, its records read; new rows go after them."""
    path = tmp_path / history.FILE_NAME
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute(
            "CREATE TABLE outages (id TEXT PRIMARY KEY, began REAL NOT NULL, ended REAL, "
            "event TEXT NOT NULL DEFAULT '', record BLOB NOT NULL)"
        )
        con.execute("CREATE INDEX outages_by_began ON outages (began)")
        for i, began in enumerate((T0 + 50, T0 - 50, T0)):  # inserted in this order
            record = {"id": f"old-{i}", "began": began, "ended": began + 20, "cause": "refused"}
            con.execute(
                "INSERT INTO outages (id, began, ended, record) VALUES (?, ?, ?, ?)",
                (f"old-{i}", began, began + 20, orjson.dumps(record)),
            )
        con.commit()
    h = await history.open_history(tmp_path)
    try:
        await h.save(ended(9))
        kept = await h.newest()
        assert [o.id for o in kept] == [ended(9).id, "old-2", "old-1", "old-0"]
        assert kept[1].lasted == 20
    finally:
        await h.close()


@pytest.mark.parametrize(
    "raw",
    [b"", b"\x78\x9c garbage", zlib.compress(b"[1, 2]"), zlib.compress(b"{" * 10)],
)
def test_what_is_not_a_stored_record_is_a_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        history.decode(raw)


def test_a_stored_record_inflating_past_its_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="bound"):
        history.decode(zlib.compress(b" " * (history.MAX_RECORD + 1)))
