"""The OTA API against the real control plane: what the Node authorizer and NodeRestriction let
the hub do with this node's identity.

An OTA DaemonSet (``apps.openyurt.io/update-strategy: OTA``, ``OnDelete``) runs a pod on the
hollow edge node. The test sets ``PodNeedUpgrade`` as OpenYurt's controller would; then, on the
node's hub server: ``imagepull`` patches the pod's status (``PodImageReady`` False) and
``upgrade`` deletes the pod, both as ``system:node:<node>``, and the real DaemonSet controller
creates its successor.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from yurthub.testing import edgenodes, realcluster

pytestmark = pytest.mark.slow

NS = "ota"


def daemonset(node: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "ota-app",
            "namespace": NS,
            "annotations": {"apps.openyurt.io/update-strategy": "OTA"},
        },
        "spec": {
            "selector": {"matchLabels": {"app": "ota-app"}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": {"app": "ota-app"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
        },
    }


def pods(cluster: realcluster.RealCluster) -> list[dict[str, Any]]:
    out = json.loads(cluster.kubectl("get", "pods", "-n", NS, "-o", "json").stdout)
    return [p for p in out["items"] if "deletionTimestamp" not in p["metadata"]]


def one_pod(cluster: realcluster.RealCluster, not_uid: str = "") -> dict[str, Any] | None:
    found = [p for p in pods(cluster) if p["metadata"]["uid"] != not_uid]
    return found[0] if len(found) == 1 else None


def post(url: str) -> tuple[int, bytes]:
    request = urllib.request.Request(url, method="POST", data=b"")
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        with e:  # its response holds the connection
            return e.code, e.read()


def test_the_node_identity_may_pull_images_and_delete_its_ota_pod(
    real_cluster: realcluster.RealCluster, edge_node: edgenodes.EdgeNode
) -> None:
    cluster, node = real_cluster, edge_node
    cluster.kubectl("create", "namespace", NS)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(daemonset(node.name)))
    pod = edgenodes.eventually(
        lambda: one_pod(cluster), 90, "the DaemonSet's pod", alive=node.check_alive
    )
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    base = f"{node.serve_url}/openyurt.io/v1/namespaces/{NS}/pods/{name}"

    code, body = post(f"{base}/upgrade")
    assert code == 403 and b"PodNeedUpgrade" in body, body  # not marked yet

    condition = {
        "type": "PodNeedUpgrade",
        "status": "True",
        "message": "controllerrevision: next",
    }
    cluster.kubectl(
        "patch",
        "pod",
        name,
        "-n",
        NS,
        "--subresource=status",
        "--type=strategic",
        "-p",
        json.dumps({"status": {"conditions": [condition]}}),
    )

    code, body = post(f"{base}/imagepull")
    assert code == 200, body
    current = json.loads(cluster.kubectl("get", "pod", name, "-n", NS, "-o", "json").stdout)
    image = [c for c in current["status"]["conditions"] if c["type"] == "PodImageReady"]
    assert [(c["status"], c["message"]) for c in image] == [("False", "controllerrevision: next")]

    # Drop the image condition again (the pre-heat controller would set it True): the
    # upgrade then only needs PodNeedUpgrade.
    cluster.kubectl(
        "patch",
        "pod",
        name,
        "-n",
        NS,
        "--subresource=status",
        "--type=strategic",
        "-p",
        json.dumps({"status": {"conditions": [{"type": "PodImageReady", "$patch": "delete"}]}}),
    )
    code, body = post(f"{base}/upgrade")
    assert code == 200, body
    assert body == f"Start updating pod {NS}/{name}".encode()
    successor = edgenodes.eventually(
        lambda: one_pod(cluster, not_uid=uid), 90, "the DaemonSet's new pod"
    )
    assert successor["metadata"]["uid"] != uid
    cluster.kubectl("delete", "namespace", NS, "--wait=false")
