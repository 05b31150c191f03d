"""``edgehub manager``'s lean informers on the real control plane, under the fleet generator
(``yurthub.testing.fleetobjects``, a small fleet; bench/manager_scale.py runs it at 50,000 pods).

Its own cluster: kube-controller-manager runs only its ServiceAccount and CSR-signing
controllers (no kubelet renews these nodes' leases, and the pods' owners are named, not
created). The manager runs as its binary with the manifests' identity and rights (RBAC and the
autonomy admission policy), five controllers, informers that keep only what they read. Checked:

* every node's pods get their tolerations when the node is marked autonomous, DaemonSet pods
  are left alone, and the marking removed from some nodes restores those nodes' pods only;
* a pod created on an autonomous node after the manager listed (a watch event decoded into the
  shape) gets them too;
* a hub client CSR, submitted as its node, is approved;
* leaders are elected for every pool, and each ``leader-hub-<pool>`` ConfigMap names them;
* nothing the manager asked was refused.

No time is asserted: waits have deadlines far beyond what the steps take.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import csr_support as cs
import pytest
from cluster_support import REPO, own_cluster

from nodeautonomy import marking
from yurthub.testing import edgenodes, fleetobjects, processes, realcluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

FLEET = fleetobjects.Fleet(nodes=50, pods=500, pools=5, prefix="scale")
MANAGER_USER = "system:serviceaccount:edgehub-system:edgehub-manager"
MANAGER_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:edgehub-system")
NR, UR = "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"
HOUR = 3600
DEFAULT = 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[realcluster.RealCluster]:
    extra_args = {"kube-controller-manager": {"controllers": fleetobjects.KCM_CONTROLLERS}}
    with own_cluster(tmp_path_factory, "scale-cluster", extra_args) as bed:
        bed.kubectl("create", "namespace", "edgehub-system")
        for manifest in (
            "crds/nodepools.apps.openyurt.io.yaml",
            "manager/rbac.yaml",
            "manager/autonomy-rbac.yaml",
            "manager/autonomy-policy.yaml",
            "manager/hubleader-rbac.yaml",
        ):
            bed.kubectl("apply", "-f", str(REPO / "manifests" / manifest))
        bed.kubectl(
            "wait", "--for=condition=established", "--timeout=60s",
            "crd/nodepools.apps.openyurt.io",
        )  # fmt: skip
        asyncio.run(fleetobjects.create(bed, FLEET))
        yield bed


@pytest.fixture(scope="module")
def manager(
    cluster: realcluster.RealCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The manager's log (it runs for the module)."""
    workdir = tmp_path_factory.mktemp("manager")
    kubeconfig = cluster.write_kubeconfig(
        workdir / "manager.kubeconfig", MANAGER_USER, MANAGER_GROUPS
    )
    (port,) = realcluster.free_ports(1)
    log = workdir / "manager.log"
    process = processes.Process(
        "edgehub manager",
        edgenodes.edgehub_argv(
            "manager",
            f"--kubeconfig={kubeconfig}",
            "--controllers=csrapprover,autonomy,hubleader,hubleaderconfig,hubleaderrbac",
            "--leader-elect-namespace=edgehub-system",
            "--bind-address=127.0.0.1",
            f"--health-port={port}",
        ),
        log,
        die_with_parent=True,
    )
    process.start()
    try:
        yield log
    finally:
        process.stop()


