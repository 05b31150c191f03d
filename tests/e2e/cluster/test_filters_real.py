"""Response filters on the real control plane, with a kubemark hollow node behind the hub.

The node ``filters-real`` carries ``apps.openyurt.io/nodepool=pool-a``; OpenYurt's NodePool
CRD (from ``manifests/crds``) is installed and ``pool-a``'s status lists it and ``pool-peer``.
A selector-less Service with pool topology has a hand-written EndpointSlice (endpoints on this
node, on ``pool-peer`` and on ``far-node``) that the test moves around as the EndpointSlice
controller would when pods move.

What the hollow kubelet and kube-proxy read is checked twice: through the hub's metrics (their
own informers' reads were filtered) and by reading as they do (their User-Agent and Accept)
through the same hub, including a watch that sees the slice change live, a protobuf-only read
and a gzip-compressed one as the real apiserver sends them.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import cluster_support as support
import pytest

from yurthub.testing import edgenodes, realcluster
from yurthub.testing import protomessages as pm

pytestmark = pytest.mark.slow

NAME = "filters-real"
POOL = "pool-a"
NS = "filters"
PROTOBUF = "application/vnd.kubernetes.protobuf"
HUB_IP = "169.254.2.1"
"""Where pods reach the hub (hidden ``--master-service-address``): the dummy IP YurtHub uses.
Nothing dials it (the hollow node's pods and kube-proxy are fakes); with the CLI's loopback
default the filters that point pods at the hub would stay off."""
KUBELET = "hollow-kubelet/v1.37.2 (linux/amd64) kubernetes/e2e"
KUBE_PROXY = "hollow-proxy/v1.37.2 (linux/amd64) kubernetes/e2e"
CLIENT_GO_ACCEPT = f"{PROTOBUF},application/json"
SLICES = "/apis/discovery.k8s.io/v1/endpointslices"
OBJECTS = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {NS}}}
---
apiVersion: apps.openyurt.io/v1beta2
kind: NodePool
metadata: {{name: {POOL}}}
spec: {{type: Edge}}
---
apiVersion: v1
kind: Service
metadata:
  name: pooled
  namespace: {NS}
  annotations: {{openyurt.io/topologyKeys: openyurt.io/nodepool}}
spec:
  ports: [{{name: http, port: 80}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: pooled-1
  namespace: {NS}
  labels:
    kubernetes.io/service-name: pooled
    endpointslice.kubernetes.io/managed-by: e2e.edgehub.io
addressType: IPv4
ports: [{{name: http, port: 8080, protocol: TCP}}]
endpoints:
  - {{addresses: [10.1.0.1], nodeName: {NAME}, conditions: {{ready: true}}}}
  - {{addresses: [10.1.0.2], nodeName: pool-peer, conditions: {{ready: true}}}}
  - {{addresses: [10.1.0.3], nodeName: far-node, conditions: {{ready: true}}}}
---
# The test bed runs the apiserver with --endpoint-reconciler-type=none (its address is
# loopback, which endpoint validation refuses): the slice a real cluster has, written here.
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes
  namespace: default
  labels: {{kubernetes.io/service-name: kubernetes}}
addressType: IPv4
ports: [{{name: https, port: 6443, protocol: TCP}}]
endpoints:
  - {{addresses: [10.0.0.10], conditions: {{ready: true}}}}
---
apiVersion: v1
kind: Service
metadata:
  name: cloud-lb
  namespace: {NS}
  annotations: {{svc.openyurt.io/discard: "true"}}
spec:
  type: LoadBalancer
  ports: [{{port: 80}}]
"""


@pytest.fixture(scope="module")
def pool_node(
    real_cluster: realcluster.RealCluster,
    hub_rbac: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[edgenodes.EdgeNode]:
    crds = support.REPO / "manifests" / "crds"
    for crd in ("nodepools.apps.openyurt.io", "nodebuckets.apps.openyurt.io"):
        real_cluster.kubectl("apply", "-f", str(crds / f"{crd}.yaml"))
        real_cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=30s")
    real_cluster.kubectl("apply", "-f", "-", input=OBJECTS)
    real_cluster.kubectl(
        "patch", "nodepool", POOL, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"nodes": [NAME, "pool-peer"], "readyNodeNum": 1}}),
    )  # fmt: skip
    node = edgenodes.EdgeNode(
        real_cluster,
        NAME,
        workdir=tmp_path_factory.mktemp(NAME),
        labels={"apps.openyurt.io/nodepool": POOL},
        hub_args=(f"--master-service-address={HUB_IP}",),
    )
    node.start()
    try:
        yield node
    finally:
        node.stop()
        real_cluster.kubectl("delete", "node", NAME, "--wait=false", check=False)
        real_cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        real_cluster.kubectl(
            "delete", "endpointslice", "kubernetes", "-n", "default", "--wait=false", check=False
        )


