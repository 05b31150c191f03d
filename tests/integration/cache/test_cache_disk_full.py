"""A full disk: writes fail, are counted and logged once; reads keep working; nothing crashes."""

from __future__ import annotations

import logging
import pathlib

import orjson
import pytest
from tmpfs_support import small_tmpfs

from yurthub.cache import keys, store

POD = keys.Scope("kubelet", "pods", "v1")


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
