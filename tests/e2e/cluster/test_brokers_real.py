"""The Akri controllers of ``edgehub manager`` on a real control plane with hollow edge nodes.

One cluster for this module (its controller-manager declares a silent node NotReady after
16 s instead of 50 s), two edge nodes (hub + hollow kubelet each), and ``edgehub manager``
running as a process with the ServiceAccount and roles of ``manifests/manager/rbac.yaml`` (real
RBAC: anything it may not do fails here), leader election on, the webhook on loopback.
Instances are written with the admin identity as agents would write them; the nodes get each
Instance's resource in their status as the agent's device plugin would make kubelet report
it, so the real scheduler places brokers by it.

kubemark's fake runtime starts containers and never ends them: a Job's pod cannot complete by
itself there. The Job case therefore ends its pod as a kubelet reports an exited container
(pod status Succeeded, written as admin) and checks what follows: the Job controller completes
the Job and the broker controller leaves a completed Job alone.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import cluster_support as support
import pytest

from yurthub.testing import edgenodes, processes, realcluster
from yurthub.testing.sim import pki

pytestmark = pytest.mark.slow

NODE_A, NODE_B = "broker-node-a", "broker-node-b"
GRACE = 16  # --node-monitor-grace-period of this module's controller-manager
BROKER = {
    "containers": [
        {
            "name": "broker",
            "image": "registry.k8s.io/pause:3.10",
            "resources": {"limits": {"{{PLACEHOLDER}}": "1"}},
        }
    ]
}


@pytest.fixture(scope="module")
def akri_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[realcluster.RealCluster]:
    cluster = realcluster.RealCluster(
        tmp_path_factory.mktemp("akri-cluster"),
        die_with_parent=True,
        extra_args={
            "kube-controller-manager": {
                "node-monitor-grace-period": f"{GRACE}s",
                "node-monitor-period": "2s",
            }
        },
    )
    with cluster:
        for manifest in (
            "crds/configurations.akri.sh.yaml",
            "crds/instances.akri.sh.yaml",
            # The manager runs every controller (--controllers=*): the hub-leader ones too.
            "crds/nodepools.apps.openyurt.io.yaml",
            "discovery/00-namespace.yaml",
            "hub/rbac.yaml",
            "manager/rbac.yaml",
            "manager/hubleader-rbac.yaml",
        ):
            cluster.kubectl("apply", "-f", str(support.REPO / "manifests" / manifest))
        cluster.kubectl(
            "wait", "--for=condition=Established", "crd/instances.akri.sh", "--timeout=30s"
        )
        yield cluster


@pytest.fixture(scope="module")
def nodes(
    akri_cluster: realcluster.RealCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, edgenodes.EdgeNode]]:
    started: dict[str, edgenodes.EdgeNode] = {}
    try:
        for name in (NODE_A, NODE_B):
            node = edgenodes.EdgeNode(
                akri_cluster, name, workdir=tmp_path_factory.mktemp(name), proxy=False
            )
            node.start(wait_ready=False)
            started[name] = node
        for node in started.values():
            node.wait_ready(60)
        yield started
    finally:
        for node in started.values():
            node.stop()


class Manager:
    def __init__(self, process: processes.Process, health: int, webhook: int, ca: bytes) -> None:
        self.process = process
        self.health = health
        self.webhook = webhook
        self.ca = ca

    def metric(self, name: str, **labels: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health}/metrics", timeout=5) as r:
            text = r.read().decode()
        wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in text.splitlines():
            if line.startswith(f"{name}{{") and _labels(line) == wanted:
                return float(line.rsplit(" ", 1)[1])
        return 0.0


def _labels(line: str) -> str:
    inner = line[line.index("{") + 1 : line.index("}")]
    return ",".join(sorted(inner.split(","))) if inner else ""


@pytest.fixture(scope="module")
def manager(
    akri_cluster: realcluster.RealCluster,
    nodes: dict[str, edgenodes.EdgeNode],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Manager]:
    work = tmp_path_factory.mktemp("manager")
    token = akri_cluster.kubectl(
        "create", "token", "edgehub-manager", "-n", "edgehub-system"
    ).stdout.strip()
    kubeconfig = support.token_kubeconfig(
        work / "kubeconfig", akri_cluster.url, token, akri_cluster.ca_pem
    )
    authority = pki.Authority.create("edgehub-webhook-ca")
    cert, key = authority.issue_serving(("127.0.0.1",))
    (work / "tls.crt").write_bytes(cert)
    (work / "tls.key").write_bytes(key)
    health, webhook = realcluster.free_ports(2)
    process = processes.Process(
        "edgehub manager",
        edgenodes.edgehub_argv(
            "manager",
            f"--kubeconfig={kubeconfig}",
            "--leader-elect-namespace=edgehub-system",
            "--bind-address=127.0.0.1",
            f"--health-port={health}",
            f"--webhook-tls-cert-file={work / 'tls.crt'}",
            f"--webhook-tls-key-file={work / 'tls.key'}",
            "--webhook-bind-address=127.0.0.1",
            f"--webhook-port={webhook}",
        ),
        work / "manager.log",
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        die_with_parent=True,
    )
    process.start()
    try:
        edgenodes.eventually(
            lambda: edgenodes.http("GET", f"http://127.0.0.1:{health}/readyz")[0] == 200,
            30,
            "edgehub manager ready",
            alive=lambda: _alive(process),
        )
        edgenodes.eventually(
            lambda: (
                "leading as"
                in edgenodes.http("GET", f"http://127.0.0.1:{health}/readyz")[1].decode()
            ),
            30,
            "edgehub manager leading",
            alive=lambda: _alive(process),
        )
        yield Manager(process, health, webhook, authority.cert_pem)
    finally:
        process.stop()
        log = (work / "manager.log").read_text(errors="replace")
        # The manifests' roles allowed everything it did.
        assert "forbidden" not in log.lower(), log[-4000:]


def _alive(process: processes.Process) -> None:
    if not process.alive:
        raise process.failure("exited")


# --- helpers -------------------------------------------------------------------------------


def apply(cluster: realcluster.RealCluster, doc: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))


def configuration(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "akri.sh/v0",
        "kind": "Configuration",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "discoveryHandler": {"name": "debugEcho", "discoveryDetails": "descriptions: [a]"},
            **spec,
        },
    }


def make_instance(
    cluster: realcluster.RealCluster,
    name: str,
    config: str,
    nodes: list[str],
    *,
    shared: bool = True,
    capacity: int = 2,
) -> None:
    """The Instance as agents write it, and the resource kubelet reports for it per node."""
    owner = support.get_json(cluster, "akric", config, "-n", "default")["metadata"]
    apply(
        cluster,
        {
            "apiVersion": "akri.sh/v0",
            "kind": "Instance",
            "metadata": {
                "name": name,
                "namespace": "default",
                "ownerReferences": [
                    {
                        "apiVersion": "akri.sh/v0",
                        "kind": "Configuration",
                        "name": config,
                        "uid": owner["uid"],  # type: ignore[index]
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "configurationName": config,
                "cdiName": f"akri.sh/{config}={name.rsplit('-', 1)[1]}",
                "capacity": capacity,
                "brokerProperties": {},
                "shared": shared,
                "nodes": nodes,
                "deviceUsage": {},
            },
        },
    )
    for node in nodes:
        advertise(cluster, node, f"akri.sh/{name}", capacity)


def advertise(cluster: realcluster.RealCluster, node: str, resource: str, count: int) -> None:
    """What kubelet reports once the agent's device plugin registers ``resource``."""
    path = resource.replace("/", "~1")
    patch = [
        {"op": "add", "path": f"/status/{field}/{path}", "value": str(count)}
        for field in ("capacity", "allocatable")
    ]
    cluster.kubectl(
        "patch", "node", node, "--subresource=status", "--type=json", "-p", json.dumps(patch)
    )


