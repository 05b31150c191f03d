"""Online through the hub, on the real control plane: the hollow node lives through the hub
with the node's identity only; kubectl and the Python client see through a hub what they see
direct; protobuf passes.

kubectl and the Python client go through a hub of their own that holds an operator identity:
through the plain loopback port a client is whoever the hub is (client-go does not send a
bearer token over plain HTTP, and there is no client certificate without TLS), and a node
identity may not create ConfigMaps.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import cluster_support as support
import kubernetes
import pytest

from yurthub.testing import edgenodes, hollownodes, realcluster

pytestmark = pytest.mark.slow

NS = "online"
PROTOBUF = "application/vnd.kubernetes.protobuf"


@pytest.fixture(scope="module")
def operator_hub(
    real_cluster: realcluster.RealCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[edgenodes.EdgeNode]:
    """A hub alone, with an operator's identity, caching for kubectl too."""
    workdir = tmp_path_factory.mktemp("operator-hub")
    identity = real_cluster.write_kubeconfig(
        workdir / "operator.kubeconfig", "operator", ("system:masters",)
    )
    hub = edgenodes.EdgeNode(
        real_cluster,
        "operator-hub",
        workdir=workdir,
        kubelet=False,
        identity=identity,
        hub_args=["--cache-agents", "kubectl"],
    )
    hub.start()
    try:
        yield hub
    finally:
        hub.stop()


@pytest.fixture(scope="module")
def via_hub(
    operator_hub: edgenodes.EdgeNode, tmp_path_factory: pytest.TempPathFactory
) -> pathlib.Path:
    """kubectl's kubeconfig for the operator hub's proxy (no credentials of its own)."""
    path = tmp_path_factory.mktemp("via-hub") / "kubeconfig"
    path.write_text(hollownodes.hub_kubeconfig(operator_hub.proxy_url))
    return path


