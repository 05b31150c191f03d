"""An outage of a real edge node leaves a record in the real apiserver.

The hub's link to the real kube-apiserver is blackholed while the hollow kubelet goes on
(renewing its lease, reading its node and pods: the hub answers locally and counts it); after
the heal the hub posts one ``EdgeOutageEnded`` Event on the Node with its own node identity
(the Node authorizer and RBAC of a real node), ``kubectl describe node`` shows it, and the
node's ``Autonomy`` condition names the outage (the NodeRestriction admission of a real
status patch).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from yurthub.outages import causes, records
from yurthub.testing import edgenodes, realcluster

pytestmark = pytest.mark.slow


HUB_ARGS = ("--outage-flap-window-seconds=5",)
"""The Event waits until the link has stayed up this long (30 s by default: a flap folds in)."""


def history(node: edgenodes.EdgeNode) -> dict[str, Any]:
    status, body = edgenodes.http("GET", f"{node.serve_url}/v1/outages")
    assert status == 200, body
    found: dict[str, Any] = json.loads(body)
    return found


def kubelet_answers(outage: dict[str, Any]) -> int:
    return sum(a["answered"] for a in outage["answers"] if a["component"] == "kubelet")


def outage_events(cluster: realcluster.RealCluster, node: str) -> list[dict[str, Any]]:
    out = cluster.kubectl(
        "get",
        "events",
        "-n",
        "default",
        "--field-selector",
        f"reason={records.EVENT_REASON},involvedObject.name={node}",
        "-o",
        "json",
    ).stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def autonomy_message(node: edgenodes.EdgeNode) -> str:
    for condition in node.node().get("status", {}).get("conditions", []):
        if condition.get("type") == "Autonomy":
            return str(condition.get("message", ""))
    return ""


def test_an_outage_is_an_event_on_the_node_and_named_by_its_autonomy_condition(
    real_cluster: realcluster.RealCluster, edge_node: edgenodes.EdgeNode
) -> None:
    cluster, node = real_cluster, edge_node
    assert history(node)["ongoing"] is None
    node.cut()
    node.wait_cloud(healthy=False, timeout=40)
    began = history(node)["ongoing"]
    assert began is not None and began["cause"] == "silent", began

    # The hollow kubelet runs offline: its lease renewals and reads are answered locally.
    def kubelet_ran() -> dict[str, Any] | None:
        ongoing: dict[str, Any] | None = history(node)["ongoing"]
        return ongoing if ongoing is not None and kubelet_answers(ongoing) >= 3 else None

    edgenodes.eventually(kubelet_ran, 90, "kubelet answered locally during the cut")
    assert outage_events(cluster, node.name) == []

    node.heal()
    node.wait_cloud(healthy=True, timeout=40)

    def posted() -> list[dict[str, Any]] | None:
        return outage_events(cluster, node.name) or None

    (event,) = edgenodes.eventually(posted, 90, "the outage Event on the Node")
    assert event["metadata"]["name"] == records.event_name(node.name, began["id"])
    assert event["involvedObject"]["kind"] == "Node"
    assert event["type"] == "Normal" and event["source"]["component"] == "edgehub"
    message = event["message"]
    assert message.startswith(f"Node {node.name} could not reach the cloud for ")
    assert "no answer in time (a silent link)" in message
    assert "requests locally (kubelet " in message
    assert event["firstTimestamp"] == began["began"]

    # The hub records the Event as posted once the apiserver answered its POST, on disk in a
    # thread: the Event can be seen in the cloud a moment before the record says so.
    def recorded() -> dict[str, Any] | None:
        found = [o for o in history(node)["outages"] if o["id"] == began["id"]]
        return found[0] if found and found[0]["event"] == records.POSTED else None

    outage = edgenodes.eventually(recorded, 30, "the outage recorded as posted")
    assert kubelet_answers(outage) >= 3
    assert "node_yurthub_outage_seconds_count 1" in node.metrics()

    described = cluster.kubectl("describe", "node", node.name).stdout
    assert records.EVENT_REASON in described

    def condition_names_it() -> str | None:
        text = autonomy_message(node)
        return text if f"last outage: {began['began']} for " in text else None

    text = edgenodes.eventually(condition_names_it, 90, "the Autonomy condition naming it")
    assert text.endswith(f"({causes.words(outage['cause'])})")
