"""What a storm's peak second was made of (``fleetmeasures.peak_mix``)."""

from __future__ import annotations

from yurthub.testing import fleetmeasures


def at(t: float, kinds: dict[str, float]) -> fleetmeasures.Point:
    return fleetmeasures.Point(
        t=t,
        requests=sum(kinds.values()),
        code_429=0,
        rejected=0,
        lists=0,
        pool_watches=0,
        watches=0,
        kinds=kinds,
    )


def test_the_fastest_interval_is_broken_down_by_verb_and_resource() -> None:
    points = [
        at(0.0, {"PUT leases": 10, "WATCH pods": 5}),
        at(1.0, {"PUT leases": 13, "WATCH pods": 6}),  # 4/s
        at(1.5, {"PUT leases": 14, "WATCH pods": 56, "PATCH pods/status": 20}),  # 142/s
        at(2.5, {"PUT leases": 17, "WATCH pods": 60, "PATCH pods/status": 30}),  # 17/s
    ]
    assert fleetmeasures.peak_mix(points) == {
        "WATCH pods": 100.0,
        "PATCH pods/status": 40.0,
        "PUT leases": 2.0,
    }


def test_the_largest_kinds_only_and_a_restarted_counter_counts_from_zero() -> None:
    kinds = {f"GET r{i}": float(i) for i in range(10)}
    points = [at(0.0, {k: 100.0 for k in kinds}), at(1.0, kinds)]  # every counter restarted
    assert list(fleetmeasures.peak_mix(points, most=3)) == ["GET r9", "GET r8", "GET r7"]


def test_no_interval_no_mix() -> None:
    assert fleetmeasures.peak_mix([]) == {}
    assert fleetmeasures.peak_mix([at(1.0, {"GET pods": 1})]) == {}
    assert fleetmeasures.peak_mix([at(1.0, {"GET pods": 1}), at(1.0, {"GET pods": 9})]) == {}
