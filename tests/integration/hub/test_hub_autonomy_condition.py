"""The hub keeps its node's ``Autonomy`` condition in the cloud (reference §4.6), on the
simulated apiserver: the condition follows the node's annotations as kubelet's node watch
brings them into the cache, is written only when it changes (the apiserver's audit log
counts the PATCHes), and says ``CacheWriteFailures`` when the cache's disk is full (a real
tmpfs that fills up). The reporter stops when cancelled even with a request in flight whose
timeout fires at the same moment (it would otherwise hold the hub's shutdown forever).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import pathlib
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from tmpfs_support import small_tmpfs

from discovery.testing import cluster
from yurthub import assembly, kubeconfigs, settings
from yurthub.autonomy import conditions, reporting
from yurthub.outages import records
from yurthub.proxy import upstream
from yurthub.testing import partition, simapiserver

NODE = "edge-node-1"
KUBELET = {"User-Agent": "kubelet/v1.32.4", "Accept": "application/json"}
INTERVAL = 0.2


def hub_settings(sim: simapiserver.SimApiserver, cache: pathlib.Path) -> settings.HubSettings:
    identity = sim.write_kubeconfig(cache.parent / "id.kubeconfig", user=f"system:node:{NODE}")
    return settings.HubSettings(
        node_name=NODE,
        upstream=settings.UpstreamSettings(servers=(sim.url,), kubeconfig=identity),
        listen=settings.ListenSettings(serve_port=0, proxy_port=0),
        heartbeat=settings.HeartbeatSettings(interval=INTERVAL, timeout=1.0),
        proxy=settings.ProxySettings(shutdown_grace=1.0),
        cache=settings.CacheSettings(disk_cache_path=cache),
    )


@contextlib.asynccontextmanager
async def kubelet_node_watch(proxy_url: str) -> AsyncIterator[None]:
    """Kubelet's node informer through the hub: a list, then a watch (both cached)."""
    base = f"{proxy_url}/api/v1/nodes?fieldSelector=metadata.name%3D{NODE}"

    async def follow(http: aiohttp.ClientSession) -> None:
        while True:
            async with http.get(base) as resp:
                assert resp.status == 200
                rv = (await resp.json())["metadata"]["resourceVersion"]
            async with http.get(f"{base}&watch=true&resourceVersion={rv}") as resp:
                async for _ in resp.content:
                    pass

    async with aiohttp.ClientSession(headers=KUBELET) as http, asyncio.TaskGroup() as tg:
        task = tg.create_task(follow(http), name="kubelet node watch")
        try:
            yield
        finally:
            task.cancel()


async def autonomy_condition(sim: simapiserver.SimApiserver) -> dict[str, Any] | None:
    node = json.loads(await cluster.kubectl(sim, "get", "node", NODE, "-o", "json"))
    found = [c for c in node["status"].get("conditions", []) if c["type"] == "Autonomy"]
    return found[0] if found else None


async def wait_reason(sim: simapiserver.SimApiserver, reason: str) -> dict[str, Any]:
    async def seen() -> bool:
        condition = await autonomy_condition(sim)
        return condition is not None and condition["reason"] == reason

    await cluster.eventually(seen, within=10)
    condition = await autonomy_condition(sim)
    assert condition is not None
    return condition


def condition_writes(sim: simapiserver.SimApiserver) -> int:
    return sum(
        1
        for r in sim.audit_log()
        if r.user_agent == reporting.USER_AGENT and r.verb == "patch" and r.code == 200
    )


async def annotate(sim: simapiserver.SimApiserver, *pairs: str) -> None:
    await cluster.kubectl(sim, "annotate", "node", NODE, "--overwrite", *pairs)


async def test_condition_follows_the_annotations_and_is_written_only_when_it_changes(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: pathlib.Path
) -> None:
    sim = sim_apiserver
    async with assembly.running(hub_settings(sim, tmp_path / "cache")) as node:
        # Before kubelet read its node through the hub: the cloud's copy is used.
        disabled = await wait_reason(sim, "AutonomyDisabled")
        assert disabled["status"] == "False"
        async with kubelet_node_watch(node.hub.proxy_url):
            await annotate(sim, "node.openyurt.io/autonomy-duration=1h")
            enabled = await wait_reason(sim, "AutonomyEnabled")
            assert enabled["status"] == "True"
            assert "autonomous for 1h0m0s" in enabled["message"]
            # Steady: many intervals, no further write (times alone are no change).
            writes = condition_writes(sim)
            await asyncio.sleep(15 * INTERVAL)
            assert condition_writes(sim) == writes

            await annotate(sim, "node.openyurt.io/autonomy-duration=1d")
            invalid = await wait_reason(sim, "InvalidAutonomyDuration")
            assert invalid["status"] == "False"
            assert "'1d'" in invalid["message"]

            await annotate(
                sim, "node.openyurt.io/autonomy-duration-", "node.beta.openyurt.io/autonomy=true"
            )
            legacy = await wait_reason(sim, "AutonomyEnabled")
            assert "for as long as it takes" in legacy["message"]
            # True -> False -> True: the transition time moved with the status.
            assert legacy["lastTransitionTime"] >= invalid["lastTransitionTime"]

            await cluster.kubectl(
                sim, "label", "node", NODE, "openyurt.io/is-edge-worker=false", "--overwrite"
            )
            await wait_reason(sim, "CloudNode")
    # One write per change: disabled, enabled, invalid, legacy, cloud node.
    assert condition_writes(sim) == 5


