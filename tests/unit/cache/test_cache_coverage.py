"""Which cached list covers an offline list request, and what a list replacement may remove."""

from __future__ import annotations

import pytest

from yurthub.cache import coverage, entries, keys, selectors

POD = keys.Scope("kubelet", "pods", "v1")
SVC = keys.Scope("kube-proxy", "services", "v1")
PARTIAL_POD = keys.Scope("kubectl", "pods", "v1", partial="v1")


def record_key(namespace: str = "", labels: str = "", fields: str = "") -> keys.ListKey:
    """A list key as the tee makes it: canonical selectors."""
    return keys.list_key(
        POD,
        namespace,
        selectors.parse_labels(labels).canonical(),
        selectors.parse_fields(fields).canonical(),
    )


@pytest.mark.parametrize(
    ("cached", "namespace", "labels", "fields", "covered"),
    [
        # same list, spelled differently (order, spaces, == vs =): the same requirements
        (record_key(labels="app=a,tier=web"), "", "tier == web, app=a", "", True),
        (record_key(fields="spec.nodeName=n1"), "", "", "spec.nodeName==n1", True),
        # the cached list is broader: the request is at least as restrictive
        (record_key(), "", "app=a", "", True),
        (record_key(), "", "", "spec.nodeName=n1", True),
        (record_key(labels="app=a"), "", "app=a,tier=web", "status.phase=Running", True),
        (record_key(labels="app in (a,b)"), "", "app in (b,a)", "", True),
        (
            record_key(fields="spec.nodeName=n1"),
            "",
            "",
            "status.phase!=Failed,spec.nodeName=n1",
            True,
        ),
        # the cached list is narrower, or different: it cannot answer
        (record_key(labels="app=a"), "", "", "", False),
        (record_key(labels="app=a"), "", "app=b", "", False),
        (record_key(labels="app=a"), "", "app in (a)", "", False),  # sound, not complete
        (record_key(fields="spec.nodeName=n1"), "", "", "", False),
        (record_key(fields="spec.nodeName=n1"), "", "", "spec.nodeName=n2", False),
        (record_key(fields="spec.nodeName=n1"), "", "", "spec.nodeName!=n1", False),
        (record_key(labels="!app"), "", "app", "", False),
        # a label requirement is not a field term, nor the other way round
        (record_key(labels="metadata.name=x"), "", "", "metadata.name=x", False),
        # namespaces: all-namespaces covers one; one never covers all or another
        (record_key(), "default", "", "", True),
        (record_key(labels="app=a"), "default", "app=a", "", True),
        (record_key("default"), "default", "", "", True),
        (record_key("default"), "", "", "", False),
        (record_key("default"), "other", "", "", False),
        (record_key("default"), "", "", "metadata.namespace=default", False),
    ],
)
def test_covers(
    cached: keys.ListKey, namespace: str, labels: str, fields: str, covered: bool
) -> None:
    got = coverage.covers(
        cached, namespace, selectors.parse_labels(labels), selectors.parse_fields(fields)
    )
    assert got is covered


def test_a_stored_selector_that_no_longer_parses_covers_nothing() -> None:
    broken = keys.ListKey(POD, "", "a in (b", "")
    wanted = selectors.parse_labels("a in (b,c)")
    assert not coverage.covers(broken, "", wanted, selectors.FieldSelector())
    assert coverage.authority(broken) is None


def record(rv: int) -> entries.ListRecord:
    return entries.ListRecord(str(rv), rv, "Pod", "v1", 0)


def test_best_prefers_the_exact_list_then_the_newest() -> None:
    exact = record_key(fields="spec.nodeName=n1")
    broad, other_broad = record_key(), record_key("default")
    narrow = record_key(labels="app=a")
    found = [(broad, record(9)), (exact, record(3)), (narrow, record(20))]
    fields = selectors.parse_fields("spec.nodeName=n1")
    labels = selectors.LabelSelector()
    assert coverage.best(found, exact, "default", labels, fields) == (exact, record(3))
    found = [(broad, record(9)), (other_broad, record(12)), (narrow, record(20))]
    assert coverage.best(found, exact, "default", labels, fields) == (other_broad, record(12))
    assert coverage.best(found, exact, "kube-system", labels, fields) == (broad, record(9))
    assert coverage.best([(narrow, record(20))], exact, "default", labels, fields) is None


def entry(labels: dict[str, str] | None = None, node: str = "") -> entries.Entry:
    fields = {"spec.nodeName": node} if node else {}
    return entries.Entry("1", 1, "Pod", "v1", labels, fields, frozenset(), 1)


def key(scope: keys.Scope = POD, namespace: str = "default", name: str = "p") -> keys.ObjectKey:
    return keys.object_key(scope, namespace, name)


@pytest.mark.parametrize(
    ("list_key", "obj", "stored", "matched"),
    [
        (record_key(), key(), entry(), True),
        (record_key(labels="app=a"), key(), entry({"app": "a"}), True),
        (record_key(labels="app=a"), key(), entry({"app": "b"}), False),
        (record_key(labels="app!=a"), key(), entry(), True),
        (record_key(fields="spec.nodeName=n1"), key(), entry(node="n1"), True),
        (record_key(fields="spec.nodeName=n1"), key(), entry(node="n2"), False),
        (record_key(fields="spec.nodeName=n1"), key(), entry(), False),
        (record_key(fields="status.podIP!=1.2.3.4"), key(), entry(), True),  # "" != 1.2.3.4
        (record_key(fields="metadata.name=p"), key(name="p"), entry(), True),
        (record_key(fields="metadata.name=p"), key(name="q"), entry(), False),
        (record_key(fields="metadata.namespace!=default"), key(), entry(), False),
    ],
)
def test_authority_matches_on_stored_labels_and_fields(
    list_key: keys.ListKey, obj: keys.ObjectKey, stored: entries.Entry, matched: bool
) -> None:
    matcher = coverage.authority(list_key)
    assert matcher is not None
    assert matcher(obj.namespace, obj.name, stored) is matched


@pytest.mark.parametrize(
    "list_key",
    [
        # a field the cache does not keep for this kind: what it matches is unknown
        keys.list_key(SVC, "", "", "spec.unknownField!=x"),
        # metadata-only objects hold no spec: spec.nodeName!=n1 would match every one
        keys.list_key(PARTIAL_POD, "", "", "spec.nodeName!=n1"),
    ],
)
def test_no_authority_over_fields_the_cache_does_not_hold(list_key: keys.ListKey) -> None:
    assert coverage.authority(list_key) is None


def test_metadata_only_lists_are_authoritative_by_labels_and_names() -> None:
    matcher = coverage.authority(keys.list_key(PARTIAL_POD, "", "app=a", "metadata.name=p"))
    assert matcher is not None
    assert matcher("default", "p", entry({"app": "a"}))
    assert not matcher("default", "q", entry({"app": "a"}))
