"""Following ``yurt-hub-cfg`` against a real loopback server that answers badly shaped bodies.

The follower runs in the hub's TaskGroup for the hub's lifetime: anything it cannot read must be
retried, never raised (an escaping exception would take the hub down with it).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from yurthub.cache import agents

GOOD = {
    "kind": "ConfigMapList",
    "apiVersion": "v1",
    "metadata": {"resourceVersion": "7"},
    "items": [{"metadata": {"name": "yurt-hub-cfg"}, "data": {"cache_agents": "virt-handler"}}],
}
BAD_LISTS: list[Any] = [
    [1],
    {"items": [1]},
    {"items": {"not": "a list"}},
    {"items": [{"metadata": {"name": "yurt-hub-cfg"}, "data": ["not", "a", "map"]}]},
    {"items": [{"metadata": "yurt-hub-cfg"}]},
]
BAD_EVENTS = [b"[]\n", b'{"type":"MODIFIED","object":[]}\n', b'{"type":"ADDED","object":{}}\n']


async def test_badly_shaped_answers_are_retried_not_raised() -> None:
    lists: list[Any] = [*BAD_LISTS, GOOD]
    watches = list(BAD_EVENTS)
    served = {"list": 0, "watch": 0}

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") == "true":
            served["watch"] += 1
            line = watches.pop(0) if watches else b""
            return web.Response(body=line, content_type="application/json")
        served["list"] += 1
        body = lists.pop(0) if len(lists) > 1 else lists[0]
        if served["list"] > len(BAD_LISTS) + 1:
            body = {**GOOD, "items": []}  # a later relist: the ConfigMap is gone again
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/kube-system/configmaps", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    agent_set = agents.AgentSet(node_name="n1")
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with aiohttp.ClientSession() as session, asyncio.TaskGroup() as tg:
            follower = tg.create_task(
                agents.follow_configmap(agent_set, session, url, max_backoff=0.05),
                name="follow-config",
            )
            async with asyncio.timeout(10):
                while not agent_set.allows("virt-handler"):
                    await asyncio.sleep(0.02)
                # Bad watch events: retried with a relist, which finds the ConfigMap gone.
                while watches or agent_set.allows("virt-handler"):
                    await asyncio.sleep(0.02)
            assert not follower.done()
            follower.cancel()
    finally:
        await runner.cleanup()
    assert served["list"] > len(BAD_LISTS) + 1 and served["watch"] >= len(BAD_EVENTS)


async def test_watches_that_end_at_once_are_not_asked_again_at_once() -> None:
    served = {"list": 0, "watch": 0}

    async def handle(request: web.Request) -> web.StreamResponse:
        served["watch" if request.query.get("watch") == "true" else "list"] += 1
        body = b"" if request.query.get("watch") == "true" else orjson.dumps(GOOD)
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/kube-system/configmaps", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with aiohttp.ClientSession() as session, asyncio.TaskGroup() as tg:
            follower = tg.create_task(
                agents.follow_configmap(agents.AgentSet(node_name="n1"), session, url),
                name="follow-config",
            )
            async with asyncio.timeout(10):
                while served["watch"] < 2:
                    await asyncio.sleep(0.02)
            await asyncio.sleep(0.5)
            follower.cancel()
    finally:
        await runner.cleanup()
    # Back-off of 0.5 s doubling: a handful in about 1.5 s, not thousands.
    assert served["watch"] <= 5, served
