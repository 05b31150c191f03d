"""Hub-leader election, the leader-hub-<pool> ConfigMap and the multiplexer ClusterRole (pure)."""

from __future__ import annotations

import datetime
import random
from typing import Any

import pytest

from managers import hubleaderconfigs, hubleaderelecting, hubleaderroles, nodepools
from managers.hubleaderelecting import Endpoint


def pool(name: str = "hz", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec}


def node(
    name: str,
    pool_name: str = "hz",
    *,
    ready: bool = True,
    ip: str | None = "auto",
    labels: dict[str, str] | None = None,
    deleting: bool = False,
    changed: str = "",
) -> nodepools.NodeFacts:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {nodepools.POOL_LABEL: pool_name, **(labels or {})},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    address = f"10.0.0.{name[-1]}" if ip == "auto" else ip
    addresses = [{"type": "Hostname", "address": name}]
    if address:
        addresses.append({"type": "InternalIP", "address": address})
    return nodepools.read_node(
        {
            "metadata": meta,
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        **({"lastTransitionTime": changed} if changed else {}),
                    }
                ],
                "addresses": addresses,
            },
        }
    )


def elect(
    spec_obj: dict[str, Any],
    nodes: list[nodepools.NodeFacts],
    leaders: tuple[Endpoint, ...] = (),
    seed: int = 1,
) -> list[str]:
    spec = nodepools.read_pool(spec_obj)
    return [e.node for e in hubleaderelecting.elect(spec, nodes, leaders, random.Random(seed))]


def test_defaults_from_an_empty_spec() -> None:
    spec = nodepools.read_pool(pool())
    assert spec.strategy == "random" and spec.leader_replicas == 1
    assert spec.scope == ("/v1/services", "discovery.k8s.io/v1/endpointslices")
    assert not spec.enable_leader_election and not spec.problems


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"leaderElectionStrategy": "oldest"}, "neither random nor mark"),
        ({"leaderReplicas": "2"}, "not an integer"),
        ({"leaderReplicas": 0}, "not within 1..64"),
        ({"leaderElectionStrategy": "mark"}, "the mark strategy needs one"),
        ({"leaderNodeLabelSelector": {"a": 1}}, "not a map of strings"),
        ({"enableLeaderElection": "yes"}, "not a boolean"),
        ({"poolScopeMetadata": [{"group": "", "version": "v1"}]}, "not a resource name"),
        ({"poolScopeMetadata": "services"}, "not a list"),
    ],
)
def test_spec_problems_are_named(spec: dict[str, Any], problem: str) -> None:
    problems = nodepools.read_pool(pool(**spec)).problems
    assert any(problem in p for p in problems), problems


def test_candidates_are_ready_nodes_of_the_pool_with_an_internal_ip() -> None:
    nodes = [
        node("n1"),
        node("n2", ready=False),
        node("n3", ip=None),
        node("n4", pool_name="other"),
        node("n5", deleting=True),
        node("n6"),
    ]
    spec = nodepools.read_pool(pool(enableLeaderElection=True, leaderReplicas=5))
    assert [n.name for n in hubleaderelecting.candidates(spec, nodes)] == ["n1", "n6"]
    assert elect(pool(enableLeaderElection=True, leaderReplicas=5), nodes) == ["n1", "n6"]


def test_random_pick_is_within_the_candidates_and_uses_the_rng() -> None:
    nodes = [node(f"n{i}") for i in range(1, 10)]
    spec = pool(enableLeaderElection=True, leaderReplicas=2)
    picks = {tuple(elect(spec, nodes, seed=s)) for s in range(20)}
    assert len(picks) > 1 and all(len(p) == 2 for p in picks)


def test_existing_eligible_leaders_are_kept() -> None:
    nodes = [node(f"n{i}") for i in range(1, 6)]
    spec = pool(enableLeaderElection=True, leaderReplicas=2)
    current = (Endpoint("n4", "10.0.0.4"), Endpoint("n2", "old"))
    for seed in range(10):
        assert elect(spec, nodes, current, seed=seed) == ["n2", "n4"]
    endpoints = hubleaderelecting.elect(nodepools.read_pool(spec), nodes, current, random.Random(0))
    assert Endpoint("n2", "10.0.0.2") in endpoints  # the address follows the node


def test_a_leader_that_is_no_longer_eligible_is_replaced() -> None:
    nodes = [node("n1", ready=False), node("n2"), node("n3")]
    spec = pool(enableLeaderElection=True)
    chosen = elect(spec, nodes, (Endpoint("n1", "10.0.0.1"),))
    assert chosen in (["n2"], ["n3"])


def test_fewer_replicas_drop_the_last_by_name() -> None:
    nodes = [node(f"n{i}") for i in range(1, 4)]
    current = tuple(Endpoint(f"n{i}", f"10.0.0.{i}") for i in range(1, 4))
    assert elect(pool(enableLeaderElection=True, leaderReplicas=2), nodes, current) == ["n1", "n2"]


