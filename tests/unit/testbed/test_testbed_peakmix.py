"""What a storm's peak second was made of (``fleetmeasures.peak_mix``)."""

from __future__ import annotations

import dataclasses

from yurthub.testing import fleetmeasures, fleetstorms


def at(t: float, kinds: dict[str, float], wall: float | None = None) -> fleetmeasures.Point:
    return fleetmeasures.Point(
        t=t,
        wall=t if wall is None else wall,
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


def test_arriving_requests_count_watches_at_their_start_not_their_end() -> None:
    """Old watches ending at the heal (counted by the metrics at their end) are no arrivals;
    the watches started later are, in the second they started."""
    points = [
        at(0.0, {"WATCH configmaps": 0, "PUT leases": 0}, wall=1000.0),
        at(1.0, {"WATCH configmaps": 500, "PUT leases": 2}, wall=1001.0),  # 500 old ones end
        at(2.0, {"WATCH configmaps": 500, "PUT leases": 4}, wall=1002.0),
        at(3.0, {"WATCH configmaps": 510, "PUT leases": 5}, wall=1003.0),
    ]
    starts = [(1001.2, "configmaps")] * 30 + [(1002.5, "configmaps")] * 10 + [(999.0, "pods")]
    rate, mix = fleetmeasures.arrivals_peak(points, starts)
    assert rate == 32.0
    assert mix == {"WATCH configmaps": 30.0, "PUT leases": 2.0}
    assert fleetmeasures.peak_mix(points)["WATCH configmaps"] == 500.0  # the metrics' view


def test_no_points_no_arrivals() -> None:
    assert fleetmeasures.arrivals_peak([], [(1.0, "pods")]) == (0.0, {})


def test_pool_watch_steps_keep_each_change_after_the_origin() -> None:
    counts = [90.0, 90.0, 40.0, 40.0, 95.0, 90.0, 90.0]
    points = [
        dataclasses.replace(at(100.0 + 0.5 * i, {}), pool_watches=c) for i, c in enumerate(counts)
    ]
    assert fleetstorms.steps(points, origin=101.0) == [
        (-1.0, 90.0),
        (0.0, 40.0),
        (1.0, 95.0),
        (1.5, 90.0),
    ]
    assert fleetstorms.steps([], origin=0.0) == []


def test_the_whole_window_is_summed_by_kind_and_a_restart_counts_from_zero() -> None:
    points = [
        at(0.0, {"PUT leases": 10, "WATCH pods": 5}),
        at(1.0, {"PUT leases": 13, "WATCH pods": 6}),
        at(2.0, {"PUT leases": 2, "WATCH pods": 8, "GET pods": 4}),  # leases restarted
    ]
    assert fleetmeasures.window_mix(points) == {
        "PUT leases": 5.0,
        "GET pods": 4.0,
        "WATCH pods": 3.0,
    }
    assert list(fleetmeasures.window_mix(points, most=1)) == ["PUT leases"]
    assert fleetmeasures.window_mix(points[:1]) == {}


def test_pooled_from_the_first_sample_of_a_run_at_the_target_held_long_enough() -> None:
    counts = [12, 6, 12, 6, 7, 12, 12, 12, 12]  # one a second from t=100
    points = [
        dataclasses.replace(at(100.0 + i, {}), pool_watches=float(c)) for i, c in enumerate(counts)
    ]
    # Before the origin does not count; 12 at 102 was not held; from 105 it is held 3 s.
    assert fleetstorms.held_from(points, origin=100.5, target=12.0, hold=3.0) == 4.5
    assert fleetstorms.held_from(points, origin=100.5, target=12.0, hold=4.0) is None
    assert fleetstorms.held_from([], origin=0.0, target=12.0) is None


def test_a_cache_poll_that_still_differs_is_one_line() -> None:
    found = {"n1": [], "n2": ["kubelet/pods.v1.core/ns/p: cached 1, cloud 2", "x"], "n3": ["y"]}
    assert fleetstorms.cache_poll_line(found, 12.34) == (
        "caches polled 12.3 s after: 2 hubs differ (3 lines), "
        "e.g. n2: kubelet/pods.v1.core/ns/p: cached 1, cloud 2"
    )
