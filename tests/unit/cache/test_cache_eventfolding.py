"""The offline Event journal's decisions: aggregation key, folding, patches, bounds, bodies."""

from __future__ import annotations

from typing import Any

import pytest

from yurthub.cache import eventfolding, patching

CORE = eventfolding.CORE
EVENTS = eventfolding.EVENTS


def event(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "metadata": {"name": "web.17a", "namespace": "default", "resourceVersion": "9"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web", "uid": "u1"},
        "reason": "BackOff",
        "message": "back-off",
        "source": {"component": "kubelet", "host": "n1"},
        "type": "Warning",
        "count": 1,
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
    }
    base.update(overrides)
    return base


@pytest.mark.parametrize(
    ("other", "same"),
    [
        ({}, True),
        ({"metadata": {"name": "web.other"}}, True),  # the name is not part of the key
        ({"count": 7, "lastTimestamp": "2026-02-02T00:00:00Z"}, True),
        ({"message": "something else"}, False),
        ({"reason": "Pulled"}, False),
        ({"type": "Normal"}, False),
        ({"source": {"component": "kube-proxy", "host": "n1"}}, False),
        ({"involvedObject": {"kind": "Pod", "namespace": "default", "name": "db"}}, False),
        ({"involvedObject": "not an object"}, False),
    ],
)
def test_key_is_client_gos_aggregation(other: dict[str, Any], same: bool) -> None:
    assert (
        eventfolding.key(CORE, "default", event())
        == eventfolding.key(CORE, "default", event(**other))
    ) is same


def test_key_tells_namespaces_and_apis_apart() -> None:
    assert eventfolding.key(CORE, "a", event()) != eventfolding.key(CORE, "b", event())
    assert eventfolding.key(CORE, "a", event()) != eventfolding.key(EVENTS, "a", event())


def test_events_k8s_io_key_uses_regarding_and_note() -> None:
    new = {"regarding": {"kind": "Pod", "name": "web"}, "reason": "R", "note": "n"}
    assert eventfolding.key(EVENTS, "d", new) == eventfolding.key(EVENTS, "d", dict(new))
    assert eventfolding.key(EVENTS, "d", new) != eventfolding.key(EVENTS, "d", {**new, "note": "m"})


def test_a_second_create_adds_its_count_and_keeps_the_first_time() -> None:
    old = event(count=3, lastTimestamp="2026-01-01T00:05:00Z")
    new = event(
        count=2, firstTimestamp="2026-01-01T01:00:00Z", lastTimestamp="2026-01-01T01:02:00Z"
    )
    got = eventfolding.folded(CORE, old, new)
    assert got["count"] == 5
    assert got["firstTimestamp"] == "2026-01-01T00:00:00Z"
    assert got["lastTimestamp"] == "2026-01-01T01:02:00Z"
    assert got["metadata"]["name"] == "web.17a"
    assert old["count"] == 3  # never mutated


def test_a_count_that_is_not_a_positive_integer_counts_once() -> None:
    assert eventfolding.folded(CORE, event(count=None), event(count=True))["count"] == 2


def test_events_k8s_io_fold_counts_the_series() -> None:
    old = {"eventTime": "t0", "note": "a"}
    new = {"eventTime": "t1", "series": {"count": 4, "lastObservedTime": "t9"}, "note": "b"}
    got = eventfolding.folded(EVENTS, old, new)
    assert got["series"] == {"count": 5, "lastObservedTime": "t9"}
    assert got["eventTime"] == "t0" and got["note"] == "b"


def test_a_patch_applies_but_keeps_the_identity() -> None:
    patch = {
        "count": 4,
        "lastTimestamp": "2026-01-01T00:09:00Z",
        "metadata": {"name": "evil", "namespace": "kube-system", "labels": {"a": "b"}},
    }
    got = eventfolding.patched(event(), patch)
    assert got["count"] == 4 and got["lastTimestamp"] == "2026-01-01T00:09:00Z"
    assert got["metadata"]["name"] == "web.17a"
    assert got["metadata"]["namespace"] == "default"
    assert got["metadata"]["labels"] == {"a": "b"}


def test_a_patch_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(patching.PatchError):
        eventfolding.patched(event(), [1, 2])


@pytest.mark.parametrize(
    ("sizes", "bounds", "gone"),
    [
        ([], eventfolding.Bounds(2, 100), []),
        ([(1, 10), (2, 10)], eventfolding.Bounds(2, 100), []),
        ([(1, 10), (2, 10), (3, 10)], eventfolding.Bounds(2, 100), [1]),
        ([(1, 10), (2, 10), (3, 10), (4, 10)], eventfolding.Bounds(2, 100), [1, 2]),
        ([(1, 60), (2, 30), (3, 30)], eventfolding.Bounds(10, 100), [1]),
        ([(1, 10), (2, 10), (3, 500)], eventfolding.Bounds(10, 100), [3]),  # too big alone
        ([(1, 10), (2, 101)], eventfolding.Bounds(10, 100), [2]),
    ],
)
def test_evictions_oldest_first(
    sizes: list[tuple[int, int]], bounds: eventfolding.Bounds, gone: list[int]
) -> None:
    assert eventfolding.evictions(sizes, bounds) == gone


def test_the_create_posted_keeps_the_times_and_drops_what_the_apiserver_sets() -> None:
    sent = event(metadata={"name": "n", "namespace": "d", "uid": "x", "resourceVersion": "1"})
    got = eventfolding.for_create(sent)
    assert got["metadata"] == {"name": "n", "namespace": "d"}
    assert got["firstTimestamp"] == sent["firstTimestamp"] and got["count"] == 1


def test_the_patch_after_a_409_carries_count_times_and_message() -> None:
    assert eventfolding.for_patch(CORE, event(count=3)) == {
        "count": 3,
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "message": "back-off",
    }
    series = {"count": 2, "lastObservedTime": "t"}
    assert eventfolding.for_patch(EVENTS, {"series": series, "note": "n", "reason": "r"}) == {
        "series": series,
        "note": "n",
    }


@pytest.mark.parametrize(
    ("status", "create", "outcome"),
    [
        (201, True, eventfolding.Outcome.POSTED),
        (200, False, eventfolding.Outcome.POSTED),
        (409, True, eventfolding.Outcome.EXISTS),
        (409, False, eventfolding.Outcome.REFUSED),
        (404, False, eventfolding.Outcome.REFUSED),
        (422, True, eventfolding.Outcome.REFUSED),
        (403, True, eventfolding.Outcome.REFUSED),
        (410, True, eventfolding.Outcome.REFUSED),
        (0, True, eventfolding.Outcome.RETRY),
        (401, True, eventfolding.Outcome.RETRY),
        (429, True, eventfolding.Outcome.RETRY),
        (503, False, eventfolding.Outcome.RETRY),
    ],
)
def test_outcomes(status: int, create: bool, outcome: eventfolding.Outcome) -> None:
    assert eventfolding.outcome(status, create=create) is outcome


def test_the_summary_is_one_warning_on_the_node() -> None:
    bounds = eventfolding.Bounds(1000, 1 << 20)
    got = eventfolding.summary("n1", 5, 1767225600.4, 1767225660.9, bounds, unique="ab")
    assert got["metadata"] == {"name": "n1.offline-events-dropped.ab", "namespace": "default"}
    assert got["involvedObject"]["kind"] == "Node" and got["involvedObject"]["name"] == "n1"
    assert got["type"] == "Warning" and got["reason"] == eventfolding.SUMMARY_REASON
    assert got["message"].startswith("5 Events recorded on node n1 ")
    assert "at most 1000 Events" in got["message"]
    assert got["firstTimestamp"] == "2026-01-01T00:00:00Z"
    assert got["lastTimestamp"] == "2026-01-01T00:01:00Z"
