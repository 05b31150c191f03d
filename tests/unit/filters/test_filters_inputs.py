"""The filters' inputs: followed collections keep only what the filters read."""

from __future__ import annotations

import pytest

from yurthub.filters import inputs


def svc(name: str, topology: str | None, namespace: str = "default") -> dict[str, object]:
    annotations = {inputs.TOPOLOGY_ANNOTATION: topology} if topology is not None else {}
    return {"metadata": {"name": name, "namespace": namespace, "annotations": annotations}}


def test_services_keep_only_the_annotated_and_a_list_replaces() -> None:
    s = inputs.ServiceTopologies()
    assert not s.synced
    s.replace([svc("a", "kubernetes.io/hostname"), svc("b", None), {"metadata": "junk"}, {}])
    assert s.synced and s.keys == {("default", "a"): "kubernetes.io/hostname"}
    # A list in progress does not disturb the state until it commits.
    s.begin()
    s.add(svc("c", "openyurt.io/nodepool"))
    assert s.keys == {("default", "a"): "kubernetes.io/hostname"}
    s.apply("MODIFIED", svc("a", "openyurt.io/nodepool"))  # a watch event meanwhile
    s.commit()
    assert s.keys == {("default", "c"): "openyurt.io/nodepool"}
    s.apply("DELETED", svc("c", "openyurt.io/nodepool"))
    assert s.keys == {}


def test_node_label_follows_this_node_only() -> None:
    n = inputs.NodeLabel("node1")
    n.replace([{"metadata": {"name": "node2", "labels": {inputs.POOL_LABEL: "p2"}}}])
    assert n.synced and n.pool == ""
    n.apply("MODIFIED", {"metadata": {"name": "node1", "labels": {inputs.POOL_LABEL: "p1"}}})
    assert n.pool == "p1"
    n.apply("MODIFIED", {"metadata": {"name": "node1", "labels": {}}})
    assert n.pool == ""


def test_node_pools_and_absent_crds() -> None:
    p = inputs.NodePools()
    p.replace(
        [
            {"metadata": {"name": "p1"}, "status": {"nodes": ["a", 1, "b"]}},
            {"metadata": {"name": "p2"}, "status": {"nodes": "junk"}},
        ]
    )
    assert p.nodes == {"p1": frozenset({"a", "b"}), "p2": frozenset()}
    p.mark_absent()  # the CRD is not installed: synced and empty
    assert p.synced and p.nodes == {}


def test_inputs_pool_name_and_nodes() -> None:
    w = inputs.Inputs(node_name="n1", hub_address=inputs.Address("127.0.0.1", 10268))
    assert w.pool_name() == "" and w.pool_nodes("p1") is None
    w.node.replace([{"metadata": {"name": "n1", "labels": {inputs.POOL_LABEL: "p1"}}}])
    w.node_pools.replace([{"metadata": {"name": "p1"}, "status": {"nodes": ["n1"]}}])
    assert w.pool_name() == "p1" and w.pool_nodes("p1") == {"n1"}
    flagged = inputs.Inputs(
        node_name="n1",
        hub_address=inputs.Address("::1", 1),
        pool_flag="pf",
        pool_topology=inputs.PoolTopology.NONE,
    )
    assert flagged.pool_name() == "pf" and flagged.pool_nodes("pf") is None
    assert flagged.hub_address.family == "IPv6"


SERVED = "the hub serves no secure port"


@pytest.mark.parametrize(
    ("host", "port", "served", "problems"),
    [
        ("169.254.2.1", 10268, True, []),  # YurtHub's default: the dummy interface
        ("10.0.0.5", 443, True, []),  # a node address pods can route to
        ("fd00::5", 10268, True, []),
        ("127.0.0.1", 10268, True, ["127.0.0.1 is a loopback address"]),
        ("127.8.9.10", 10268, True, ["127.8.9.10 is a loopback address"]),  # all of 127/8
        ("::1", 10268, True, ["::1 is a loopback address"]),
        ("::ffff:127.0.0.1", 10268, True, ["::ffff:127.0.0.1 is a loopback address"]),
        ("0.0.0.0", 10268, True, ["0.0.0.0 is the unspecified address"]),
        ("::", 10268, True, [":: is the unspecified address"]),
        ("localhost", 10268, True, ["'localhost' is not an IP address"]),
        ("", 10268, True, ["no address"]),
        ("169.254.2.1", 0, True, ["--proxy-secure-port=0"]),
        ("169.254.2.1", 10268, False, [SERVED]),
        # The CLI's defaults: every problem is named.
        ("127.0.0.1", 10268, False, ["127.0.0.1 is a loopback address", SERVED]),
    ],
)
def test_where_pods_can_reach_the_hub(
    host: str, port: int, served: bool, problems: list[str]
) -> None:
    why = inputs.pods_cannot_reach(inputs.Address(host, port), secure_port_served=served)
    if not problems:
        assert why == ""
    else:
        for problem in problems:
            assert problem in why, why
        assert why.count(";") == len(problems) - 1, why
