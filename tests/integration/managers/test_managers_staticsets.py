"""``edgehub manager``'s yurtstaticset controller against the simulated apiserver, with the
manager's own ServiceAccount: a YurtStaticSet is taken (``edgehub.io/owner``), its ConfigMap
written, worker Pods created one at a time with maxUnavailable 1 (a NotReady node never
blocks, and gets its worker once Ready), the status counts right; OTA marks the mirror Pods;
nothing is touched while yurt-manager's Lease is held or another owner is named; every request
is allowed by the manifests' roles."""

from __future__ import annotations

import dataclasses
import datetime
import logging
from pathlib import Path
from typing import Any

import pytest
import rbac_support as rbac
import yaml
from managers_support import FAST, eventually, manager_settings, service_account_dir

from managers import running, settings, staticsetplanning
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


def node(name: str, ready: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
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


def finish(sim: simapiserver.SimApiserver, node_name: str) -> None:
    """What the worker on ``node_name`` achieves: the new static Pod, and the worker done."""
    mirror(sim, node_name, LATEST)
    pod = workers(sim)[node_name]
    pod["status"] = {**pod.get("status", {}), "phase": "Succeeded"}
    pod["metadata"].pop("resourceVersion", None)
    sim.state.update(pod)


def yss_settings(sim: simapiserver.SimApiserver, account: Path) -> settings.ManagerSettings:
    base = manager_settings(sim, account)
    return dataclasses.replace(
        base,
        controllers=("yurtstaticset",),
        static_sets=settings.StaticSets(
            owner="edgehub", worker_image="mirror/edgehub:9", timings=FAST
        ),
    )


async def test_rolls_out_one_node_at_a_time_past_a_notready_node(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    sim = sim_apiserver
    sim.state.create(yaml.safe_load(CRD.read_text()))
    sim.state.create(node("a", ready=False))  # first in order: it must not block the others
    sim.state.create(node("b"))
    sim.state.create(node("c"))
    for n in ("a", "b", "c"):
        mirror(sim, n, "old")
    sim.state.create(yss())
    account = service_account_dir(sim, tmp_path / "sa")
    async with running.running(yss_settings(sim, account)):
        await eventually(lambda: list(workers(sim)) == ["b"])
        obj = sim.state.get("yurtstaticsets", NS, "hub")
        assert obj["metadata"]["annotations"][staticsetplanning.OWNER_ANNOTATION] == "edgehub"
        await eventually(lambda: status(sim).get("totalNumber") == 3)
        assert status(sim) == {
            "totalNumber": 3,
            "readyNumber": 3,
            "upgradedNumber": 0,
            "observedGeneration": obj["metadata"]["generation"],
        }
        assert list(workers(sim)) == ["b"]  # the status is written after the creates
        cm = sim.state.get("configmaps", NS, "yurt-static-set-hub")
        assert cm["metadata"]["annotations"] == {staticsetplanning.HASH_ANNOTATION: LATEST}
        assert yaml.safe_load(cm["data"]["edgehub-hub"])["spec"] == TEMPLATE["spec"]
        worker = workers(sim)["b"]
        assert worker["metadata"]["name"] == f"yss-upgrade-worker-hub-b-{LATEST}"
        container = worker["spec"]["containers"][0]
        assert container["image"] == "mirror/edgehub:9"
        assert container["command"][:2] == ["edgehub", "static-pod-upgrade"]
        assert "--name=hub-b" in container["command"] and f"--hash={LATEST}" in container["command"]

        # b done: its worker goes, c gets the only slot; a (NotReady) still waits. The
        # ConfigMap, deleted by hand meanwhile, is back before c's worker mounts it.
        sim.state.delete("configmaps", NS, "yurt-static-set-hub")
        finish(sim, "b")
        await eventually(lambda: list(workers(sim)) == ["c"])
        assert sim.state.get("configmaps", NS, "yurt-static-set-hub")["data"] == cm["data"]
        await eventually(lambda: status(sim).get("upgradedNumber") == 1)
        assert list(workers(sim)) == ["c"]
        finish(sim, "c")
        await eventually(lambda: status(sim).get("upgradedNumber") == 2)
        await eventually(lambda: workers(sim) == {})
        # a Ready again: it gets its worker.
        set_ready(sim, "a", True)
        await eventually(lambda: list(workers(sim)) == ["a"])
        finish(sim, "a")
        await eventually(lambda: status(sim).get("upgradedNumber") == 3 and not workers(sim))
        assert status(sim)["totalNumber"] == 3

        # Every request the controller made is granted by the manifests' roles.
        seen = {
            # The Lease is listed and watched with fieldSelector metadata.name=<it>, which the
            # apiserver's RBAC matches against resourceNames (the audit log records no name).
            (verb, group, resource, ns, name or "cloud-yurt-manager")
            if resource == "leases" and verb in ("list", "watch")
            else (verb, group, resource, ns, name)
            for verb, group, resource, ns, name in rbac.requests_of(
                sim, "system:serviceaccount:kube-system:edgehub-manager"
            )
        }
        cluster_rules = [
            *next(d for d in yaml.safe_load_all(RBAC.read_text()) if d["kind"] == "ClusterRole")[
                "rules"
            ],
            *next(
                d
                for d in yaml.safe_load_all(MANAGER_RBAC.read_text())
                if d["kind"] == "ClusterRole"
            )["rules"],
        ]
        lease_rules = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d["kind"] == "Role")[
            "rules"
        ]
        assert rbac.denied(seen, cluster_rules, lease_rules, NS) == []
        assert ("create", "", "pods") in rbac.kinds(seen)
        assert ("update", "apps.openyurt.io", "yurtstaticsets/status") in rbac.kinds(seen)


async def test_ota_marks_mirror_pods_and_creates_no_worker(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    sim = sim_apiserver
    sim.state.create(yaml.safe_load(CRD.read_text()))
    sim.state.create(node("a"))
    sim.state.create(node("b"))
    mirror(sim, "a", "old")
    mirror(sim, "b", LATEST)
    sim.state.create(yss(strategy="OTA"))
    account = service_account_dir(sim, tmp_path / "sa")

    def need(pod: str) -> str:
        got = sim.state.get("pods", NS, pod)
        return next(
            (
                c["status"]
                for c in got["status"].get("conditions", [])
                if c["type"] == "PodNeedUpgrade"
            ),
            "",
        )

    async with running.running(yss_settings(sim, account)):
        await eventually(lambda: need("hub-a") == "True" and need("hub-b") == "False")
        await eventually(lambda: status(sim).get("upgradedNumber") == 1)
        assert status(sim)["totalNumber"] == 2 and workers(sim) == {}
        mirror(sim, "a", LATEST)  # the node took the upgrade
        await eventually(lambda: need("hub-a") == "False")
        await eventually(lambda: status(sim).get("upgradedNumber") == 2)


async def test_nothing_is_touched_while_yurt_manager_leads_or_owns(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sim = sim_apiserver
    sim.state.create(yaml.safe_load(CRD.read_text()))
    sim.state.create(node("a"))
    mirror(sim, "a", "old")
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    sim.state.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "cloud-yurt-manager", "namespace": NS},
            "spec": {
                "holderIdentity": "yurt-manager-0",
                "leaseDurationSeconds": 3600,
                "renewTime": now,
            },
        }
    )
    sim.state.create(yss())
    sim.state.create(
        yss("theirs", annotations={staticsetplanning.OWNER_ANNOTATION: "yurt-manager"})
    )
    account = service_account_dir(sim, tmp_path / "sa")
    caplog.set_level(logging.INFO, logger="managers.staticsets")
    async with running.running(yss_settings(sim, account)):
        await eventually(
            lambda: "yurt-manager holds Lease kube-system/cloud-yurt-manager" in caplog.text
        )
        lines = [r for r in caplog.records if "acting on no YurtStaticSet" in r.getMessage()]
        assert len(lines) == 1
        assert staticsetplanning.OWNER_ANNOTATION not in (
            sim.state.get("yurtstaticsets", NS, "hub")["metadata"].get("annotations") or {}
        )
        assert not sim.state.list(
            "configmaps", NS, field_selector="metadata.name=yurt-static-set-hub"
        )
        assert workers(sim) == {}

        # yurt-manager gone: edgehub takes its own, never the one annotated for yurt-manager.
        sim.state.delete("leases", NS, "cloud-yurt-manager")
        await eventually(lambda: list(workers(sim)) == ["a"])
        await eventually(lambda: "theirs: edgehub.io/owner=yurt-manager, left" in caplog.text)
        theirs = sim.state.get("yurtstaticsets", NS, "theirs")
        assert theirs["metadata"]["annotations"] == {
            staticsetplanning.OWNER_ANNOTATION: "yurt-manager"
        }
        assert "status" not in theirs or not theirs["status"]
        assert not sim.state.list(
            "configmaps", NS, field_selector="metadata.name=yurt-static-set-theirs"
        )