def read(
    node: edgenodes.EdgeNode,
    path: str,
    ua: str,
    accept: str = CLIENT_GO_ACCEPT,
    gzip_ok: bool = False,
) -> tuple[bytes, dict[str, str]]:
    headers = {"User-Agent": ua, "Accept": accept}
    if gzip_ok:
        headers["Accept-Encoding"] = "gzip"
    request = urllib.request.Request(node.proxy_url + path, headers=headers)
    with urllib.request.urlopen(request, timeout=15) as r:
        assert r.status == 200
        return r.read(), dict(r.headers)


def read_json(node: edgenodes.EdgeNode, path: str, ua: str, **kw: Any) -> dict[str, Any]:
    body, headers = read(node, path, ua, **kw)
    assert headers["Content-Type"].startswith("application/json"), headers
    out: dict[str, Any] = json.loads(body)
    return out


def metric(node: edgenodes.EdgeNode, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in node.metrics().splitlines():
        if line.startswith(f"{name}{{{want}}} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def nodes_of(slice_obj: dict[str, Any]) -> list[str]:
    return sorted(e.get("nodeName", "") for e in slice_obj.get("endpoints") or [])


def test_the_hollow_kubelet_gets_the_hub_as_the_kubernetes_service(
    pool_node: edgenodes.EdgeNode, real_cluster: realcluster.RealCluster
) -> None:
    # The hollow kubelet's own service informer (its pods' KUBERNETES_SERVICE_* come from it)
    # read the kubernetes Service rewritten.
    edgenodes.eventually(
        lambda: metric(
            pool_node, "node_yurthub_filter_objects_total", filter="masterservice",
            outcome="changed",
        ) >= 1,
        30,
        "the hollow kubelet's kubernetes Service rewritten",
    )  # fmt: skip
    real = support.get_json(real_cluster, "service", "kubernetes", "-n", "default")
    listed = read_json(pool_node, "/api/v1/services", KUBELET)
    (svc,) = [s for s in listed["items"] if s["metadata"]["name"] == "kubernetes"]
    assert svc["spec"]["clusterIP"] == HUB_IP != real["spec"]["clusterIP"]  # type: ignore[index]
    assert [p["port"] for p in svc["spec"]["ports"] if p["name"] == "https"] == [10268]
    # A protobuf-only client: the real apiserver's protobuf, filtered.
    body, headers = read(pool_node, "/api/v1/services", KUBELET, accept=PROTOBUF)
    assert headers["Content-Type"] == PROTOBUF
    services = {s.metadata.name: s for s in pm.open_envelope(body, "ServiceList").items}
    assert services["kubernetes"].spec.clusterIP == HUB_IP
    assert list(services["kubernetes"].spec.clusterIPs) == [HUB_IP]


def test_kube_proxy_sees_its_pool_and_follows_a_move(
    pool_node: edgenodes.EdgeNode, real_cluster: realcluster.RealCluster
) -> None:
    edgenodes.eventually(
        lambda: (
            metric(pool_node, "node_yurthub_filter_requests_total", filter="servicetopology") >= 1
        ),
        30,
        "the hollow kube-proxy's EndpointSlice reads filtered",
    )
    listed = read_json(pool_node, SLICES, KUBE_PROXY)
    slices = {f"{s['metadata']['namespace']}/{s['metadata']['name']}": s for s in listed["items"]}
    assert nodes_of(slices[f"{NS}/pooled-1"]) == sorted([NAME, "pool-peer"])
    kubernetes = slices["default/kubernetes"]
    assert [e["addresses"] for e in kubernetes["endpoints"]] == [[HUB_IP]]
    assert kubernetes["ports"][0]["port"] == 10268
    # A protobuf-only read of the slices.
    body, _ = read(pool_node, SLICES, KUBE_PROXY, accept=PROTOBUF)
    pb = {s.metadata.name: s for s in pm.open_envelope(body, "EndpointSliceList").items}
    assert sorted(e.nodeName for e in pb["pooled-1"].endpoints) == sorted([NAME, "pool-peer"])

    # Live: the endpoint on far-node moves into the pool, then ours moves out.
    rv = listed["metadata"]["resourceVersion"]
    request = urllib.request.Request(
        f"{pool_node.proxy_url}/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"
        f"?watch=true&resourceVersion={rv}&timeoutSeconds=60",
        headers={"User-Agent": KUBE_PROXY, "Accept": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as stream:

        def next_pooled() -> dict[str, Any]:
            while True:
                event = json.loads(stream.readline())
                if event["object"]["metadata"].get("name") == "pooled-1":
                    return dict(event)

        def move(index: int, node: str) -> None:
            patch = [{"op": "replace", "path": f"/endpoints/{index}/nodeName", "value": node}]
            real_cluster.kubectl(
                "patch", "endpointslice", "pooled-1", "-n", NS, "--type=json",
                "-p", json.dumps(patch),
            )  # fmt: skip

        move(2, "pool-peer")
        event = next_pooled()
        assert event["type"] == "MODIFIED"
        assert nodes_of(event["object"]) == sorted([NAME, "pool-peer", "pool-peer"])
        move(0, "far-node")
        event = next_pooled()
        assert nodes_of(event["object"]) == ["pool-peer", "pool-peer"]


def test_a_discarded_load_balancer_never_reaches_kube_proxy(
    pool_node: edgenodes.EdgeNode, real_cluster: realcluster.RealCluster
) -> None:
    names = {
        s["metadata"]["name"] for s in read_json(pool_node, "/api/v1/services", KUBE_PROXY)["items"]
    }
    assert "pooled" in names and "cloud-lb" not in names
    direct = support.get_json(real_cluster, "services", "-n", NS)
    assert "cloud-lb" in {s["metadata"]["name"] for s in direct["items"]}  # type: ignore[attr-defined]
    listed = read_json(pool_node, f"/api/v1/namespaces/{NS}/services", KUBE_PROXY)
    request = urllib.request.Request(
        f"{pool_node.proxy_url}/api/v1/namespaces/{NS}/services?watch=true"
        f"&resourceVersion={listed['metadata']['resourceVersion']}&timeoutSeconds=60",
        headers={"User-Agent": KUBE_PROXY, "Accept": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as stream:
        real_cluster.kubectl(
            "create", "service", "loadbalancer", "cloud-lb-2", "--tcp=80:80", "-n", NS
        )
        real_cluster.kubectl(
            "annotate", "service", "cloud-lb-2", "-n", NS, "svc.openyurt.io/discard=true"
        )
        while True:
            event = json.loads(stream.readline())
            if event["object"]["metadata"].get("annotations", {}).get("svc.openyurt.io/discard"):
                break
        # Dropped from here on: DELETED carrying the object, so kube-proxy forgets it.
        assert event["type"] == "DELETED" and event["object"]["metadata"]["name"] == "cloud-lb-2"
    assert metric(
        pool_node, "node_yurthub_filter_objects_total", filter="discardcloudservice",
        outcome="dropped",
    ) >= 1  # fmt: skip
    # A list big enough for the apiserver to gzip it (over 128 KiB), as Go clients ask: the
    # hub inflates it, filters it, and sends it plain.
    for i in range(4):
        real_cluster.kubectl("create", "service", "clusterip", f"big-{i}", "--tcp=80:80", "-n", NS)
        real_cluster.kubectl(
            "annotate", "service", f"big-{i}", "-n", NS, f"e2e/padding={'x' * 60000}"
        )
    path = f"/api/v1/namespaces/{NS}/services"
    gzip_headers = {"Accept": "application/json", "Accept-Encoding": "gzip"}
    direct = urllib.request.Request(real_cluster.url + path, headers=gzip_headers)
    with urllib.request.urlopen(direct, context=real_cluster.admin_ssl_context()) as r:
        assert r.headers.get("Content-Encoding") == "gzip"  # so the hub had to inflate
    request = urllib.request.Request(
        pool_node.proxy_url + path, headers={"User-Agent": KUBE_PROXY, **gzip_headers}
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        assert "Content-Encoding" not in r.headers
        names = {s["metadata"]["name"] for s in json.loads(r.read())["items"]}
    assert {"big-0", "big-3", "pooled"} <= names and not names & {"cloud-lb", "cloud-lb-2"}
    # The cache keeps what the cloud sent: offline answers are filtered on the way out.
    edgenodes.eventually(
        lambda: pool_node.cached(f"kube-proxy/services.v1.core/{NS}/cloud-lb"),
        30,
        "kube-proxy's services cached unfiltered",
    )
