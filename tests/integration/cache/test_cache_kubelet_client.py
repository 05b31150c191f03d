"""The kubelet-like client against a real loopback server that ends every watch at once."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

from yurthub.testing import kubelet


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

    async def elsewhere(request: web.Request) -> web.StreamResponse:
        return web.Response(status=404)

    app = web.Application()
    app.router.add_get("/api/v1/pods", handle)
    app.router.add_route("*", "/{tail:.*}", elsewhere)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        client = kubelet.KubeletClient(
            f"http://127.0.0.1:{runner.addresses[0][1]}", "n1", retry_backoff=0.2
        )
        async with asyncio.TaskGroup() as tg:
            running = tg.create_task(client.run(), name="kubelet-like")
            async with asyncio.timeout(10):
                while served["watch"] < 2:
                    await asyncio.sleep(0.02)
            await asyncio.sleep(0.6)
            running.cancel()
    finally:
        await runner.cleanup()
    assert client.pods == {"d/p": pod}
    # Each short watch costs a back-off and a relist: a few in a second, not thousands.
    assert served["watch"] <= 8 and served["list"] >= served["watch"], served
