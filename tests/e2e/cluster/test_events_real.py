"""Events recorded on an edge node while the cloud is away reach the real apiserver after the heal.

kubemark's hollow kubelet records no Events (it runs with client-go's FakeRecorder), so a client
posts through the hub what kubelet's recorder would: protobuf creates with kubelet's User-Agent
and no credentials of its own (the hub's port: the node's identity), and a strategic merge
PATCH of the count for a repeat. During the cut the hub answers with echoes and journals them;
after the heal the real apiserver (its validation, the Node authorizer for the hub's node
identity) holds them with their counts and the times they were recorded during the outage.
"""

from __future__ import annotations

import calendar
import json
import time
import urllib.request
from typing import Any

import pytest

from yurthub.kubeproto import converting
from yurthub.testing import edgenodes, realcluster

pytestmark = pytest.mark.slow

NS = "offline-events"
KUBELET_UA = "kubelet/v1.37.2 (linux/amd64) e2e"
SMP = "application/strategic-merge-patch+json"


def stamp(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def protobuf_event(
    name: str, namespace: str, kind: str, obj: str, reason: str, node: str, at: int
) -> bytes:
    """A core/v1 Event as kubelet's client sends it (protobuf, enveloped)."""
    converter = converting.Converter()
    event = converter._class("k8s.io.api.core.v1.Event")()
    event.metadata.name = name
    event.metadata.namespace = namespace
    event.involvedObject.kind = kind
    event.involvedObject.name = obj
    event.involvedObject.apiVersion = "v1"
    if kind == "Pod":
        event.involvedObject.namespace = namespace
    event.reason = reason
    event.message = f"{reason} (recorded offline)"
    event.source.component = "kubelet"
    event.source.host = node
    event.firstTimestamp.seconds = at
    event.lastTimestamp.seconds = at
    event.count = 1
    event.type = "Normal"
    unknown = converter._class("k8s.io.apimachinery.pkg.runtime.Unknown")()
    unknown.typeMeta.apiVersion = "v1"
    unknown.typeMeta.kind = "Event"
    unknown.raw = event.SerializeToString()
    return b"k8s\x00" + unknown.SerializeToString()


def through_hub(
    node: edgenodes.EdgeNode, method: str, path: str, body: bytes, content_type: str
) -> int:
    request = urllib.request.Request(
        node.proxy_url + path,
        data=body,
        method=method,
        headers={
            "Content-Type": content_type,
            "Accept": f"{converting.CONTENT_TYPE}, application/json",
            "User-Agent": KUBELET_UA,
        },
    )
    with urllib.request.urlopen(request, timeout=10) as r:
        return int(r.status)


def cloud_events(cluster: realcluster.RealCluster, namespace: str) -> dict[str, dict[str, Any]]:
    out = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json").stdout)
    return {e["metadata"]["name"]: e for e in out["items"]}


def seconds(text: str) -> int:
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))


def test_events_recorded_during_a_cut_are_in_the_apiserver_after_the_heal(
    real_cluster: realcluster.RealCluster, edge_node: edgenodes.EdgeNode
) -> None:
    cluster, node = real_cluster, edge_node
    cluster.kubectl("create", "namespace", NS)
    node.cut()
    node.wait_cloud(healthy=False, timeout=40)
    at = int(time.time())
    tag = f"{time.time_ns():x}"
    pods = f"/api/v1/namespaces/{NS}/events"
    created = {
        f"app-0.{tag}.pulled": (NS, "Pod", "app-0", "Pulled"),
        f"app-0.{tag}.started": (NS, "Pod", "app-0", "Started"),
        f"app-1.{tag}.backoff": (NS, "Pod", "app-1", "BackOff"),
        f"{node.name}.{tag}.starting": ("default", "Node", node.name, "Starting"),
    }
    for name, (namespace, kind, obj, reason) in created.items():
        body = protobuf_event(name, namespace, kind, obj, reason, node.name, at)
        path = f"/api/v1/namespaces/{namespace}/events"
        assert through_hub(node, "POST", path, body, converting.CONTENT_TYPE) == 201
    # The repeat kubelet's recorder counts: a strategic merge patch of the same name.
    backoff = f"app-1.{tag}.backoff"
    for count in (2, 3):
        patch = {
            "count": count,
            "lastTimestamp": stamp(at + 10 * count),
            "message": "BackOff (recorded offline)",
        }
        status = through_hub(node, "PATCH", f"{pods}/{backoff}", json.dumps(patch).encode(), SMP)
        assert status == 200
    assert not set(created) & set(cloud_events(cluster, NS))

    node.heal()
    node.wait_cloud(healthy=True, timeout=40)

    def all_there() -> dict[str, dict[str, Any]] | None:
        found = {**cloud_events(cluster, NS), **cloud_events(cluster, "default")}
        return found if set(created) <= set(found) else None

    found = edgenodes.eventually(all_there, 60, "the offline Events in the apiserver")
    for name, (namespace, kind, obj, reason) in created.items():
        got = found[name]
        assert got["metadata"]["namespace"] == namespace
        assert got["involvedObject"]["kind"] == kind and got["involvedObject"]["name"] == obj
        assert got["reason"] == reason and got["source"] == {
            "component": "kubelet",
            "host": node.name,
        }
        assert seconds(got["firstTimestamp"]) == at  # the time it happened, not the post's
    assert found[backoff]["count"] == 3
    assert found[backoff]["lastTimestamp"] == stamp(at + 30)
    assert all(found[n].get("count") == 1 for n in created if n != backoff)
