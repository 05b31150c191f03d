"""Edge autonomy with the real kubelet and the real control plane.

A kubemark hollow node runs two pods that mount a ConfigMap, a Secret and their projected
ServiceAccount token, through edgehub. The hub's link to the apiserver is blackholed for more
than 60 s; meanwhile the kubelet keeps its pods, and a kubelet **restarted while offline**
(kubemark keeps no local state) learns its node, its pods and what they mount from the hub's
cache alone and runs them again. Healed: the node is Ready in the cloud, no pod was deleted or
re-created (same UIDs), and the hub's cache holds what the apiserver holds.

kubelet 1.37 lists with streaming lists (``sendInitialEvents``): the offline restart only
works because a completed initial-events stream counts as a whole list in the cache.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from prometheus_client import parser

from yurthub.kubeproto import converting
from yurthub.testing import edgenodes, realcluster

pytestmark = pytest.mark.slow

NS = "autonomy"
PODS = ("app-0", "app-1")
OUTAGE = 65.0


def pod_manifest(name: str, node: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "autonomy"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "volumeMounts": [
                        {"name": "config", "mountPath": "/config"},
                        {"name": "secret", "mountPath": "/secret"},
                    ],
                }
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": "app-config"}},
                {"name": "secret", "secret": {"secretName": "app-secret"}},
            ],
        },
    }


def cloud_pods(cluster: realcluster.RealCluster) -> dict[str, dict[str, object]]:
    out = json.loads(cluster.kubectl("get", "pods", "-n", NS, "-o", "json").stdout)
    return {item["metadata"]["name"]: item for item in out["items"]}


def running_in_cloud(cluster: realcluster.RealCluster) -> dict[str, str] | None:
    pods = cloud_pods(cluster)
    if sorted(pods) != list(PODS):
        return None
    if any(p["status"].get("phase") != "Running" for p in pods.values()):  # type: ignore[union-attr]
        return None
    return {f"{NS}/{n}": str(p["metadata"]["uid"]) for n, p in pods.items()}  # type: ignore[index]


def offline_protobuf_pods(node: edgenodes.EdgeNode) -> list[dict[str, object]]:
    """kubelet's pod list through the hub, asked as kubelet asks (protobuf first)."""
    request = urllib.request.Request(
        f"{node.proxy_url}/api/v1/pods?fieldSelector=spec.nodeName%3D{node.name}",
        headers={
            "Accept": f"{converting.CONTENT_TYPE}, application/json",
            "User-Agent": "kubelet/v1.37.2 (linux/amd64) e2e",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.headers["Content-Type"] == converting.CONTENT_TYPE
        body = r.read()
    items: list[dict[str, object]] = converting.Converter().object(body)["items"]
    return items


def token_requests(node: edgenodes.EdgeNode) -> dict[str, float]:
    """kubelet's TokenRequests the hub has answered (cloud or cache), by status code."""
    counts: dict[str, float] = {}
    for family in parser.text_string_to_metric_families(node.metrics()):
        if family.name != "node_yurthub_request_duration_seconds":
            continue
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name.endswith("_count")
                and labels.get("component") == "kubelet"
                and labels.get("verb") == "create"
                and labels.get("resource") == "serviceaccounts"
            ):
                counts[labels["code"]] = counts.get(labels["code"], 0.0) + sample.value
    return counts


def test_pods_survive_an_outage_and_an_offline_kubelet_restart(
    real_cluster: realcluster.RealCluster, edge_node: edgenodes.EdgeNode
) -> None:
    cluster, node = real_cluster, edge_node
    cluster.kubectl("create", "namespace", NS)
    cluster.kubectl("create", "configmap", "app-config", "-n", NS, "--from-literal=mode=edge")
    cluster.kubectl("create", "secret", "generic", "app-secret", "-n", NS, "--from-literal=k=v")
    manifests = {"kind": "List", "apiVersion": "v1", "items": []}
    manifests["items"] = [pod_manifest(p, node.name) for p in PODS]
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifests))

    uids = edgenodes.eventually(
        lambda: running_in_cloud(cluster), 90, "pods Running", alive=node.check_alive
    )
    edgenodes.eventually(
        lambda: node.running_pods() == uids, 30, "kubelet runtime running both pods"
    )
    # kubelet's pod informer is a streaming list: the hub recorded it as a whole list.
    pod_lists = node.cached_lists("kubelet/pods.v1.core")
    assert f"kubelet/pods.v1.core?fieldSelector=spec.nodeName%3D{node.name}" in pod_lists

    cut_at = time.monotonic()
    node.cut()
    node.wait_cloud(healthy=False, timeout=40)
    assert node.running_pods() == uids, "kubelet dropped pods when the link went"

    granted = token_requests(node).get("201", 0.0)
    node.hollow.restart_kubelet()
    edgenodes.eventually(
        lambda: node.running_pods() == uids,
        90,
        "the kubelet restarted offline running its pods again from the hub's cache",
        alive=node.check_alive,
    )
    # Their projected token volumes were filled with tokens the hub issued offline, to the
    # node for its own pods (authn.tokengranting), and no TokenRequest of kubelet was refused.
    answered = token_requests(node)
    assert answered.get("201", 0.0) >= granted + len(PODS), answered
    assert set(answered) == {"201"}, answered
    # Offline, kubelet's protobuf list is assembled from what the hub stored as received.
    listed = offline_protobuf_pods(node)
    assert sorted(str(p["metadata"]["uid"]) for p in listed) == sorted(uids.values())
    while time.monotonic() - cut_at < OUTAGE:
        assert node.running_pods() == uids, "kubelet dropped pods during the outage"
        time.sleep(5)

    node.heal()
    node.wait_cloud(healthy=True, timeout=40)
    node.wait_ready(timeout=90)
    after = edgenodes.eventually(
        lambda: running_in_cloud(cluster), 60, "pods Running again in the cloud"
    )
    assert after == uids, "pods were deleted or re-created in the cloud"
    for pod in cloud_pods(cluster).values():
        assert "deletionTimestamp" not in pod["metadata"]  # type: ignore[operator]
    assert node.running_pods() == uids

    # The hub's cache converges on what the apiserver holds.
    def cache_matches_cloud() -> bool:
        cloud = {
            f"kubelet/pods.v1.core/{NS}/{name}": str(p["metadata"]["resourceVersion"])  # type: ignore[index]
            for name, p in cloud_pods(cluster).items()
        }
        return node.cached(f"kubelet/pods.v1.core/{NS}/") == cloud

    edgenodes.eventually(cache_matches_cloud, 30, "the hub's cached pods equal the cloud's")
    cached_node = node.cached(f"kubelet/nodes.v1.core/{node.name}")
    assert cached_node, "the hub holds kubelet's Node"
