"""A flapping link through the outage record and its Event poster (``outages.recording``,
``outages.posting``, ``outages.flapping``) on a real history file, with the recorder's clock
stepped by the test (no sleeps): a drop within the flap window after a heal goes on with the
same outage (one record, its flaps counted, one Event once the link stayed up); a drop after
the window, or after the Event was posted, is a new outage; a hub stopped within the window
posts the Event on its next start, or goes on with the outage if the link drops again.

The cloud's side of the poster is a stand-in for the apiserver's Event endpoint (it keeps
Events by name and answers a repeated name with 409, as the apiserver does); the real hub
against the simulated apiserver is ``tests/integration/cache/test_cache_outages.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
import sqlite3
import zlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import orjson
import pytest

from yurthub import metrics
from yurthub.outages import causes, history, posting, recording, records

T0 = 1_767_225_600.0
SERVER = "https://10.0.0.1:6443"
NODE = "edge-1"
WINDOW = 30.0


class Clock:
    """The hub's two clocks in one boot, stepped by the test."""

    def __init__(self, boot: str = "boot-1") -> None:
        self.wall, self.mono, self.boot = T0, 1000.0, boot

    def __call__(self) -> records.Instant:
        return records.Instant(self.wall, self.boot, self.mono)

    def run(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


class Cloud:
    """The apiserver's ``POST .../events`` as the poster meets it, and the link's state."""

    def __init__(self) -> None:
        self.up = False
        self.events: dict[str, dict[str, Any]] = {}
        self.posts = 0

    def healthy_server(self) -> str | None:
        return SERVER if self.up else None

    async def call_as_hub(
        self,
        server: str,
        method: str,
        path: str,
        *,
        data: bytes | None,
        headers: Mapping[str, str],
        within: float,
        limit: int,
    ) -> tuple[int, bytes | None]:
        assert (server, method, path) == (SERVER, "POST", posting.PATH) and data is not None
        self.posts += 1
        event = orjson.loads(data)
        name = event["metadata"]["name"]
        if name in self.events:
            return 409, b'{"kind":"Status","reason":"AlreadyExists"}'
        self.events[name] = event
        return 201, data


@dataclasses.dataclass
class Hub:
    recorder: recording.Recorder
    poster: posting.Poster
    cloud: Cloud
    clock: Clock

    def cut(self) -> None:
        """The last server's probe fails: health declares the cloud gone."""
        self.cloud.up = False
        self.recorder.failure(SERVER, causes.Cause.REFUSED, "connection refused")
        self.recorder.cloud(False)

    def heal(self) -> None:
        self.cloud.up = True
        self.recorder.cloud(True)

    def outage(self, seconds: float) -> records.Outage:
        """A cut of ``seconds`` on the test's clock, healed: the outage it began."""
        self.cut()
        began = self.recorder.current
        assert began is not None
        self.clock.run(seconds)
        self.heal()
        return began

    async def looked(self) -> None:
        """Wait until the poster has looked at what is due twice since now (so at least once
        whole after the last change)."""
        since = self.poster.rounds
        await until(lambda: self.poster.rounds >= since + 2)

    async def posted(self, count: int) -> list[dict[str, Any]]:
        """Wait for ``count`` Events in the cloud and nothing left to post."""
        await until(lambda: len(self.cloud.events) >= count)

        async def all_done() -> bool:
            return not await self.recorder.unposted()

        async with asyncio.timeout(10):
            while not await all_done():
                await asyncio.sleep(0.01)
        return list(self.cloud.events.values())

    def sample(self, name: str) -> float:
        return self.recorder._metrics.registry.get_sample_value(name) or 0.0


async def until(check: Callable[[], bool], within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while not check():
            await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def running(
    directory: pathlib.Path,
    clock: Clock,
    cloud: Cloud | None = None,
    *,
    flap_window: float = WINDOW,
) -> AsyncIterator[Hub]:
    """A hub's outage record and Event poster on the history in ``directory``, as
    ``server.Hub`` runs them (the poster looking every 20 ms: the test steps the clock)."""
    store = await history.open_history(directory)
    recorder = recording.Recorder(
        store, metrics.Metrics(), clock=clock, save_interval=3600, flap_window=flap_window
    )
    await recorder.open()
    cloud = cloud or Cloud()
    poster = posting.Poster(
        recorder,
        cloud,  # type: ignore[arg-type]
        cloud.healthy_server,
        node_name=NODE,
        spread=0.0,
        timeout=5.0,
        poll=0.02,
    )
    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [
                tg.create_task(recorder.run(), name="outage-record"),
                tg.create_task(poster.run(), name="outage-events"),
            ]
            try:
                yield Hub(recorder, poster, cloud, clock)
            finally:
                for task in tasks:
                    task.cancel()
    finally:
        await recorder.close()
        await store.close()


async def stored(directory: pathlib.Path) -> list[records.Outage]:
    store = await history.open_history(directory)
    try:
        return await store.newest()
    finally:
        await store.close()


async def test_a_drop_within_the_window_goes_on_with_the_same_outage_and_one_event(
    tmp_path: pathlib.Path,
) -> None:
    clock = Clock()
    async with running(tmp_path, clock) as hub:
        hub.cut()
        first = hub.recorder.current
        assert first is not None
        clock.run(60)
        hub.heal()
        await hub.looked()
        assert hub.cloud.posts == 0  # the link has not stayed up yet: the Event waits
        assert hub.recorder.last_outage() is None  # nor does the condition name it yet
        clock.run(5)
        hub.cut()  # 5 s later: the same outage goes on
        assert hub.recorder.current is first and first.flaps == 1
        ongoing = (await hub.recorder.status())["ongoing"]
        assert ongoing["flaps"] == 1 and ongoing["seconds"] == 65
        outage = hub.recorder.begin_request()
        assert outage is first
        hub.recorder.answered(outage, ("kubelet", "get", "nodes"), "cache", 200)
        clock.run(10)
        hub.heal()
        clock.run(WINDOW - 1)
        await hub.looked()
        assert hub.cloud.posts == 0 and hub.recorder.last_outage() is None
        clock.run(1)  # up for the whole window: final
        (event,) = await hub.posted(1)
        assert event["metadata"]["name"] == records.event_name(NODE, first.id)
        message = event["message"]
        assert message.startswith(f"Node {NODE} could not reach the cloud for 1m15s, ")
        assert "The link came back once for less than 30s (5s in all, counted in its length)." in (
            message
        )
        assert "The hub answered 1 request locally" in message
        named = hub.recorder.last_outage()
        assert named is not None and named.lasted == "1m15s"
        assert hub.sample("node_yurthub_outage_flaps_total") == 1
        assert hub.sample("node_yurthub_outage_seconds_count") == 1
        assert hub.sample("node_yurthub_outage_seconds_sum") == 75
        (shown,) = (await hub.recorder.document())["outages"]
        assert (shown["flaps"], shown["flapSeconds"], shown["seconds"]) == (1, 5, 75)
        assert shown["failedProbes"] == {"refused": 2} and shown["event"] == records.POSTED
    (kept,) = await stored(tmp_path)
    assert (kept.id, kept.flaps, kept.lasted, kept.event) == (first.id, 1, 75.0, records.POSTED)


async def test_many_flaps_are_one_record_and_the_condition_keeps_naming_the_one_before(
    tmp_path: pathlib.Path,
) -> None:
    clock = Clock()
    async with running(tmp_path, clock) as hub:
        hub.cut()
        clock.run(10)
        hub.heal()
        clock.run(WINDOW)
        (before,) = await hub.posted(1)
        named = hub.recorder.last_outage()
        assert named is not None and named.lasted == "10s"
        clock.run(100)
        hub.cut()
        flapping = hub.recorder.current
        assert flapping is not None and flapping.flaps == 0
        for _ in range(20):  # up 2 s, down 1 s, twenty times
            clock.run(1)
            hub.heal()
            assert hub.recorder.last_outage() == named
            clock.run(2)
            hub.cut()
            assert hub.recorder.last_outage() == named
            status = await hub.recorder.status()
            assert status["last"]["began"] == records.timestamp(T0)  # the one before
        assert hub.recorder.current is flapping and flapping.flaps == 20
        clock.run(1)
        hub.heal()
        clock.run(WINDOW)
        events = await hub.posted(2)
        assert len(events) == 2 and before in events
        assert "The link came back 20 times for less than 30s (40s in all" in events[1]["message"]
        named = hub.recorder.last_outage()
        assert named is not None and named.lasted == "1m01s"
    assert [o.flaps for o in await stored(tmp_path)] == [20, 0]


async def test_a_drop_after_the_window_is_a_new_outage(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    async with running(tmp_path, clock) as hub:
        hub.cut()
        first = hub.recorder.current
        clock.run(60)
        hub.heal()
        clock.run(WINDOW)  # up for the whole window: whether posted yet or not, it is final
        hub.cut()
        second = hub.recorder.current
        assert second is not None and second is not first and second.flaps == 0
        clock.run(5)
        hub.heal()
        clock.run(WINDOW)
        events = await hub.posted(2)
        assert len({e["metadata"]["name"] for e in events}) == 2
        assert hub.sample("node_yurthub_outage_flaps_total") == 0
        assert hub.sample("node_yurthub_outage_seconds_count") == 2
    assert [(o.flaps, o.lasted) for o in await stored(tmp_path)] == [(0, 5.0), (0, 60.0)]


async def test_a_drop_after_the_event_was_posted_is_a_new_outage(tmp_path: pathlib.Path) -> None:
    """The Event is in the cloud: its words are final. Here the hub restarts with a longer flap
    window, so the posted outage ended within it."""
    clock = Clock()
    async with running(tmp_path, clock) as hub:
        hub.cut()
        clock.run(60)
        hub.heal()
        clock.run(WINDOW)
        await hub.posted(1)
    clock.run(1)
    async with running(tmp_path, clock, flap_window=3600) as hub:
        assert hub.recorder.last is not None and hub.recorder.last.event == records.POSTED
        hub.cut()
        current = hub.recorder.current
        assert current is not None and current.id != hub.recorder.last.id
    assert [o.flaps for o in await stored(tmp_path)] == [0, 0]


async def test_a_hub_stopped_within_the_window_posts_the_event_on_its_next_start(
    tmp_path: pathlib.Path,
) -> None:
    clock = Clock()
    cloud = Cloud()
    async with running(tmp_path, clock, cloud) as hub:
        began = hub.outage(60)
        await hub.looked()
    assert cloud.posts == 0  # stopped within the window: the history keeps it unposted
    clock.run(10)  # the same boot: the window is measured across the restart
    async with running(tmp_path, clock, cloud) as hub:
        await hub.looked()
        assert cloud.posts == 0  # 20 s of the window left
        (pending,) = await hub.recorder.unposted()
        assert pending.id == began.id
        last = (await hub.recorder.status())["last"]
        assert last["event"] == "pending" and last["flaps"] == 0
        named = hub.recorder.last_outage()  # a restarted hub names it as it ended first
        assert named is not None and named.lasted == "1m00s"
        clock.run(WINDOW - 10)
        (event,) = await hub.posted(1)
        assert event["metadata"]["name"] == records.event_name(NODE, began.id)
        assert hub.sample("node_yurthub_outage_seconds_count") == 1  # observed here, once


async def test_a_hub_restarted_within_the_window_goes_on_with_the_outage_when_the_link_drops(
    tmp_path: pathlib.Path,
) -> None:
    clock = Clock()
    cloud = Cloud()
    async with running(tmp_path, clock, cloud) as hub:
        began = hub.outage(60)
    clock.run(3)
    async with running(tmp_path, clock, cloud) as hub:
        hub.cut()  # the restarted hub's first probe round finds the link gone
        current = hub.recorder.current
        assert current is not None and current.id == began.id
        assert (current.flaps, current.restarts) == (1, 1)
        assert await hub.recorder.unposted() == []  # its row still says ended: not posted
        clock.run(7)
        hub.heal()
        clock.run(WINDOW)
        (event,) = await hub.posted(1)
        assert "The hub restarted once during it." in event["message"]
        assert "came back once for less than 30s (3s in all" in event["message"]
    (kept,) = await stored(tmp_path)
    assert (kept.flaps, kept.restarts, kept.lasted) == (1, 1, 70.0)


async def test_a_reboot_within_the_window_makes_it_final(tmp_path: pathlib.Path) -> None:
    """Another boot's monotonic clock cannot measure the window: posted at once, and a drop is
    a new outage."""
    clock = Clock()
    cloud = Cloud()
    async with running(tmp_path, clock, cloud) as hub:
        hub.cut()
        first = hub.recorder.current
        assert first is not None
        clock.run(60)
        hub.heal()
    rebooted = Clock(boot="boot-2")
    async with running(tmp_path, rebooted, cloud) as hub:
        hub.cut()
        second = hub.recorder.current
        assert second is not None and second.id != first.id and second.flaps == 0
        hub.heal()
        await until(lambda: len(cloud.events) == 1)  # the first at once
        assert list(cloud.events) == [records.event_name(NODE, first.id)]
        rebooted.run(WINDOW)  # the second once the link stayed up in this boot
        await hub.posted(2)


async def test_no_window_posts_at_the_heal_and_every_drop_is_new(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    async with running(tmp_path, clock, flap_window=0) as hub:
        hub.cut()
        hub.heal()
        await hub.posted(1)
        hub.cut()
        hub.heal()
        await hub.posted(2)


async def test_a_history_of_the_previous_release_opens_with_its_rows_and_posts_them(
    tmp_path: pathlib.Path,
) -> None:
    """The file the previous release wrote (the same table, records without the flap fields):
    its rows are kept and read with no flaps; its unposted outage, with no end reading, is
    final: posted at once."""
    path = tmp_path / history.FILE_NAME
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute(
            "CREATE TABLE outages (id TEXT PRIMARY KEY, began REAL NOT NULL, ended REAL, "
            "event TEXT NOT NULL DEFAULT '', record BLOB NOT NULL, seq INTEGER)"
        )
        for seq, event in ((1, records.POSTED), (2, "")):
            old = records.begin(records.Instant(T0 + seq, "boot-0", 5.0), f"old{seq}", "silent", "")
            old.end(records.Instant(T0 + seq + 40, "boot-0", 45.0), 0)
            data = records.to_stored(old)
            for key in ("until", "flaps", "flapSeconds"):
                del data[key]
            con.execute(
                "INSERT INTO outages (id, began, ended, event, record, seq) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (old.id, old.began, old.ended, event, zlib.compress(orjson.dumps(data)), seq),
            )
        con.commit()
    clock = Clock(boot="boot-0")
    async with running(tmp_path, clock) as hub:
        hub.heal()  # the first probe round finds the cloud: nothing to end
        (event,) = await hub.posted(1)
        assert event["metadata"]["name"] == records.event_name(NODE, "old2")
        assert "came back" not in event["message"]
        shown = (await hub.recorder.document())["outages"]
        assert [(o["id"], o["flaps"], o["seconds"]) for o in shown] == [
            ("old2", 0, 40),
            ("old1", 0, 40),
        ]
        hub.cut()  # within 30 s of old2's end, but no end reading: a new outage
        assert hub.recorder.current is not None and hub.recorder.current.id not in ("old1", "old2")


@pytest.mark.parametrize("window", [WINDOW, 0.0])
async def test_a_flap_counts_the_failed_probe_that_dropped_the_link(
    tmp_path: pathlib.Path, window: float
) -> None:
    clock = Clock()
    async with running(tmp_path, clock, flap_window=window) as hub:
        hub.cut()
        hub.heal()
        clock.run(1)
        hub.recorder.failure(SERVER, causes.Cause.SILENT, "no answer within 2 s")
        hub.recorder.cloud(False)
        current = hub.recorder.current
        assert current is not None
        if window:
            assert current.causes == {"refused": 1, "silent": 1} and current.cause == "refused"
            assert "later also: no answer in time" in records.cause_words(current)
        else:
            assert current.causes == {"silent": 1} and current.cause == "silent"
