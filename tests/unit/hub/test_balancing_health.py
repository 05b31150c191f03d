"""Balancer (reference §10.6 load balancer cases) and the prober state machine (§10.6 prober)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from yurthub import balancing, probing, settings
from yurthub.outages import causes

SERVERS = [f"https://127.0.0.1:{p}" for p in (8080, 8081, 8082, 8083)]


def picks(b: balancing.Balancer, healthy: set[str], n: int) -> list[str | None]:
    return [b.pick(lambda s: s in healthy) for _ in range(n)]


def test_rr_cycles_over_all() -> None:
    b = balancing.Balancer(SERVERS, settings.LbMode.RR)
    assert picks(b, set(SERVERS), 5) == [*SERVERS, SERVERS[0]]


def test_rr_skips_unhealthy() -> None:
    b = balancing.Balancer(SERVERS[:3], settings.LbMode.RR)
    healthy = {SERVERS[0], SERVERS[2]}
    assert picks(b, healthy, 3) == [SERVERS[0], SERVERS[2], SERVERS[0]]


@pytest.mark.parametrize("mode", list(settings.LbMode))
def test_all_unhealthy_is_none(mode: settings.LbMode) -> None:
    b = balancing.Balancer(SERVERS, mode)
    assert picks(b, set(), 2) == [None, None]


def test_priority_always_first_healthy() -> None:
    b = balancing.Balancer(SERVERS, settings.LbMode.PRIORITY)
    assert picks(b, set(SERVERS), 3) == [SERVERS[0]] * 3
    assert picks(b, set(SERVERS[2:]), 2) == [SERVERS[2]] * 2


def test_exclude_skips_a_failed_backend() -> None:
    b = balancing.Balancer(SERVERS[:2], settings.LbMode.PRIORITY)
    assert b.pick(lambda s: True, exclude=frozenset({SERVERS[0]})) == SERVERS[1]
    assert b.pick(lambda s: True, exclude=frozenset(SERVERS[:2])) is None


def test_empty_backends_rejected() -> None:
    with pytest.raises(ValueError):
        balancing.Balancer([], settings.LbMode.RR)


# --- prober state machine (prober_test.go:35) ---


def run(results: list[bool], threshold: int = 2) -> list[bool]:
    state = probing.ProbeState(threshold)
    out = []
    for ok in results:
        state.record(ok)
        out.append(state.healthy)
    return out


@pytest.mark.parametrize(
    ("results", "states"),
    [
        ([True], [True]),  # init success -> healthy
        ([False], [False]),  # init failure -> unhealthy
        ([True, False], [True, False]),  # healthy + failed update -> unhealthy
        ([False, False, True, True], [False, False, False, True]),  # threshold 2
        ([False, True, False, True, True], [False, False, False, False, True]),  # counter reset
    ],
)
def test_probe_state(results: list[bool], states: list[bool]) -> None:
    assert run(results) == states


def test_probe_state_reports_changes() -> None:
    state = probing.ProbeState(1)
    assert not state.record(False)  # initial unhealthy: no change from default
    assert state.record(True)
    assert not state.record(True)
    assert state.record(False)


def test_kubelet_gate() -> None:
    gate = probing.KubeletGate(40.0)
    assert gate.alive(1000.0)  # open before kubelet's first lease request
    gate.renew(1000.0)
    assert gate.alive(1040.0)
    assert not gate.alive(1060.0)  # renewed 60 s ago -> probes fail


NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC)


def test_new_lease() -> None:
    lease = probing.new_lease("n1", "uid-1", 40, NOW)
    assert lease["metadata"] == {
        "name": "n1",
        "namespace": "kube-node-lease",
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-1"}],
    }
    assert lease["spec"] == {
        "holderIdentity": "n1",
        "leaseDurationSeconds": 40,
        "renewTime": "2026-01-02T03:04:05.678901Z",
    }
    assert "ownerReferences" not in probing.new_lease("n1", "", 40, NOW)["metadata"]


def test_renewed_lease_strips_delegate_annotation_and_keeps_rv() -> None:
    base: dict[str, Any] = {
        "metadata": {
            "name": "n1",
            "resourceVersion": "7",
            "annotations": {"openyurt.io/delegate-heartbeat": "true", "keep": "me"},
        },
        "spec": {"holderIdentity": "other", "renewTime": "old"},
    }
    lease = probing.renewed_lease(base, "n1", 40, NOW)
    assert lease["metadata"]["annotations"] == {"keep": "me"}
    assert lease["metadata"]["resourceVersion"] == "7"
    assert lease["spec"]["holderIdentity"] == "n1"
    assert lease["spec"]["renewTime"] == "2026-01-02T03:04:05.678901Z"
    assert base["metadata"]["annotations"]  # the base is not mutated


@pytest.mark.parametrize(
    ("attempt", "interval", "jitter", "expected"),
    [
        (0, 10.0, 0.0, 1.0),
        (1, 10.0, 0.0, 2.0),
        (2, 10.0, 0.0, 4.0),
        (3, 10.0, 0.0, 8.0),
        (4, 10.0, 0.0, 10.0),  # never beyond the heartbeat
        (0, 10.0, 0.99, 1.2475),  # at most a quarter longer
        (0, 0.5, 0.0, 0.5),  # a heartbeat shorter than the first step
        (10_000, 10.0, 0.5, 10.0),
    ],
)
def test_an_unhealthy_server_is_probed_sooner_than_the_heartbeat(
    attempt: int, interval: float, jitter: float, expected: float
) -> None:
    assert probing.recovery_delay(attempt, interval, jitter) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("attempt", "interval", "jitter", "expected"),
    [
        (0, 10.0, 0.0, 1.0),
        (1, 10.0, 0.0, 2.0),
        (2, 10.0, 0.0, 2.0),  # a silent server: never more than RECOVERY_CAP apart
        (30, 10.0, 0.99, 2.0),
        (0, 10.0, 0.99, 1.2475),
        (5, 0.5, 0.0, 0.5),  # nor more than the heartbeat
    ],
)
def test_a_server_that_gives_no_answer_is_probed_every_couple_of_seconds(
    attempt: int, interval: float, jitter: float, expected: float
) -> None:
    assert probing.recovery_delay(attempt, interval, jitter, silent=True) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("cause", "in_use", "retried"),
    [
        (causes.Cause.SILENT, True, True),  # a busy apiserver answers late
        (causes.Cause.RESET, True, True),  # a pooled connection the server closed
        (causes.Cause.OTHER, True, True),
        (causes.Cause.REFUSED, True, False),  # nothing listens: final at once
        (causes.Cause.UNREACHABLE, True, False),
        (causes.Cause.DNS, True, False),
        (causes.Cause.TLS, True, False),
        (causes.Cause.SILENT, False, False),  # not in use: probed again soon anyway
        (causes.Cause.RESET, False, False),
    ],
)
def test_which_unanswered_renewals_are_tried_again(
    cause: causes.Cause, in_use: bool, retried: bool
) -> None:
    assert probing.retry_unanswered(cause, in_use=in_use) is retried


@pytest.mark.parametrize(
    ("cause", "began", "heard", "alive"),
    [
        (causes.Cause.SILENT, 10.0, 10.5, True),  # an answer arrived while the lease waited
        (causes.Cause.SILENT, 10.0, 10.0, True),
        (causes.Cause.SILENT, 10.0, 9.9, False),  # only before it: no proof of life
        (causes.Cause.SILENT, 10.0, None, False),  # never heard
        (causes.Cause.RESET, 10.0, 10.5, False),  # an answer, and it was a reset: not slow
        (causes.Cause.REFUSED, 10.0, 10.5, False),
    ],
)
def test_a_timed_out_renewal_with_answers_meanwhile_shows_the_server_alive(
    cause: causes.Cause, began: float, heard: float | None, alive: bool
) -> None:
    assert probing.alive_meanwhile(cause, began, heard) is alive


@pytest.mark.parametrize(
    ("offline", "attempt", "since_heal", "since_strain", "expected"),
    [
        (False, 0, None, None, 2.0),  # never offline, never strained: the timeout
        (True, 0, None, None, 10.0),  # offline: an interval
        (True, 2, None, None, 10.0),
        (False, 0, 0.0, None, 10.0),  # first attempt right after the heal: an interval
        (False, 0, 19.9, None, 10.0),
        (False, 0, 20.0, None, 2.0),  # two intervals after it: the timeout again
        (False, 1, 5.0, None, 2.0),  # a retry: the timeout, so a new cut is still seen in ~14 s
        (False, 0, -1.0, None, 2.0),  # a clock gone backwards trusts nothing
        # The storm goes on: strain seen lately keeps the first attempt patient, heal or not.
        (False, 0, 45.0, 3.0, 10.0),
        (False, 0, None, 19.9, 10.0),
        (False, 0, 45.0, 20.0, 2.0),  # two intervals after the last strain: the timeout
        (False, 1, 45.0, 3.0, 2.0),  # a retry: the timeout
        (False, 0, None, -1.0, 2.0),
    ],
)
def test_how_long_a_probe_attempt_waits(
    offline: bool,
    attempt: int,
    since_heal: float | None,
    since_strain: float | None,
    expected: float,
) -> None:
    bound = probing.answer_bound(
        2.0,
        10.0,
        offline=offline,
        attempt=attempt,
        since_heal=since_heal,
        since_strain=since_strain,
    )
    assert bound == expected


@pytest.mark.parametrize(
    ("status", "elapsed", "strained"),
    [
        (200, 0.1, False),
        (409, 1.9, False),  # a conflict is an answer in time
        (429, 0.1, True),  # API Priority and Fairness refusing
        (503, 0.1, True),
        (504, 0.1, True),  # the apiserver's own handler timeout
        (200, 2.1, True),  # answered, but later than the heartbeat timeout
        (500, 0.1, False),  # an error, not a sign of load
    ],
)
def test_which_answers_show_a_server_under_strain(
    status: int, elapsed: float, strained: bool
) -> None:
    assert probing.strained(status, elapsed, 2.0) is strained


def test_a_timeout_longer_than_the_interval_is_never_shortened() -> None:
    assert probing.answer_bound(12.0, 10.0, offline=True, attempt=0, since_heal=None) == 12.0
    assert probing.answer_bound(12.0, 10.0, offline=False, attempt=0, since_heal=1.0) == 12.0
