"""Device plugins against the simulated kubelet over real Unix-socket gRPC.

No apiserver here: it is unreachable on purpose, so Allocate must fail with a
clear status instead of handing out an unrecorded slot.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes_asyncio import client as k8s_client

from discovery import devices
from discovery.agent import discovered, metrics, plugins, settings
from discovery.testing import kubelet as sim_kubelet
from kubecontrol import kubeapi

NODE = "node-a"


def instance(name: str, usage: dict[str, str], capacity: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "resourceVersion": "1"},
        "spec": {
            "configurationName": "cfg",
            "cdiName": f"akri.sh/cfg={name.rsplit('-', 1)[1]}",
            "capacity": capacity,
            "nodes": [NODE],
            "deviceUsage": usage,
            "shared": True,
        },
    }


async def test_register_list_and_watch_restart_and_offline_allocate(sockdir: Path) -> None:
    dp_dir = sockdir / "dp"
    agent_settings = settings.AgentSettings(
        node_name=NODE,
        device_plugins_dir=dp_dir,
        timings=settings.Timings(kubelet_poll=0.05),
    )
    api_client = k8s_client.ApiClient(k8s_client.Configuration(host="http://127.0.0.1:9"))
    api = kubeapi.KubeApi(api_client, request_timeout=2.0)
    manager = plugins.Manager(agent_settings, api, metrics.Metrics())
    named = discovered.name_devices("cfg", [(devices.Device("dev", {"K": "v"}), True)], NODE)
    (name,) = named
    try:
        async with sim_kubelet.SimKubelet(dp_dir) as kubelet, asyncio.TaskGroup() as tg:
            runner = tg.create_task(manager.run(), name="plugins")
            manager.set_devices(("default", "cfg"), named, {"B": "b"})
            manager.on_instance_event("ADDED", instance(name, {f"{name}-1": "node-b"}))

            found = await kubelet.wait_for_devices(f"akri.sh/{name}")
            assert found == {f"{name}-0": "Healthy", f"{name}-1": "Unhealthy"}
            vdevs = await kubelet.wait_for_devices("akri.sh/cfg")
            assert vdevs == {"cfg-0": "Healthy"}
            options = await kubelet.options(f"akri.sh/{name}")
            assert not options.pre_start_required

            # Usage changes flow to kubelet through ListAndWatch.
            manager.on_instance_event("MODIFIED", instance(name, {}))
            await kubelet.wait_for_devices(
                f"akri.sh/{name}", lambda d: set(d.values()) == {"Healthy"}
            )

            # kubelet restarts: every plugin registers again on a fresh socket.
            before = len(kubelet.registrations)
            await kubelet.restart()
            await kubelet.wait_for(lambda: len(kubelet.registrations) >= before + 2)
            await kubelet.wait_for_devices(f"akri.sh/{name}")
            assert {r for r, _ in kubelet.registrations[before:]} == {
                f"akri.sh/{name}",
                "akri.sh/cfg",
            }

            # The apiserver is unreachable: the claim cannot be recorded, so no slot is handed out.
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await kubelet.allocate(f"akri.sh/{name}", [f"{name}-0"])
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE

            # The Instance goes away: both plugins stop and their sockets are removed.
            manager.on_instance_event("DELETED", instance(name, {}))
            await kubelet.wait_for(lambda: not kubelet.plugins)
            runner.cancel()
        assert sorted(p.name for p in dp_dir.iterdir()) == []
    finally:
        await api_client.close()
