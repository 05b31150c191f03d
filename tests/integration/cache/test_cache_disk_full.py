"""A full disk: writes fail, are counted and logged once; reads keep working; nothing crashes."""

from __future__ import annotations

import asyncio
import errno
import logging
import pathlib

import aiohttp
import orjson
import pytest
from tmpfs_support import small_tmpfs

from yurthub import assembly, settings
from yurthub.cache import keys, store
from yurthub.testing import simapiserver

POD = keys.Scope("kubelet", "pods", "v1")
KUBELET = {"User-Agent": "kubelet/v1.32.4"}


def pod(name: str, pad: int) -> bytes:
    return orjson.dumps(
        {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "d", "resourceVersion": "1"},
            "spec": {"nodeName": "n1"},
            "pad": "x" * pad,
        }
    )


async def test_disk_full_is_counted_logged_once_and_survived(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="yurthub.cache")
    with small_tmpfs(tmp_path / "full", "400k") as root:
        s = await store.Store.open(root / "cache")
        try:
            assert s.submit(store.PutObject(POD, pod("first", 100)))
            assert await s.flush(5)
            for i in range(60):
                s.submit(store.PutObject(POD, pod(f"p{i}", 20_000)))
                assert await s.flush(5)
            assert s.stats.write_failures > 0
            assert s.stats.error_keys
            assert "full" in s.stats.last_error or "disk" in s.stats.last_error.lower()
            failures = [r for r in caplog.records if "cache write failed" in r.getMessage()]
            assert len(failures) == 1
            # What was cached before stays readable.
            assert await s.body(keys.object_key(POD, "d", "first")) is not None
            assert s.entry(keys.object_key(POD, "d", "p59")) is None
        finally:
            await s.close()


async def test_hub_keeps_serving_online_when_the_cache_disk_is_full(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    from cache_edge import edge_node

    caplog.set_level(logging.INFO)
    with small_tmpfs(tmp_path / "cache", "600k"):
        async with edge_node(tmp_path) as edge:
            statuses = []
            # Every new selector is one more list claiming every pod: the disk fills up.
            for i in range(400):
                status, _ = await edge.get(
                    "/api/v1/pods", params={"labelSelector": f"nothing-{i}!=x"}
                )
                statuses.append(status)
                if i % 10 == 0:
                    await edge.flush()
                    if edge.rt.store.stats.write_failures > 5:
                        break
            await edge.flush()
            assert len(statuses) > 5 and set(statuses) == {200}  # every online answer arrived
            stats = edge.rt.store.stats
            assert stats.write_failures > 0 and stats.error_keys
            async with edge.session.get(edge.hub.server_url + "/metrics") as resp:
                metrics = await resp.text()
            assert "node_yurthub_cache_write_failures_total 0.0" not in metrics
    failures = [r for r in caplog.records if "cache write failed" in r.getMessage()]
    assert len(failures) == 1


def fill(path: pathlib.Path) -> None:
    """Write ``path`` until its file system has no byte left (a tmpfs counts whole pages)."""
    with path.open("wb", buffering=0) as f:
        for chunk in (64 << 10, 4 << 10, 1):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e


def metric(text: str, name: str) -> float:
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    assert len(values) == 1, f"{name} not exposed once"
    return values[0]


async def test_a_full_disk_is_named_by_readyz_status_metrics_and_the_offline_404(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: pathlib.Path
) -> None:
    # Issue 27: with the cache's file system full, /v1/readyz said OK, the list read online got
    # "never listed while online" offline, and the metric (1) disagreed with /v1/status (37).
    sim_apiserver.state.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "full"}}
    )
    for i in range(37):
        sim_apiserver.state.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"p{i}",
                    "namespace": "full",
                    "annotations": {"pad": "x" * 8000},
                },
                "spec": {"nodeName": "elsewhere", "containers": [{"name": "c", "image": "i"}]},
            }
        )
    cache_dir = tmp_path / "cache"
    cfg = settings.HubSettings(
        node_name="edge-node-1",
        upstream=settings.UpstreamSettings(
            servers=(sim_apiserver.url,),
            kubeconfig=sim_apiserver.write_kubeconfig(tmp_path / "id.kubeconfig"),
        ),
        listen=settings.ListenSettings(serve_port=0, proxy_port=0),
        heartbeat=settings.HeartbeatSettings(interval=0.5, timeout=1.0, failed_retry=1),
        proxy=settings.ProxySettings(shutdown_grace=1.0),
        cache=settings.CacheSettings(disk_cache_path=cache_dir / "db"),
    )
    pods = "/api/v1/namespaces/full/pods"
    with small_tmpfs(cache_dir, "2m"):
        async with assembly.running(cfg) as node, aiohttp.ClientSession(headers=KUBELET) as http:
            assert node.cache is not None
            server = node.hub.server_url
            # The hub's own followers' lists (yurt-hub-cfg, the filters' inputs) are stored before
            # the disk fills: they keep the hub answerable offline ("cloud-or-cache" ready).
            async with asyncio.timeout(10):
                while not node.cache.store.list_count():
                    await node.cache.store.flush(10)
                    await asyncio.sleep(0.05)
            fill(cache_dir / "filler")
            async with http.get(node.hub.proxy_url + pods) as resp:
                assert resp.status == 200  # online traffic never needs the cache
                assert len((await resp.json())["items"]) == 37
            cache = node.cache.store
            assert await cache.flush(10)
            assert cache.stats.write_failures > 0 and not cache.list_records(
                keys.Scope("kubelet", "pods", "v1")
            )
            await sim_apiserver.stop()
            health = node.hub.health
            assert health is not None
            async with asyncio.timeout(10):
                while health.any_healthy():
                    await asyncio.sleep(0.05)
            assert await cache.flush(10)

            async with http.get(server + "/v1/readyz") as resp:
                text = await resp.text()
            # A hub that cannot write its cache still proxies: ready, with the warning named.
            assert resp.status == 200, text
            assert "warning: disk-cache: write failures: disk full (ENOSPC) since " in text, text

            async with http.get(node.hub.proxy_url + pods) as resp:
                body = await resp.json()
            assert resp.status == 404
            assert (
                "the list was read online but could not be stored: disk full (ENOSPC)"
                in body["message"]
            ), body["message"]

            # Counters only grow: a metric read between two equal /v1/status reads is theirs.
            async with asyncio.timeout(10):
                while True:
                    async with http.get(server + "/v1/status") as resp:
                        before = await resp.json()
                    async with http.get(server + "/metrics") as resp:
                        scraped = await resp.text()
                    async with http.get(server + "/v1/status") as resp:
                        after = await resp.json()
                    if before["cache"]["writeFailures"] == after["cache"]["writeFailures"]:
                        break
            failed = metric(scraped, "node_yurthub_cache_write_failures_total")
            assert failed == after["cache"]["writeFailures"] >= 1
            assert metric(scraped, "node_yurthub_error_keys_count") == after["cache"]["errorKeys"]
            assert after["cache"]["errorKeys"] >= 37  # the list's pods
            assert any(w.startswith("disk-cache: write failures:") for w in after["warnings"])
