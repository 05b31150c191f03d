"""Two ``edgehub manager`` replicas on one simulated apiserver: only the Lease holder acts, the
standby is ready with warm caches, a clean stop hands over at once, and a leader cut off from
the apiserver stops acting before the standby takes over."""

from __future__ import annotations

import contextlib
from pathlib import Path

import csr_support as cs
from managers_support import (
    TOKEN_GROUPS,
    TOKEN_USER,
    conditions,
    eventually,
    get_text,
    manager_settings,
    service_account_dir,
    submit,
)

from managers import running
from yurthub.testing import simapiserver

CLIENT = ["digital signature", "client auth"]


def approvals(manager: running.Manager) -> float:
    counter = manager.metrics.csr_decisions
    return sum(
        sample.value
        for metric in counter.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels.get("decision") == "approved"
    )


async def test_only_the_leader_acts_and_a_clean_stop_hands_over(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    sim = sim_apiserver
    account = service_account_dir(sim, tmp_path / "sa")
    # The lease never expires here: the standby can lead only because it was released.
    first_settings = manager_settings(
        sim, account, election=True, identity="replica-a_1", lease_duration=3600
    )
    second_settings = manager_settings(
        sim, account, election=True, identity="replica-b_2", lease_duration=3600
    )
    first_stack = contextlib.AsyncExitStack()
    first = await first_stack.enter_async_context(running.running(first_settings))
    try:
        await eventually(lambda: first.leading)
        async with running.running(second_settings) as second:
            elector = second.elector
            assert elector is not None
            await eventually(lambda: elector.holder is not None)
            assert elector.holder == "replica-a_1"
            # The standby is ready: warm caches, and it reads the Lease.
            await eventually(lambda: all(c.synced for c in second.controllers))
            assert second.health_port is not None
            status, text = await get_text(second.health_port, "/readyz")
            assert status == 200 and "standby, leader replica-a_1" in text
            status, text = await get_text(second.health_port, "/metrics")
            assert "edgehub_manager_leader 0.0" in text

            for n in range(3):
                obj = cs.csr(f"one-{n}", cs.hub_client_request(f"n{n}"), cs.CLIENT_SIGNER, CLIENT)
                await submit(sim, cs.body(obj), TOKEN_USER, TOKEN_GROUPS)
            await eventually(lambda: all(conditions(sim, f"one-{n}") for n in range(3)))
            assert approvals(first) == 3 and approvals(second) == 0

            # A clean stop releases the Lease: the standby leads on its next try.
            await first_stack.aclose()
            await eventually(lambda: second.leading, timeout=60)
            lease = sim.state.get("leases", "kube-system", "edgehub-manager")
            assert lease["spec"]["holderIdentity"] == "replica-b_2"
            obj = cs.csr("two", cs.hub_client_request("n9"), cs.CLIENT_SIGNER, CLIENT)
            await submit(sim, cs.body(obj), TOKEN_USER, TOKEN_GROUPS)
            await eventually(lambda: "Approved" in conditions(sim, "two"))
            assert approvals(second) == 1
            # A new leader announces itself on the Lease, as kube-controller-manager does.
            await eventually(
                lambda: any(
                    e.get("reason") == "LeaderElection" and "replica-b_2" in e.get("message", "")
                    for e in sim.state.list("events", "kube-system")
                )
            )
    finally:
        await first_stack.aclose()
    lease = sim.state.get("leases", "kube-system", "edgehub-manager")
    assert lease["spec"]["holderIdentity"] == "", "released on a clean stop"
