"""API Priority and Fairness pushing back, on the real apiserver: a FlowSchema sends the node's
ConfigMap lists and watches to a priority level with no seats (every request rejected, 429).

- A client's request through the hub gets the apiserver's answer unchanged: 429, its
  ``Retry-After`` and the ``X-Kubernetes-PF-FlowSchema-UID`` / ``-PriorityLevel-UID`` of the
  FlowSchema and priority level that refused it (client-go waits and retries).
- The hub's own ConfigMap watch (``yurt-hub-cfg``), broken by a cut and a heal while APF
  refuses it, is retried as ``Retry-After`` says (the apiserver counts a few rejections, not a
  spin) and resumed once the FlowSchema is gone, without a list; the hub stays healthy (its
  heartbeat is not refused, and a refusal would not count as the cloud being away).
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from yurthub.testing import edgenodes, realcluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NAME = "edgehub-test-reject"


def rejected(cluster: realcluster.RealCluster) -> float:
    """Requests APF rejected for our FlowSchema so far."""
    total = 0.0
    for line in cluster.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        if line.startswith("apiserver_flowcontrol_rejected_requests_total{") and (
            f'flow_schema="{NAME}"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def refused_lists(cluster: realcluster.RealCluster) -> float:
    """ConfigMap LISTs the apiserver answered 429 so far."""
    total = 0.0
    for line in cluster.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        if (
            line.startswith("apiserver_request_total{")
            and 'code="429"' in line
            and 'resource="configmaps"' in line
            and 'verb="LIST"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def hub_metric(node: edgenodes.EdgeNode, prefix: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in node.metrics().splitlines()
        if line.startswith(prefix)
    )


def through_the_hub(node: edgenodes.EdgeNode, path: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        node.proxy_url + path,
        headers={"User-Agent": "kubectl/v1.37.2 (linux/amd64)", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return int(resp.status), dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return int(e.code), dict(e.headers), e.read()


def apf_objects(node_name: str) -> list[dict[str, object]]:
    level = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": NAME},
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": 0,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"},
            },
        },
    }
    schema = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": NAME},
        "spec": {
            "priorityLevelConfiguration": {"name": NAME},
            "matchingPrecedence": 10,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [{"kind": "User", "user": {"name": f"system:node:{node_name}"}}],
                    "resourceRules": [
                        {
                            "verbs": ["list", "watch"],
                            "apiGroups": [""],
                            "resources": ["configmaps"],
                            "namespaces": ["*"],
                        }
                    ],
                }
            ],
        },
    }
    return [level, schema]


def uid(cluster: realcluster.RealCluster, kind: str) -> str:
    out = cluster.kubectl("get", kind, NAME, "-o", "jsonpath={.metadata.uid}").stdout
    return out.strip()


def test_the_apiservers_429_is_passed_on_and_waited_out(
    real_cluster: realcluster.RealCluster, edge_node: edgenodes.EdgeNode
) -> None:
    cluster, node = real_cluster, edge_node
    doc = {"apiVersion": "v1", "kind": "List", "items": apf_objects(node.name)}
    own_lists = 'node_yurthub_cloud_lists_total{component="yurthub",resource="configmaps"}'
    lists_before = hub_metric(node, own_lists)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
    try:
        # A client's list through the hub: the apiserver's 429, unchanged.
        def refused() -> tuple[dict[str, str], bytes] | None:
            status, headers, body = through_the_hub(node, "/api/v1/namespaces/default/configmaps")
            return (headers, body) if status == 429 else None

        headers, body = edgenodes.eventually(refused, 30, "APF refusing the node's lists")
        assert headers["Retry-After"] == "1"
        assert headers["X-Kubernetes-PF-FlowSchema-UID"] == uid(cluster, "flowschema")
        assert headers["X-Kubernetes-PF-PriorityLevel-UID"] == uid(
            cluster, "prioritylevelconfiguration"
        )
        assert json.loads(body)["reason"] == "TooManyRequests"

        # The hub's own ConfigMap watch breaks (the link is cut and healed) while APF refuses.
        lists_refused = refused_lists(cluster)
        node.cut()
        node.wait_cloud(False, 60)
        before = rejected(cluster)
        node.heal()
        node.wait_cloud(True, 60)
        edgenodes.eventually(lambda: rejected(cluster) >= before + 3, 60, "a few retries")
        start, first = time.monotonic(), rejected(cluster)
        edgenodes.eventually(lambda: time.monotonic() - start >= 5, 10, "5 s of retries")
        paced = rejected(cluster) - first
        print(f"APF rejected {paced:.0f} requests in 5 s of the hub's retries")
        # Retry-After (1 s, stretched by up to a quarter) paces it: a handful per 5 s (one
        # watch loop; the client above retried nothing), not a spin.
        assert paced <= 12, paced
        assert node.cloud_healthy() is True
    finally:
        cluster.kubectl("delete", "flowschema,prioritylevelconfiguration", NAME, check=False)
    # Resumed once APF lets it through: its watch open again, and never a list.
    watch = 'node_yurthub_in_flight_requests_collector{client="yurthub",resource="configmaps"'
    edgenodes.eventually(
        lambda: hub_metric(node, watch) >= 1, 60, "the hub's ConfigMap watch open again"
    )
    assert hub_metric(node, own_lists) == lists_before
    # Only watches were refused and retried: the hub never turned a 429 into a relist.
    assert refused_lists(cluster) == lists_refused
