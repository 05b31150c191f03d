"""The whole agent (in-process, against the simulated apiserver and kubelet) with an Akri
discovery handler built on Akri's own stack (``tests/akripeer``: tonic 0.13 over h2 0.4).

Akri's handler DaemonSets under edgehub's agent: the handler registers *before* it binds its
socket, and its h2 server resets any stream whose ``:authority`` is not a valid authority.
Either used to leave the Configuration without Instances.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import agent_support
import akripeer_support as akripeer
import pytest

from discovery import sdk
from discovery.agent import running
from discovery.testing import cluster
from discovery.testing import kubelet as sim_kubelet

pytestmark = pytest.mark.slow


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[Any]:
    async with agent_support.akri_sim(tmp_path) as server:
        yield server


async def test_an_akri_handler_registering_before_it_binds_gets_its_instances(
    sim: Any, sockdir: Path
) -> None:
    config = {
        "apiVersion": "akri.sh/v0",
        "kind": "Configuration",
        "metadata": {"name": "cfg", "namespace": "default"},
        "spec": {
            "discoveryHandler": {"name": "debugEcho", "discoveryDetails": "descriptions: [x]"},
            "capacity": 1,
        },
    }
    await cluster.kubectl(sim, "apply", "-f", "-", stdin=json.dumps(config))
    s = agent_support.agent_settings(
        sim, sockdir, "node-a", embedded=False, degraded_grace=30.0, reclaim_grace=20.0
    )
    async with (
        sim_kubelet.SimKubelet(s.device_plugins_dir) as kubelet,
        sim_kubelet.SimPodResources(s.pod_resources_socket),
    ):
        agent = running.Agent(s)
        async with asyncio.timeout(15):
            await agent.start()
        try:
            async with akripeer.running(
                "handler",
                "--socket",
                str(s.discovery_handlers_dir / "debugEcho.sock"),
                "--register",
                str(s.discovery_handlers_dir / sdk.REGISTRATION_SOCKET),
                "--shared",
                "--device",
                "foo0",
                "--device",
                "foo1",
            ) as peer:
                await peer.next_event("registered")
                assert (await peer.next_event("discover"))["details"] == "descriptions: [x]"
                names = {
                    f"cfg-{agent_support.digest('foo0')}",
                    f"cfg-{agent_support.digest('foo1')}",
                }

                async def both() -> bool:
                    return set(await cluster.instances(sim)) == names

                await cluster.eventually(both)
                instance = (await cluster.instances(sim))[f"cfg-{agent_support.digest('foo0')}"]
                assert instance["spec"]["shared"] is True
                assert instance["spec"]["nodes"] == ["node-a"]
                assert instance["spec"]["brokerProperties"] == {"DEBUG_ECHO_DESCRIPTION": "foo0"}
                await kubelet.wait_for_devices(f"akri.sh/cfg-{agent_support.digest('foo0')}")
        finally:
            await agent.stop()
