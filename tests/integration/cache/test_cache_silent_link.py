"""Reads in flight when the link goes silent, with the hub's DEFAULT heartbeat (10 s).

Before: a read sent just before a blackhole waited for its client's own timeout (kubectl
without ``--request-timeout``: for good), although the next request was answered from the cache
once the heartbeat noticed the cut 10-20 s later; watches open at the cut stayed open and silent.
Now a request without response headers after ``header_deadline`` makes its server probed at
once (the cut is noticed in about 3 s), and when a server is declared unhealthy the reads in
flight to it are answered from the cache and its watches end, so clients re-watch locally.

What is asserted is the order of the hub's own events (late headers, then the probe that
declared the server unhealthy, then the request ended because of it), not how long it took:
a loaded machine only makes the steps slower.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import time
from typing import Any

import aiohttp
import pytest
from cache_edge import KUBELET_UA, NODE, Edge, edge_node

from yurthub import settings
from yurthub.testing import partition

PODS = "/api/v1/pods"
MY_PODS = {"fieldSelector": f"spec.nodeName={NODE}"}
WAIT = 60.0
"""Deadline of each wait: far beyond the 10 s heartbeat, reached only by a hub that hangs."""


@pytest.fixture
async def edge(tmp_path: pathlib.Path) -> Any:
    async with edge_node(tmp_path, heartbeat=settings.HeartbeatSettings()) as node:
        yield node


async def warm(edge: Edge) -> None:
    status, _ = await edge.get(PODS, params=MY_PODS)
    assert status == 200
    await edge.kubectl("get", "pods", "-A")
    await edge.flush()


def noticed_through_late_headers(edge: Edge, caplog: pytest.LogCaptureFixture, ended: str) -> None:
    """The hub logged late headers, then the server unhealthy (the probe they caused), then a
    request starting with ``ended`` ended because of it."""
    server = edge.hub_settings.upstream.servers[0]
    log = [r.getMessage() for r in caplog.records]
    slow = log.index(f"no response headers from {server} in time: probing it now")
    unhealthy = log.index(f"server {server} is now unhealthy")
    because = [n for n, m in enumerate(log) if m.startswith(ended) and "became unhealthy" in m]
    assert because and slow < unhealthy < because[0], log


async def timed_get(edge: Edge, path: str, **params: str) -> tuple[int, Any, float]:
    started = time.monotonic()
    async with edge.session.get(
        edge.url + path,
        params=params,
        headers={"User-Agent": KUBELET_UA, "Accept": "application/json"},
        timeout=aiohttp.ClientTimeout(total=WAIT),
    ) as resp:
        body = await resp.json()
        return resp.status, body, time.monotonic() - started


async def test_a_read_in_flight_at_the_cut_gets_the_cached_answer(
    edge: Edge, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="yurthub")
    await warm(edge)
    watch = await edge.session.get(
        edge.url + PODS,
        params={**MY_PODS, "watch": "true"},
        headers={"User-Agent": KUBELET_UA},
    )
    assert watch.status == 200
    caplog.clear()
    await edge.link.set_mode(partition.Mode.BLACKHOLE)
    status, body, _ = await timed_get(edge, PODS, **MY_PODS)
    assert status == 200 and body["items"], body
    assert not edge.healthy()
    noticed_through_late_headers(edge, caplog, "list pods for /api/v1/pods via")
    # The watch open at the cut ended (cleanly): the client re-watches, now from the cache.
    async with asyncio.timeout(WAIT):
        while await watch.content.readany():
            pass
    watch.release()
    noticed_through_late_headers(edge, caplog, "watch pods for /api/v1/pods: ")
    again = await edge.session.get(
        edge.url + PODS, params={**MY_PODS, "watch": "true"}, headers={"User-Agent": KUBELET_UA}
    )
    assert again.status == 200  # held open from the cache
    again.release()


async def test_a_newcomers_kubectl_right_after_a_blackhole_is_answered(
    edge: Edge, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="yurthub")
    await warm(edge)
    caplog.clear()
    await edge.link.set_mode(partition.Mode.BLACKHOLE)
    # No --request-timeout: kubectl waits as long as the hub makes it.
    done = await edge.kubectl("get", "pods", "-A", request_timeout=None)
    assert "NAME" in done.stdout
    noticed_through_late_headers(edge, caplog, "list pods for /api/v1/pods via")


async def test_a_slow_apiserver_is_probed_not_abandoned(edge: Edge) -> None:
    await warm(edge)
    await edge.link.set_mode(partition.Mode.LATENCY, latency=0.7)
    status, body, took = await timed_get(edge, PODS, **MY_PODS)
    # Headers came late (after the header deadline): the probe found the server alive, so the
    # answer is the apiserver's own, not the cache's, and the server stays healthy.
    assert status == 200 and body["items"] and took >= 0.7
    await edge.link.set_mode(partition.Mode.PASS)
    assert edge.healthy()
