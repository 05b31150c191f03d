"""The multiplexer's in-memory store: resourceVersions, history, selections, bounds."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from yurthub.cache import selectors
from yurthub.pool import selection, watchcache
from yurthub.pool.watchcache import ADDED, DELETED, MODIFIED


def svc(
    name: str, rv: int, ns: str = "default", labels: dict[str, str] | None = None, **spec: str
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "resourceVersion": str(rv)}
    if labels is not None:
        meta["labels"] = labels
    return {"metadata": meta, "spec": {"type": "ClusterIP", **spec}}


def entry(name: str, rv: int, **kw: Any) -> watchcache.Entry:
    return watchcache.entry_of("services", svc(name, rv, **kw), "Service", "v1")


def store(
    *entries: watchcache.Entry, rv: int = 10, limits: watchcache.Limits = watchcache.Limits()
) -> watchcache.Store:
    s = watchcache.Store("services", limits)
    s.replace(list(entries), rv, kind="Service", list_kind="ServiceList", api_version="v1")
    return s


def sel(
    namespace: str = "", name: str = "", labels: str = "", fields: str = ""
) -> selection.Selection:
    built = selection.build("services", namespace, name, labels, fields)
    assert isinstance(built, selection.Selection)
    return built


def names(entries: list[watchcache.Entry]) -> list[str]:
    return [e.name for e in entries]


def seen(w: watchcache.Watcher) -> list[tuple[str, str, int]]:
    out = []
    for d in w.take(1000):
        obj = orjson.loads(d.entry.raw)
        rv = d.rv_override or int(obj["metadata"]["resourceVersion"])
        out.append((d.type, d.entry.name, rv))
    return out


def test_entry_of_adds_kind_and_reads_fields() -> None:
    e = entry("web", 5, labels={"app": "web"}, clusterIP="10.0.0.1")
    obj = orjson.loads(e.raw)
    assert obj["kind"] == "Service" and obj["apiVersion"] == "v1"
    assert e.key == ("default", "web") and e.rv == 5
    assert e.labels == {"app": "web"}
    assert e.fields["spec.clusterIP"] == "10.0.0.1" and e.fields["spec.type"] == "ClusterIP"


@pytest.mark.parametrize(
    ("obj", "why"),
    [
        ({"spec": {}}, "without metadata"),
        ({"metadata": {"namespace": "a", "resourceVersion": "1"}}, "without a name"),
        ({"metadata": {"name": "a"}}, "no resourceVersion"),
        ({"metadata": {"name": "a", "resourceVersion": "x"}}, "not a number"),
        ({"metadata": {"name": "a", "resourceVersion": "1", "labels": ["a"]}}, "labels"),
    ],
)
def test_entry_of_refuses_garbage(obj: dict[str, Any], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        watchcache.entry_of("services", obj, "Service", "v1")


def test_items_by_namespace_name_labels_and_fields() -> None:
    s = store(
        entry("a", 1, labels={"tier": "web"}),
        entry("b", 2, ns="kube-system", labels={"tier": "db"}, type="NodePort"),
        entry("c", 3, ns="kube-system"),
    )
    assert names(s.items(sel())) == ["a", "b", "c"]
    assert names(s.items(sel(namespace="kube-system"))) == ["b", "c"]
    assert names(s.items(sel(namespace="kube-system", name="c"))) == ["c"]
    assert names(s.items(sel(name="b"))) == ["b"]
    assert names(s.items(sel(labels="tier in (web,db)"))) == ["a", "b"]
    assert names(s.items(sel(labels="tier!=web"))) == ["b", "c"]
    assert names(s.items(sel(fields="spec.type=NodePort"))) == ["b"]
    assert names(s.items(sel(fields="metadata.namespace!=default"))) == ["b", "c"]


def test_unsupported_field_selector_is_400() -> None:
    refused = selection.build("services", "", "", "", "status.phase=Running")
    assert not isinstance(refused, selection.Selection)
    assert (
        refused["code"] == 400 and refused["message"] == "field label not supported: status.phase"
    )
    bad = selection.build("services", "", "", "a in (", "")
    assert not isinstance(bad, selection.Selection) and bad["code"] == 400
    slices = selection.build("endpointslices", "", "", "", "spec.type=ClusterIP")
    assert not isinstance(slices, selection.Selection)


def test_apply_keeps_versions_and_normalises_types() -> None:
    s = store(entry("a", 1))
    w = s.watch(sel(), initial=False, since=None)
    assert s.apply(MODIFIED, entry("b", 11))  # unknown object: ADDED for the client
    assert s.apply(ADDED, entry("a", 12))  # known object: MODIFIED
    assert not s.apply(MODIFIED, entry("a", 12))  # not newer: ignored
    assert not s.apply(MODIFIED, entry("a", 3))
    assert s.apply(DELETED, entry("b", 13))
    assert s.rv == 13 and s.objects == 1
    assert seen(w) == [(ADDED, "b", 11), (MODIFIED, "a", 12), (DELETED, "b", 13)]
    s.advance(20)
    s.advance(15)
    assert s.rv == 20


def test_watch_initial_state_then_changes() -> None:
    s = store(entry("a", 1), entry("b", 2, ns="other"))
    w = s.watch(sel(namespace="default"), initial=True, since=None)
    assert names(w.initial) == ["a"] and w.start_rv == 10
    s.apply(ADDED, entry("c", 11))
    s.apply(ADDED, entry("d", 12, ns="other"))
    assert seen(w) == [(ADDED, "c", 11)]


def test_watch_from_a_version_replays_the_history() -> None:
    s = store(entry("a", 1))
    for rv in (11, 12, 13):
        s.apply(MODIFIED, entry("a", rv))
    w = s.watch(sel(), initial=False, since=11)
    assert seen(w) == [(MODIFIED, "a", 12), (MODIFIED, "a", 13)]
    assert seen(s.watch(sel(), initial=False, since=10)) == [
        (MODIFIED, "a", rv) for rv in (11, 12, 13)
    ]
    assert seen(s.watch(sel(), initial=False, since=99)) == []  # newer than the store: later ones
    with pytest.raises(watchcache.Expired) as caught:
        s.watch(sel(), initial=False, since=9)
    assert caught.value.status["code"] == 410


def test_objects_entering_and_leaving_a_selection() -> None:
    s = store(entry("a", 1, labels={"app": "web"}))
    w = s.watch(sel(labels="app=web"), initial=False, since=None)
    s.apply(MODIFIED, entry("a", 11, labels={"app": "db"}))  # leaves: DELETED, previous content
    s.apply(MODIFIED, entry("a", 12, labels={"app": "db", "x": "y"}))  # outside: nothing
    s.apply(MODIFIED, entry("a", 13, labels={"app": "web"}))  # enters: ADDED
    s.apply(DELETED, entry("a", 14, labels={"app": "web"}))
    deliveries = w.take(10)
    assert [(d.type, d.rv_override) for d in deliveries] == [
        (DELETED, 11),
        (ADDED, None),
        (DELETED, None),
    ]
    left = orjson.loads(deliveries[0].entry.raw)
    assert left["metadata"]["labels"] == {"app": "web"}  # what the client knew


def test_relist_is_delivered_as_differences_and_restarts_the_history() -> None:
    s = store(entry("a", 1), entry("b", 2), entry("c", 3))
    w = s.watch(sel(), initial=False, since=None)
    s.replace(
        [entry("a", 1), entry("c", 15), entry("d", 14)],
        20,
        kind="Service",
        list_kind="ServiceList",
        api_version="v1",
    )
    assert seen(w) == [(DELETED, "b", 2), (ADDED, "d", 14), (MODIFIED, "c", 15)]
    assert s.rv == 20 and s.oldest == 20 and w.closed is None
    with pytest.raises(watchcache.Expired):
        s.watch(sel(), initial=False, since=15)  # inside the relist: list again
    with pytest.raises(watchcache.Behind):
        s.replace([], 19, kind="Service", list_kind="ServiceList", api_version="v1")


def test_a_slow_watcher_is_closed_and_the_others_go_on() -> None:
    s = store(rv=10, limits=watchcache.Limits(watcher_events=3))
    slow = s.watch(sel(), initial=False, since=None)
    fast = s.watch(sel(), initial=False, since=None)
    woken = []
    fast.notify = lambda: woken.append(1)
    for rv in range(11, 16):
        s.apply(ADDED, entry(f"s{rv}", rv))
        fast.take(10)
    assert slow.closed == "slow" and not slow.pending
    assert fast.closed is None and len(woken) == 5
    assert s.watchers == 2  # the server unwatches a closed watcher when its stream ends
    s.unwatch(slow)
    assert s.watchers == 1


def test_a_watcher_over_its_byte_budget_is_closed() -> None:
    s = store(limits=watchcache.Limits(watcher_bytes=4000))
    w = s.watch(sel(), initial=False, since=None)
    s.apply(ADDED, entry("big", 11, clusterIP="x" * 3000))
    assert w.closed is None
    s.apply(ADDED, entry("big2", 12, clusterIP="x" * 3000))
    assert w.closed == "slow"


def test_history_is_bounded_by_count_and_bytes() -> None:
    s = store(entry("a", 1), limits=watchcache.Limits(history_events=3))
    for rv in range(11, 17):
        s.apply(MODIFIED, entry("a", rv))
    assert s.history_length == 3 and s.oldest == 13
    assert seen(s.watch(sel(), initial=False, since=13)) == [
        (MODIFIED, "a", r) for r in (14, 15, 16)
    ]
    with pytest.raises(watchcache.Expired):
        s.watch(sel(), initial=False, since=12)

    small = store(entry("a", 1), limits=watchcache.Limits(max_bytes=2000))
    for rv in range(11, 21):
        small.apply(MODIFIED, entry("a", rv))
    assert small.bytes <= 2000 and small.history_length < 10 and not small.over_budget


def test_over_budget_when_the_objects_alone_do_not_fit() -> None:
    s = store(limits=watchcache.Limits(max_bytes=3000))
    for i in range(1, 11):
        s.apply(ADDED, entry(f"s{i}", 10 + i))
    assert s.over_budget
    s.reset("too big")
    assert not s.synced and s.objects == 0 and s.bytes == 0


def test_reset_closes_watchers() -> None:
    s = store(entry("a", 1))
    w = s.watch(sel(), initial=True, since=None)
    assert s.close_watchers("shutdown") == 1 and w.closed == "shutdown"
    w2 = s.watch(sel(), initial=True, since=None)
    s.reset("resource removed")
    assert w2.closed == "resource removed" and s.watchers == 0


def test_label_selectors_match_through_the_shared_parser() -> None:
    chosen = selection.Selection(labels=selectors.parse_labels("!canary"))
    assert chosen.matches("default", "a", {}, {})
    assert not chosen.matches("default", "a", {"canary": ""}, {})
