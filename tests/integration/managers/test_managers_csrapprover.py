"""``edgehub manager``'s CSR approver against the simulated apiserver, with the manager's own
ServiceAccount: hub CSRs approved (and signed), a hub CSR that fails a check denied with a
reason and an Event, kubelet's CSR left alone, a stale approval write answered by a requeue;
health, readiness and metrics on its port."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import csr_support as cs
import pytest
from managers_support import (
    CSRS,
    HUB_GROUPS,
    TOKEN_GROUPS,
    TOKEN_USER,
    conditions,
    csr_state,
    eventually,
    get_text,
    manager_settings,
    service_account_dir,
    session_for,
    submit,
)

from kubecontrol import events, kubeapi
from managers import context, csrapprover, metrics, running, settings
from yurthub.testing import simapiserver

NODE = "edge-1"
CLIENT = ["digital signature", "client auth"]
SERVING = ["digital signature", "server auth"]


async def test_hub_csrs_approved_bad_ones_denied_kubelets_untouched(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    sim = sim_apiserver
    account = service_account_dir(sim, tmp_path / "sa")
    async with running.running(manager_settings(sim, account)) as manager:
        assert manager.health_port is not None
        # The first client certificate, with a bootstrap token; its renewal, by the hub.
        first = cs.csr("hub-client-1", cs.hub_client_request(NODE), cs.CLIENT_SIGNER, CLIENT)
        await submit(sim, cs.body(first), TOKEN_USER, TOKEN_GROUPS)
        renewal = cs.csr("hub-client-2", cs.hub_client_request(NODE), cs.CLIENT_SIGNER, CLIENT)
        await submit(sim, cs.body(renewal), f"system:node:{NODE}", HUB_GROUPS)
        serving = cs.csr("hub-serving", cs.hub_serving_request(NODE), cs.SERVING_SIGNER, SERVING)
        await submit(sim, cs.body(serving), f"system:node:{NODE}", HUB_GROUPS)
        # A hub CSR asking for server auth on a client certificate: denied, naming the check.
        bad = cs.csr(
            "hub-bad", cs.hub_client_request(NODE), cs.CLIENT_SIGNER, [*CLIENT, "server auth"]
        )
        await submit(sim, cs.body(bad), TOKEN_USER, TOKEN_GROUPS)
        # Another node's name from a node: denied.
        theft = cs.csr("hub-theft", cs.hub_client_request("edge-2"), cs.CLIENT_SIGNER, CLIENT)
        await submit(sim, cs.body(theft), f"system:node:{NODE}", HUB_GROUPS)
        # kubelet's serving CSR (sent through the hub, so made with the hub's identity).
        kubelet = cs.csr(
            "kubelet-serving", cs.kubelet_serving_request(NODE), cs.SERVING_SIGNER, SERVING
        )
        await submit(sim, cs.body(kubelet), f"system:node:{NODE}", HUB_GROUPS)

        decided = ("hub-client-1", "hub-client-2", "hub-serving", "hub-bad", "hub-theft")
        await eventually(lambda: all(conditions(sim, n) for n in decided))
        for name in ("hub-client-1", "hub-client-2", "hub-serving"):
            approved = conditions(sim, name)["Approved"]
            assert approved["reason"] == "AutoApproved" and "edgehub" in approved["message"]
            # The (simulated) controller-manager signed what was approved.
            assert csr_state(sim, name)["status"].get("certificate"), name
        assert conditions(sim, "hub-bad")["Denied"]["reason"] == "InvalidUsages"
        assert conditions(sim, "hub-theft")["Denied"]["reason"] == "InvalidRequester"
        assert "Approved" not in conditions(sim, "hub-bad")

        # kubelet's CSR stays pending, and nothing ever wrote to it.
        await eventually(lambda: manager.controllers[0].synced)
        assert conditions(sim, "kubelet-serving") == {}
        writes = [
            r
            for r in sim.audit_log()
            if r.name == "kubelet-serving" and r.verb != "create" and r.verb != "get"
        ]
        assert writes == []

        # The denial is explained where `kubectl describe csr` looks.
        def denial_event() -> bool:
            return any(
                e.get("reason") == "InvalidUsages"
                and e["involvedObject"]["name"] == "hub-bad"
                and e["involvedObject"].get("namespace", "") == ""
                for e in sim.state.list("events", "default")
            )

        await eventually(denial_event)

        status, text = await get_text(manager.health_port, "/readyz")
        assert status == 200 and "[+]caches ok" in text and "disabled" in text
        status, text = await get_text(manager.health_port, "/healthz")
        assert (status, text) == (200, "ok")
        status, text = await get_text(manager.health_port, "/metrics")
        assert status == 200
        assert (
            'edgehub_manager_csr_decisions_total{decision="approved",kind="client",'
            'reason="AutoApproved"} 2.0' in text
        )
        assert 'reason="InvalidUsages"' in text and 'reason="InvalidRequester"' in text
        assert 'edgehub_manager_cache_synced{controller="csrapprover"} 1.0' in text
        assert "edgehub_manager_leader 1.0" in text
        names = {
            line.split("{")[0].split(" ")[0]
            for line in text.splitlines()
            if line and not line.startswith("#")
        }
        assert all(n.startswith("edgehub_manager_") for n in names), names

    # Everything the manager asked for, it asked as its ServiceAccount.
    users = {r.user for r in sim.audit_log() if r.user_agent.startswith("edgehub-manager")}
    assert users == {"system:serviceaccount:kube-system:edgehub-manager"}


async def test_a_stale_copy_is_requeued_not_forced(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    sim = sim_apiserver
    obj = cs.csr("race", cs.hub_client_request(NODE), cs.CLIENT_SIGNER, CLIENT)
    created = await submit(sim, cs.body(obj), TOKEN_USER, TOKEN_GROUPS)
    # Someone else decides first, while the approver's store still holds the pending copy.
    denied = {
        **created,
        "status": {
            "conditions": [{"type": "Denied", "status": "True", "reason": "ByHand", "message": "x"}]
        },
    }
    async with (
        session_for(sim, "admin", ("system:masters",)) as admin,
        admin.put(f"{CSRS}/race/approval", json=denied) as resp,
    ):
        assert resp.status == 200
    account = service_account_dir(sim, tmp_path / "sa")
    own = manager_settings(sim, account)
    client = await kubeapi.connect(None, None, "edgehub-manager/test", own.kube.service_account)
    try:
        api = kubeapi.KubeApi(client, 5.0)
        recorder = events.Recorder(api, "test", component="edgehub-manager")
        approver = csrapprover.CsrApprover(context.Context(api, own, recorder, metrics.Metrics()))
        approver.csrs.store[("", "race")] = created
        again = await approver.reconcile(("", "race"))
    finally:
        await client.close()
    assert again == csrapprover.CONFLICT_REQUEUE
    assert set(conditions(sim, "race")) == {"Denied"}, "the other decision stands"


async def test_startup_failures_are_one_line_errors(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    sim = sim_apiserver
    account = service_account_dir(sim, tmp_path / "sa")
    async with running.running(manager_settings(sim, account)) as first:
        taken = dataclasses.replace(manager_settings(sim, account), health_port=first.health_port)
        with pytest.raises(running.StartupError, match="cannot serve health"):
            async with running.running(taken):
                pass
    broken = tmp_path / "broken.kubeconfig"
    broken.write_text("not: [a kubeconfig")
    bad = dataclasses.replace(
        manager_settings(sim, account), kube=settings.KubeSettings(kubeconfig=broken)
    )
    with pytest.raises(running.StartupError, match="kubeconfig"):
        async with running.running(bad):
            pass
    unsafe = dataclasses.replace(
        manager_settings(sim, account, election=True),
        leader_election=settings.LeaderElection(lease_duration=5, renew_deadline=6.0),
    )
    with pytest.raises(running.StartupError, match="leader election"):
        async with running.running(unsafe):
            pass


def node_object(name: str, *addresses: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"addresses": [{"type": "InternalIP", "address": a} for a in addresses]},
    }


async def test_serving_certificates_name_only_what_the_hub_serves(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    """Documentation addresses (192.0.2.0/24) stand for node IPs: the simulator's own nodes
    have loopback ones, which are always allowed. Nothing is ever sent to them."""
    sim = sim_apiserver
    sim.state.create(node_object(NODE, "192.0.2.10"))
    sim.state.create(node_object("edge-2", "192.0.2.11"))
    account = service_account_dir(sim, tmp_path / "sa")
    own = manager_settings(sim, account, wait_initial=0.05, wait_cap=0.2)
    node_user = f"system:node:{NODE}"

    def request(name: str, *, dns: tuple[str, ...] = cs.HUB_DNS, ips: tuple[str, ...] = ()) -> Any:
        pem = cs.request_pem(node_user, ["system:nodes"], dns=dns, ips=ips)
        return cs.body(cs.csr(name, pem, cs.SERVING_SIGNER, SERVING))

    async with running.running(own):
        # What the hub asks for: the Service's ClusterIP, the dummy IP, loopback, its node IP.
        ok = request("serving-ok", ips=(*cs.HUB_IPS, "192.0.2.10"))
        await submit(sim, ok, node_user, HUB_GROUPS)
        wildcard = request("serving-wildcard", dns=(*cs.HUB_DNS, "*"))
        await submit(sim, wildcard, node_user, HUB_GROUPS)
        every_service = request(
            "serving-services", dns=("kubernetes.default", "*.svc.cluster.local")
        )
        await submit(sim, every_service, node_user, HUB_GROUPS)
        vault = request("serving-vault", dns=(*cs.HUB_DNS, "vault.example.com"))
        await submit(sim, vault, node_user, HUB_GROUPS)
        other_ip = request("serving-other-ip", ips=("192.0.2.11",))
        await submit(sim, other_ip, node_user, HUB_GROUPS)
        other_domain = request("serving-other-domain", dns=("kubernetes.default.svc.evil.example",))
        await submit(sim, other_domain, node_user, HUB_GROUPS)

        denied = {
            "serving-wildcard": "DNS:*",
            "serving-services": "DNS:*.svc.cluster.local",
            "serving-vault": "DNS:vault.example.com",
            "serving-other-ip": "IP:192.0.2.11",
            "serving-other-domain": "DNS:kubernetes.default.svc.evil.example",
        }
        await eventually(lambda: all(conditions(sim, n) for n in ("serving-ok", *denied)))
        assert conditions(sim, "serving-ok")["Approved"]["reason"] == "AutoApproved"
        assert csr_state(sim, "serving-ok")["status"].get("certificate")
        for name, san in denied.items():
            condition = conditions(sim, name)["Denied"]
            assert condition["reason"] == "InvalidSubjectAltNames", name
            assert san in condition["message"], condition["message"]
            assert "Approved" not in conditions(sim, name)

        # The Warning Event says the same, where `kubectl describe csr` looks.
        def explained() -> bool:
            return any(
                e.get("reason") == "InvalidSubjectAltNames"
                and e["involvedObject"]["name"] == "serving-vault"
                and "DNS:vault.example.com" in e.get("message", "")
                for e in sim.state.list("events", "default")
            )

        await eventually(explained)

        # A hub that asks before its kubelet registered the node: pending, not denied; once
        # the node is there (with that address), approved.
        late_user = "system:node:edge-late"
        pem = cs.request_pem(late_user, ["system:nodes"], dns=cs.HUB_DNS, ips=("192.0.2.20",))
        late = cs.body(cs.csr("serving-late", pem, cs.SERVING_SIGNER, SERVING))
        await submit(sim, late, late_user, HUB_GROUPS)

        def node_read() -> bool:
            return any(
                r.verb == "get" and r.resource == "nodes" and r.name == "edge-late"
                for r in sim.audit_log()
            )

        await eventually(node_read)
        assert conditions(sim, "serving-late") == {}
        sim.state.create(node_object("edge-late", "192.0.2.20"))
        await eventually(lambda: "Approved" in conditions(sim, "serving-late"))
