"""Node autonomy on the real control plane: the cloud keeps the pods of an offline autonomous
node; the control node's pods are evicted as usual.

Its own cluster with short timings, so an outage of three default tolerations takes a minute
instead of a quarter of an hour: kube-controller-manager declares a silent node
unreachable after 10 s (``--node-monitor-grace-period``) and the DefaultTolerationSeconds
admission plugin gives pods 20 s (``--default-{not-ready,unreachable}-toleration-seconds``);
``edgehub manager`` runs as its own binary with the manifests' RBAC and admission policy
(its identity is the manifests' ServiceAccount) and is told the same 20 s.

The node lifecycle controller stops evicting when every node of a zone is down (it takes that
for the control plane's own network failing), so an ``anchor`` Node stays Ready throughout:
its Lease is renewed by the test, as a kubelet would (it runs no pods: it is tainted).
"""

from __future__ import annotations

import datetime
import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_support import REPO, own_cluster

from managers import autonomy as autonomy_controller
from managers import tolerating
from yurthub.testing import edgenodes, processes, realcluster

# The outage test alone is a 60 s cut plus recovery; pytest-timeout counts its fixtures' setup
# and teardown (two edge nodes, the manager, the cluster) in the same budget.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TOLERATION = 20
GRACE = "10s"
NR, UR = tolerating.NOT_READY, tolerating.UNREACHABLE
MANAGER_USER = "system:serviceaccount:edgehub-system:edgehub-manager"
MANAGER_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:edgehub-system")
DURATION = "node.openyurt.io/autonomy-duration"
LEGACY = "node.beta.openyurt.io/autonomy"
NS = "autonomy"


# --------------------------------------------------------------------------- the test bed


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[realcluster.RealCluster]:
    seconds = str(TOLERATION)
    extra_args = {
        "kube-apiserver": {
            "default-not-ready-toleration-seconds": seconds,
            "default-unreachable-toleration-seconds": seconds,
        },
        "kube-controller-manager": {
            "node-monitor-grace-period": GRACE,
            "node-monitor-period": "2s",
        },
    }
    with own_cluster(tmp_path_factory, "autonomy-cluster", extra_args) as bed:
        bed.kubectl("create", "namespace", "edgehub-system")
        bed.kubectl("create", "namespace", NS)
        for manifest in (
            "hub/rbac.yaml",
            "manager/rbac.yaml",
            "manager/autonomy-rbac.yaml",
            "manager/autonomy-policy.yaml",
        ):
            bed.kubectl("apply", "-f", str(REPO / "manifests" / manifest))
        yield bed


class Manager:
    """``edgehub manager`` with the manifests' identity, as the Deployment runs it."""

    def __init__(self, cluster: realcluster.RealCluster, workdir: Path) -> None:
        kubeconfig = cluster.write_kubeconfig(
            workdir / "manager.kubeconfig", MANAGER_USER, MANAGER_GROUPS
        )
        (port,) = realcluster.free_ports(1)
        self.log = workdir / "manager.log"
        self.process = processes.Process(
            "edgehub manager",
            edgehub_argv_manager(kubeconfig, port),
            self.log,
            die_with_parent=True,
        )

    def start(self) -> None:
        self.process.start()

    def stop(self) -> None:
        self.process.stop()

    def refusals(self) -> list[str]:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        # kubeapi says "HTTP 403 Forbidden"; a bare "403" also matched log timestamps (",403").
        return [
            line
            for line in text.splitlines()
            if "HTTP 403" in line or "forbidden" in line.lower() or "refused" in line
        ]


def edgehub_argv_manager(kubeconfig: Path, port: int) -> list[str]:
    return edgenodes.edgehub_argv(
        "manager",
        f"--kubeconfig={kubeconfig}",
        "--controllers=autonomy",
        "--leader-elect-namespace=edgehub-system",
        "--bind-address=127.0.0.1",
        f"--health-port={port}",
        f"--default-not-ready-toleration-seconds={TOLERATION}",
        f"--default-unreachable-toleration-seconds={TOLERATION}",
    )


@pytest.fixture(scope="module")
def manager(
    cluster: realcluster.RealCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Manager]:
    running = Manager(cluster, tmp_path_factory.mktemp("manager"))
    running.start()
    try:
        yield running
    finally:
        running.stop()