def names_and_uids(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    return sorted(
        (i["metadata"].get("namespace", ""), i["metadata"]["name"], i["metadata"]["uid"])
        for i in doc["items"]
    )


def test_the_hollow_node_lives_through_the_hub_with_the_node_identity(
    real_cluster: realcluster.RealCluster, edge_node: edgenodes.EdgeNode
) -> None:
    node = edge_node.node()
    assert node["status"]["nodeInfo"]["kubeletVersion"] == real_cluster.binaries.version
    lease = json.loads(
        real_cluster.kubectl(
            "get", "lease", edge_node.name, "-n", "kube-node-lease", "-o", "json"
        ).stdout
    )
    assert lease["spec"]["holderIdentity"] == edge_node.name
    renewed = lease["spec"]["renewTime"]

    real_cluster.kubectl("create", "namespace", NS, check=False)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": edge_node.name},
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    real_cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    edgenodes.eventually(
        lambda: (
            support.get_json(real_cluster, "pod", "web", "-n", NS)["status"].get("phase")  # type: ignore[union-attr]
            == "Running"
        ),
        60,
        "pod web Running",
        alive=edge_node.check_alive,
    )

    def lease_renewed() -> bool:
        spec = support.get_json(real_cluster, "lease", edge_node.name, "-n", "kube-node-lease")
        return spec["spec"]["renewTime"] != renewed  # type: ignore[index]

    edgenodes.eventually(lease_renewed, 30, "the node lease renewed")

    # Nothing the node did through the hub was refused: no 401/403 for any component.
    refused = [
        line
        for line in edge_node.metrics().splitlines()
        if line.startswith("node_yurthub_request_duration_seconds_count")
        and ('code="403"' in line or 'code="401"' in line)
    ]
    assert not refused, refused
    for log in (edge_node.hollow.kubelet_log, edge_node.hollow.proxy_log):
        text = log.read_text(errors="replace")
        assert "is forbidden" not in text, f"{log.name}: {text[-2000:]}"


def test_kubectl_through_the_hub_equals_direct(
    real_cluster: realcluster.RealCluster, via_hub: pathlib.Path
) -> None:
    real_cluster.kubectl("create", "namespace", NS, check=False)
    for kind in ("namespaces", "nodes"):
        direct = json.loads(real_cluster.kubectl("get", kind, "-o", "json").stdout)
        hubbed = json.loads(
            real_cluster.kubectl("get", kind, "-o", "json", kubeconfig=via_hub).stdout
        )
        assert names_and_uids(hubbed) == names_and_uids(direct)

    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": NS},
        "data": {"a": "1"},
    }
    real_cluster.kubectl("apply", "-f", "-", input=json.dumps(cm), kubeconfig=via_hub)
    watcher = subprocess.Popen(
        [
            str(real_cluster.binaries.path("kubectl")),
            "--kubeconfig",
            str(via_hub),
            "get",
            "configmap",
            "settings",
            "-n",
            NS,
            "-w",
            "-o",
            'jsonpath={.data.a}{"\\n"}',
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watcher.stdout is not None
        assert watcher.stdout.readline().strip() == "1"
        real_cluster.kubectl(
            "patch",
            "configmap",
            "settings",
            "-n",
            NS,
            "-p",
            '{"data":{"a":"2"}}',
            kubeconfig=via_hub,
        )
        seen: list[str] = []
        reader = threading.Thread(target=lambda: seen.append(watcher.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(15)
        assert seen and seen[0].strip() == "2", (seen, watcher.stderr)
    finally:
        watcher.kill()
        watcher.communicate()
    direct = support.get_json(real_cluster, "configmap", "settings", "-n", NS)
    assert direct["data"] == {"a": "2"}
    real_cluster.kubectl("delete", "configmap", "settings", "-n", NS, kubeconfig=via_hub)
    gone = real_cluster.kubectl("get", "configmap", "settings", "-n", NS, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def test_python_client_list_and_watch_through_the_hub(
    real_cluster: realcluster.RealCluster, operator_hub: edgenodes.EdgeNode
) -> None:
    config = kubernetes.client.Configuration()
    config.host = operator_hub.proxy_url
    with kubernetes.client.ApiClient(config) as client:  # closed: its pool holds sockets
        api = kubernetes.client.CoreV1Api(client)
        listed = api.list_namespace()
        direct = json.loads(real_cluster.kubectl("get", "namespaces", "-o", "json").stdout)
        assert sorted(n.metadata.uid for n in listed.items) == sorted(
            i["metadata"]["uid"] for i in direct["items"]
        )
        real_cluster.kubectl("create", "namespace", NS, check=False)
        watch = kubernetes.watch.Watch()
        events: list[tuple[str, str]] = []
        started = time.monotonic()

        def make() -> None:
            time.sleep(1.0)
            real_cluster.kubectl("create", "configmap", "watched", "-n", NS, "--from-literal=x=y")
            real_cluster.kubectl("delete", "configmap", "watched", "-n", NS)

        maker = threading.Thread(target=make)
        maker.start()
        rv = api.list_namespaced_config_map(NS).metadata.resource_version
        for event in watch.stream(
            api.list_namespaced_config_map, NS, resource_version=rv, timeout_seconds=20
        ):
            if event["object"].metadata.name == "watched":
                events.append((event["type"], event["object"].metadata.name))
            if len(events) == 2 or time.monotonic() - started > 20:
                watch.stop()
        maker.join()
        assert events == [("ADDED", "watched"), ("DELETED", "watched")]


def test_protobuf_passes_through_the_hub(
    real_cluster: realcluster.RealCluster, edge_node: edgenodes.EdgeNode
) -> None:
    # The hub answers with its own (node) identity here. Both the protobuf-only client and
    # kube-proxy's "protobuf, json" get the apiserver's protobuf bytes (the edge link carries
    # protobuf); what the hub cached reads as the apiserver's JSON. (Not kubelet: its
    # node GETs are answered from the cache, as YurtHub does.)
    key = f"kube-proxy/nodes.v1.core/{edge_node.name}"

    def fetched_and_cached_equal_direct() -> bool:
        for accept in (PROTOBUF, f"{PROTOBUF}, application/json"):
            request = urllib.request.Request(
                f"{edge_node.proxy_url}/api/v1/nodes/{edge_node.name}",
                headers={"Accept": accept, "User-Agent": "kube-proxy/v1.37.2 (linux/amd64) e2e"},
            )
            with urllib.request.urlopen(request, timeout=10) as r:
                body = r.read()
                content_type = r.headers["Content-Type"]
            assert r.status == 200
            assert content_type == PROTOBUF and body.startswith(b"k8s\x00"), content_type
        direct = json.loads(
            real_cluster.kubectl("get", "--raw", f"/api/v1/nodes/{edge_node.name}").stdout
        )
        cached = edge_node.cached_object(key)
        assert cached is not None, "what kube-proxy fetched was cached for it"
        # The node's status moves on (heartbeats): compare at the same resourceVersion.
        if cached["metadata"]["resourceVersion"] != direct["metadata"]["resourceVersion"]:
            return False
        assert cached == direct
        return True

    edgenodes.eventually(
        fetched_and_cached_equal_direct, 60, "cached node equal to the apiserver's JSON"
    )
