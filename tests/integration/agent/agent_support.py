"""The agent tests' shared pieces: the simulated apiserver serving Akri's CRDs, agent settings
with short timings, and Akri's Instance-name digest computed here, independently of the agent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from discovery.agent import settings
from discovery.testing import cluster

REPO = Path(__file__).resolve().parents[3]
CRDS = [
    REPO / "manifests/crds/configurations.akri.sh.yaml",
    REPO / "manifests/crds/instances.akri.sh.yaml",
]

# The simulated apiserver lives in yurthub.testing (tests may use it; discovery may not).
simapiserver = pytest.importorskip("yurthub.testing.simapiserver")


@contextlib.asynccontextmanager
async def akri_sim(tmp_path: Path) -> AsyncIterator[Any]:
    """A simulated apiserver (seed ``demo``) once it serves Akri's Configurations and
    Instances; stopped on exit."""
    server = simapiserver.SimApiserver("127.0.0.1", port=0, seed="demo", workdir=tmp_path / "sim")
    await server.start()
    try:
        for crd in CRDS:
            await cluster.kubectl(server, "apply", "-f", str(crd))
        await cluster.eventually(lambda: _served(server), within=10.0)
        yield server
    finally:
        await server.stop()


async def _served(server: Any) -> bool:
    out = await cluster.kubectl(server, "get", "akric", "-A", check=False)
    return "error" not in out.lower()


def digest(device_id: str) -> str:
    """The suffix of an Instance's name (Akri: blake2b of the device id, 3 bytes, hex)."""
    return hashlib.blake2b(device_id.encode(), digest_size=3).hexdigest()


def agent_settings(
    sim: Any,
    base: Path,
    node: str,
    *,
    embedded: bool = True,
    availability: Path | None = None,
    **timings: Any,
) -> settings.AgentSettings:
    return settings.AgentSettings(
        node_name=node,
        kube=settings.KubeSettings(
            kubeconfig=Path(sim.kubeconfig_path), user_agent="edgehub-agent/test"
        ),
        discovery_handlers_dir=base / "akri",
        embedded_handlers=("debugEcho",) if embedded else (),
        handler_environ={
            "DEBUG_ECHO_INSTANCES_SHARED": "true",
            "DEBUG_ECHO_AVAILABILITY_FILE": str(availability or base / "availability"),
            "DEBUG_ECHO_POLL_SECONDS": "0.05",
        },
        device_plugins_dir=base / "dp",
        pod_resources_socket=base / "pr.sock",
        cdi_dir=base / "cdi",
        metrics_address="127.0.0.1",
        metrics_port=0,
        timings=dataclasses.replace(
            settings.Timings(
                backoff_initial=0.1,
                backoff_cap=1.0,
                watch_backoff_initial=0.1,
                watch_backoff_cap=0.5,
                settle=0.3,
                registration_window=0.3,
                degraded_grace=1.0,
                reclaim_interval=0.2,
                reclaim_grace=0.6,
                kubelet_poll=0.05,
            ),
            **timings,
        ),
    )