async def test_a_full_cache_disk_makes_the_condition_false(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: pathlib.Path
) -> None:
    sim = sim_apiserver
    await annotate(sim, "node.openyurt.io/autonomy-duration=0")
    big = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"big-{i}", "namespace": "default"},
            "data": {"data": "x" * 200_000},
        }
        for i in range(12)
    ]
    await cluster.kubectl(
        sim,
        "create",
        "--validate=false",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": big}),
    )
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        async with assembly.running(hub_settings(sim, disk / "cache")) as node:
            proxy = node.hub.proxy_url
            async with kubelet_node_watch(proxy), aiohttp.ClientSession(headers=KUBELET) as http:
                await wait_reason(sim, "AutonomyEnabled")
                # Kubelet reads the ConfigMaps its pods mount: the cache cannot hold them.
                for i in range(12):
                    url = f"{proxy}/api/v1/namespaces/default/configmaps/big-{i}"
                    async with http.get(url) as resp:
                        assert resp.status == 200
                        await resp.read()
                failing = await wait_reason(sim, "CacheWriteFailures")
                assert failing["status"] == "False"
                assert node.cache is not None and node.cache.failed_keys() > 0


async def test_a_cancel_meeting_the_request_timeout_stops_the_reporter(
    tmp_path: pathlib.Path,
) -> None:
    # An apiserver that takes the connection and never answers (a cut link).
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        server = f"http://127.0.0.1:{silent.getsockname()[1]}"
        timeout = 0.2
        hub = settings.HubSettings(
            node_name=NODE,
            upstream=settings.UpstreamSettings(servers=(server,)),
            heartbeat=settings.HeartbeatSettings(interval=timeout, timeout=timeout),
        )
        client = upstream.Upstream(hub.upstream, kubeconfigs.anonymous())
        await client.start()
        try:
            reporter = reporting.Reporter(
                hub,
                client,
                lambda: server,
                cached_node=None,
                cache_health=lambda: conditions.CacheHealth(True),
            )
            # The hub cancels the reporter right as the request's timeout fires: the loop is
            # busy past the deadline, then the cancel comes one step after the timer's wakeup
            # (aiohttp's own total timeout turned exactly this cancel into a TimeoutError).
            for steps in range(4):
                task = asyncio.get_running_loop().create_task(reporter.run(), name="reporter")
                await asyncio.sleep(timeout / 2)
                time.sleep(timeout * 1.5)
                for _ in range(steps):
                    await asyncio.sleep(0)
                task.cancel()
                await asyncio.wait({task}, timeout=3)  # waits without cancelling it again
                stopped = task.cancelled()
                if not task.done():
                    task.cancel()  # a second cancel, to end the test cleanly
                    await asyncio.wait({task}, timeout=3)
                assert stopped, f"the reporter outlived its cancel ({steps} steps)"
        finally:
            await client.close()


async def test_the_condition_names_the_last_outage_once_it_ended(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: pathlib.Path
) -> None:
    sim = sim_apiserver
    async with partition.Partition("127.0.0.1", sim.port) as link:
        cache = tmp_path / "cache"
        url = f"https://127.0.0.1:{link.port}"
        identity = sim.write_kubeconfig(tmp_path / "id.kubeconfig", user=f"system:node:{NODE}")
        hub = dataclasses.replace(
            hub_settings(sim, cache),
            upstream=settings.UpstreamSettings(servers=(url,), kubeconfig=identity),
            heartbeat=settings.HeartbeatSettings(
                interval=INTERVAL, timeout=1.0, healthy_threshold=1, failed_retry=1
            ),
            outage_flap_window=1.0,  # named once the link stayed up that long
        )
        async with assembly.running(hub) as node:
            disabled = await wait_reason(sim, "AutonomyDisabled")
            assert "last outage" not in disabled["message"]
            writes = condition_writes(sim)
            checker = node.hub.health
            assert checker is not None

            async def offline() -> bool:
                return not checker.any_healthy()

            await link.set_mode(partition.Mode.REFUSE)
            await cluster.eventually(offline, within=10)
            outage = node.hub.outages.current
            assert outage is not None
            await link.set_mode(partition.Mode.PASS)

            async def named() -> bool:
                condition = await autonomy_condition(sim)
                return condition is not None and "last outage:" in condition["message"]

            await cluster.eventually(named, within=15)
            condition = await autonomy_condition(sim)
            assert condition is not None
            assert condition["message"] == (
                f"{disabled['message']}; last outage: {records.timestamp(outage.began)} for "
                f"{records.lasted(outage.lasted or 0)} (connection refused)"
            )
            # One more write for the outage; the status, and its transition time, did not move.
            assert condition_writes(sim) == writes + 1
            assert condition["lastTransitionTime"] == disabled["lastTransitionTime"]
