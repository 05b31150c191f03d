"""Pure apply decisions: RV guard, list replacement with coexisting selectors, watch DELETED.

A list replacement is authoritative for what its selector matches in its namespace: an object it
matches (on stored labels and fields) and lacks is removed, whoever brought it in; an object it
does not match only loses this list's claim.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from yurthub.cache import applying, entries, keys

POD = keys.Scope("kubelet", "pods", "v1")
ALL = keys.list_key(POD, "", "", "")
MINE = keys.list_key(POD, "", "", "spec.nodeName=n1")
LABELLED = keys.list_key(POD, "default", "app=x", "")
BY_NAME = keys.list_key(POD, "default", "", "metadata.name=p1")


def pod(name: str, rv: int, node: str = "n1", **labels: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": "default",
            "resourceVersion": str(rv),
            "labels": labels,
        },
        "spec": {"nodeName": node},
    }


def item(name: str, rv: int, node: str = "n1", **labels: str) -> applying.Item:
    obj = pod(name, rv, node, **labels)
    return applying.item_from_object(POD, obj, orjson.dumps(obj))


class Index:
    """A tiny index applying changes like the store does."""

    def __init__(self) -> None:
        self.entries: dict[keys.ObjectKey, entries.Entry] = {}

    def lookup(self, key: keys.ObjectKey) -> entries.Entry | None:
        return self.entries.get(key)

    def apply(self, changes: list[applying.Change | None]) -> None:
        for change in changes:
            if isinstance(change, applying.Remove):
                del self.entries[change.key]
            elif change is not None:
                self.entries[change.key] = change.entry

    def members(self, list_key: keys.ListKey) -> list[keys.ObjectKey]:
        return [k for k, e in self.entries.items() if str(list_key) in e.owners]

    def replace(self, list_key: keys.ListKey, *items: applying.Item, rv: int = -1) -> None:
        # As the store does: every cached object of the scope is a candidate.
        candidates = list(self.entries.items())
        self.apply(list(applying.replace_list(self.lookup, candidates, items, list_key, rv)))

    def put(self, it: applying.Item, owner: str) -> None:
        self.apply([applying.apply_object(self.lookup(it.key), it, owner)])

    def state(self) -> dict[str, tuple[str, list[str]]]:
        return {
            k.name: (e.resource_version, sorted(e.owners))
            for k, e in sorted(self.entries.items(), key=lambda kv: kv[0].name)
        }


# reference §10.1 TestCacheWatchResponse: sequences of ADDED/MODIFIED/DELETED
@pytest.mark.parametrize(
    ("events", "expected"),
    [
        (
            [("ADDED", "p1", 2), ("ADDED", "p2", 4), ("ADDED", "p3", 6)],
            {"p1": "2", "p2": "4", "p3": "6"},
        ),
        ([("ADDED", "p1", 2), ("DELETED", "p1", 4), ("ADDED", "p3", 6)], {"p3": "6"}),
        ([("ADDED", "p1", 2), ("MODIFIED", "p1", 4), ("ADDED", "p3", 6)], {"p1": "4", "p3": "6"}),
        ([("ADDED", "p1", 6), ("MODIFIED", "p1", 4), ("MODIFIED", "p1", 2)], {"p1": "6"}),
    ],
)
def test_watch_sequences(events: list[tuple[str, str, int]], expected: dict[str, str]) -> None:
    index = Index()
    for kind, name, rv in events:
        it = item(name, rv)
        if kind == "DELETED":
            index.apply([applying.apply_deleted(index.lookup(it.key), it.key, ALL)])
        else:
            index.put(it, str(ALL))
    assert {n: rv for n, (rv, _) in index.state().items()} == expected


def test_older_object_only_adds_its_owner() -> None:
    index = Index()
    index.put(item("p1", 5), str(ALL))
    index.put(item("p1", 3), str(MINE))
    assert index.state() == {"p1": ("5", sorted([str(ALL), str(MINE)]))}


def test_opaque_resource_versions_let_the_newest_write_win() -> None:
    a = item("p1", 5)
    b = applying.Item(a.key, entries.Entry("abc", -1, "Pod", "v1", None, {}, frozenset(), 1), b"{}")
    assert applying.is_newer_or_same(b.entry, a.entry)


def test_lists_with_different_selectors_coexist() -> None:
    index = Index()
    index.replace(MINE, item("p1", 1), item("p2", 2))
    index.replace(LABELLED, item("p2", 2, app="x"), item("p3", 3, app="x"))
    assert index.state() == {
        "p1": ("1", [str(MINE)]),
        "p2": ("2", sorted([str(MINE), str(LABELLED)])),
        "p3": ("3", [str(LABELLED)]),
    }
    # p2 is relabelled (my node's list sees it first), then the labelled list loses it: it no
    # longer matches app=x, so the labelled list only lets go of it; p3 still matches and goes.
    index.replace(MINE, item("p1", 1), item("p2", 4, app="y"))
    index.replace(LABELLED, rv=10)
    assert index.state() == {"p1": ("1", [str(MINE)]), "p2": ("4", [str(MINE)])}


def test_a_list_removes_what_it_matches_and_lacks_whoever_brought_it() -> None:
    index = Index()
    index.replace(MINE, item("p1", 1), item("p2", 2, app="x"))
    index.put(item("ghost", 3), entries.DIRECT)  # a get; deleted in the cloud since
    index.put(item("elsewhere", 3, node="n2"), entries.DIRECT)  # not on my node
    index.replace(LABELLED, item("p2", 2, app="x"))
    index.replace(MINE, item("p1", 1), rv=10)
    # p2 is on my node (stored spec.nodeName=n1), so my node's list says it is gone: it goes
    # although the labelled list has it (that list's watch re-adds it if it still exists).
    assert index.state() == {
        "elsewhere": ("3", [entries.DIRECT]),
        "p1": ("1", [str(MINE)]),
    }


def test_a_list_keeps_what_it_lacks_when_newer_than_its_snapshot() -> None:
    index = Index()
    index.replace(MINE, item("p1", 1))
    index.put(item("p2", 12), str(MINE))  # from the watch, after the next snapshot
    index.put(item("p3", 13), entries.DIRECT)  # a get, after the next snapshot
    index.replace(MINE, item("p1", 1), rv=10)
    assert set(index.state()) == {"p1", "p2", "p3"}
    index.replace(MINE, item("p1", 1), rv=20)
    assert set(index.state()) == {"p1"}


def test_a_namespaced_list_has_no_say_outside_its_namespace() -> None:
    index = Index()
    other = item("p1", 1)
    moved = applying.Item(
        keys.object_key(POD, "other", "p1"), other.entry.with_owners(frozenset()), other.body
    )
    index.put(moved, entries.DIRECT)
    index.replace(keys.list_key(POD, "default", "", ""), rv=10)
    assert set(index.state()) == {"p1"}


def test_a_selector_on_fields_the_cache_does_not_keep_removes_only_its_members() -> None:
    index = Index()
    unknown = keys.list_key(POD, "", "", "spec.unknown!=x")
    index.put(item("p1", 1), str(unknown))
    index.put(item("p2", 1), entries.DIRECT)
    index.replace(unknown, rv=10)
    assert index.state() == {"p2": ("1", [entries.DIRECT])}


@pytest.mark.parametrize(
    ("list_key", "survives"),
    [
        (ALL, False),  # no selector: deleted in the cluster
        (BY_NAME, False),  # a name selector loses objects only by deletion
        (MINE, True),  # may just have moved off the selection: the other list keeps it
    ],
)
def test_deleted_under_selector_releases_only_that_claim(
    list_key: keys.ListKey, survives: bool
) -> None:
    index = Index()
    other = keys.list_key(POD, "default", "", "")
    it = item("p1", 1)
    index.put(it, str(list_key))
    index.put(it, str(other))
    index.put(it, entries.DIRECT)
    index.apply([applying.apply_deleted(index.lookup(it.key), it.key, list_key)])
    if survives:
        assert index.state() == {"p1": ("1", [str(other)])}
    else:
        assert index.state() == {}


def test_deleted_with_only_a_direct_claim_left_removes() -> None:
    index = Index()
    it = item("p1", 1)
    index.put(it, str(MINE))
    index.put(it, entries.DIRECT)
    index.apply([applying.apply_deleted(index.lookup(it.key), it.key, MINE)])
    assert index.state() == {}


@pytest.mark.parametrize(
    ("obj", "why"),
    [
        ({"kind": "Status", "metadata": {}}, "Status"),
        ({"kind": "Pod", "metadata": {}}, "name"),
        ({"kind": "Pod"}, "metadata"),
    ],
)
def test_not_storable(obj: dict[str, Any], why: str) -> None:
    with pytest.raises(applying.NotStorable, match=why):
        applying.item_from_object(POD, obj, b"{}")


def test_an_unscheduled_pod_is_an_object_like_any_other() -> None:
    # YurtHub refuses pods without spec.nodeName everywhere (a quirk): a whole list of all pods
    # would then be stored without its pending ones and answer incomplete offline.
    obj = {"kind": "Pod", "metadata": {"name": "pending", "namespace": "default"}, "spec": {}}
    it = applying.item_from_object(POD, obj, b"{}")
    assert it.key == keys.object_key(POD, "default", "pending")


@pytest.mark.parametrize(
    ("name", "namespace", "url_name", "url_namespace", "refused"),
    [
        ("a", "default", "a", "default", False),
        ("a", "default", "", "default", False),  # a create: the URL names no object
        ("a", "default", "", "", False),  # an all-namespaces list or watch
        ("a", "default", "b", "default", True),
        ("a", "other", "a", "default", True),
        ("a", "other", "", "default", True),
        ("a", "", "a", "default", False),  # the body names no namespace: the URL's is used
    ],
)
def test_an_object_must_be_the_one_its_url_names(
    name: str, namespace: str, url_name: str, url_namespace: str, refused: bool
) -> None:
    meta = {"name": name, "resourceVersion": "1"} | ({"namespace": namespace} if namespace else {})
    it = applying.item_from_object(
        POD, {"kind": "Pod", "metadata": meta}, b"{}", fallback_namespace=url_namespace
    )
    if refused:
        with pytest.raises(applying.WrongObject):
            applying.check_identity(it, url_name, url_namespace)
    else:
        applying.check_identity(it, url_name, url_namespace)


def test_index_entry_holds_what_offline_answers_need() -> None:
    it = item("p1", 7, app="x")
    assert it.key == keys.object_key(POD, "default", "p1")
    assert it.entry.rv == 7 and it.entry.kind == "Pod"
    assert it.entry.labels == {"app": "x"}
    assert it.entry.fields["spec.nodeName"] == "n1"
    assert "status.podIP" not in it.entry.fields  # empty fields are not kept


def test_namespaces_objects_have_no_namespace_level() -> None:
    scope = keys.Scope("kubelet", "namespaces", "v1")
    obj = {"kind": "Namespace", "metadata": {"name": "kube-system", "resourceVersion": "1"}}
    it = applying.item_from_object(scope, obj, b"{}", fallback_namespace="kube-system")
    assert str(it.key) == "kubelet/namespaces.v1.core/kube-system"


def test_same_version_already_claimed_is_not_rewritten_unless_made_locally() -> None:
    index = Index()
    index.put(item("p1", 5), str(ALL))
    assert applying.apply_object(index.lookup(item("p1", 5).key), item("p1", 5), str(ALL)) is None
    change = applying.apply_object(
        index.lookup(item("p1", 5).key), item("p1", 5), str(ALL), same_version_differs=True
    )
    assert isinstance(change, applying.Write) and change.body is not None


def test_same_version_claimed_by_another_list_rewrites_only_the_claim() -> None:
    # kubelet's pods arrive as protobuf from its own list; another list (or the same pods read
    # as JSON) at the same versions adds its claim and leaves the stored body as it came.
    index = Index()
    index.put(item("p1", 5), str(ALL))
    change = applying.apply_object(index.lookup(item("p1", 5).key), item("p1", 5), str(MINE))
    assert isinstance(change, applying.Write) and change.body is None
    assert change.entry.owners == {str(ALL), str(MINE)}
    newer = applying.apply_object(index.lookup(item("p1", 5).key), item("p1", 6), str(MINE))
    assert isinstance(newer, applying.Write) and newer.body is not None
