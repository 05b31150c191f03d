"""After the cloud's 410, a pool leader's feeder lists again within the leader spread
(``--leader-relist-spread-seconds``: one or a few leaders a pool relist, and the pool's
followers wait for them); any other hub's feeder reading the cloud within the fleet's relist
spread (``--relist-spread-seconds``). Each test makes the spread it must not use an hour, so a
feeder using it would not list again within the test's bound."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from pool_edge import NullMeter

from yurthub import following, pacing
from yurthub.pool import feeding, feedsources, gvrs, leaders, watchcache

HOUR = 3600.0
SERVICE = {
    "kind": "Service",
    "apiVersion": "v1",
    "metadata": {"name": "web", "namespace": "default", "resourceVersion": "7"},
    "spec": {"ports": [{"port": 80}]},
}
END = {
    "kind": "Service",
    "apiVersion": "v1",
    "metadata": {"resourceVersion": "10", "annotations": {"k8s.io/initial-events-end": "true"}},
}
EXPIRED = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "reason": "Expired",
    "message": "too old resource version: 10 (20)",
    "code": 410,
}


def _event(kind: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


async def lists_after_a_410(*, leading: bool, pace: pacing.Settings) -> list[dict[str, str]]:
    """The requests of a feeder whose first streaming list ends, whose watch from there is
    answered 410, until it has listed again (the test's bound is 10 s)."""
    seen: list[dict[str, str]] = []
    relisted = asyncio.Event()
    stop = asyncio.Event()

    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append(dict(request.query))
        if request.query.get("sendInitialEvents") != "true":
            # The watch from the first list's version: the apiserver compacted past it.
            return web.json_response(EXPIRED, status=410)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        await resp.write(_event("ADDED", SERVICE) + _event("BOOKMARK", END))
        if sum(q.get("sendInitialEvents") == "true" for q in seen) > 1:
            relisted.set()
            await stop.wait()
        return resp  # the first stream ends: the feeder watches on from version 10

    app = web.Application()
    app.router.add_get("/api/v1/services", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    sources = feedsources.Sources(lambda: following.ProxyRoute(url), leaders.Leaders(0))
    sources.leading = leading
    sources.configured.set()
    try:
        async with aiohttp.ClientSession() as session, asyncio.TaskGroup() as tg:
            feeder = feeding.Feeder(
                gvrs.Gvr("", "v1", "services"),
                watchcache.Store("services", watchcache.Limits()),
                sources,
                session=session,
                leader_ssl=lambda: False,
                tee=None,
                feed=feeding.FeedSettings(user_agent="multiplexer-proxy-n1", pace=pace),
                meter=NullMeter(),
            )
            task = tg.create_task(feeder.run(), name="feeder-under-test")
            try:
                async with asyncio.timeout(10):
                    await relisted.wait()
            finally:
                task.cancel()
                stop.set()
    finally:
        stop.set()
        await runner.cleanup()
    return seen


async def test_a_leader_lists_again_within_the_leader_spread() -> None:
    seen = await lists_after_a_410(
        leading=True, pace=pacing.Settings(relist_spread=HOUR, leader_relist_spread=0.0)
    )
    kinds = ["list" if q.get("sendInitialEvents") == "true" else "watch" for q in seen]
    assert kinds == ["list", "watch", "list"]
    assert seen[1]["resourceVersion"] == "10"  # resumed first; listed only after the 410


async def test_a_hub_that_does_not_lead_lists_again_within_the_fleets_spread() -> None:
    seen = await lists_after_a_410(
        leading=False, pace=pacing.Settings(relist_spread=0.0, leader_relist_spread=HOUR)
    )
    assert [q.get("sendInitialEvents") == "true" for q in seen] == [True, False, True]
