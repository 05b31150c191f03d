"""The yurtstaticset controller's test bed on the simulated apiserver: Nodes, mirror Pods as
kubelet keeps them, the YurtStaticSet, and what a worker and kubelet report on a node."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Any

from managers_support import FAST, manager_settings

from managers import settings, staticsetplanning
from yurthub.testing import simapiserver

REPO = Path(__file__).resolve().parents[3]
CRD = REPO / "manifests" / "crds" / "yurtstaticsets.apps.openyurt.io.yaml"
RBAC = REPO / "manifests" / "manager" / "staticset-rbac.yaml"
MANAGER_RBAC = REPO / "manifests" / "manager" / "rbac.yaml"
NS = "kube-system"
TEMPLATE = {
    "metadata": {"labels": {"k8s-app": "edgehub-hub"}},
    "spec": {"containers": [{"name": "hub", "image": "ghcr.io/edgehub/edgehub:0.2.0"}]},
}
LATEST = staticsetplanning.template_hash(TEMPLATE)


def node(name: str, ready: bool = True, pool: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"apps.openyurt.io/nodepool": pool} if pool else {}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.9"}],
        },
    }


def set_ready(sim: simapiserver.SimApiserver, name: str, ready: bool) -> None:
    obj = sim.state.get("nodes", None, name)
    obj["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    sim.state.update(obj)


def mirror(sim: simapiserver.SimApiserver, node_name: str, digest: str) -> None:
    """The mirror Pod kubelet keeps for a static Pod, Ready, running template ``digest``."""
    name = f"hub-{node_name}"
    annotations = {"kubernetes.io/config.mirror": "x", staticsetplanning.HASH_ANNOTATION: digest}
    existing = sim.state.list("pods", NS, field_selector=f"metadata.name={name}")
    if existing:
        pod = existing[0]
        pod["metadata"]["annotations"] = annotations
    else:
        pod = sim.state.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NS, "annotations": annotations},
                "spec": {
                    "nodeName": node_name,
                    "containers": [{"name": "hub", "image": "ghcr.io/edgehub/edgehub:0.1.0"}],
                },
            }
        )
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    pod["metadata"].pop("resourceVersion", None)  # kubelet's word is final here
    sim.state.update(pod)


def yss(name: str = "hub", strategy: str = "AdvancedRollingUpdate", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps.openyurt.io/v1alpha1",
        "kind": "YurtStaticSet",
        "metadata": {"name": name, "namespace": NS, **meta},
        "spec": {
            "staticPodManifest": "edgehub-hub",
            "upgradeStrategy": {"type": strategy, "maxUnavailable": 1},
            "template": TEMPLATE,
        },
    }


def workers(sim: simapiserver.SimApiserver) -> dict[str, dict[str, Any]]:
    return {
        p["spec"]["nodeName"]: p
        for p in sim.state.list("pods", NS)
        if p["metadata"]["name"].startswith("yss-upgrade-worker-hub-")
    }


def status(sim: simapiserver.SimApiserver, name: str = "hub") -> dict[str, Any]:
    return dict(sim.state.get("yurtstaticsets", NS, name).get("status") or {})


def _stamp(offset: float = 0.0) -> str:
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=offset)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def renew(sim: simapiserver.SimApiserver, node_name: str, offset: float = 0.0) -> None:
    """kubelet renewing the node's Lease (``offset`` seconds from now)."""
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node_name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": node_name, "leaseDurationSeconds": 40,
                 "renewTime": _stamp(offset)},
    }  # fmt: skip
    existing = sim.state.list(
        "leases", "kube-node-lease", field_selector=f"metadata.name={node_name}"
    )
    if existing:
        existing[0]["spec"] = lease["spec"]
        existing[0]["metadata"].pop("resourceVersion", None)
        sim.state.update(existing[0])
    else:
        sim.state.create(lease)


def end_worker(
    sim: simapiserver.SimApiserver, node_name: str, phase: str, message: str = ""
) -> None:
    """kubelet reporting the worker on ``node_name`` ended (``phase``, ended a second ago)."""
    pod = workers(sim)[node_name]
    terminated = {"exitCode": 0 if phase == "Succeeded" else 1, "finishedAt": _stamp(-1)}
    if message:
        terminated["message"] = message
    pod["status"] = {
        **pod.get("status", {}),
        "phase": phase,
        "containerStatuses": [{"name": "upgrade-worker", "state": {"terminated": terminated}}],
    }
    pod["metadata"].pop("resourceVersion", None)
    sim.state.update(pod)


def finish(sim: simapiserver.SimApiserver, node_name: str) -> None:
    """What the worker on ``node_name`` achieves: the new static Pod, the worker done, and the
    node's kubelet back (its Lease renewed after the worker ended)."""
    mirror(sim, node_name, LATEST)
    end_worker(sim, node_name, "Succeeded")
    renew(sim, node_name)


def yss_settings(
    sim: simapiserver.SimApiserver,
    account: Path,
    node_ready_timeout: float = 120.0,
    lease: tuple[str, str] | None = ("kube-system", "cloud-yurt-manager"),
) -> settings.ManagerSettings:
    base = manager_settings(sim, account)
    return dataclasses.replace(
        base,
        controllers=("yurtstaticset",),
        static_sets=settings.StaticSets(
            owner="edgehub",
            worker_image="mirror/edgehub:9",
            node_ready_timeout=node_ready_timeout,
            yurt_manager_lease=lease,
            timings=FAST,
        ),
    )