class Anchor:
    """A Ready Node that stays Ready: its Lease renewed every 2 s from a thread."""

    NAME = "anchor"

    def __init__(self, cluster: realcluster.RealCluster) -> None:
        self.cluster = cluster
        self.ssl = cluster.admin_ssl_context()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._renew, name="anchor lease", daemon=True)

    def start(self) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.NAME},
            "spec": {"taints": [{"key": "edgehub.test/anchor", "effect": "NoSchedule"}]},
        }
        self.cluster.kubectl("create", "-f", "-", input=json.dumps(node))
        now = _now()
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "anchor"}
        status = {"status": {"conditions": [{**ready, "lastHeartbeatTime": now}]}}
        self._request("PATCH", f"/api/v1/nodes/{self.NAME}/status", status, "strategic")
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.NAME, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": self.NAME,
                "leaseDurationSeconds": 40,
                "renewTime": _now(micro=True),
            },
        }
        self._request(
            "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease
        )
        self.thread.start()

    def _renew(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.NAME}"
        while not self.stopped.wait(2.0):
            try:
                self._request("PATCH", path, {"spec": {"renewTime": _now(micro=True)}}, "merge")
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


def _now(micro: bool = False) -> str:
    now = datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def anchor(cluster: realcluster.RealCluster) -> Iterator[Anchor]:
    node = Anchor(cluster)
    node.start()
    try:
        yield node
    finally:
        node.stop()


# --------------------------------------------------------------------------- reading the cloud


def get(cluster: realcluster.RealCluster, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)
    return out


def pods(cluster: realcluster.RealCluster, selector: str) -> dict[str, dict[str, Any]]:
    listed = get(cluster, "pods", "-n", NS, "-l", selector)
    return {p["metadata"]["name"]: p for p in listed["items"]}


def seconds_of(pod: dict[str, Any]) -> dict[str, int | str | None]:
    """tolerationSeconds of the pod's not-ready/unreachable tolerations (``"-"``: none)."""
    found: dict[str, int | str | None] = {NR: "-", UR: "-"}
    for t in pod["spec"].get("tolerations") or []:
        if t.get("key") in found and t.get("effect") == "NoExecute":
            found[t["key"]] = t.get("tolerationSeconds")
    return found


def bare_pod(name: str, node: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
            **spec,
        },
    }


def apply(cluster: realcluster.RealCluster, *objects: dict[str, Any]) -> None:
    doc = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))


