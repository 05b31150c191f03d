"""Whether a drop of the link goes on with the last outage or begins a new one, and when an
ended outage is final (``outages.flapping``, pure): a table over the time since it ended, its
Event's state, the boot, and the window."""

from __future__ import annotations

import math

import pytest

from yurthub.outages import flapping, records

T0 = 1_767_225_600.0
WINDOW = 30.0


def at(mono: float, boot: str = "boot-1") -> records.Instant:
    """The wall clock is never read by the decision: set far off to show it."""
    return records.Instant(T0 - 1e6, boot, mono)


def ended(
    at_mono: float = 100.0, *, event: str = "", boot: str = "boot-1", until: bool = True
) -> records.Outage:
    """An outage that began 60 s before ``at_mono`` and ended then."""
    outage = records.begin(at(at_mono - 60, boot), "a1", "refused", "")
    outage.end(at(at_mono, boot), 0)
    outage.event = event
    if not until:
        outage.until = None  # a record from a hub that kept no end reading
    return outage


@pytest.mark.parametrize(
    ("outage", "now", "window", "left", "drop"),
    [
        pytest.param(ended(), at(100.0), WINDOW, 30.0, "reopen", id="at-its-end"),
        pytest.param(ended(), at(101.0), WINDOW, 29.0, "reopen", id="1s-after"),
        pytest.param(ended(), at(129.5), WINDOW, 0.5, "reopen", id="just-within"),
        pytest.param(ended(), at(130.0), WINDOW, 0.0, "begin", id="the-window-passed"),
        pytest.param(ended(), at(500.0), WINDOW, 0.0, "begin", id="long-after"),
        pytest.param(ended(event=records.POSTED), at(101.0), WINDOW, 0.0, "begin", id="posted"),
        pytest.param(
            ended(event="refused: HTTP 403"), at(101.0), WINDOW, 0.0, "begin", id="refused"
        ),
        pytest.param(ended(), at(101.0, "boot-2"), WINDOW, 0.0, "begin", id="another-boot"),
        pytest.param(ended(until=False), at(101.0), WINDOW, 0.0, "begin", id="older-hub"),
        pytest.param(ended(), at(99.0), WINDOW, 0.0, "begin", id="a-reading-gone-back"),
        pytest.param(ended(), at(100.0), 0.0, 0.0, "begin", id="no-window"),
        pytest.param(ended(), at(101.0), 5.0, 4.0, "reopen", id="a-shorter-window"),
        pytest.param(
            ended(boot=""), at(101.0, ""), WINDOW, 0.0, "begin", id="a-record-with-no-boot"
        ),
    ],
)
def test_an_ended_outage_is_open_for_the_window_after_its_end(
    outage: records.Outage, now: records.Instant, window: float, left: float, drop: str
) -> None:
    assert flapping.left(outage, now, window) == left
    assert flapping.on_drop(outage, now, window) is flapping.Drop(drop)


def test_no_last_outage_or_one_going_on_begins_nothing_to_reopen() -> None:
    ongoing = records.begin(at(0.0), "a1", "refused", "")
    assert flapping.on_drop(None, at(1.0), WINDOW) is flapping.Drop.BEGIN
    assert flapping.on_drop(ongoing, at(1.0), WINDOW) is flapping.Drop.BEGIN
    assert flapping.left(ongoing, at(1.0), WINDOW) == math.inf  # never final while it lasts
    assert flapping.left(ongoing, at(1.0), 0.0) == math.inf


def test_a_reopened_outage_runs_from_its_first_beginning_with_its_up_time_counted() -> None:
    outage = records.begin(at(0.0), "a1", "refused", "")
    outage.answered(("kubelet", "get", "nodes"), "cache", 200)
    outage.end(at(60.0), 0)
    assert outage.until == 60.0 and outage.lasted == 60.0
    outage.reopen(at(64.0))  # up 4 s
    assert outage.ended is None and outage.lasted is None and outage.until is None
    assert outage.seconds(at(70.0)) == 70.0
    outage.answered(("kubelet", "get", "nodes"), "cache", 200)
    outage.end(at(80.0), 0)
    outage.reopen(at(82.0))  # up 2 s
    outage.end(at(90.0), 0)
    assert (outage.flaps, outage.flap_seconds, outage.lasted) == (2, 6.0, 90.0)
    assert outage.answered_total == 2
    message = records.summary(outage, "edge-1")
    assert "could not reach the cloud for 1m30s, " in message
    assert "The link came back 2 times for less than 30s (6s in all, counted in its length)." in (
        message
    )
    once = records.begin(at(0.0), "b1", "refused", "")
    once.end(at(10.0), 0)
    once.reopen(at(11.0))
    once.end(at(20.0), 0)
    assert "The link came back once for less than 5s (1s in all" in records.summary(
        once, "edge-1", flap_window=5.0
    )
    # Stored and read back whole; shown in /v1/outages.
    again = records.from_stored(records.to_stored(outage))
    assert (again.flaps, again.flap_seconds, again.until) == (2, 6.0, 90.0)
    view = records.view(outage, at(100.0))
    assert (view["flaps"], view["flapSeconds"]) == (2, 6)


def test_a_record_from_an_older_hub_reads_with_no_flaps_and_no_end_reading() -> None:
    stored = records.to_stored(ended())
    for key in ("until", "flaps", "flapSeconds"):
        del stored[key]
    old = records.from_stored(stored)
    assert (old.flaps, old.flap_seconds, old.until) == (0, 0.0, None)
    assert flapping.left(old, at(101.0), WINDOW) == 0.0  # posted at once, as before
    assert "came back" not in records.summary(old, "edge-1")
