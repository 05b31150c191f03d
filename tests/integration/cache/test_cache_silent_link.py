"""Reads in flight when the link goes silent, with the hub's DEFAULT heartbeat (10 s).

Before: a read sent just before a blackhole waited for its client's own timeout (kubectl
without ``--request-timeout``: for good), although the next request was answered from the cache
once the heartbeat noticed the cut 10-20 s later; watches open at the cut stayed open and silent.
Now a request without response headers after ``header_deadline`` makes its server probed at
once (the cut is noticed in about 3 s), and when a server is declared unhealthy the reads in
flight to it are answered from the cache and its watches end, so clients re-watch locally.
"""

from __future__ import annotations

import asyncio
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
DETECTED_WITHIN = 4.0
"""Header deadline (1 s) + one probe bounded by --heartbeat-timeout-seconds (2 s), with room."""


@pytest.fixture
async def edge(tmp_path: pathlib.Path) -> Any:
    async with edge_node(tmp_path, heartbeat=settings.HeartbeatSettings()) as node:
        yield node


async def warm(edge: Edge) -> None:
    status, _ = await edge.get(PODS, params=MY_PODS)
    assert status == 200
    await edge.kubectl("get", "pods", "-A")
    await edge.flush()


async def timed_get(edge: Edge, path: str, **params: str) -> tuple[int, Any, float]:
    started = time.monotonic()
    async with edge.session.get(
        edge.url + path,
        params=params,
        headers={"User-Agent": KUBELET_UA, "Accept": "application/json"},
        timeout=aiohttp.ClientTimeout(total=15),
    ) as resp:
        body = await resp.json()
        return resp.status, body, time.monotonic() - started


async def test_a_read_in_flight_at_the_cut_gets_the_cached_answer(edge: Edge) -> None:
    await warm(edge)
    watch = await edge.session.get(
        edge.url + PODS,
        params={**MY_PODS, "watch": "true"},
        headers={"User-Agent": KUBELET_UA},
    )
    assert watch.status == 200
    await edge.link.set_mode(partition.Mode.BLACKHOLE)
    cut = time.monotonic()
    status, body, took = await timed_get(edge, PODS, **MY_PODS)
    assert status == 200 and body["items"], body
    assert took < DETECTED_WITHIN, took
    assert not edge.healthy()
    # The watch open at the cut ended (cleanly): the client re-watches, now from the cache.
    async with asyncio.timeout(1.5):
        while await watch.content.readany():
            pass
    watch.release()
    assert time.monotonic() - cut < DETECTED_WITHIN + 1
    again = await edge.session.get(
        edge.url + PODS, params={**MY_PODS, "watch": "true"}, headers={"User-Agent": KUBELET_UA}
    )
    assert again.status == 200  # held open from the cache
    again.release()


async def test_a_newcomers_kubectl_right_after_a_blackhole_is_answered(edge: Edge) -> None:
    await warm(edge)
    await edge.link.set_mode(partition.Mode.BLACKHOLE)
    started = time.monotonic()
    # No --request-timeout: kubectl waits as long as the hub makes it.
    done = await edge.kubectl("get", "pods", "-A", request_timeout=None)
    assert "NAME" in done.stdout
    assert time.monotonic() - started < DETECTED_WITHIN + 1


async def test_a_slow_apiserver_is_probed_not_abandoned(edge: Edge) -> None:
    await warm(edge)
    await edge.link.set_mode(partition.Mode.LATENCY, latency=0.7)
    status, body, took = await timed_get(edge, PODS, **MY_PODS)
    # Headers came late (after the header deadline): the probe found the server alive, so the
    # answer is the apiserver's own, not the cache's, and the server stays healthy.
    assert status == 200 and body["items"] and took >= 0.7
    await edge.link.set_mode(partition.Mode.PASS)
    assert edge.healthy()