def test_mark_strategy_needs_the_labels() -> None:
    nodes = [node("n1"), node("n2", labels={"leader": "yes"}), node("n3", labels={"leader": "no"})]
    spec = pool(
        enableLeaderElection=True,
        leaderElectionStrategy="mark",
        leaderNodeLabelSelector={"leader": "yes"},
        leaderReplicas=3,
    )
    assert elect(spec, nodes) == ["n2"]


def test_no_eligible_node_no_leaders_and_disabled_clears() -> None:
    assert elect(pool(enableLeaderElection=True), [node("n1", ready=False)]) == []
    assert elect(pool(enableLeaderElection=False), [node("n1")], (Endpoint("n1", "x"),)) == []


def test_a_spec_with_problems_changes_nothing() -> None:
    current = (Endpoint("n1", "10.0.0.1"),)
    assert elect(pool(enableLeaderElection=True, leaderReplicas=0), [node("n2")], current) == ["n1"]


def test_status_changes_only_when_something_does() -> None:
    leaders = (Endpoint("n1", "10.0.0.1"),)
    fresh = hubleaderelecting.status(pool(), leaders, "T1")
    assert fresh == {
        "leaderEndpoints": [{"nodeName": "n1", "address": "10.0.0.1"}],
        "leaderNum": 1,
        "leaderLastElectedTime": "T1",
    }
    written = {**pool(), "status": {**fresh, "nodes": ["n1"]}}
    assert hubleaderelecting.status(written, leaders, "T2") is None
    moved = hubleaderelecting.status(written, (Endpoint("n1", "10.0.0.9"),), "T2")
    assert moved is not None and moved["leaderLastElectedTime"] == "T1"  # same leader, new address
    assert moved["nodes"] == ["n1"]  # other status fields kept
    replaced = hubleaderelecting.status(written, (Endpoint("n2", "10.0.0.2"),), "T3")
    assert replaced is not None and replaced["leaderLastElectedTime"] == "T3"
    none = hubleaderelecting.status(written, (), "T4")
    assert none is not None and none["leaderNum"] == 0 and none["leaderEndpoints"] == []


def test_configmap_for_a_pool() -> None:
    obj = {
        **pool(
            enableLeaderElection=True,
            interConnectivity=True,
            poolScopeMetadata=[
                {"group": "discovery.k8s.io", "version": "v1", "resource": "endpointslices"},
                {"group": "", "version": "v1", "resource": "services"},
            ],
        ),
        "status": {
            "leaderEndpoints": [
                {"nodeName": "n2", "address": "10.0.0.2"},
                {"nodeName": "n1", "address": "10.0.0.1"},
            ]
        },
    }
    want = hubleaderconfigs.desired(obj, "kube-system")
    assert want is not None
    assert want["metadata"]["name"] == "leader-hub-hz"
    assert want["metadata"]["labels"] == {"openyurt.io/configmap-name": "leader-hub-hz"}
    owner = want["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "NodePool" and owner["uid"] == "uid-hz" and owner["controller"]
    assert want["data"] == {
        "leaders": "n1/10.0.0.1,n2/10.0.0.2",
        "pool-scoped-metadata": "/v1/services,discovery.k8s.io/v1/endpointslices",
        "interconnectivity": "true",
        "enable-leader-election": "true",
    }
    existing = {
        "metadata": {
            "name": "leader-hub-hz",
            "resourceVersion": "5",
            "labels": {"team": "edge"},
            "annotations": {"note": "x"},
        },
        "data": {"leaders": ""},
    }
    body = hubleaderconfigs.update(existing, want)
    assert body is not None and body["data"] == want["data"]
    assert body["metadata"]["resourceVersion"] == "5"
    assert body["metadata"]["labels"] == {
        "team": "edge",
        "openyurt.io/configmap-name": "leader-hub-hz",
    }
    assert body["metadata"]["annotations"] == {"note": "x"}
    assert hubleaderconfigs.update(body, want) is None
    assert hubleaderconfigs.desired(pool(name="p" * 250), "kube-system") is None


def test_cluster_role_aggregates_every_pool() -> None:
    role = hubleaderroles.desired(
        [
            ("/v1/services",),
            ("/v1/configmaps", "apps.openyurt.io/v1beta2/nodepools"),
        ]
    )
    assert role["metadata"]["name"] == "yurt-hub-multiplexer"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps", "services"], "verbs": ["list", "watch"]},
        {"apiGroups": ["apps.openyurt.io"], "resources": ["nodepools"], "verbs": ["list", "watch"]},
        {
            "apiGroups": ["discovery.k8s.io"],
            "resources": ["endpointslices"],
            "verbs": ["list", "watch"],
        },
    ]
    existing = {**role, "metadata": {**role["metadata"], "resourceVersion": "3"}}
    assert hubleaderroles.update(existing, role) is None
    changed = hubleaderroles.update(existing, hubleaderroles.desired([]))
    assert changed is not None and changed["metadata"]["resourceVersion"] == "3"


