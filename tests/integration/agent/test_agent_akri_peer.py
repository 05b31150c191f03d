"""The whole agent (in-process, against the simulated apiserver and kubelet) with an Akri
discovery handler built on Akri's own stack (``tests/akripeer``: tonic 0.13 over h2 0.4).

Akri's handler DaemonSets under edgehub's agent: the handler registers *before* it binds its
socket, and its h2 server resets any stream whose ``:authority`` is not a valid authority.
Either used to leave the Configuration without Instances.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import akripeer_support as akripeer
import pytest

from discovery import sdk
from discovery.agent import running, settings
from discovery.testing import cluster
from discovery.testing import kubelet as sim_kubelet

REPO = Path(__file__).resolve().parents[3]
CRDS = [
    REPO / "manifests/crds/configurations.akri.sh.yaml",
    REPO / "manifests/crds/instances.akri.sh.yaml",
]

pytestmark = pytest.mark.slow

simapiserver = pytest.importorskip("yurthub.testing.simapiserver")


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[Any]:
    server = simapiserver.SimApiserver("127.0.0.1", port=0, seed="demo", workdir=tmp_path / "sim")
    await server.start()
    try:
        for crd in CRDS:
            await cluster.kubectl(server, "apply", "-f", str(crd))

        async def served() -> bool:
            out = await cluster.kubectl(server, "get", "akric", "-A", check=False)
            return "error" not in out.lower()

        await cluster.eventually(served, within=10.0)
        yield server
    finally:
        await server.stop()


def _settings(sim: Any, base: Path) -> settings.AgentSettings:
    return settings.AgentSettings(
        node_name="node-a",
        kube=settings.KubeSettings(
            kubeconfig=Path(sim.kubeconfig_path), user_agent="edgehub-agent/test"
        ),
        discovery_handlers_dir=base / "akri",
        embedded_handlers=(),
        device_plugins_dir=base / "dp",
        pod_resources_socket=base / "pr.sock",
        cdi_dir=base / "cdi",
        metrics_address="127.0.0.1",
        metrics_port=0,
        timings=settings.Timings(
            backoff_initial=0.1,
            backoff_cap=1.0,
            watch_backoff_initial=0.1,
            watch_backoff_cap=0.5,
            settle=0.3,
            registration_window=0.3,
            reclaim_interval=0.2,
            kubelet_poll=0.05,
        ),
    )


def _digest(device_id: str) -> str:
    return hashlib.blake2b(device_id.encode(), digest_size=3).hexdigest()


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
    s = _settings(sim, sockdir)
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
                names = {f"cfg-{_digest('foo0')}", f"cfg-{_digest('foo1')}"}

                async def both() -> bool:
                    return set(await cluster.instances(sim)) == names

                await cluster.eventually(both)
                instance = (await cluster.instances(sim))[f"cfg-{_digest('foo0')}"]
                assert instance["spec"]["shared"] is True
                assert instance["spec"]["nodes"] == ["node-a"]
                assert instance["spec"]["brokerProperties"] == {"DEBUG_ECHO_DESCRIPTION": "foo0"}
                await kubelet.wait_for_devices(f"akri.sh/cfg-{_digest('foo0')}")
        finally:
            await agent.stop()
