"""The fleet generator's plan: every pod once, spread evenly, each node's first pod its
DaemonSet's; pools and namespaces cover the fleet; addresses stay on loopback; the objects are
the same in every process (no per-process hashing)."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
from collections import Counter

import pytest

from yurthub.testing import fleetobjects


@pytest.mark.parametrize(
    ("nodes", "pods", "pools"), [(1, 0, 1), (3, 10, 2), (50, 500, 5), (7, 1000, 7)]
)
def test_every_pod_once_spread_evenly(nodes: int, pods: int, pools: int) -> None:
    fleet = fleetobjects.Fleet(nodes=nodes, pods=pods, pools=pools, namespaces=3)
    every = list(fleet.every_pod())
    assert len(every) == pods
    assert len({(ns, name) for _, ns, name in every}) == pods  # unique keys
    per_node = Counter(i for i, _, _ in every)
    assert max(per_node.values(), default=0) - min(per_node.values(), default=0) <= 1
    for i in range(nodes):
        names = fleet.pod_names(i)
        assert len(names) == fleet.pods_on(i)
        assert all(not n.startswith("agent-") for _, n in names[1:])
        if names:
            assert names[0][1] == f"agent-{fleet.node_name(i)}"
            agent = fleet.pod(i, *names[0])
            assert agent["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
        for namespace, name in names:
            pod = fleet.pod(i, namespace, name)
            assert pod["spec"]["nodeName"] == fleet.node_name(i)
            assert pod["metadata"]["namespace"] in {fleet.namespace(n) for n in range(3)}


def test_pools_and_nodes() -> None:
    fleet = fleetobjects.Fleet(nodes=300, pods=0, pools=7)
    members = Counter(
        fleet.node(i)["metadata"]["labels"][fleetobjects.POOL_LABEL] for i in range(300)
    )
    assert set(members) == {fleet.pool_name(p) for p in range(7)}
    assert max(members.values()) - min(members.values()) <= 1
    for i in (0, 255, 256, 299):
        node = fleet.node(i)
        assert node["metadata"]["labels"][fleetobjects.EDGE_WORKER_LABEL] == "true"
        (internal,) = [a for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
        assert ipaddress.ip_address(internal["address"]).is_loopback
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert [c["status"] for c in ready] == ["True"]
    assert fleet.nodepool(3)["spec"]["enableLeaderElection"] is True
    with pytest.raises(ValueError):
        fleetobjects.Fleet(nodes=2, pods=1, pools=3)


def test_the_objects_are_the_same_in_every_process() -> None:
    code = (
        "import json; from yurthub.testing import fleetobjects as f; "
        "x = f.Fleet(4, 9, 2); print(json.dumps([x.pod(1, 'ns', 'app-00001-2'), "
        "x.pod_status(1, 'ns', 'app-00001-2'), x.node(3)], sort_keys=True))"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    }
    assert len(runs) == 1
    fleet = fleetobjects.Fleet(4, 9, 2)
    here = [
        fleet.pod(1, "ns", "app-00001-2"),
        fleet.pod_status(1, "ns", "app-00001-2"),
        fleet.node(3),
    ]
    assert json.loads(runs.pop()) == json.loads(json.dumps(here))
