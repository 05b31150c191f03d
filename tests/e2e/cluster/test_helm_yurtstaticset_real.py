"""The chart in YurtStaticSet mode on the real control plane, rolled out by the manager.

``helm install`` with ``hub.yurtStaticSet`` (one pool, owner edgehub) creates YurtStaticSet
``edgehub-hub-<pool>``; two Nodes of the pool (no kubelet: the test renews their Leases, as a
kubelet would, so they stay Ready) carry the hub's mirror Pods ``edgehub-hub-<pool>-<node>``
running its template. ``edgehub manager`` runs the yurtstaticset controller with the flags the
chart gives its Deployment. ``helm upgrade --set image.tag=<new>`` changes the template's image
only; the controller writes the new manifest into ConfigMap ``yurt-static-set-<yss>`` and
creates a worker Pod on each node (maxUnavailable 100%), status 0 of 2 upgraded. The test then
does what a worker would (the mirror Pod's hash becomes the new one, the worker Succeeded): 2 of
2 upgraded and the workers deleted. Nothing here runs a container.
"""

from __future__ import annotations

import copy
import datetime
import json
import pathlib
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from managers import staticsetplanning
from yurthub.testing import realcluster

pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[3]
CHART = REPO / "manifests" / "helm" / "edgehub"
EDGEHUB = str(pathlib.Path(sys.executable).with_name("edgehub"))
NS, RELEASE, POOL = "edgehub-hubyss", "eh-yss", "yss-pool"
NODES = ("hubyss-a", "hubyss-b")
YSS = f"edgehub-hub-{POOL}"
WAIT = "--timeout=60s"


def _helm(cluster: realcluster.RealCluster, *args: str) -> str:
    path = subprocess.run(
        [sys.executable, str(REPO / "tests" / "cluster" / "build.py"), "--print-helm"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    done = subprocess.run(
        [path, "--kubeconfig", str(cluster.admin_kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


def _now(micro: bool = False) -> str:
    now = datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


class PoolNodes:
    """Nodes of the pool, kept Ready: their Leases renewed every 2 s from a thread."""

    def __init__(self, cluster: realcluster.RealCluster) -> None:
        self.cluster = cluster
        self.ssl = cluster.admin_ssl_context()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._renew, name="pool leases", daemon=True)

    def start(self) -> None:
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}
        for name in NODES:
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"apps.openyurt.io/nodepool": POOL}},
                "spec": {"taints": [{"key": "edgehub.test/no-kubelet", "effect": "NoSchedule"}]},
            }
            self.cluster.kubectl("create", "-f", "-", input=json.dumps(node))
            status = {"status": {"conditions": [{**ready, "lastHeartbeatTime": _now()}]}}
            self._request("PATCH", f"/api/v1/nodes/{name}/status", status, "strategic")
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease"},
                "spec": {
                    "holderIdentity": name,
                    "leaseDurationSeconds": 40,
                    "renewTime": _now(micro=True),
                },
            }
            self._request(
                "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease
            )
        self.thread.start()

    def _renew(self) -> None:
        while not self.stopped.wait(2.0):
            for name in NODES:
                path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
                try:
                    self._request("PATCH", path, {"spec": {"renewTime": _now(True)}}, "merge")
                except OSError:
                    pass  # the next renewal tries again; a lasting failure shows in the test

    def _request(self, method: str, path: str, body: Any, patch: str = "") -> None:
        content = {
            "strategic": "application/strategic-merge-patch+json",
            "merge": "application/merge-patch+json",
        }.get(patch, "application/json")
        request = urllib.request.Request(
            self.cluster.url + path,
            data=json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": content, "Accept": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10, context=self.ssl) as resp:
            resp.read()

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=10)
        for name in NODES:
            self.cluster.kubectl("delete", "node", name, "--wait=false", check=False)
            self.cluster.kubectl(
                "delete", "lease", name, "-n", "kube-node-lease", "--wait=false", check=False
            )


@pytest.fixture
def pool_nodes(real_cluster: realcluster.RealCluster) -> Iterator[PoolNodes]:
    nodes = PoolNodes(real_cluster)
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.stop()


def _json(cluster: realcluster.RealCluster, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)
    return out


def _mirror_pod(template: dict[str, Any], node: str, digest: str) -> dict[str, Any]:
    """What kubelet would post for the static Pod of ``template`` on ``node``."""
    meta = template["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-{node}",
            "namespace": meta["namespace"],
            "labels": meta["labels"],
            "annotations": {
                "kubernetes.io/config.mirror": digest,
                staticsetplanning.HASH_ANNOTATION: digest,
            },
        },
        "spec": {**template["spec"], "nodeName": node},
    }


def _wait_status(cluster: realcluster.RealCluster, field: str, value: int) -> None:
    cluster.kubectl(
        "wait", "-n", NS, f"yss/{YSS}", f"--for=jsonpath={{.status.{field}}}={value}", WAIT,
        timeout=90,
    )  # fmt: skip