def pods(cluster: realcluster.RealCluster, selector: str) -> dict[str, dict[str, Any]]:
    listed = support.get_json(cluster, "pods", "-n", "default", "-l", selector)
    return {p["metadata"]["name"]: p for p in listed["items"]}  # type: ignore[attr-defined]


def names(cluster: realcluster.RealCluster, kind: str, selector: str) -> set[str]:
    listed = support.get_json(cluster, kind, "-n", "default", "-l", selector)
    return {i["metadata"]["name"] for i in listed["items"]}  # type: ignore[attr-defined]


def timestamp(text: str) -> datetime.datetime:
    """A Kubernetes Time (``2026-12-01T22:40:00Z``, events may carry fractions)."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def events(cluster: realcluster.RealCluster, name: str) -> list[dict[str, Any]]:
    listed = support.get_json(
        cluster, "events", "-n", "default", "--field-selector", f"involvedObject.name={name}"
    )
    return list(listed["items"])  # type: ignore[arg-type]


# --- the cases --------------------------------------------------------------------------------


def test_a_broker_pod_per_instance_per_node_runs_and_holds_a_slot(
    akri_cluster: realcluster.RealCluster, nodes: dict[str, edgenodes.EdgeNode], manager: Manager
) -> None:
    cluster = akri_cluster
    apply(
        cluster,
        configuration(
            "echo",
            capacity=2,
            brokerSpec={"brokerPodSpec": BROKER},
            instanceServiceSpec={"ports": [{"name": "grpc", "port": 8083}]},
            configurationServiceSpec={"ports": [{"name": "grpc", "port": 8083}]},
        ),
    )
    make_instance(cluster, "echo-aaaaaa", "echo", [NODE_A, NODE_B])  # one shared device
    make_instance(cluster, "echo-bbbbbb", "echo", [NODE_A], shared=False, capacity=1)
    want = {f"{NODE_A}-echo-aaaaaa-pod", f"{NODE_B}-echo-aaaaaa-pod", "echo-bbbbbb-pod"}

    def running() -> bool:
        found = pods(cluster, "akri.sh/configuration=echo")
        return set(found) == want and all(
            p["status"].get("phase") == "Running" for p in found.values()
        )

    edgenodes.eventually(running, 60, "three broker pods Running")
    found = pods(cluster, "akri.sh/configuration=echo")
    for name, pod in found.items():
        node = pod["metadata"]["labels"]["akri.sh/target-node"]
        assert pod["spec"]["nodeName"] == node, name  # the real scheduler followed the affinity
        # ...and its hollow kubelet runs it (its runtime's view lags the status a little).
        edgenodes.eventually(
            lambda node=node, name=name: f"default/{name}" in (nodes[node].running_pods() or {}),
            15,
            f"{name} in the runtime of {node}",
        )
    # The local device's one slot on node A is held: another pod asking for it cannot run.
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "slot-probe", "namespace": "default"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE_A},
            "containers": [
                {
                    "name": "p",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {"akri.sh/echo-bbbbbb": "1"}},
                }
            ],
        },
    }
    apply(cluster, probe)

    def refused() -> str | None:
        pod = support.get_json(cluster, "pod", "slot-probe", "-n", "default")
        for condition in pod["status"].get("conditions") or []:  # type: ignore[union-attr]
            if condition["type"] == "PodScheduled" and condition["status"] == "False":
                return str(condition.get("message"))
        return None

    message = edgenodes.eventually(refused, 30, "the probe pod unschedulable")
    assert "Insufficient akri.sh/echo-bbbbbb" in message
    cluster.kubectl("delete", "pod", "slot-probe", "-n", "default", "--wait=false")
    edgenodes.eventually(
        lambda: (
            names(cluster, "services", "controller=akri.sh")
            == {"echo-aaaaaa-svc", "echo-bbbbbb-svc", "echo-svc"}
        ),
        30,
        "instance and configuration services",
    )
    # The apiserver's own view of the Instance Service: it selects its brokers.
    slices = support.get_json(
        cluster,
        "endpointslices",
        "-n",
        "default",
        "-l",
        "kubernetes.io/service-name=echo-aaaaaa-svc",
    )
    assert slices["items"]  # type: ignore[index]

    # A deleted broker pod comes back as a new pod.
    old = found["echo-bbbbbb-pod"]["metadata"]["uid"]
    cluster.kubectl("delete", "pod", "echo-bbbbbb-pod", "-n", "default", "--wait=false")
    edgenodes.eventually(
        lambda: (
            pods(cluster, "akri.sh/configuration=echo")
            .get("echo-bbbbbb-pod", {})
            .get("metadata", {})
            .get("uid")
            not in (None, old)
        ),
        30,
        "the broker pod recreated",
    )

    # The Instance goes (device OFFLINE: its agents delete it): its broker and Service go.
    cluster.kubectl("delete", "akrii", "echo-bbbbbb", "-n", "default")
    edgenodes.eventually(
        lambda: (
            "echo-bbbbbb-pod" not in pods(cluster, "akri.sh/configuration=echo")
            and "echo-bbbbbb-svc" not in names(cluster, "services", "controller=akri.sh")
        ),
        30,
        "broker pod and Instance Service gone",
    )
    assert "echo-svc" in names(cluster, "services", "controller=akri.sh")  # echo-aaaaaa stays


def test_a_broker_job_per_instance_completes(
    akri_cluster: realcluster.RealCluster, nodes: dict[str, edgenodes.EdgeNode], manager: Manager
) -> None:
    cluster = akri_cluster
    job_spec = {
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": 0,
        "template": {"spec": {"restartPolicy": "Never", **BROKER}},
    }
    apply(cluster, configuration("batch", brokerSpec={"brokerJobSpec": job_spec}))
    make_instance(cluster, "batch-cccccc", "batch", [NODE_B], shared=False, capacity=1)

    def job_pod() -> dict[str, Any] | None:
        found = pods(cluster, "akri.sh/instance=batch-cccccc")
        running = [p for p in found.values() if p["status"].get("phase") == "Running"]
        return running[0] if running else None

    pod = edgenodes.eventually(job_pod, 60, "the broker Job's pod Running")
    job = support.get_json(cluster, "job", "batch-cccccc-1-job", "-n", "default")
    assert job["metadata"]["ownerReferences"][0]["name"] == "batch-cccccc"  # type: ignore[index]
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"akri.sh/batch-cccccc": "1"}
    assert pod["spec"]["nodeName"] == NODE_B
    # The container "exits 0", as a kubelet would report it (kubemark's never do).
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {
        "phase": "Succeeded",
        "conditions": pod["status"].get("conditions", []),
        "containerStatuses": [
            {
                "name": "broker",
                "image": "registry.k8s.io/pause:3.10",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": now}},
            }
        ],
    }
    cluster.kubectl(
        "patch",
        "pod",
        pod["metadata"]["name"],
        "-n",
        "default",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )

    def complete() -> bool:
        job = support.get_json(cluster, "job", "batch-cccccc-1-job", "-n", "default")
        return any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in job["status"].get("conditions") or []  # type: ignore[union-attr]
        )

    edgenodes.eventually(complete, 60, "the broker Job Complete")
    uid = support.get_json(cluster, "job", "batch-cccccc-1-job", "-n", "default")["metadata"]
    time.sleep(2)  # a completed Job is left alone, not run again
    again = support.get_json(cluster, "job", "batch-cccccc-1-job", "-n", "default")["metadata"]
    assert again["uid"] == uid["uid"]  # type: ignore[index]
    assert names(cluster, "jobs", "akri.sh/instance=batch-cccccc") == {"batch-cccccc-1-job"}


def test_a_broker_spec_the_apiserver_refuses_is_an_event_and_backs_off(
    akri_cluster: realcluster.RealCluster, nodes: dict[str, edgenodes.EdgeNode], manager: Manager
) -> None:
    cluster = akri_cluster
    broken = {"containers": [{"name": "broker", "image": "pause", "ports": [{"containerPort": 0}]}]}
    apply(cluster, configuration("broken", brokerSpec={"brokerPodSpec": broken}))
    make_instance(cluster, "broken-dddddd", "broken", [NODE_A], shared=False, capacity=1)

    def reported() -> str | None:
        for event in events(cluster, "broken"):
            if event["reason"] == "FailedCreate":
                return str(event["message"])
        return None

    message = edgenodes.eventually(reported, 30, "a FailedCreate Event on the Configuration")
    assert "broken-dddddd-pod" in message and "spec.containers[0].ports[0].containerPort" in message

    def refused() -> float:
        return manager.metric(
            "edgehub_manager_broker_writes_total", kind="pods", verb="create", outcome="refused"
        )

    # Tried again (the Event may come late: wait for the next try, not a fixed window, which a
    # doubling back-off can leave empty) ...
    tries = refused()
    edgenodes.eventually(lambda: refused() > tries or None, 60, "the refused create tried again")
    # ... and backed off (0.5 s doubling to 300 s): some 10 tries in the first five minutes at
    # most (a try a second, or one per event, would be hundreds).
    time.sleep(10)
    assert refused() <= 12, (tries, refused())
    # Other Configurations are not held up: echo's shared broker still runs on both nodes.
    echo = pods(cluster, "akri.sh/instance=echo-aaaaaa")
    assert len(echo) == 2 and all(p["status"]["phase"] == "Running" for p in echo.values())


def _review_config(name: str, handler: str, details: str, **spec: Any) -> dict[str, Any]:
    doc = configuration(name, **spec)
    doc["spec"]["discoveryHandler"] = {"name": handler, "discoveryDetails": details}
    return doc


def test_the_webhook_refuses_broken_configurations_naming_the_field(
    akri_cluster: realcluster.RealCluster, manager: Manager
) -> None:
    cluster = akri_cluster
    registration = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "edgehub-configurations-test"},
        "webhooks": [
            {
                "name": "configurations.edgehub.akri.sh",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "rules": [
                    {
                        "apiGroups": ["akri.sh"],
                        "apiVersions": ["v0"],
                        "resources": ["configurations"],
                        "operations": ["CREATE", "UPDATE"],
                    }
                ],
                "clientConfig": {
                    "url": f"https://127.0.0.1:{manager.webhook}/validate",
                    "caBundle": base64.b64encode(manager.ca).decode(),
                },
            }
        ],
    }
    apply(cluster, registration)
    try:
        good = _review_config(
            "fine", "debugEcho", "descriptions: [a]", brokerSpec={"brokerPodSpec": BROKER}
        )
        # Registration takes a moment to reach the apiserver's webhook cache.
        probe = json.dumps(_review_config("probe", "udev", "udevRules: 3"))
        edgenodes.eventually(
            lambda: (
                "denied the request"
                in cluster.kubectl(
                    "create", "--dry-run=server", "-f", "-", input=probe, check=False
                ).stderr
            ),
            30,
            "the webhook registered",
        )
        cluster.kubectl("apply", "-f", "-", input=json.dumps(good))
        no_key = _review_config("bad-no-key", "debugEcho", "descriptions: [a]")
        no_key["spec"]["discoveryHandler"]["discoveryProperties"] = [
            {"name": "P", "valueFrom": {"configMapKeyRef": {"name": "cm"}}}
        ]
        no_name = configuration("bad-no-name")
        no_name["spec"]["discoveryHandler"] = {"discoveryDetails": "descriptions: [a]"}
        cases = {
            # The CRD takes these, as Akri's does; the webhook refuses them, naming the field.
            "spec.discoveryHandler.name": no_name,
            "spec.capacity": _review_config(
                "bad-capacity-5000", "debugEcho", "descriptions: [a]", capacity=5000
            ),
            "spec.discoveryHandler.discoveryProperties[0].valueFrom.configMapKeyRef.key": no_key,
            "spec.brokerSpec": _review_config(
                "bad-broker-spec", "debugEcho", "descriptions: [a]", brokerSpec={}
            ),
            "spec.discoveryHandler.discoveryDetails: udevRules[0]": _review_config(
                "bad-udev", "udev", 'udevRules: ["TYPO==\\"x\\""]'
            ),
            "spec.discoveryHandler.discoveryDetails: opcuaDiscoveryMethod.lds": _review_config(
                "bad-opcua", "opcua", "opcuaDiscoveryMethod:\n  lds: {}"
            ),
            "spec.discoveryHandler.discoveryDetails: descriptions": _review_config(
                "bad-echo", "debugEcho", "{}"
            ),
            "spec.brokerSpec.brokerPodSpec.containers[0].image": _review_config(
                "bad-pod",
                "debugEcho",
                "descriptions: [a]",
                brokerSpec={"brokerPodSpec": {"containers": [{"name": "b"}]}},
            ),
            "spec.brokerSpec.brokerJobSpec.template.spec.restartPolicy": _review_config(
                "bad-job",
                "debugEcho",
                "descriptions: [a]",
                brokerSpec={
                    "brokerJobSpec": {"template": {"spec": {"restartPolicy": "Always", **BROKER}}}
                },
            ),
            "spec.discoveryHandler.discoveryDetails: discoveryTimeoutSeconds": _review_config(
                "bad-onvif", "onvif", "discoveryTimeoutSeconds: 0"
            ),
        }
        for field, doc in cases.items():
            result = cluster.kubectl("apply", "-f", "-", input=json.dumps(doc), check=False)
            assert result.returncode != 0, field
            assert "denied the request" in result.stderr, result.stderr
            assert field in result.stderr, (field, result.stderr)
        # A negative capacity: the CRD takes it (as Akri's does), the webhook refuses it.
        negative = _review_config("bad-capacity", "debugEcho", "descriptions: [a]", capacity=-1)
        result = cluster.kubectl("apply", "-f", "-", input=json.dumps(negative), check=False)
        assert result.returncode != 0 and "spec.capacity" in result.stderr, result.stderr
        assert "denied the request" in result.stderr, result.stderr
        # Details Akri's debugEcho takes: stored, the unknown key named in a kubectl warning.
        typo = _review_config("typo", "debugEcho", "descriptions: [1, yes]\ndescriptons: [b]")
        result = cluster.kubectl("apply", "-f", "-", input=json.dumps(typo))
        assert "Warning: spec.discoveryHandler.discoveryDetails: descriptons: unknown key" in (
            result.stderr
        ), result.stderr
        # Nothing refused was stored; the good one was.
        stored = names(cluster, "akric", "")
        assert "fine" in stored and not {n for n in stored if n.startswith("bad-")}
        # A metadata-only update of a stored Configuration passes (an agent's finalizer).
        cluster.kubectl(
            "patch",
            "akric",
            "fine",
            "-n",
            "default",
            "--type=merge",
            "-p",
            json.dumps({"metadata": {"finalizers": [NODE_A]}}),
        )
        cluster.kubectl(
            "patch",
            "akric",
            "fine",
            "-n",
            "default",
            "--type=merge",
            "-p",
            json.dumps({"metadata": {"finalizers": None}}),
        )
        assert manager.metric("edgehub_manager_webhook_reviews_total", allowed="false") >= 6
    finally:
        cluster.kubectl("delete", "validatingwebhookconfiguration", "edgehub-configurations-test")
        for name in ("fine", "typo"):
            cluster.kubectl("delete", "akric", name, "-n", "default", "--wait=false", check=False)


def test_a_node_that_goes_not_ready_leaves_its_instances(
    akri_cluster: realcluster.RealCluster, nodes: dict[str, edgenodes.EdgeNode], manager: Manager
) -> None:
    cluster = akri_cluster
    before = support.get_json(cluster, "akrii", "echo-aaaaaa", "-n", "default")["spec"]
    assert sorted(before["nodes"]) == [NODE_A, NODE_B]  # type: ignore[index]
    nodes[NODE_B].stop()  # its hub and kubelet: the node stops renewing its Lease

    def left() -> bool:
        spec = support.get_json(cluster, "akrii", "echo-aaaaaa", "-n", "default")["spec"]
        return spec["nodes"] == [NODE_A]  # type: ignore[index]

    edgenodes.eventually(left, GRACE + 120, f"{NODE_B} removed from the shared Instance")
    ready = support.get_json(cluster, "node", NODE_B)["status"]
    condition = next(c for c in ready["conditions"] if c["type"] == "Ready")  # type: ignore[index]
    assert condition["status"] == "Unknown"
    # The Instance that had only that node is gone, and with it its broker Job.
    edgenodes.eventually(
        lambda: "batch-cccccc" not in names(cluster, "akrii", ""), 20, "batch-cccccc deleted"
    )
    # The broker on the lost node is being deleted (its kubelet is not there to confirm).
    pod = support.get_json(cluster, "pod", f"{NODE_B}-echo-aaaaaa-pod", "-n", "default")
    assert pod["metadata"].get("deletionTimestamp"), pod["metadata"]  # type: ignore[union-attr]
    # Left because it went NotReady: the manager's NodeLeft Event is not older than the Ready
    # condition's change to Unknown (both second-granular timestamps of the cluster's clock).
    left_events = [e for e in events(cluster, "echo-aaaaaa") if e.get("reason") == "NodeLeft"]
    assert left_events and any(NODE_B in e["message"] for e in left_events), left_events
    unknown_since = timestamp(condition["lastTransitionTime"])
    for event in left_events:
        if NODE_B in event["message"]:
            assert timestamp(event["firstTimestamp"]) >= unknown_since, (event, condition)
