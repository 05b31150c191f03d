"""A feeder's watch that outlives its own ``timeoutSeconds`` (its end lost on the way: a
connection nothing writes to again) is ended by the feeder, which resumes from the store's
version instead of waiting forever with a store that no longer changes."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from pool_edge import NullMeter

from yurthub import following
from yurthub.pool import feeding, feedsources, gvrs, leaders, watchcache


def _service(rv: str, port: int) -> dict[str, Any]:
    return {
        "kind": "Service",
        "apiVersion": "v1",
        "metadata": {"name": "web", "namespace": "default", "resourceVersion": rv},
        "spec": {"ports": [{"port": port}]},
    }


END = {
    "kind": "Service",
    "apiVersion": "v1",
    "metadata": {"resourceVersion": "10", "annotations": {"k8s.io/initial-events-end": "true"}},
}


def _event(kind: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


async def test_a_silent_watch_past_its_timeout_is_ended_and_resumed_from_the_store() -> None:
    seen: list[dict[str, str]] = []
    release = asyncio.Event()

    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append(dict(request.query))
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        if request.query.get("sendInitialEvents") == "true":
            # The streaming list, then silence: its end never comes.
            await resp.write(_event("ADDED", _service("7", 80)) + _event("BOOKMARK", END))
        else:
            await resp.write(_event("MODIFIED", _service("11", 81)))
        await release.wait()
        return resp

    app = web.Application()
    app.router.add_get("/api/v1/services", handle)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    sources = feedsources.Sources(lambda: following.ProxyRoute(url), leaders.Leaders(0))
    sources.configured.set()
    store = watchcache.Store("services", watchcache.Limits())
    advanced = asyncio.Event()
    try:
        async with aiohttp.ClientSession() as session, asyncio.TaskGroup() as tg:
            feeder = feeding.Feeder(
                gvrs.Gvr("", "v1", "services"),
                store,
                sources,
                session=session,
                leader_ssl=lambda: False,
                tee=None,
                feed=feeding.FeedSettings(
                    user_agent="multiplexer-proxy-n1", watch_timeout=(1, 1), watch_overrun=0.5
                ),
                meter=NullMeter(),
                on_advance=advanced.set,
            )
            task = tg.create_task(feeder.run(), name="feeder-under-test")
            try:
                async with asyncio.timeout(10):
                    while store.rv != 11:
                        advanced.clear()
                        await advanced.wait()
            finally:
                task.cancel()
    finally:
        release.set()
        await runner.cleanup()
    assert [q.get("sendInitialEvents") for q in seen[:2]] == ["true", None]
    assert seen[1]["resourceVersion"] == "10"  # resumed from the store, not listed again