def eventually(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not reached in {timeout:.0f} s"
        time.sleep(0.5)


def get(cluster: realcluster.RealCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def seconds_by_pod(cluster: realcluster.RealCluster) -> dict[str, dict[str, int | None]]:
    out = {}
    for pod in get(cluster, "pods", "--all-namespaces")["items"]:
        out[pod["metadata"]["name"]] = {
            t["key"]: t.get("tolerationSeconds")
            for t in pod["spec"].get("tolerations") or []
            if t.get("key") in (NR, UR) and t.get("effect") == "NoExecute"
        }
    return out


def annotate(cluster: realcluster.RealCluster, nodes: list[str], value: str | None) -> None:
    setting = (
        f"{marking.DURATION_ANNOTATION}={value}" if value else f"{marking.DURATION_ANNOTATION}-"
    )
    cluster.kubectl("annotate", "--overwrite", "nodes", *nodes, setting)


def pods_of(indexes: range | list[int]) -> tuple[set[str], set[str]]:
    """(non-DaemonSet pods, DaemonSet pods) of these nodes."""
    apps, agents = set(), set()
    for i in indexes:
        for _, name in FLEET.pod_names(i):
            (agents if name.startswith("agent-") else apps).add(name)
    return apps, agents


def test_every_nodes_pods_follow_its_marking(
    cluster: realcluster.RealCluster, manager: Path
) -> None:
    everyone = [FLEET.node_name(i) for i in range(FLEET.nodes)]
    apps, agents = pods_of(range(FLEET.nodes))
    assert len(apps) + len(agents) == FLEET.pods

    annotate(cluster, everyone, "1h")

    def all_extended() -> bool:
        seen = seconds_by_pod(cluster)
        return all(seen[p] == {NR: HOUR, UR: HOUR} for p in apps)

    eventually(all_extended, 180, "every non-DaemonSet pod tolerates an hour")
    seen = seconds_by_pod(cluster)
    assert all(seen[p] == {NR: DEFAULT, UR: DEFAULT} for p in agents)

    # A pod bound after the manager listed: its watch event, decoded into the shape.
    namespace, _ = FLEET.pod_names(3)[1]
    late = FLEET.pod(3, namespace, "late-pod")
    cluster.kubectl("create", "-f", "-", input=json.dumps(late))
    eventually(
        lambda: seconds_by_pod(cluster).get("late-pod") == {NR: HOUR, UR: HOUR},
        120,
        "a pod created later tolerates an hour",
    )

    # The marking removed from the first ten nodes: their pods only go back to the default.
    annotate(cluster, everyone[:10], None)
    restored, _ = pods_of(range(10))

    def restored_only_those() -> bool:
        seen = seconds_by_pod(cluster)
        return all(seen[p] == {NR: DEFAULT, UR: DEFAULT} for p in restored)

    eventually(restored_only_those, 180, "the first ten nodes' pods restored")
    seen = seconds_by_pod(cluster)
    assert all(seen[p] == {NR: HOUR, UR: HOUR} for p in apps - restored)
    refused = re.compile(r"HTTP 40[13]|HTTP 422|forbidden|refused")
    log = manager.read_text(errors="replace").splitlines()
    assert [line for line in log if refused.search(line)] == []


def test_a_hub_csr_is_approved(
    cluster: realcluster.RealCluster, manager: Path, tmp_path: Path
) -> None:
    node = FLEET.node_name(7)
    request = cs.csr(
        "scale-hub-client",
        cs.hub_client_request(node),
        cs.CLIENT_SIGNER,
        ["digital signature", "key encipherment", "client auth"],
    )
    kubeconfig = cluster.node_kubeconfig(node)
    cluster.kubectl("create", "-f", "-", kubeconfig=kubeconfig, input=json.dumps(cs.body(request)))

    def approved() -> bool:
        csr = get(cluster, "csr", "scale-hub-client")
        return any(
            c["type"] == "Approved" for c in (csr.get("status") or {}).get("conditions") or []
        )

    eventually(approved, 120, "the hub CSR approved")
    issued = get(cluster, "csr", "scale-hub-client")
    eventually(
        lambda: bool(
            (get(cluster, "csr", "scale-hub-client").get("status") or {}).get("certificate")
        ),
        120,
        "the CSR signed",
    )
    assert base64.b64decode(get(cluster, "csr", "scale-hub-client")["status"]["certificate"])
    assert issued["status"]["conditions"][0]["reason"] == "AutoApproved"


def test_leaders_are_elected_for_every_pool(
    cluster: realcluster.RealCluster, manager: Path
) -> None:
    for p in range(FLEET.pools):
        cluster.kubectl("create", "-f", "-", input=json.dumps(FLEET.nodepool(p)))
    members = {
        FLEET.pool_name(p): {FLEET.node_name(i) for i in range(FLEET.nodes) if i % FLEET.pools == p}
        for p in range(FLEET.pools)
    }

    def leaders() -> dict[str, list[str]]:
        pools = get(cluster, "nodepools")["items"]
        return {
            p["metadata"]["name"]: [
                e["nodeName"] for e in (p.get("status") or {}).get("leaderEndpoints") or []
            ]
            for p in pools
        }

    eventually(
        lambda: all(len(v) == 1 for v in leaders().values()) and len(leaders()) == FLEET.pools,
        120,
        "every pool has its leader",
    )
    elected = leaders()
    for pool, (leader,) in elected.items():
        assert leader in members[pool]  # one of its own nodes

    def configured() -> bool:
        maps = get(cluster, "configmaps", "-n", "kube-system")["items"]
        data = {m["metadata"]["name"]: (m.get("data") or {}).get("leaders", "") for m in maps}
        return all(
            data.get(f"leader-hub-{pool}", "").startswith(f"{leader}/")
            for pool, (leader,) in elected.items()
        )

    eventually(configured, 120, "every leader-hub ConfigMap names its leader")
