"""An outage's length comes from the monotonic clock, its times from the wall clock for display
only: fake clocks that jump backward and forward, a hub restarted within a boot, a node
rebooted during an outage (``outages.records``, ``outages.recording``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from yurthub import metrics
from yurthub.outages import causes, recording, records

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
DAY = 86_400.0
SERVER = "https://10.0.0.1:6443"


class Clocks:
    """A wall clock and a monotonic one, stepped apart as a test likes."""

    def __init__(self, boot: str = "boot-1") -> None:
        self.wall, self.mono, self.boot = T0, 500.0, boot

    def __call__(self) -> records.Instant:
        return records.Instant(self.wall, self.boot, self.mono)

    def run(self, seconds: float, wall_step: float = 0.0) -> None:
        """``seconds`` pass; the wall clock is also stepped by ``wall_step`` (NTP, an RTC-less
        boot)."""
        self.mono += seconds
        self.wall += seconds + wall_step


@pytest.mark.parametrize(
    ("wall_step", "seconds"),
    [
        (0.0, 312.0),
        (-DAY, 312.0),  # NTP stepped the clock back a day meanwhile
        (+56 * 365 * DAY, 312.0),  # a node that booted in 1970 got its time from NTP
        (-T0, 45.0),  # back to the epoch
    ],
)
def test_an_outages_length_is_the_monotonic_clocks_whatever_the_wall_clock_does(
    wall_step: float, seconds: float
) -> None:
    clocks = Clocks()
    o = records.begin(clocks(), "a1", "refused", "connection refused")
    clocks.run(seconds / 2)
    assert o.seconds(clocks()) == seconds / 2
    clocks.run(seconds / 2, wall_step)
    assert o.seconds(clocks()) == seconds
    o.end(clocks(), 0)
    assert o.lasted == seconds
    assert records.view(o, clocks())["seconds"] == round(seconds)
    assert f"for {records.lasted(seconds)}, from " in records.summary(o, "edge-1")
    assert o.began == T0  # the times stay what the wall clock said, for display


def test_a_hub_restarted_within_the_boot_counts_the_time_it_was_away() -> None:
    clocks = Clocks()
    o = records.begin(clocks(), "a1", "silent", "no answer")
    clocks.run(100)
    o.touch(clocks())  # its last save
    stored = records.from_stored(records.to_stored(o))
    clocks.run(50, wall_step=-DAY)  # the hub was down 50 s; the wall clock stepped back
    stored.resume(clocks())
    assert stored.restarts == 1 and stored.unmeasured == 0
    clocks.run(10)
    assert stored.seconds(clocks()) == 160
    stored.end(clocks(), 0)
    assert records.length(stored, clocks()) == "2m40s"


def test_a_node_rebooted_during_an_outage_counts_what_it_saw_and_says_at_least() -> None:
    clocks = Clocks()
    o = records.begin(clocks(), "a1", "silent", "no answer")
    clocks.run(600)
    o.touch(clocks())
    stored = records.from_stored(records.to_stored(o))
    rebooted = Clocks(boot="boot-2")  # its monotonic clock starts anew, near 0
    rebooted.mono, rebooted.wall = 12.0, 3.0  # and its wall clock in 1970 (no RTC)
    stored.resume(rebooted())
    assert (stored.restarts, stored.unmeasured) == (1, 1)
    assert stored.seconds(rebooted()) == 600
    rebooted.run(120)
    stored.end(rebooted(), 0)
    assert stored.lasted == 720
    assert records.length(stored, rebooted()) == "at least 12m00s"
    message = records.summary(stored, "edge-1")
    assert "for at least 12m00s" in message
    assert "the time it was off is not counted" in message
    assert records.view(stored, rebooted())["atLeast"] is True


def test_a_record_of_an_older_hub_keeps_its_length_and_counts_on_from_a_restart() -> None:
    ended = {"id": "19b76daa800", "began": T0, "ended": T0 + 312, "cause": "refused"}
    assert records.from_stored(ended).lasted == 312
    ongoing = records.from_stored({"id": "19b76daa801", "began": T0, "ended": None})
    clocks = Clocks()
    ongoing.resume(clocks())
    clocks.run(30)
    assert ongoing.seconds(clocks()) == 30 and ongoing.at_least


@pytest.mark.parametrize("when", [-1e12, -1.0, 0.0, 1e13, float("nan"), float("inf")])
def test_a_wall_clock_gone_wrong_is_still_a_timestamp(when: float) -> None:
    assert len(records.timestamp(when)) == len("2026-01-01T00:00:00Z")


@pytest.fixture
async def recorder_and_clocks() -> AsyncIterator[tuple[recording.Recorder, Clocks]]:
    clocks = Clocks()
    made = recording.Recorder(None, metrics.Metrics(), clock=clocks)
    await made.open()
    yield made, clocks
    await made.close()


async def test_outages_begun_at_the_same_wall_time_are_distinct(
    recorder_and_clocks: tuple[recording.Recorder, Clocks],
) -> None:
    """A node without a battery-backed clock boots at the same wall time every time: an id
    made of the start would repeat, and the second outage's Event would meet a 409."""
    recorder, clocks = recorder_and_clocks
    ids = []
    for _ in range(2):
        clocks.wall = T0
        recorder.failure(SERVER, causes.Cause.REFUSED, "connection refused")
        recorder.cloud(False)
        clocks.run(60)
        recorder.cloud(True)
        assert recorder.last is not None
        ids.append(recorder.last.id)
        clocks.run(60)
    assert ids[0] != ids[1]
    await recorder.save()
    kept = await recorder.outages()
    assert [o.id for o in kept] == ids[::-1]


async def test_the_metric_and_the_condition_use_the_monotonic_length(
    recorder_and_clocks: tuple[recording.Recorder, Clocks],
) -> None:
    recorder, clocks = recorder_and_clocks
    recorder.failure(SERVER, causes.Cause.SILENT, "no answer within 2 s")
    recorder.cloud(False)
    clocks.run(90, wall_step=-DAY)
    assert recorder.ongoing_seconds() == 90
    clocks.run(30, wall_step=+2 * DAY)
    recorder.cloud(True)
    registry = recorder._metrics.registry
    # Not final until the link has stayed up for the flap window: neither named nor observed.
    assert recorder.last_outage() is None
    assert await recorder.due() == ([], records.FLAP_WINDOW)
    assert registry.get_sample_value("node_yurthub_outage_seconds_count") == 0
    clocks.run(records.FLAP_WINDOW, wall_step=-DAY)
    assert [o.id for o in (await recorder.due())[0]] == [recorder.last.id]
    last = recorder.last_outage()
    assert last is not None and last.lasted == "2m00s"
    assert registry.get_sample_value("node_yurthub_outage_seconds_sum") == 120
