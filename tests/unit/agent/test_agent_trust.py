"""When the agent may remove Instances of devices a discovery request no longer lists
(reference §4 step 5 [quirk] fixed): table tests of ``discovering.observe`` / ``trusted`` /
``recheck_in`` over sequences of snapshots.

Each case is a list of steps ``(now, snapshot, trusted, recheck_in)`` fed to one Health;
timings: settle 30 s, degraded grace 30 s, registration window until t=5 unless a case says.
"""

from __future__ import annotations

import dataclasses

import pytest

from discovery import devices, registry
from discovery.agent import discovering

A, B = "h@a", "h@b"
DEVICE = registry.DiscoveredDevice(devices.Device("d"), True, A)
TIMINGS = discovering.TrustTimings(settle=30.0, degraded_grace=30.0, registrations_until=5.0)


def snap(
    endpoints: tuple[str, ...] = (),
    reported: tuple[str, ...] = (),
    *,
    found: tuple[registry.DiscoveredDevice, ...] = (),
    errors: dict[str, str] | None = None,
    invalid: str | None = None,
) -> registry.Snapshot:
    return registry.Snapshot(
        version=1,
        devices=found,
        endpoints=endpoints,
        reported=frozenset(reported),
        invalid_details=invalid,
        errors=errors or {},
    )


Step = tuple[float, registry.Snapshot, bool, float | None]

CASES: dict[str, tuple[discovering.TrustTimings, list[Step]]] = {
    # A handler that never registers again keeps its Instances; and no busy re-queue.
    "no endpoint, ever": (TIMINGS, [(10.0, snap(), False, None), (500.0, snap(), False, None)]),
    # The fix: an endpoint that reported an empty list is believed at once (no 2 s settle),
    # and one that has not reported yet is not, however quiet it is (within settle).
    "reported empty list is believed at once": (
        TIMINGS,
        [
            (10.0, snap((A,)), False, 30.0),
            (12.0, snap((A,)), False, 28.0),
            (12.5, snap((A,), (A,)), True, None),
        ],
    ),
    "reported devices are believed at once": (
        TIMINGS,
        [(10.0, snap((A,), (A,), found=(DEVICE,)), True, None)],
    ),
    # Fallback for Akri handlers that send nothing when they find nothing.
    "silent endpoint counts as empty after settle": (
        TIMINGS,
        [(10.0, snap((A,)), False, 30.0), (40.0, snap((A,)), True, None)],
    ),
    "every attached endpoint must have reported": (
        TIMINGS,
        [
            (10.0, snap((A, B), (A,), found=(DEVICE,)), False, 30.0),
            (11.0, snap((A, B), (A, B), found=(DEVICE,)), True, None),
        ],
    ),
    # Right after the agent started, B may not have re-registered yet: A's report alone
    # must not remove B's devices. Joining is not gated; removing waits for the window.
    "registration window after agent start": (
        TIMINGS,
        [
            (1.0, snap((A,), (A,)), False, 4.0),
            (5.0, snap((A,), (A,)), True, None),
        ],
    ),
    "no window without a registration socket": (
        dataclasses.replace(TIMINGS, registrations_until=0.0),
        [(1.0, snap((A,), (A,)), True, None)],
    ),
    # Settled, then the stream fails (its list dropped, retrying): vanished devices keep
    # their Instances for the grace, so a handler restart does not churn brokers.
    "failing stream is trusted again after the grace": (
        TIMINGS,
        [
            (10.0, snap((A,), (A,), found=(DEVICE,)), True, None),
            (20.0, snap((A,), errors={A: "stream ended"}), False, 30.0),
            (35.0, snap((A,), errors={A: "stream ended"}), False, 15.0),
            (50.0, snap((A,), errors={A: "stream ended"}), True, None),
        ],
    ),
    "recovered stream is trusted at once": (
        TIMINGS,
        [
            (10.0, snap((A,), (A,), found=(DEVICE,)), True, None),
            (20.0, snap((A,), errors={A: "stream ended"}), False, 30.0),
            (21.0, snap((A,), (A,)), True, None),
        ],
    ),
    # A second endpoint attaching to a settled request is heard before anything is removed.
    "new endpoint on a settled request": (
        TIMINGS,
        [
            (10.0, snap((A,), (A,), found=(DEVICE,)), True, None),
            (20.0, snap((A, B), (A,)), False, 30.0),
            (21.0, snap((A, B), (A, B)), True, None),
        ],
    ),
    "handler gone from a settled request": (
        TIMINGS,
        [
            (10.0, snap((A,), (A,), found=(DEVICE,)), True, None),
            (20.0, snap(), False, 30.0),
            (50.0, snap(), True, None),
        ],
    ),
    # Rejected details are believed only after the grace (the Configuration must change).
    "invalid details, never settled": (
        TIMINGS,
        [
            (1.0, snap(invalid="bad"), False, 29.0),
            (31.0, snap(invalid="bad"), True, None),
        ],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_trust(name: str) -> None:
    timings, steps = CASES[name]
    health = discovering.Health(started=0.0)
    for number, (now, snapshot, expect_trusted, expect_recheck) in enumerate(steps):
        health = discovering.observe(health, snapshot, now, timings)
        got_trusted = discovering.trusted(health, snapshot, now, timings.degraded_grace)
        got_recheck = discovering.recheck_in(health, snapshot, now, timings)
        assert (got_trusted, got_recheck) == (expect_trusted, expect_recheck), f"step {number}"


def test_recheck_is_never_zero_or_negative() -> None:
    # A wait that has passed is already reflected in Health; 0 would re-queue in a loop.
    health = discovering.Health(started=0.0)
    for now in (0.0, 4.999, 5.0, 29.999, 30.0, 30.001, 1000.0):
        for snapshot in (snap(), snap((A,)), snap(invalid="bad"), snap((A,), errors={A: "x"})):
            health = discovering.observe(health, snapshot, now, TIMINGS)
            wait = discovering.recheck_in(health, snapshot, now, TIMINGS)
            assert wait is None or wait > 0
