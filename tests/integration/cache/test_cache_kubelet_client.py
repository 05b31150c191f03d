"""The kubelet-like client against a real loopback server that ends every watch at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from yurthub.testing import kubelet


@contextlib.asynccontextmanager
async def kubelet_against(
    path: str,
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    retry_backoff: float,
) -> AsyncIterator[kubelet.KubeletClient]:
    """A kubelet-like client (node ``n1``) running against a loopback server that answers
    GET ``path`` with ``handler`` and 404 to anything else; cancelled, and the server gone, on
    exit."""

    async def elsewhere(request: web.Request) -> web.StreamResponse:
        return web.Response(status=404)

    app = web.Application()
    app.router.add_get(path, handler)
    app.router.add_route("*", "/{tail:.*}", elsewhere)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        client = kubelet.KubeletClient(
            f"http://127.0.0.1:{runner.addresses[0][1]}", "n1", retry_backoff=retry_backoff
        )
        async with asyncio.TaskGroup() as tg:
            running = tg.create_task(client.run(), name="kubelet-like")
            yield client
            running.cancel()
    finally:
        await runner.cleanup()


async def test_watches_that_end_at_once_back_off_and_relist() -> None:
    served = {"list": 0, "watch": 0}
    pod = {"metadata": {"name": "p", "namespace": "d", "resourceVersion": "2"}}
    pods: dict[str, Any] = {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "3"},
        "items": [pod],
    }

    async def handle(request: web.Request) -> web.StreamResponse:
        watching = request.query.get("watch") == "true"
        served["watch" if watching else "list"] += 1
        body = b"" if watching else orjson.dumps(pods)
        return web.Response(body=body, content_type="application/json")

    async with kubelet_against("/api/v1/pods", handle, 0.2) as client:
        async with asyncio.timeout(10):
            while served["watch"] < 2:
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.6)
    assert client.pods == {"d/p": pod}
    # Each short watch costs a back-off and a relist: a few in a second, not thousands.
    assert served["watch"] <= 8 and served["list"] >= served["watch"], served


async def test_a_request_is_in_flight_from_sending_until_its_answer() -> None:
    """Tests wait on ``in_flight`` (a request inside a link, or its end) instead of sleeping."""
    release = asyncio.Event()
    asked = asyncio.Event()

    async def node(request: web.Request) -> web.StreamResponse:
        asked.set()
        await release.wait()
        return web.Response(status=404)

    async with kubelet_against("/api/v1/nodes/n1", node, 0.2) as client:
        async with asyncio.timeout(10):
            await asked.wait()
        held = [s for s in client.in_flight.values() if s.what == "GET /api/v1/nodes/n1"]
        assert len(held) == 1 and held[0].is_read, client.in_flight
        (number,) = [n for n, s in client.in_flight.items() if s is held[0]]
        release.set()
        async with asyncio.timeout(10):
            while number in client.in_flight:
                await asyncio.sleep(0.02)
    assert not client.in_flight  # cancelled with the client: nothing left behind


async def test_watching_names_the_watches_open_now() -> None:
    """Tests wait on ``watching`` (a watch re-made after a cut) instead of sleeping."""
    end = asyncio.Event()
    pods: dict[str, Any] = {"kind": "PodList", "metadata": {"resourceVersion": "3"}, "items": []}

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            return web.Response(body=orjson.dumps(pods), content_type="application/json")
        resp = web.StreamResponse()
        await resp.prepare(request)
        await end.wait()
        return resp

    async with kubelet_against("/api/v1/pods", handle, 5.0) as client:
        async with asyncio.timeout(10):
            while "pods" not in client.watching:
                await asyncio.sleep(0.02)
        assert "services" not in client.watching  # its list is a 404: no watch
        end.set()  # the watch ends (no event: a short watch, then a 5 s back-off)
        async with asyncio.timeout(10):
            while "pods" in client.watching:
                await asyncio.sleep(0.02)
