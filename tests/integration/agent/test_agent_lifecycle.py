"""Starting and stopping the whole agent, against an apiserver that never answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

from discovery.agent import running, settings


def unreachable(sockdir: Path) -> settings.AgentSettings:
    # Nothing listens on port 9 of loopback: the caches never sync, start never returns.
    return settings.AgentSettings(
        node_name="node-a",
        kube=settings.KubeSettings(url="http://127.0.0.1:9", request_timeout=1.0),
        discovery_handlers_dir=sockdir / "akri",
        device_plugins_dir=sockdir / "dp",
        pod_resources_socket=None,
        cdi_dir=sockdir / "cdi",
        metrics_port=None,
    )


async def test_cancelling_a_start_stops_everything_it_started(sockdir: Path) -> None:
    # A SIGTERM (or the hub stopping) while the agent still waits for the apiserver.
    registration = sockdir / "akri" / "agent-registration.sock"
    before = asyncio.all_tasks()
    starting = asyncio.get_running_loop().create_task(
        running.run(unreachable(sockdir)), name="agent under test"
    )
    async with asyncio.timeout(10):
        while not registration.exists():
            await asyncio.sleep(0.02)
    starting.cancel()
    await asyncio.wait([starting])
    assert starting.cancelled()
    assert not registration.exists()
    assert [t.get_name() for t in asyncio.all_tasks() - before if not t.done()] == []
