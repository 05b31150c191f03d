"""``edgehub manager``'s autonomy controller against the simulated apiserver, with the manager's
own ServiceAccount: a node's autonomy annotation reaches every pod bound to it (and only
those: DaemonSet pods and other nodes' pods are left alone) as conditional merge patches made
from the trimmed pods the informers hold; removing it restores the cluster default; every
request is one the manifests' role grants. (The real apiserver, with the admission policy:
tests/e2e/cluster/test_node_autonomy.py and test_manager_scale_real.py.)"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import rbac_support as rbac
import yaml
from managers_support import eventually, manager_settings, service_account_dir

from managers import autonomy, running, tolerating
from nodeautonomy import marking
from yurthub.testing import simapiserver

REPO = Path(__file__).resolve().parents[3]
RBAC = REPO / "manifests" / "manager" / "autonomy-rbac.yaml"
NS = "autonomy"
NR, UR = tolerating.NOT_READY, tolerating.UNREACHABLE


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(name: str, node_name: str, *, daemonset: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if daemonset is not None:
        owner = daemonset["metadata"]
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": owner["name"]}
            | {"uid": owner["uid"], "controller": True}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "image": "registry.example/app:1"}],
            "tolerations": [
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
                for key in (NR, UR)
            ],
        },
    }


def seconds(sim: simapiserver.SimApiserver, name: str) -> dict[str, int | None]:
    obj = sim.state.get("pods", NS, name)
    return {
        t["key"]: t.get("tolerationSeconds")
        for t in obj["spec"]["tolerations"]
        if t.get("key") in (NR, UR)
    }


def annotate(sim: simapiserver.SimApiserver, name: str, value: str | None) -> None:
    obj = sim.state.get("nodes", None, name)
    annotations = obj["metadata"].setdefault("annotations", {})
    if value is None:
        annotations.pop(marking.DURATION_ANNOTATION, None)
    else:
        annotations[marking.DURATION_ANNOTATION] = value
    sim.state.update(obj)


async def test_a_nodes_annotation_reaches_its_pods_through_patches_of_trimmed_pods(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    sim = sim_apiserver
    sim.state.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    for name in ("edge-1", "edge-2"):
        sim.state.create(node(name))
    mine = [f"app-{n}" for n in range(3)]
    for name in mine:
        sim.state.create(pod(name, "edge-1"))
    daemonset = sim.state.create(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "ds", "namespace": NS},
            "spec": {
                "selector": {"matchLabels": {"app": "ds"}},
                "template": {
                    "metadata": {"labels": {"app": "ds"}},
                    "spec": {"containers": [{"name": "c", "image": "registry.example/ds:1"}]},
                },
            },
        }
    )
    sim.state.create(pod("ds-1", "edge-1", daemonset=daemonset))
    sim.state.create(pod("other", "edge-2"))
    account = service_account_dir(sim, tmp_path / "sa")
    own = dataclasses.replace(manager_settings(sim, account), controllers=(autonomy.NAME,))
    default = {NR: 300, UR: 300}
    async with running.running(own) as manager:
        assert manager.informers is not None
        await eventually(lambda: manager.informers is not None and manager.informers.synced)
        held = [r for r in manager.informers.reflectors.values() if r.resource == autonomy.PODS]
        assert len(held) == 1 and (NS, "app-0") in held[0].store
        assert "containers" not in held[0].store[(NS, "app-0")]["spec"]  # trimmed at ingest

        annotate(sim, "edge-1", "1h")
        await eventually(lambda: all(seconds(sim, p) == {NR: 3600, UR: 3600} for p in mine))
        for name in mine:
            annotations = sim.state.get("pods", NS, name)["metadata"]["annotations"]
            assert annotations[tolerating.MANAGED_ANNOTATION] == f"{NR},{UR}"
            # Nothing else of the pod was touched by the patch.
            assert sim.state.get("pods", NS, name)["spec"]["containers"][0]["image"] == (
                "registry.example/app:1"
            )

        annotate(sim, "edge-1", None)
        await eventually(lambda: all(seconds(sim, p) == default for p in mine))
        for name in mine:
            meta = sim.state.get("pods", NS, name)["metadata"]
            assert tolerating.MANAGED_ANNOTATION not in (meta.get("annotations") or {})
    assert seconds(sim, "ds-1") == default and seconds(sim, "other") == default

    docs = list(yaml.safe_load_all(RBAC.read_text()))
    rules = next(d for d in docs if d["kind"] == "ClusterRole")["rules"]
    events_rule = [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    seen = rbac.requests_of(sim, "system:serviceaccount:kube-system:edgehub-manager")
    assert rbac.denied(seen, rules + events_rule) == []
    assert ("patch", "", "pods") in rbac.kinds(seen)
