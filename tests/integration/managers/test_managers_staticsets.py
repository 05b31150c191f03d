"""``edgehub manager``'s yurtstaticset controller against the simulated apiserver, with the
manager's own ServiceAccount: a YurtStaticSet is taken (``edgehub.io/owner``), its ConfigMap
written, worker Pods created one at a time with maxUnavailable 1 (a NotReady node never
blocks, and gets its worker once Ready), the status counts right; OTA marks the mirror Pods;
nothing is touched while yurt-manager's Lease is held or another owner is named; every request
is allowed by the manifests' roles."""

from __future__ import annotations

import datetime
import logging
from pathlib import Path

import pytest
import rbac_support as rbac
import yaml
from managers_support import eventually, service_account_dir
from staticsets_support import (
    CRD,
    LATEST,
    MANAGER_RBAC,
    NS,
    RBAC,
    TEMPLATE,
    finish,
    mirror,
    node,
    set_ready,
    status,
    workers,
    yss,
    yss_settings,
)

from managers import running, staticsetplanning
from yurthub.testing import simapiserver


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
        roles = {
            d["metadata"]["namespace"]: d["rules"]
            for d in yaml.safe_load_all(RBAC.read_text())
            if d["kind"] == "Role"
        }
        node_leases = {r for r in seen if r[3] == "kube-node-lease"}
        assert node_leases and {r[:3] for r in node_leases} == {
            ("get", "coordination.k8s.io", "leases")
        }
        assert rbac.denied(seen - node_leases, cluster_rules, roles[NS], NS) == []
        assert rbac.denied(node_leases, [], roles["kube-node-lease"], "kube-node-lease") == []
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


async def test_without_the_lease_check_a_running_yurt_manager_does_not_hold_it_off(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    """--yurt-manager-lease='': yurt-manager runs (its other controllers), its YurtStaticSet
    controller is off, the operator says so: edgehub acts although the Lease is held."""
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
            "spec": {"holderIdentity": "ym-0", "leaseDurationSeconds": 3600, "renewTime": now},
        }
    )
    sim.state.create(yss())
    account = service_account_dir(sim, tmp_path / "sa")
    async with running.running(yss_settings(sim, account, lease=None)):
        await eventually(lambda: list(workers(sim)) == ["a"])
