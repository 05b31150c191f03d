"""What begins an outage (``outages.recording.Recorder``), fed as health feeds it: a hub still
joining (no identity, its probes not sent) has not lost the cloud; a probe that then fails for
a reason of the link begins the outage."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from yurthub import metrics
from yurthub.outages import causes, history, recording, records

SERVER = "https://10.0.0.1:6443"
T0 = 1_767_225_600.0


class Clock:
    def __init__(self) -> None:
        self.now = records.Instant(T0, "boot-1", 100.0)

    def __call__(self) -> records.Instant:
        return self.now


@pytest.fixture
async def recorder() -> AsyncIterator[recording.Recorder]:
    made = recording.Recorder(None, metrics.Metrics(), clock=Clock())
    await made.open()
    yield made
    await made.close()


def joining(r: recording.Recorder) -> None:
    """The first probe round of a hub with no identity yet: not probed, so unhealthy."""
    r.failure(SERVER, causes.Cause.NO_IDENTITY, "not probed: the hub has no identity yet")
    r.cloud(False)


async def test_a_join_is_no_outage(recorder: recording.Recorder) -> None:
    joining(recorder)
    assert recorder.current is None
    recorder.cloud(True)  # the identity came, the probe passed
    assert recorder.current is None and recorder.last is None
    assert await recorder.unposted() == []
    assert recorder.last_outage() is None  # the Autonomy condition names none


async def test_a_link_failure_while_joining_begins_the_outage_with_its_cause(
    recorder: recording.Recorder,
) -> None:
    joining(recorder)
    recorder.failure(SERVER, causes.Cause.REFUSED, "connection refused")
    outage = recorder.current
    assert outage is not None and outage.cause == "refused"
    assert outage.reason == f"{SERVER}: connection refused"
    assert outage.causes == {"refused": 1}
    recorder.cloud(True)
    assert recorder.last is outage and outage.ended is not None


async def test_a_link_failure_begins_the_outage_as_before(recorder: recording.Recorder) -> None:
    recorder.failure(SERVER, causes.Cause.SILENT, "no answer within 2 s")
    recorder.cloud(False)
    outage = recorder.current
    assert outage is not None and outage.cause == "silent" and outage.causes == {"silent": 1}
    recorder.failure(SERVER, causes.Cause.REFUSED, "connection refused")
    assert recorder.current is outage and outage.causes == {"silent": 1, "refused": 1}


class CountingHistory(history.History):
    """The real history (in memory), counting the records it writes."""

    def __init__(self, inner: history.History) -> None:
        super().__init__(inner._db)
        self.writes = 0
        self.written = asyncio.Event()

    async def save(self, outage: records.Outage) -> None:
        await super().save(outage)
        self.writes += 1
        self.written.set()


async def test_a_busy_outage_is_written_at_begin_end_and_shutdown_not_per_change() -> None:
    """Flash wear: the record is written when an outage begins and ends, at shutdown, and in
    between at most once per save interval while it changes (an hour here: never)."""
    store = CountingHistory(await history.open_history(None))
    clock = Clock()
    recorder = recording.Recorder(store, metrics.Metrics(), clock=clock, save_interval=3600)
    await recorder.open()
    async with asyncio.TaskGroup() as tg:
        saver = tg.create_task(recorder.run(), name="outage-record")
        recorder.failure(SERVER, causes.Cause.REFUSED, "connection refused")
        recorder.cloud(False)
        await store.written.wait()  # the begin, at once
        assert store.writes == 1
        for _ in range(1000):
            outage = recorder.begin_request()
            assert outage is not None
            recorder.answered(outage, ("kubelet", "get", "nodes"), "cache", 200)
            await asyncio.sleep(0)  # the saver runs as often as it likes
        assert store.writes == 1
        store.written.clear()
        recorder.cloud(True)
        await store.written.wait()  # the end, at once
        assert store.writes == 2
        saver.cancel()
    await recorder.save()
    assert store.writes == 2  # nothing changed since: nothing written
    clock.now = records.Instant(T0 + 60, "boot-1", 160.0)  # past the flap window: a new one
    recorder.failure(SERVER, causes.Cause.REFUSED, "connection refused")
    recorder.cloud(False)
    outage = recorder.begin_request()
    assert outage is not None
    recorder.answered(outage, ("kubelet", "get", "nodes"), "cache", 200)
    await recorder.close()  # shutdown: what changed is written
    assert store.writes == 3
    (kept, _) = await store.newest()
    assert kept.answered_total == 1
    await store.close()
