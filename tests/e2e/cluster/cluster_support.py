"""Helpers of the real-cluster suite: token kubeconfigs, JSON reads, a module's own control
plane, and a NodePool of edge nodes with ``edgehub manager``'s hub-leader controllers."""

from __future__ import annotations

import base64
import contextlib
import json
import pathlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import pytest
import yaml

from yurthub.testing import edgenodes, k8sbinaries, ports, processes, realcluster

REPO = pathlib.Path(__file__).resolve().parents[3]
POOL_LABEL = "apps.openyurt.io/nodepool"
# What a pool of hubs needs in the cluster: the NodePool CRD, the manager's namespace and
# roles (its hub-leader controllers' among them), the multiplexer's role for the hubs.
POOL_MANIFESTS = (
    "crds/nodepools.apps.openyurt.io.yaml",
    "discovery/00-namespace.yaml",
    "manager/rbac.yaml",
    "manager/hubleader-rbac.yaml",
    "hub/multiplexer-rbac.yaml",
)


def token_kubeconfig(
    path: pathlib.Path, server: str, token: str, ca: bytes | None = None
) -> pathlib.Path:
    """A kubeconfig for ``server`` with a bearer ``token`` (and a CA when https)."""
    cluster: dict[str, object] = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


def get_json(cluster: realcluster.RealCluster, *args: str) -> dict[str, object]:
    out: dict[str, object] = json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)
    return out


@contextlib.contextmanager
def own_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    extra_args: Mapping[str, Mapping[str, str]] | None = None,
) -> Iterator[realcluster.RealCluster]:
    """A control plane of the module's own (in a temporary directory named ``name``), with
    ``extra_args`` per component, for tests whose timings or controllers are not the session
    ``real_cluster``'s. Without the binaries the test fails, saying how to build them."""
    try:
        binaries = k8sbinaries.locate()
    except k8sbinaries.MissingBinariesError as e:
        pytest.fail(str(e), pytrace=False)
    bed = realcluster.RealCluster(
        tmp_path_factory.mktemp(name), binaries, die_with_parent=True, extra_args=extra_args
    )
    with bed:
        yield bed


def pool_leaders(cluster: realcluster.RealCluster, pool: str) -> list[str]:
    """The nodes the NodePool's status names as its leaders."""
    found: Any = get_json(cluster, "nodepool", pool)
    return [e["nodeName"] for e in (found.get("status") or {}).get("leaderEndpoints") or []]


class HubPool(NamedTuple):
    nodes: list[edgenodes.EdgeNode]
    port: int
    """Every hub's multiplexer port."""


@contextlib.contextmanager
def hub_pool(
    cluster: realcluster.RealCluster,
    workdir: pathlib.Path,
    pool: str,
    names: Sequence[str],
    manager_args: Sequence[str] = (),
) -> Iterator[HubPool]:
    """The NodePool ``pool`` (leader election on) with an edge node per address in ``names``,
    started but not yet waited Ready, and ``edgehub manager``'s csrapprover and hub-leader
    controllers as its ServiceAccount (log in ``workdir/manager.log``; ``manager_args`` more
    flags). Nodes are named after their addresses, which kubelet then reports as their
    InternalIP; the hubs use the node's identity as kubelet's and request serving
    certificates; every hub's multiplexer listens on one port (free on the first address).
    On the way out the nodes and the manager are stopped, the Nodes and the NodePool deleted."""
    for manifest in POOL_MANIFESTS:
        cluster.kubectl("apply", "-f", str(REPO / "manifests" / manifest))
    edgenodes.eventually(
        lambda: cluster.kubectl("get", "nodepools", check=False).returncode == 0, 30, "NodePool CRD"
    )
    nodepool = {
        "apiVersion": "apps.openyurt.io/v1beta2",
        "kind": "NodePool",
        "metadata": {"name": pool},
        "spec": {"type": "Edge", "enableLeaderElection": True, "interConnectivity": True},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(nodepool))
    token = cluster.kubectl(
        "create", "token", "edgehub-manager", "-n", "edgehub-system", "--duration=1h"
    ).stdout
    kubeconfig = token_kubeconfig(
        workdir / "manager.kubeconfig", cluster.url, token.strip(), cluster.ca_pem
    )
    manager = processes.Process(
        "manager",
        edgenodes.edgehub_argv(
            "manager",
            "--controllers=csrapprover,hubleader,hubleaderconfig,hubleaderrbac",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--health-port=0",
            f"--kubeconfig={kubeconfig}",
            *manager_args,
        ),
        workdir / "manager.log",
        die_with_parent=True,
    )
    port = ports.free_port(names[0])
    nodes = [
        edgenodes.EdgeNode(
            cluster,
            name,
            workdir=workdir / name,
            labels={POOL_LABEL: pool},
            serving_certificate=True,
            hub_args=[
                f"--nodepool-name={pool}",
                f"--node-ip={name}",
                f"--multiplexer-port={port}",
                "--proxy-secure-port=0",
            ],
        )
        for name in names
    ]
    manager.start()
    try:
        for node in nodes:
            node.start(wait_ready=False)
        yield HubPool(nodes, port)
    finally:
        for node in nodes:
            node.stop()
        manager.stop()
        for node in nodes:
            cluster.kubectl("delete", "node", node.name, "--wait=false", check=False)
        cluster.kubectl("delete", "nodepool", pool, "--wait=false", check=False)