def fake_node(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    """A Node object with no kubelet: the controller only reads its annotations."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": annotations, "labels": {"fake": name}},
    }


# --------------------------------------------------------------------------- the controller


def test_tolerations_follow_the_node_marking(
    cluster: realcluster.RealCluster, manager: Manager, anchor: Anchor
) -> None:
    apply(
        cluster,
        fake_node("fake-auto", {DURATION: "1h"}),
        fake_node("fake-legacy", {LEGACY: "true"}),
        fake_node("fake-plain", {}),
        fake_node("fake-bad", {DURATION: "1d"}),
    )
    try:
        own = [{"key": UR, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 77}]
        daemonset = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "ds", "namespace": NS},
            "spec": {
                "selector": {"matchLabels": {"test": "ds"}},
                "template": {
                    "metadata": {"labels": {"test": "ds"}},
                    "spec": {
                        "nodeSelector": {"fake": "fake-auto"},
                        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                    },
                },
            },
        }
        apply(
            cluster,
            *(bare_pod(f"p-{n}", n, {"test": "marking"}) for n in (
                "fake-auto", "fake-legacy", "fake-plain", "fake-bad"
            )),
            bare_pod("own", "fake-auto", {"test": "marking"}, tolerations=own),
            daemonset,
        )  # fmt: skip
        expected = {
            "p-fake-auto": {NR: 3600, UR: 3600},
            "p-fake-legacy": {NR: None, UR: None},
            "p-fake-plain": {NR: TOLERATION, UR: TOLERATION},
            "p-fake-bad": {NR: TOLERATION, UR: TOLERATION},
            "own": {NR: 3600, UR: 77},  # its own unreachable toleration is its own
        }

        def marked() -> bool:
            got = {n: seconds_of(p) for n, p in pods(cluster, "test=marking").items()}
            return got == expected

        edgenodes.eventually(marked, 30, "tolerations set from the node markings")
        # The DaemonSet's pod keeps its controller's tolerations (forever) and gets no record.
        (ds_pod,) = pods(cluster, "test=ds").values()
        assert seconds_of(ds_pod) == {NR: None, UR: None}
        assert tolerating.MANAGED_ANNOTATION not in (ds_pod["metadata"].get("annotations") or {})
        record = pods(cluster, "test=marking")["p-fake-auto"]["metadata"]["annotations"]
        assert record[tolerating.MANAGED_ANNOTATION] == f"{NR},{UR}"

        # One Warning on the node naming the bad value.
        def warned() -> list[dict[str, Any]]:
            events = get(
                cluster, "events", "-A", "--field-selector", "involvedObject.name=fake-bad"
            )
            return [
                e for e in events["items"] if e["reason"] == autonomy_controller.INVALID_DURATION
            ]

        (event,) = edgenodes.eventually(warned, 15, "an InvalidAutonomyDuration event")
        assert "'1d'" in event["message"] and event["type"] == "Warning"
        assert event["involvedObject"]["kind"] == "Node"

        # The marking changes: forever, off, fixed.
        cluster.kubectl("annotate", "node", "fake-plain", f"{DURATION}=0")
        cluster.kubectl("annotate", "node", "fake-auto", f"{DURATION}-")
        cluster.kubectl("annotate", "node", "fake-bad", f"{DURATION}=45m", "--overwrite")
        expected.update(
            {
                "p-fake-plain": {NR: None, UR: None},
                "p-fake-auto": {NR: TOLERATION, UR: TOLERATION},  # the cluster default again
                "p-fake-bad": {NR: 2700, UR: 2700},
                "own": {NR: TOLERATION, UR: 77},
            }
        )
        edgenodes.eventually(marked, 30, "tolerations following the changed markings")
        restored = pods(cluster, "test=marking")["p-fake-auto"]["metadata"].get("annotations") or {}
        assert tolerating.MANAGED_ANNOTATION not in restored
        assert len(warned()) == 1  # fixed: no second Event
        assert manager.refusals() == []  # RBAC and the admission policy allowed all of it

        # The manager's identity may do what the controller does and nothing else.
        identity = cluster.write_kubeconfig(
            cluster.layout.root / "as-manager.kubeconfig", MANAGER_USER, MANAGER_GROUPS
        )
        pod = pods(cluster, "test=marking")["p-fake-plain"]
        changed_image = json.loads(json.dumps(pod))
        changed_image["spec"]["containers"][0]["image"] = "registry.example/evil:1"
        # It patches pods (a merge patch of the tolerations) and never updates them: RBAC refuses a
        # PUT, and the admission policy a patch that touches anything but the tolerations.
        replaced = cluster.kubectl(
            "replace", "-f", "-", kubeconfig=identity, input=json.dumps(changed_image), check=False
        )
        assert replaced.returncode != 0
        assert 'cannot update resource "pods"' in replaced.stderr
        patched = cluster.kubectl(
            "patch",
            "pod",
            "p-fake-plain",
            "-n",
            pod["metadata"]["namespace"],
            "--type=merge",
            "-p",
            json.dumps({"spec": {"containers": changed_image["spec"]["containers"]}}),
            kubeconfig=identity,
            check=False,
        )
        assert patched.returncode != 0
        assert "edgehub manager may not change containers" in patched.stderr
    finally:
        # Even after a failure: fake nodes left NotReady would put the zone in partial
        # disruption, where the outage test below sees no eviction at all.
        cluster.kubectl("delete", "daemonset", "ds", "-n", NS, "--ignore-not-found", check=False)
        cluster.kubectl(
            "delete",
            "pods",
            "-n",
            NS,
            "-l",
            "test=marking",
            "--force",
            "--grace-period=0",
            check=False,
        )
        cluster.kubectl(
            "delete",
            "nodes",
            "fake-auto",
            "fake-legacy",
            "fake-plain",
            "fake-bad",
            "--ignore-not-found",
            check=False,
        )


# --------------------------------------------------------------------------- the outage


@pytest.fixture(scope="module")
def edge(
    cluster: realcluster.RealCluster, anchor: Anchor, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, edgenodes.EdgeNode]]:
    """Two edge nodes through their hubs: ``autonomous`` (annotated) and ``control``."""
    cluster.kubectl("apply", "-f", str(REPO / "manifests/hub/rbac.yaml"))
    nodes = {
        role: edgenodes.EdgeNode(
            cluster,
            f"edge-{role}",
            workdir=tmp_path_factory.mktemp(role),
            # The hub renews the node's Lease in the cloud: well inside the 10 s grace.
            hub_args=("--heartbeat-interval-seconds", "2"),
        )
        for role in ("autonomous", "control")
    }
    try:
        # One after the other, from this thread: the processes die with the thread that
        # started them (PR_SET_PDEATHSIG), so a worker thread's exit would kill them.
        for node in nodes.values():
            node.start()
        yield nodes
    finally:
        for node in nodes.values():
            node.stop()


def test_an_autonomous_node_keeps_its_pods_through_an_outage_of_three_tolerations(
    cluster: realcluster.RealCluster,
    manager: Manager,
    anchor: Anchor,
    edge: dict[str, edgenodes.EdgeNode],
) -> None:
    auto, control = edge["autonomous"], edge["control"]
    cluster.kubectl("annotate", "node", auto.name, f"{DURATION}=10m")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "app", "namespace": NS},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "app"}},
            "template": {
                "metadata": {"labels": {"app": "app"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": auto.name},
                    "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "app", "namespace": NS},
        "spec": {"selector": {"app": "app"}, "ports": [{"port": 80}]},
    }
    apply(
        cluster,
        deployment,
        service,
        *(bare_pod(f"ctl-{i}", control.name, {"app": "ctl"}) for i in range(2)),
        # A node deleted in the cloud: its pod goes the usual way, autonomy or not.
        fake_node("gone", {DURATION: "0"}),
        bare_pod("orphan", "gone", {"app": "orphan"}),
    )

    def settled() -> dict[str, str] | None:
        app = pods(cluster, "app=app")
        if len(app) != 2 or any(p["status"].get("phase") != "Running" for p in app.values()):
            return None
        if any(seconds_of(p) != {NR: 600, UR: 600} for p in app.values()):
            return None
        ctl = pods(cluster, "app=ctl")
        if len(ctl) != 2 or any(p["status"].get("phase") != "Running" for p in ctl.values()):
            return None
        if any(seconds_of(p) != {NR: TOLERATION, UR: TOLERATION} for p in ctl.values()):
            return None
        if seconds_of(pods(cluster, "app=orphan")["orphan"]) != {NR: None, UR: None}:
            return None
        return {p["metadata"]["uid"]: n for n, p in app.items()}

    try:
        app_uids = edgenodes.eventually(settled, 90, "pods running with their tolerations")
    except TimeoutError as e:
        seen = {
            n: (p["spec"].get("nodeName"), p["status"].get("phase"), seconds_of(p))
            for n, p in get(cluster, "pods", "-n", NS)["items"] and pods(cluster, "app").items()
        }
        raise AssertionError(f"{e}: {seen}; manager log: {manager.log.read_text()[-2000:]}") from e
    ctl_uids = {p["metadata"]["uid"] for p in pods(cluster, "app=ctl").values()}
    cluster.kubectl("delete", "node", "gone")

    # The hubs report the condition: the autonomous node's hub True, the control's False.
    def condition(node: edgenodes.EdgeNode) -> tuple[str, str]:
        for c in node.node()["status"]["conditions"]:
            if c["type"] == "Autonomy":
                return c["status"], c["reason"]
        return "", ""

    # Each hub reports on its own schedule: wait for both, not for one and then look at the other.
    edgenodes.eventually(
        lambda: condition(auto) == ("True", "AutonomyEnabled"), 20, "Autonomy=True on the hub"
    )
    edgenodes.eventually(
        lambda: condition(control) == ("False", "AutonomyDisabled"),
        20,
        "Autonomy=False on the control's hub",
    )
    ready_endpoints(cluster)  # the Service's endpoints are ready before the cut

    # The protection is on the pods: the manager is not needed during the outage.
    manager.stop()

    cut_at = time.monotonic()
    auto.cut()
    control.cut()
    evicted_at = None
    cloud_not_ready = False
    hub_still_ready = False
    while time.monotonic() - cut_at < 3 * TOLERATION:
        app = pods(cluster, "app=app")
        assert {p["metadata"]["uid"] for p in app.values()} == set(app_uids), "a pod was replaced"
        for p in app.values():
            assert "deletionTimestamp" not in p["metadata"], f"{p['metadata']['name']} evicted"
        ctl = pods(cluster, "app=ctl")
        if evicted_at is None and all("deletionTimestamp" in p["metadata"] for p in ctl.values()):
            evicted_at = time.monotonic() - cut_at
        if not cloud_not_ready:
            cloud = ready_endpoints(cluster, check=False)
            cloud_not_ready = len(cloud) == 2 and not any(cloud.values())
        elif not hub_still_ready and auto.cloud_healthy() is False:
            offline = hub_endpoints(auto)
            hub_still_ready = len(offline) == 2 and all(offline.values())
        time.sleep(3)
    assert evicted_at is not None, "the control node's pods were not evicted"
    assert evicted_at < 3 * TOLERATION
    # Endpoints: the cloud takes them out of service (it cannot tell a cut link from a dead
    # node); the node's own hub keeps answering kube-proxy with the last ones it saw.
    assert cloud_not_ready, "the cloud never marked the offline node's endpoints not ready"
    assert hub_still_ready, "the offline node's hub did not serve its endpoints as ready"
    assert auto.running_pods() is not None
    assert set((auto.running_pods() or {}).values()) == set(app_uids)

    auto.heal()
    control.heal()
    auto.wait_ready(timeout=60)

    def running_again() -> bool:
        app = pods(cluster, "app=app")
        return {p["metadata"]["uid"] for p in app.values()} == set(app_uids) and all(
            p["status"].get("phase") == "Running"
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions", [])
            )
            for p in app.values()
        )

    edgenodes.eventually(running_again, 60, "the same pods running and ready after the outage")
    assert set((auto.running_pods() or {}).values()) == set(app_uids)
    edgenodes.eventually(
        lambda: all(ready_endpoints(cluster).values()), 30, "the Service's endpoints ready again"
    )
    # The control node's evicted pods are gone once its kubelet heard of it.
    edgenodes.eventually(
        lambda: not ({p["metadata"]["uid"] for p in pods(cluster, "app=ctl").values()} & ctl_uids),
        60,
        "the control node's evicted pods deleted",
    )
    edgenodes.eventually(
        lambda: not pods(cluster, "app=orphan"), 60, "the pod of the deleted node removed"
    )


def ready_endpoints(cluster: realcluster.RealCluster, check: bool = True) -> dict[str, bool]:
    """Pod name -> ready, from the Service's EndpointSlices in the cloud."""
    slices = get(cluster, "endpointslices", "-n", NS, "-l", "kubernetes.io/service-name=app")
    found = {
        e["targetRef"]["name"]: bool(e["conditions"].get("ready"))
        for s in slices["items"]
        for e in s.get("endpoints") or []
    }
    if check:
        assert len(found) == 2, found
    return found


def hub_endpoints(node: edgenodes.EdgeNode) -> dict[str, bool]:
    """What the node's hub answers kube-proxy for the Service's EndpointSlices (offline: its
    cache), with kube-proxy's own list selector."""
    selector = "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name"
    url = (
        f"{node.proxy_url}/apis/discovery.k8s.io/v1/endpointslices?labelSelector="
        + urllib.parse.quote(selector)
    )
    request = urllib.request.Request(url, headers={"User-Agent": "kube-proxy/v1.37.2"})
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            listed = json.loads(r.read())
    except OSError as e:
        realcluster.close_answer(e)
        return {}
    return {
        e["targetRef"]["name"]: bool(e["conditions"].get("ready"))
        for s in listed["items"]
        if s["metadata"].get("labels", {}).get("kubernetes.io/service-name") == "app"
        for e in s.get("endpoints") or []
    }
