"""API Priority and Fairness pushing back, on the real apiserver: a FlowSchema sends the node's
ConfigMap lists and watches to a priority level with no seats. APF still runs one request at a
time there (a queue set never starves), so concurrent lists through the hub are refused 429.

- A client's request through the hub gets the apiserver's answer unchanged: 429, its
  ``Retry-After`` and the ``X-Kubernetes-PF-FlowSchema-UID`` / ``-PriorityLevel-UID`` of the
  FlowSchema and priority level that refused it (client-go waits and retries);
- the hub retries none of them (against this apiserver or another): the apiserver rejected
  exactly as many as the clients were told;
- the hub stays healthy (a refusal is an answer, not the cloud being away).

How the hub's own loops wait a 429 out and resume without a list is tested on the simulator
(``tests/integration/hub/test_hub_following_resume.py``): a priority level with no seats
still lets a lone request through, so the real apiserver cannot refuse one watch on demand.
"""

from __future__ import annotations

import concurrent.futures
import json
import urllib.error
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


def through_the_hub(node: edgenodes.EdgeNode, path: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        node.proxy_url + path,
        headers={"User-Agent": "kubectl/v1.37.2 (linux/amd64)", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return int(resp.status), {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as e:
        with e:  # its response holds the connection
            return int(e.code), {k.lower(): v for k, v in e.headers.items()}, e.read()


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


def test_the_apiservers_429_is_passed_on_unchanged_and_never_retried(
    real_cluster: realcluster.RealCluster, edge_node: edgenodes.EdgeNode
) -> None:
    cluster, node = real_cluster, edge_node
    doc = {"apiVersion": "v1", "kind": "List", "items": apf_objects(node.name)}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
    try:
        before = rejected(cluster)
        answers: list[tuple[int, dict[str, str], bytes]] = []

        def some_refused() -> bool:
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                answers.extend(
                    pool.map(
                        lambda _: through_the_hub(
                            node, "/api/v1/namespaces/kube-system/configmaps"
                        ),
                        range(16),
                    )
                )
            return any(status == 429 for status, _, _ in answers)

        edgenodes.eventually(some_refused, 60, "APF refusing concurrent lists", interval=1)
        refused = [(headers, body) for status, headers, body in answers if status == 429]
        assert {status for status, _, _ in answers} <= {200, 429}
        schema, level = uid(cluster, "flowschema"), uid(cluster, "prioritylevelconfiguration")
        for headers, body in refused:
            # (header names lowercased: Go writes them X-Kubernetes-Pf-Flowschema-Uid)
            assert headers["retry-after"] == "1"
            assert headers["x-kubernetes-pf-flowschema-uid"] == schema
            assert headers["x-kubernetes-pf-prioritylevel-uid"] == level
            # APF's refusal is plain text, not a Status (the simulator's throttle says the same).
            assert headers["content-type"] == "text/plain; charset=utf-8"
            assert body == b"Too many requests, please try again later.\n"
        print(f"{len(refused)} of {len(answers)} concurrent lists refused by APF")
        # Nothing retried behind the clients' backs: the apiserver refused what they saw.
        assert rejected(cluster) - before == len(refused)
        assert node.cloud_healthy() is True
    finally:
        cluster.kubectl("delete", "flowschema,prioritylevelconfiguration", NAME, check=False)
