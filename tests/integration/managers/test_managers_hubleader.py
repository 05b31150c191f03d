"""``edgehub manager``'s hub-leader controllers against the simulated apiserver, with the
manager's own ServiceAccount: leaders elected from Ready nodes with an InternalIP, replaced when
their node goes NotReady, topped up when replicas grow, none when no node qualifies; the
leader-hub-<pool> ConfigMap follows the pool (and comes back when edited by hand); the
yurt-hub-multiplexer ClusterRole covers every pool's resources; a spec that cannot be used is
a Warning Event and changes nothing; every request is allowed by the manifests' roles."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import rbac_support as rbac
import yaml
from managers_support import eventually, manager_settings, service_account_dir

from managers import running, settings
from yurthub.testing import simapiserver

REPO = Path(__file__).resolve().parents[3]
CRD = REPO / "manifests" / "crds" / "nodepools.apps.openyurt.io.yaml"
RBAC = REPO / "manifests" / "manager" / "hubleader-rbac.yaml"
POOL_LABEL = "apps.openyurt.io/nodepool"
NS = "kube-system"


def node(name: str, pool: str, ip: str, *, ready: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {POOL_LABEL: pool}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "Hostname", "address": name},
            ],
        },
    }


def nodepool(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps.openyurt.io/v1beta2",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"type": "Edge", **spec},
    }


def pool_status(sim: simapiserver.SimApiserver, name: str) -> dict[str, Any]:
    return dict(sim.state.get("nodepools", None, name).get("status") or {})


def leaders(sim: simapiserver.SimApiserver, name: str) -> list[str]:
    return [e["nodeName"] for e in pool_status(sim, name).get("leaderEndpoints") or []]


def configmap(sim: simapiserver.SimApiserver, pool: str) -> dict[str, str] | None:
    found = sim.state.list("configmaps", NS, field_selector=f"metadata.name=leader-hub-{pool}")
    return dict(found[0].get("data") or {}) if found else None


def set_ready(sim: simapiserver.SimApiserver, name: str, ready: bool) -> None:
    obj = sim.state.get("nodes", None, name)
    obj["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    sim.state.update(obj)


def hubleader_settings(sim: simapiserver.SimApiserver, account: Path) -> settings.ManagerSettings:
    base = manager_settings(sim, account)
    return dataclasses.replace(base, controllers=("hubleader", "hubleaderconfig", "hubleaderrbac"))


async def test_leaders_configmaps_and_role_follow_pools_and_nodes(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    sim = sim_apiserver
    sim.state.create(yaml.safe_load(CRD.read_text()))
    for i in (1, 2, 3):
        sim.state.create(node(f"hz-{i}", "hz", f"10.0.0.{i}"))
    sim.state.create(node("bj-1", "bj", "10.1.0.1", ready=False))
    sim.state.create(nodepool("hz", enableLeaderElection=True, interConnectivity=True))
    sim.state.create(nodepool("bj", enableLeaderElection=True))
    sim.state.create(
        nodepool(
            "sh",
            poolScopeMetadata=[{"group": "", "version": "v1", "resource": "configmaps"}],
        )
    )
    account = service_account_dir(sim, tmp_path / "sa")
    async with running.running(hubleader_settings(sim, account)):
        await eventually(lambda: len(leaders(sim, "hz")) == 1)
        first = leaders(sim, "hz")[0]
        status = pool_status(sim, "hz")
        assert status["leaderNum"] == 1 and status["leaderLastElectedTime"]
        assert status["leaderEndpoints"][0]["address"] == f"10.0.0.{first[-1]}"
        await eventually(
            lambda: (configmap(sim, "hz") or {}).get("leaders") == f"{first}/10.0.0.{first[-1]}"
        )
        assert configmap(sim, "hz") == {
            "leaders": f"{first}/10.0.0.{first[-1]}",
            "pool-scoped-metadata": "/v1/services,discovery.k8s.io/v1/endpointslices",
            "interconnectivity": "true",
            "enable-leader-election": "true",
        }
        cm = sim.state.list("configmaps", NS, field_selector="metadata.name=leader-hub-hz")[0]
        assert cm["metadata"]["ownerReferences"][0]["kind"] == "NodePool"
        assert cm["metadata"]["labels"] == {"openyurt.io/configmap-name": "leader-hub-hz"}

        # No eligible node: no leaders, everyone reads from the cloud.
        await eventually(lambda: configmap(sim, "bj") is not None)
        assert leaders(sim, "bj") == [] and configmap(sim, "bj")["leaders"] == ""  # type: ignore[index]
        # The role covers every pool's resources (it is created empty, then given its rules:
        # RBAC's escalation check on create cannot name it).
        pool_rule = {
            "apiGroups": [""],
            "resources": ["configmaps", "services"],
            "verbs": ["list", "watch"],
        }

        def role_rules() -> list[dict[str, object]]:
            found = sim.state.list(
                "clusterroles", field_selector="metadata.name=yurt-hub-multiplexer"
            )
            return list(found[0].get("rules") or []) if found else []

        await eventually(lambda: pool_rule in role_rules())

        # A new pool with another resource: the role grows.
        sim.state.create(
            nodepool("gz", poolScopeMetadata=[{"group": "", "version": "v1", "resource": "nodes"}])
        )

        def role_covers_nodes() -> bool:
            rules = sim.state.get("clusterroles", None, "yurt-hub-multiplexer")["rules"]
            return any("nodes" in rule["resources"] for rule in rules)

        await eventually(role_covers_nodes)

        # The leader's node goes NotReady: another one leads, the ConfigMap follows.
        set_ready(sim, first, False)
        await eventually(lambda: leaders(sim, "hz") not in ([], [first]))
        second = leaders(sim, "hz")[0]
        await eventually(lambda: (configmap(sim, "hz") or {}).get("leaders", "").startswith(second))

        # More replicas: topped up, the current leader kept.
        obj = sim.state.get("nodepools", None, "hz")
        obj["spec"]["leaderReplicas"] = 3
        sim.state.update(obj)
        await eventually(lambda: len(leaders(sim, "hz")) == 2)
        assert second in leaders(sim, "hz") and first not in leaders(sim, "hz")
        set_ready(sim, first, True)
        await eventually(lambda: len(leaders(sim, "hz")) == 3)

        # A hand edit of the ConfigMap is put back.
        cm = sim.state.list("configmaps", NS, field_selector="metadata.name=leader-hub-hz")[0]
        cm["data"]["leaders"] = "garbage"
        sim.state.update(cm)
        await eventually(lambda: (configmap(sim, "hz") or {}).get("leaders", "").count("/") == 3)

        # A spec that cannot be used: a Warning Event, the leaders stay.
        before = leaders(sim, "hz")
        obj = sim.state.get("nodepools", None, "hz")
        obj["spec"]["leaderElectionStrategy"] = "oldest"
        sim.state.update(obj)
        await eventually(
            lambda: any(
                e.get("reason") == "InvalidLeaderElection"
                for e in sim.state.list("events", "default")
            )
        )
        assert leaders(sim, "hz") == before

    # Every request the controllers made is allowed by their roles (+ events in edgehub:manager).
    docs = list(yaml.safe_load_all(RBAC.read_text()))
    cluster_rules = next(d for d in docs if d["kind"] == "ClusterRole")["rules"]
    role_rules = next(d for d in docs if d["kind"] == "Role")["rules"]
    events_rule = [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    user = "system:serviceaccount:kube-system:edgehub-manager"
    seen = rbac.requests_of(sim, user)
    assert rbac.denied(seen, cluster_rules + events_rule, role_rules, NS) == []
    assert {
        ("watch", "apps.openyurt.io", "nodepools"),
        ("update", "apps.openyurt.io", "nodepools/status"),
        ("watch", "", "nodes"),
        ("create", "", "configmaps"),
        ("update", "", "configmaps"),
        ("create", "rbac.authorization.k8s.io", "clusterroles"),
        ("update", "rbac.authorization.k8s.io", "clusterroles"),
        ("create", "", "events"),
    } <= rbac.kinds(seen)