def test_helm_upgrade_rolls_the_hub_out_through_its_yurtstaticset(
    real_cluster: realcluster.RealCluster, pool_nodes: PoolNodes, tmp_path: pathlib.Path
) -> None:
    kubectl = real_cluster.kubectl
    values = [
        "-n", NS, "--set", f"hub.namespace={NS}",
        "--set", "hub.yurtStaticSet.enabled=true",
        "--set", f"hub.yurtStaticSet.pools[0].name={POOL}",
        "--set", "hub.yurtStaticSet.upgradeStrategy.maxUnavailable=100%",
    ]  # fmt: skip
    notes = _helm(real_cluster, "install", RELEASE, str(CHART), *values, "--create-namespace")
    assert f"get yss {YSS}" in notes, notes
    manager_log = (tmp_path / "manager.log").open("w")
    manager: subprocess.Popen[bytes] | None = None
    try:
        yss = _json(real_cluster, "yss", "-n", NS, YSS)
        assert yss["metadata"]["annotations"]["edgehub.io/owner"] == "edgehub"
        template = yss["spec"]["template"]
        assert template["metadata"]["labels"]["apps.openyurt.io/nodepool"] == POOL
        old_image = template["spec"]["containers"][0]["image"]
        assert old_image == "ghcr.io/edgehub/edgehub:0.1.0"
        old = staticsetplanning.template_hash(template)
        for node in NODES:
            pod = _mirror_pod(template, node, old)
            kubectl("create", "-f", "-", input=json.dumps(pod))
            ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
            kubectl(
                "patch", "pod", pod["metadata"]["name"], "-n", NS, "--subresource=status",
                "--type=strategic", "-p", json.dumps(ready),
            )  # fmt: skip

        # The manager as the chart's Deployment runs it (its YurtStaticSet flags).
        deployment = _json(real_cluster, "deployment", "-n", NS, f"{RELEASE}-manager")
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        flags = [a for a in args if a.startswith(("--yurtstaticset-owner", "--static-pod"))]
        assert flags == [
            "--yurtstaticset-owner=edgehub",
            "--static-pod-upgrade-image=ghcr.io/edgehub/edgehub:0.1.0",
        ]
        manager = subprocess.Popen(
            [
                EDGEHUB, "manager", "--kubeconfig", str(real_cluster.admin_kubeconfig),
                "--leader-elect=false", "--controllers=yurtstaticset", "--bind-address=127.0.0.1",
                "--health-port=0", "--webhook-port=0", *flags,
            ],
            stdout=subprocess.DEVNULL,
            stderr=manager_log,
        )  # fmt: skip
        _wait_status(real_cluster, "totalNumber", 2)
        _wait_status(real_cluster, "upgradedNumber", 2)
        _wait_status(real_cluster, "readyNumber", 2)

        _helm(real_cluster, "upgrade", RELEASE, str(CHART), *values, "--set", "image.tag=0.2.0")
        upgraded = _json(real_cluster, "yss", "-n", NS, YSS)
        new = staticsetplanning.template_hash(upgraded["spec"]["template"])
        assert new != old
        changed = copy.deepcopy(upgraded["spec"]["template"])
        assert changed["spec"]["containers"][0]["image"] == "ghcr.io/edgehub/edgehub:0.2.0"
        changed["spec"]["containers"][0]["image"] = old_image
        assert changed == template
        workers = [f"yss-upgrade-worker-{YSS}-{node}-{new}" for node in NODES]
        for worker in workers:
            kubectl("wait", "-n", NS, f"pod/{worker}", "--for=create", WAIT, timeout=90)
        _wait_status(real_cluster, "upgradedNumber", 0)
        generation = upgraded["metadata"]["generation"]
        _wait_status(real_cluster, "observedGeneration", generation)
        status = _json(real_cluster, "yss", "-n", NS, YSS)["status"]
        assert (status["totalNumber"], status["readyNumber"]) == (2, 2)
        for node, worker in zip(NODES, workers, strict=True):
            pod = _json(real_cluster, "pod", "-n", NS, worker)
            assert pod["spec"]["nodeName"] == node
            (container,) = pod["spec"]["containers"]
            # The worker runs the image the manager was given (it started before the upgrade).
            assert f"--static-pod-upgrade-image={container['image']}" in flags
            assert f"--name={YSS}-{node}" in container["command"]
            assert "--manifest=edgehub-hub" in container["command"]
        deployment = _json(real_cluster, "deployment", "-n", NS, f"{RELEASE}-manager")
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert "--static-pod-upgrade-image=ghcr.io/edgehub/edgehub:0.2.0" in args
        configmap = _json(real_cluster, "configmap", "-n", NS, f"yurt-static-set-{YSS}")
        manifest = yaml.safe_load(configmap["data"]["edgehub-hub"])
        assert manifest["metadata"]["name"] == YSS
        assert manifest["spec"]["containers"][0]["image"] == "ghcr.io/edgehub/edgehub:0.2.0"

        # What each worker does on its node: kubelet's mirror Pod now runs the new hash.
        for node, worker in zip(NODES, workers, strict=True):
            kubectl(
                "annotate", "pod", f"{YSS}-{node}", "-n", NS, "--overwrite",
                f"{staticsetplanning.HASH_ANNOTATION}={new}",
            )  # fmt: skip
            kubectl(
                "patch", "pod", worker, "-n", NS, "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"phase": "Succeeded"}}),
            )  # fmt: skip
        _wait_status(real_cluster, "upgradedNumber", 2)
        for worker in workers:
            kubectl("wait", "-n", NS, f"pod/{worker}", "--for=delete", WAIT, timeout=90)
    finally:
        if manager is not None:
            manager.terminate()
            manager.wait(timeout=30)
        manager_log.close()
        # No kubelet confirms a graceful delete: the mirror Pods (and any worker) go at once.
        kubectl(
            "delete", "pods", "-n", NS, "--all", "--grace-period=0", "--force", "--wait=false",
            check=False,
        )  # fmt: skip
        _helm(real_cluster, "uninstall", RELEASE, "-n", NS, "--wait")
        kubectl("delete", "namespace", NS, "--wait=false", check=False)
    assert manager.returncode == 0, (tmp_path / "manager.log").read_text()[-4000:]
