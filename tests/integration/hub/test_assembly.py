"""``assembly.running``: the hub with its cache, and without one when the cache cannot open."""

from __future__ import annotations

import asyncio
import logging
import pathlib

import aiohttp
import pytest

from yurthub import assembly, settings
from yurthub.testing import kubelet, simapiserver

KUBELET = {"User-Agent": "kubelet/v1.32.4"}


def hub_settings(
    sim: simapiserver.SimApiserver, cache_path: pathlib.Path, grace: float = 10.0
) -> settings.HubSettings:
    identity = sim.write_kubeconfig(cache_path.parent / "id.kubeconfig")
    return settings.HubSettings(
        node_name="edge-node-1",
        upstream=settings.UpstreamSettings(servers=(sim.url,), kubeconfig=identity),
        listen=settings.ListenSettings(serve_port=0, proxy_port=0),
        heartbeat=settings.HeartbeatSettings(interval=1.0, timeout=1.0),
        proxy=settings.ProxySettings(shutdown_grace=grace),
        cache=settings.CacheSettings(disk_cache_path=cache_path),
    )


async def wait_ready(node: assembly.Node) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(100):
            async with http.get(f"{node.hub.server_url}/v1/readyz") as resp:
                if resp.status == 200:
                    return
            await asyncio.sleep(0.05)
    raise AssertionError("hub never became ready")


async def scrape(node: assembly.Node) -> str:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{node.hub.server_url}/metrics") as resp,
    ):
        return await resp.text()


async def test_with_cache_lists_are_cached_and_metrics_exposed(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: pathlib.Path
) -> None:
    cfg = hub_settings(sim_apiserver, tmp_path / "cache")
    async with assembly.running(cfg) as node:
        assert node.cache is not None
        await wait_ready(node)
        async with (
            aiohttp.ClientSession(headers=KUBELET) as http,
            http.get(f"{node.hub.proxy_url}/api/v1/namespaces/default/pods") as resp,
        ):
            assert resp.status == 200
            await resp.read()
        text = await scrape(node)
        assert "node_yurthub_error_keys_persistency_status 1.0" in text
        assert "node_yurthub_cache_objects" in text


async def test_unopenable_cache_degrades_to_plain_proxy(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: pathlib.Path
) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("not a directory")  # the cache path is a regular file
    async with assembly.running(hub_settings(sim_apiserver, blocker)) as node:
        assert node.cache is None
        # Not autonomous: the probe says so (it said OK before), the proxy is not gated on it.
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{node.hub.server_url}/v1/readyz") as resp,
        ):
            text = await resp.text()
        # The reason the log has, not just the condition's name.
        assert resp.status == 500, text
        assert f"disk-cache (cannot open the cache at {blocker}: " in text, text
        assert "running without offline answers" in text, text
        async with (
            aiohttp.ClientSession(headers=KUBELET) as http,
            http.get(f"{node.hub.proxy_url}/api/v1/namespaces/default/pods") as resp,
        ):
            assert resp.status == 200
            body = await resp.json()
        assert body["kind"] == "PodList"
        assert "node_yurthub_error_keys_persistency_status 0.0" in await scrape(node)


async def test_stop_ends_watches_held_offline_at_once(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: pathlib.Path
) -> None:
    pods = "/api/v1/namespaces/default/pods"
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(headers=KUBELET) as http:
        async with assembly.running(hub_settings(sim_apiserver, tmp_path / "c", grace=8)) as node:
            await wait_ready(node)
            async with http.get(node.hub.proxy_url + pods) as resp:
                assert resp.status == 200
                await resp.read()  # cached
            await sim_apiserver.stop()
            health = node.hub.health
            assert health is not None
            async with asyncio.timeout(10):
                while health.any_healthy():
                    await asyncio.sleep(0.05)
            watch = await http.get(node.hub.proxy_url + pods + "?watch=1")
            assert watch.status == 200  # held open from the cache
            started = loop.time()
        # The shutdown ended the held watch like an upstream one: no wait for the grace period,
        # and the client sees the stream end cleanly (it re-watches), not a cut connection.
        assert loop.time() - started < 4
        async with asyncio.timeout(2):
            assert await watch.content.read() == b""
        watch.release()


async def test_a_stop_with_watches_and_its_own_loops_running_does_not_wait_its_grace(
    sim_apiserver: simapiserver.SimApiserver,
    tmp_path: pathlib.Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """kubelet-style watches (pods through the proxy, services answered by the pool
    multiplexer), the hub's own loops following through its own socket (config, filter
    inputs, the multiplexer's feeders, discovery) and a grace of 600 s: the stop has nothing to
    wait for and returns well before it (a deadline to wait, not a time asserted), and stopping
    the loops logs no traceback."""
    loop = asyncio.get_running_loop()
    caplog.set_level(logging.WARNING)
    cfg = hub_settings(sim_apiserver, tmp_path / "c", grace=600)
    async with asyncio.TaskGroup() as tg:
        async with asyncio.timeout(None) as deadline, assembly.running(cfg) as node:
            await wait_ready(node)
            client = kubelet.KubeletClient(
                node.hub.proxy_url, "edge-node-1", lease_interval=1.0, status_interval=1.0
            )
            running = tg.create_task(client.run(), name="kubelet-like")
            assert node.pool is not None and node.hub.router is not None
            stores = [resource.store for resource in node.pool.mux.resources.values()]
            router = node.hub.router
            async with asyncio.timeout(30):
                # Both of kubelet's watches open, one of them the multiplexer's, and the own
                # loops' watches through the proxy besides.
                while not (
                    client.watching == {"pods", "services"}
                    and any(store.watchers for store in stores)
                    and router.in_flight > 2
                ):
                    await asyncio.sleep(0.05)
            caplog.clear()
            deadline.reschedule(loop.time() + 60)
        running.cancel()
    noisy = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not noisy, [r.getMessage() for r in noisy]


async def test_the_hub_is_ready_when_running_yields(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: pathlib.Path
) -> None:
    # Whatever runs beside the hub (the discovery agent, the demo) talks to it at once.
    async with (
        assembly.running(hub_settings(sim_apiserver, tmp_path / "cache")) as node,
        aiohttp.ClientSession(headers=KUBELET) as http,
        http.get(f"{node.hub.proxy_url}/api/v1/namespaces/default/pods") as resp,
    ):
        assert resp.status == 200, await resp.text()


async def test_a_damaged_cache_is_started_anew_and_reported(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: pathlib.Path
) -> None:
    cfg = hub_settings(sim_apiserver, tmp_path / "cache")
    async with (
        assembly.running(cfg) as node,
        aiohttp.ClientSession(headers=KUBELET) as http,
        http.get(f"{node.hub.proxy_url}/api/v1/namespaces/default/pods") as resp,
    ):
        await resp.read()
    db = tmp_path / "cache" / "cache.db"
    with db.open("r+b") as f:
        f.truncate(db.stat().st_size // 2)  # a power cut on a bad SD card
    async with assembly.running(cfg) as node:
        assert node.cache is not None and node.cache.store.reset
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{node.hub.server_url}/v1/readyz") as resp,
        ):
            text = await resp.text()
            assert resp.status == 200 and "warning: disk-cache" in text, text
        assert "node_yurthub_cache_resets_total 1.0" in await scrape(node)
        async with (
            aiohttp.ClientSession(headers=KUBELET) as http,
            http.get(f"{node.hub.proxy_url}/api/v1/namespaces/default/pods") as resp,
        ):
            assert resp.status == 200
            await resp.read()
        assert await node.cache.store.flush(5)
        assert len(node.cache.store) > 0  # caching again