NOW = datetime.datetime(2026, 1, 1, 0, 1, 0, tzinfo=datetime.UTC)
JUST_NOW = "2026-01-01T00:00:50Z"  # 10 s before NOW: within the grace
LONG_AGO = "2026-01-01T00:00:00Z"  # 60 s before NOW: past it
N1 = (Endpoint("n1", "10.0.0.1"),)


@pytest.mark.parametrize(
    ("nodes", "leaders", "expected", "recheck"),
    [
        # The whole pool's cloud link dropped: every node NotReady, the leader stays.
        ([node("n1", ready=False, changed=LONG_AGO), node("n2", ready=False)], N1, ["n1"], None),
        # ... even with no transition time known.
        ([node("n1", ready=False), node("n2", ready=False)], N1, ["n1"], None),
        # A per-leader problem, the others Ready: replaced once past the grace ...
        ([node("n1", ready=False, changed=LONG_AGO), node("n2")], N1, ["n2"], None),
        # ... kept within it, decided again when it ends.
        ([node("n1", ready=False, changed=JUST_NOW), node("n2")], N1, ["n1"], 20.0),
        # The pool's link back after a long outage: its nodes turn Ready one by one. The
        # first one back has not waited the grace yet, though the leader has been NotReady
        # for long: kept (the leader's own Ready is only seconds behind).
        (
            [node("n1", ready=False, changed=LONG_AGO), node("n2", changed=JUST_NOW)],
            N1,
            ["n1"],
            20.0,
        ),
        # The leader stays NotReady while the other has been Ready past the grace: replaced.
        (
            [node("n1", ready=False, changed=JUST_NOW), node("n2", changed=LONG_AGO)],
            N1,
            ["n1"],
            20.0,
        ),
        (
            [node("n1", ready=False, changed=LONG_AGO), node("n2", changed=LONG_AGO)],
            N1,
            ["n2"],
            None,
        ),
        # The pool's link dropping: most of its nodes NotReady already, the rest still Ready
        # (marked one by one): the leader stays, whatever the grace.
        (
            [
                node("n1", ready=False, changed=LONG_AGO),
                node("n2", ready=False, changed=LONG_AGO),
                node("n3", ready=False, changed=JUST_NOW),
                node("n4", changed=LONG_AGO),
                node("n5", changed=LONG_AGO),
            ],
            N1,
            ["n1"],
            None,
        ),
        # Half of the pool NotReady is no majority: a leader with a problem of its own goes.
        (
            [
                node("n1", ready=False, changed=LONG_AGO),
                node("n2", ready=False, changed=LONG_AGO),
                node("n3", changed=LONG_AGO),
                node("n4", changed=LONG_AGO),
            ],
            N1,
            ["n3"],
            None,
        ),
        # Ready members that may not lead (no InternalIP) are no replacement.
        ([node("n1", ready=False, changed=LONG_AGO), node("n2", ip=None)], N1, ["n1"], None),
        # A deleted leader (no longer a member) or one being deleted is gone: replaced, or
        # none when nobody may lead.
        ([node("n2", ready=False)], N1, [], None),
        ([node("n1", deleting=True), node("n2")], N1, ["n2"], None),
        # A leader that left the pool is gone.
        ([node("n1", pool_name="other"), node("n2")], N1, ["n2"], None),
    ],
)
def test_a_leader_is_replaced_only_for_a_problem_of_its_own(
    nodes: list[nodepools.NodeFacts],
    leaders: tuple[Endpoint, ...],
    expected: list[str],
    recheck: float | None,
) -> None:
    spec = nodepools.read_pool(pool(enableLeaderElection=True))
    decided = hubleaderelecting.decide(spec, nodes, leaders, random.Random(1), now=NOW)
    assert [e.node for e in decided.leaders] == expected
    assert decided.recheck == recheck


def test_a_pool_wide_outage_never_empties_the_leaders() -> None:
    spec = nodepools.read_pool(pool(enableLeaderElection=True, leaderReplicas=2))
    leaders = (Endpoint("n1", "10.0.0.1"), Endpoint("n3", "10.0.0.3"))
    nodes = [node(f"n{i}", ready=False, changed=LONG_AGO) for i in range(1, 5)]
    decided = hubleaderelecting.decide(spec, nodes, leaders, random.Random(1), now=NOW)
    assert decided.leaders == leaders
    # When replicas must be dropped, a NotReady leader goes before a Ready one.
    nodes = [node("n1", ready=False, changed=LONG_AGO), node("n3")]
    assert elect(pool(enableLeaderElection=True), nodes, leaders) == ["n3"]


def test_a_node_says_when_it_went_not_ready() -> None:
    facts = node("n1", ready=False, changed=LONG_AGO)
    assert facts.not_ready_since == datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    assert node("n1", changed=LONG_AGO).not_ready_since is None
    ready = node("n1", changed=LONG_AGO)
    assert ready.ready_since == datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    assert node("n1", ready=False, changed=LONG_AGO).ready_since is None
    assert node("n1", ready=False, changed="yesterday").not_ready_since is None
    assert node("n1", deleting=True).deleting
