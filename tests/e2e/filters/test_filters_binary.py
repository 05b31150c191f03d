"""``edgehub hub`` filters what kubelet and kube-proxy read: the binary against the simulated cloud.

The cluster is set up with the real ``kubectl`` (OpenYurt's NodePool CRD from ``manifests/``,
a NodePool whose status lists the pool's nodes, a Service with pool topology, a cloud load
balancer marked for discarding); the hub runs as its own process with the node's identity.
"""

from __future__ import annotations

import json
import pathlib
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from yurthub.testing import processes, realcluster, simapiserver
from yurthub.testing.fixtures import KUBECTL

EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
CRDS = pathlib.Path(__file__).resolve().parents[3] / "manifests" / "crds"
KUBELET = "kubelet/v1.37.2 (linux/amd64) kubernetes/abcdef0"
KUBE_PROXY = "kube-proxy/v1.37.2 (linux/amd64) kubernetes/abcdef0"
SETUP = """
apiVersion: apps.openyurt.io/v1beta2
kind: NodePool
metadata: {name: edge-pool}
spec: {type: Edge}
---
apiVersion: v1
kind: Service
metadata:
  name: cloud-lb
  namespace: default
  annotations: {svc.openyurt.io/discard: "true"}
spec:
  type: LoadBalancer
  selector: {app: web}
  ports: [{port: 80}]
"""


def kubectl(kubeconfig: pathlib.Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout


def get(url: str, ua: str) -> Any:
    request = urllib.request.Request(url, headers={"User-Agent": ua, "Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.fixture
def hub(tmp_path: pathlib.Path) -> Iterator[tuple[simapiserver.SimApiserverThread, str, str]]:
    with simapiserver.SimApiserverThread(seed="demo", workdir=tmp_path / "cloud") as sim:
        admin = sim.kubeconfig_path
        kubectl(admin, "apply", "-f", str(CRDS))
        kubectl(admin, "apply", "-f", "-", stdin=SETUP)
        kubectl(
            admin, "patch", "nodepool", "edge-pool", "--subresource=status", "--type=merge",
            "-p", '{"status": {"nodes": ["edge-node-1", "edge-node-2"]}}',
        )  # fmt: skip
        kubectl(
            admin, "annotate", "service", "web", "openyurt.io/topologyKeys=openyurt.io/nodepool"
        )
        identity = sim.call(
            sim.sim.write_kubeconfig,
            tmp_path / "node.kubeconfig",
            user="system:node:edge-node-1",
            groups=("system:nodes",),
        )
        log = (tmp_path / "hub.log").open("w")
        proc = subprocess.Popen(
            [
                EDGEHUB, "hub", f"--server-addr={sim.url}", "--node-name=edge-node-1",
                f"--kubeconfig={identity}", "--proxy-port=0", "--serve-port=0",
                f"--disk-cache-path={tmp_path / 'cache'}", "--bind-proxy-address=127.0.0.1",
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            fields = processes.read_announcement_sync(proc.stdout, "EDGEHUB_HUB_READY")
            deadline = time.monotonic() + 15
            while True:
                try:
                    with urllib.request.urlopen(fields["server"] + "/v1/readyz", timeout=5):
                        break
                except OSError as e:
                    realcluster.close_answer(e)  # a 503 while starting: its answer is open
                    assert time.monotonic() < deadline, "hub never ready"
                    time.sleep(0.1)
            yield sim, fields["proxy"], fields["server"]
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                assert proc.stdout is not None
                proc.stdout.close()
                log.close()
            assert code == 0, (tmp_path / "hub.log").read_text()


def test_the_binary_filters_for_kubelet_and_kube_proxy(
    hub: tuple[simapiserver.SimApiserverThread, str, str], tmp_path: pathlib.Path
) -> None:
    _, proxy, server = hub
    services = {s["metadata"]["name"]: s for s in get(proxy + "/api/v1/services", KUBELET)["items"]}
    # masterservice is off with the CLI's defaults (no dummy interface, no serving
    # certificate): the hub's 127.0.0.1 would be each pod itself, so pods keep the apiserver.
    assert services["kubernetes"]["spec"]["clusterIP"] == "10.96.0.1"
    assert services["kubernetes"]["spec"]["ports"][0]["port"] == 443
    seen = {s["metadata"]["name"] for s in get(proxy + "/api/v1/services", KUBE_PROXY)["items"]}
    assert "web" in seen and "cloud-lb" not in seen
    slices = get(proxy + "/apis/discovery.k8s.io/v1/endpointslices", KUBE_PROXY)["items"]
    web = next(
        s for s in slices if s["metadata"]["labels"].get("kubernetes.io/service-name") == "web"
    )
    assert sorted(e["nodeName"] for e in web["endpoints"]) == ["edge-node-1", "edge-node-2"]
    kube = next(s for s in slices if s["metadata"]["name"] == "kubernetes")
    assert "127.0.0.1" not in kube["endpoints"][0]["addresses"]  # forwardkubesvctraffic off too
    with urllib.request.urlopen(server + "/metrics", timeout=10) as resp:
        metrics = resp.read().decode()
    assert 'node_yurthub_filter_requests_total{filter="servicetopology"}' in metrics
    assert 'filter="masterservice"' not in metrics
    # ... and the hub says so: in /v1/status and on `edgehub status`'s screen.
    status = subprocess.run(
        [EDGEHUB, "status", "--server", server, "--agent", "", "-o", "json"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    section = json.loads(status)["hub"]["filters"]
    assert section["hubAddress"] == "127.0.0.1:10268"
    assert "127.0.0.1 is a loopback address" in section["inactive"]["masterservice"]
    assert "no secure port" in section["inactive"]["masterservice"]
    screen = subprocess.run(
        [EDGEHUB, "status", "--server", server, "--agent", ""],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    (off,) = [line for line in screen.splitlines() if line.startswith("  OFF: ")]
    assert off.startswith("  OFF: masterservice, forwardkubesvctraffic, inclusterconfig, ")
    assert "pods cannot reach the hub at 127.0.0.1:10268" in off, screen
    log = (tmp_path / "hub.log").read_text()
    assert log.count("pods cannot reach the hub's secure port") == 1, log
    # The filters' inputs were read through the hub and cached for an offline restart.
    listing = subprocess.run(
        [EDGEHUB, "cache", "ls", "--disk-cache-path", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    assert "yurthub/nodepools.v1beta2.apps.openyurt.io/edge-pool" in listing, listing
    # Services come through the pool multiplexer: cached under its component, unfiltered.
    assert "multiplexer-proxy-edge-node-1/services.v1.core/default/web" in listing


def test_a_typo_in_disabled_filters_is_a_startup_failure() -> None:
    done = subprocess.run(
        [EDGEHUB, "hub", "--server-addr=https://127.0.0.1:1", "--node-name=n",
         "--disabled-resource-filters=masterservice,servicetoplogy"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 3
    assert "unknown filter 'servicetoplogy'" in done.stderr and "Traceback" not in done.stderr
