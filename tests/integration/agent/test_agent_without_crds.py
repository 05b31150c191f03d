"""The agent started before the akri.sh CRDs exist: one line saying how to install them, quiet
retries with back-off, and it carries on by itself once they are applied."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from discovery.agent import running, settings
from discovery.testing import cluster

REPO = Path(__file__).resolve().parents[3]
HINT = "the akri.sh CRDs are not installed: kubectl apply -f manifests/crds/ (or the Helm chart)"

pytestmark = pytest.mark.slow

simapiserver = pytest.importorskip("yurthub.testing.simapiserver")


def agent_settings(sim: Any, base: Path) -> settings.AgentSettings:
    return settings.AgentSettings(
        node_name="node-a",
        kube=settings.KubeSettings(
            kubeconfig=Path(sim.kubeconfig_path), user_agent="edgehub-agent/test"
        ),
        discovery_handlers_dir=base / "akri",
        device_plugins_dir=base / "dp",
        pod_resources_socket=None,
        cdi_dir=base / "cdi",
        metrics_port=None,
        timings=settings.Timings(watch_backoff_initial=0.05, watch_backoff_cap=0.2),
    )


async def test_missing_crds_are_named_once_with_the_fix(
    tmp_path: Path, sockdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server = simapiserver.SimApiserver("127.0.0.1", port=0, seed="demo", workdir=tmp_path / "s")
    await server.start()
    agent = running.Agent(agent_settings(server, sockdir))
    starting = asyncio.get_running_loop().create_task(agent.start(), name="agent start")
    try:

        def failed_lists() -> int:
            return sum(1 for r in caplog.records if "HTTP 404" in r.getMessage())

        async with asyncio.timeout(20):
            while failed_lists() < 8:  # both reflectors have retried a few times
                await asyncio.sleep(0.05)
        assert not starting.done()
        said = [r for r in caplog.records if r.levelno >= logging.INFO]
        hints = [r for r in said if HINT in r.getMessage()]
        assert len(hints) == 1 and hints[0].levelno == logging.WARNING, hints
        noise = [m for r in said if "HTTP 404" in (m := r.getMessage()) and HINT not in m]
        assert noise == []
        for crd in ("configurations.akri.sh.yaml", "instances.akri.sh.yaml"):
            await cluster.kubectl(server, "apply", "-f", str(REPO / "manifests/crds" / crd))
        async with asyncio.timeout(20):
            await starting  # the caches sync once the CRDs are served
    finally:
        if not starting.done():
            starting.cancel()
            await asyncio.wait([starting])
        await agent.stop()
        await server.stop()
