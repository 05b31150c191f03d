"""The hub's watches over HTTP/2 on the real control plane (``proxy/h2upstream.py``): kubelet's
watch of each ConfigMap and Secret its pods mount goes to kube-apiserver as a stream over one
connection, not a connection each; a blackholed link ends them and they come back after the
heal, still over a few connections; the hub's cache follows a change made after it. (Every
other real-cluster test runs its hubs with HTTP/2 watches too: it is the default.)

Connections are counted where the apiserver would see them: the established ones into the
node's link (``partition``, every byte between the hub and kube-apiserver crosses it)."""

from __future__ import annotations

import functools
import json
import re

import cluster_support as support
import pytest

from yurthub.testing import edgenodes, procstats, realcluster

pytestmark = pytest.mark.slow

NS = "h2-watches"
MOUNTS = 12


def _open_exchanges(metrics: str) -> float:
    """Upstream exchanges in flight (``node_yurthub_closable_conns_collector``), all servers:
    the watches the hub forwards, mostly."""
    found = re.findall(r"^node_yurthub_closable_conns_collector\{[^}]*\} (\S+)$", metrics, re.M)
    return sum(float(v) for v in found)


def _pod(node: str) -> dict[str, object]:
    volumes = []
    for n in range(MOUNTS):
        volumes.append({"name": f"cm{n}", "configMap": {"name": f"cm{n}"}})
        volumes.append({"name": f"s{n}", "secret": {"secretName": f"s{n}"}})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "mounts", "namespace": NS},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "volumes": volumes,
        },
    }


def test_kubelets_watches_share_a_few_connections_through_a_cut(
    real_cluster: realcluster.RealCluster, edge_node: edgenodes.EdgeNode
) -> None:
    real_cluster.kubectl("create", "namespace", NS, check=False)
    objects = []
    for n in range(MOUNTS):
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm{n}", "namespace": NS},
                "data": {"k": "v"},
            }
        )
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"s{n}", "namespace": NS},
                "stringData": {"k": "v"},
            }
        )
    real_cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )
    real_cluster.kubectl("apply", "-f", "-", input=json.dumps(_pod(edge_node.name)))
    edgenodes.eventually(
        lambda: (
            support.get_json(real_cluster, "pod", "mounts", "-n", NS)["status"].get("phase")  # type: ignore[union-attr]
            == "Running"
        ),
        90,
        "pod mounts Running",
        alive=edge_node.check_alive,
    )

    def shared(least: int) -> tuple[float, int] | None:
        """(watches, connections) once at least ``least`` watches are open through the hub
        and they share connections: over HTTP/1.1 each held one of its own (connections >=
        watches); over HTTP/2 what is open besides the watches' one connection (one a TLS
        identity) is the heartbeat lane's, the prober's and the keep-alives of kubelet's
        gets and patches."""
        watches = _open_exchanges(edge_node.metrics())
        connections = procstats.connections_into(edge_node.partition_port)
        if watches < least or connections * 2 > watches:
            return None
        return watches, connections

    # kubelet watches each object its pod mounts for a minute (its watch-based manager stops
    # a reflector nobody read for that long: the hollow kubelet mounts only once).
    edgenodes.eventually(
        functools.partial(shared, 2 * MOUNTS), 60, f"{2 * MOUNTS} watches over a few connections"
    )
    log = edge_node.hub_log.read_text(errors="replace")
    assert "did not select HTTP/2" not in log

    # A blackholed link: the hub takes the apiserver for gone and ends what went over it.
    edge_node.cut()
    edge_node.wait_cloud(False)
    edge_node.heal()
    edge_node.wait_cloud(True)
    # kubelet's own watches (its pods, its node, services, CSIDrivers, RuntimeClasses...) are
    # back, over a few connections again.
    edgenodes.eventually(functools.partial(shared, 8), 90, "kubelet's watches back after the heal")

    # The hub's cache follows a change made after the heal (kubelet's watch of its Node, over
    # the new connection).
    real_cluster.kubectl("label", "node", edge_node.name, "h2-watches=after", "--overwrite")

    def cached_after() -> bool:
        cached = edge_node.cached_object(f"kubelet/nodes.v1.core/{edge_node.name}")
        labels = ((cached or {}).get("metadata") or {}).get("labels") or {}
        return labels.get("h2-watches") == "after"

    edgenodes.eventually(cached_after, 60, "the change in the hub's cache")
