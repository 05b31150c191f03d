"""A hub whose ``--server-addr`` is wrong: the cause is said once, the consequences are not.

The health checker logs ``cannot reach <server>: <why>`` once; the hub's own followers
(``following``: yurt-hub-cfg, the filters' inputs; the pool's feeders) then meet the empty
cache's 404 through the hub's own proxy on every attempt. Those are consequences of the one
reported cause (no healthy apiserver): debug lines, not a warning per retry.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib

import pytest

from yurthub import assembly, settings
from yurthub.testing import ports

QUIET = ("yurthub.pool.feeding", "yurthub.following")


async def test_a_wrong_server_is_said_once_and_the_followers_stay_quiet(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server = f"http://127.0.0.1:{ports.closed_port()}"
    hub_settings = settings.HubSettings(
        node_name="edge-node-1",
        upstream=settings.UpstreamSettings(servers=(server,)),
        listen=settings.ListenSettings(serve_port=0, proxy_port=0),
        # A refused connection is immediate; the timeout only keeps a loaded machine from
        # turning it into another reason ("no answer within ...", rightly logged once more).
        heartbeat=settings.HeartbeatSettings(interval=0.2, timeout=5.0),
        proxy=settings.ProxySettings(shutdown_grace=1.0),
        cache=settings.CacheSettings(disk_cache_path=tmp_path / "cache"),
    )

    def feeder_attempts() -> int:
        return sum(
            1
            for r in caplog.records
            if r.name == "yurthub.pool.feeding" and "from cloud: HTTP 404" in r.getMessage()
        )

    async with assembly.running(hub_settings) as node:
        health = node.hub.health
        assert health is not None
        async with asyncio.timeout(20):
            # Each feeder (services, endpointslices) has retried a few times ...
            while feeder_attempts() < 6:
                await asyncio.sleep(0.05)
            # ... and the health checker has probed again since.
            probed = health.reports[server].last_error_at
            while health.reports[server].last_error_at == probed:
                await asyncio.sleep(0.05)
        assert not health.any_healthy()
    said = [r for r in caplog.records if r.levelno >= logging.INFO]
    unreachable = [r.getMessage() for r in said if f"cannot reach {server}: " in r.getMessage()]
    assert unreachable == [f"cannot reach {server}: connection refused"], unreachable
    noise = [f"{r.name}: {r.getMessage()}" for r in said if r.name in QUIET]
    assert noise == []
