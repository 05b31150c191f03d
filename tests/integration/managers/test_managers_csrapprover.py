"""``edgehub manager``'s CSR approver against the simulated apiserver, with the manager's own
ServiceAccount: hub CSRs approved (and signed), a hub CSR that fails a check denied with a
reason and an Event, kubelet's CSR left alone, a stale approval write answered by a requeue;
health, readiness and metrics on its port."""

from __future__ import annotations

import dataclasses
from pathlib import Path

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
