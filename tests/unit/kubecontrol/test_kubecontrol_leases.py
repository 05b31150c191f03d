"""Lease leader-election decisions: client-go's semantics as a table, and the Lease bodies."""

from __future__ import annotations

import datetime

import pytest

from kubecontrol import leases

ME = "host-a_1111"
OTHER = "host-b_2222"
CONFIG = leases.Config("kube-system", "edgehub-manager", ME)
WALL = datetime.datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC)
STAMP = "2025-01-02T03:04:05.678901Z"
EARLIER = "2025-01-02T03:00:00.000000Z"


def held(holder: str, duration: int = 15, transitions: int = 3) -> leases.Record:
    return leases.Record(holder, duration, EARLIER, EARLIER, transitions)


@pytest.mark.parametrize(
    ("observed", "now", "expected"),
    [
        # No Lease: create it, first holder, no transition yet.
        (None, 100.0, leases.Write(leases.Record(ME, 15, STAMP, STAMP, 0))),
        # Someone else renewed it 5 s ago (as seen here): stand by.
        (leases.Observed(held(OTHER), 95.0), 100.0, leases.Standby(OTHER)),
        # ... 14.9 s ago: still valid.
        (leases.Observed(held(OTHER), 85.1), 100.0, leases.Standby(OTHER)),
        # ... unchanged for the whole lease duration: take it over, one more transition.
        (
            leases.Observed(held(OTHER), 85.0),
            100.0,
            leases.Write(leases.Record(ME, 15, STAMP, STAMP, 4)),
        ),
        # Its own (shorter) duration counts, not ours: a released lease (1 s) goes quickly.
        (
            leases.Observed(held(OTHER, duration=1), 98.0),
            100.0,
            leases.Write(leases.Record(ME, 15, STAMP, STAMP, 4)),
        ),
        # Released (no holder): take it at once.
        (
            leases.Observed(held("", duration=1), 99.9),
            100.0,
            leases.Write(leases.Record(ME, 15, STAMP, STAMP, 4)),
        ),
        # Ours: renew, keeping acquireTime and the transition count.
        (
            leases.Observed(held(ME), 99.0),
            100.0,
            leases.Write(leases.Record(ME, 15, EARLIER, STAMP, 3)),
        ),
        # Ours even though it looks expired from here: renew (nobody else took it).
        (
            leases.Observed(held(ME), 10.0),
            100.0,
            leases.Write(leases.Record(ME, 15, EARLIER, STAMP, 3)),
        ),
        # A holder without a duration never blocks.
        (
            leases.Observed(held(OTHER, duration=0), 100.0),
            100.0,
            leases.Write(leases.Record(ME, 15, STAMP, STAMP, 4)),
        ),
    ],
)
def test_decide(observed: leases.Observed | None, now: float, expected: leases.Decision) -> None:
    assert leases.decide(CONFIG, observed, now, WALL) == expected


def test_observation_time_moves_only_when_the_record_changes() -> None:
    # Validity is judged by when *we* saw a change, never by the renewTime someone else's
    # clock wrote: a leader whose clock runs an hour behind is still seen as alive.
    first = leases.observe(None, held(OTHER), 10.0)
    same = leases.observe(first, held(OTHER), 20.0)
    assert same.at == 10.0
    renewed = leases.Record(OTHER, 15, EARLIER, "1999-01-01T00:00:00.000000Z", 3)
    changed = leases.observe(same, renewed, 24.0)
    assert changed.at == 24.0
    assert leases.decide(CONFIG, changed, 38.0, WALL) == leases.Standby(OTHER)
    assert isinstance(leases.decide(CONFIG, changed, 39.0, WALL), leases.Write)


def test_record_of_reads_a_lease_and_survives_garbage() -> None:
    lease = {
        "spec": {
            "holderIdentity": OTHER,
            "leaseDurationSeconds": 15,
            "acquireTime": EARLIER,
            "renewTime": STAMP,
            "leaseTransitions": 7,
        }
    }
    assert leases.record_of(lease) == leases.Record(OTHER, 15, EARLIER, STAMP, 7)
    assert leases.record_of({}) == leases.Record()
    assert leases.record_of({"spec": "x"}) == leases.Record()
    odd = {"spec": {"holderIdentity": 5, "leaseDurationSeconds": True, "leaseTransitions": "2"}}
    assert leases.record_of(odd) == leases.Record()


def test_body_keeps_what_it_does_not_own() -> None:
    read = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "edgehub-manager", "namespace": "kube-system", "resourceVersion": "9"},
        "spec": {"holderIdentity": OTHER, "preferredHolder": "x", "renewTime": EARLIER},
    }
    record = leases.Record(ME, 15, STAMP, STAMP, 1)
    written = leases.body(CONFIG, read, record)
    assert written["metadata"]["resourceVersion"] == "9"  # conditional: 409 on a race
    assert written["spec"] == {
        "holderIdentity": ME,
        "preferredHolder": "x",
        "leaseDurationSeconds": 15,
        "acquireTime": STAMP,
        "renewTime": STAMP,
        "leaseTransitions": 1,
    }
    assert read["spec"]["holderIdentity"] == OTHER, "the read copy is not changed"
    fresh = leases.body(CONFIG, None, record)
    assert fresh["metadata"] == {"name": "edgehub-manager", "namespace": "kube-system"}
    assert fresh["apiVersion"] == "coordination.k8s.io/v1" and fresh["kind"] == "Lease"


def test_released_record_lets_a_standby_take_over_at_once() -> None:
    gone = leases.released(held(ME), WALL)
    assert gone == leases.Record("", 1, STAMP, STAMP, 3)
    assert isinstance(
        leases.decide(CONFIG, leases.Observed(gone, 100.0), 100.0, WALL), leases.Write
    )


def test_micro_time_is_utc_with_microseconds() -> None:
    local = WALL.astimezone(datetime.timezone(datetime.timedelta(hours=2)))
    assert leases.micro_time(local) == STAMP


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"identity": ""}, "identity"),
        ({"name": ""}, "namespace and name"),
        ({"lease_duration": 10, "renew_deadline": 10.0}, "greater than the renew deadline"),
        ({"renew_deadline": 2.0, "retry_period": 2.0}, "1.2 times"),
        ({"retry_period": -1.0}, "positive"),
    ],
)
def test_config_refuses_unsafe_timings(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"namespace": "ns", "name": "n", "identity": ME}
    with pytest.raises(ValueError, match=message):
        leases.Config(**(base | kwargs))  # type: ignore[arg-type]


def test_defaults_are_kube_controller_managers() -> None:
    assert (CONFIG.lease_duration, CONFIG.renew_deadline, CONFIG.retry_period) == (15, 10.0, 2.0)
