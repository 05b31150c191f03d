"""Fixtures of the real-cluster suite: the hubs' RBAC applied once, one edge node per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cluster_support import REPO

from yurthub.testing import edgenodes, realcluster


@pytest.fixture(scope="session")
def hub_rbac(real_cluster: realcluster.RealCluster) -> None:
    """What manifests/hub/rbac.yaml grants the hubs (applied as an operator would)."""
    real_cluster.kubectl("apply", "-f", str(REPO / "manifests/hub/rbac.yaml"))


@pytest.fixture(scope="module")
def edge_node(
    real_cluster: realcluster.RealCluster,
    hub_rbac: None,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[edgenodes.EdgeNode]:
    """An edge node (partition, hub, hollow kubelet + kube-proxy) named after the module; its
    hub gets the module's ``HUB_ARGS`` (a sequence of flags) if it has any."""
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    name = module.replace("_", "-")
    node = edgenodes.EdgeNode(
        real_cluster,
        name,
        workdir=tmp_path_factory.mktemp(name),
        hub_args=tuple(getattr(request.module, "HUB_ARGS", ())),
    )
    node.start()
    try:
        yield node
    finally:
        node.stop()
        real_cluster.kubectl("delete", "node", name, "--wait=false", check=False)
