"""The multiplexer's feeder reads the cloud's protobuf (as kube-proxy asks for it: the edge link
carries what a direct kube-proxy's would) and keeps the apiserver's JSON in its store: a
streaming list, a plain list when streaming is refused, and the watch after it. The upstream is
a loopback server answering with bodies captured from a real kube-apiserver 1.37
(tests/data/kubeproto)."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from pool_edge import NullMeter

from yurthub import following
from yurthub.kubeproto import converting, enveloping
from yurthub.pool import feeding, feedsources, gvrs, leaders, selection, watchcache

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "kubeproto"
WATCH_TYPE = enveloping.WATCH_CONTENT_TYPE


def services() -> tuple[bytes, list[bytes], str, list[dict[str, Any]]]:
    """(the list body, each service enveloped, the list's resourceVersion, the JSON items)."""
    body = (DATA / "services.pb").read_bytes()
    split = converting.Converter().split_list(body)
    assert split is not None and split.items
    enveloped = [enveloping.envelope("v1", "Service", item) for item in split.items]
    want = orjson.loads((DATA / "services.json").read_bytes())["items"]
    return body, enveloped, split.head["metadata"]["resourceVersion"], want


@contextlib.asynccontextmanager
async def feeding_from(
    handle: Any,
) -> AsyncIterator[tuple[watchcache.Store, list[tuple[dict[str, str], str]]]]:
    seen: list[tuple[dict[str, str], str]] = []
    stop = asyncio.Event()
    """Ends the upstream's held watches (at teardown)."""

    async def recorded(request: web.Request) -> web.StreamResponse:
        seen.append((dict(request.query), request.headers.get("Accept", "")))
        response: web.StreamResponse = await handle(request, stop)
        return response

    app = web.Application()
    app.router.add_get("/api/v1/services", recorded)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    gvr = gvrs.Gvr("", "v1", "services")
    store = watchcache.Store("services", watchcache.Limits())
    sources = feedsources.Sources(lambda: following.ProxyRoute(url), leaders.Leaders(0))
    sources.configured.set()
    try:
        async with aiohttp.ClientSession() as session:
            feeder = feeding.Feeder(
                gvr,
                store,
                sources,
                session=session,
                leader_ssl=lambda: False,
                tee=None,
                feed=feeding.FeedSettings(user_agent="multiplexer-proxy-n1"),
                meter=NullMeter(),
            )
            async with asyncio.TaskGroup() as tg:
                task = tg.create_task(feeder.run(), name="feeder-under-test")
                try:
                    yield store, seen
                finally:
                    task.cancel()
                    stop.set()
    finally:
        stop.set()
        await runner.cleanup()


async def synced(store: watchcache.Store) -> None:
    async with asyncio.timeout(10):
        while not store.synced:
            await asyncio.sleep(0.02)


def held(store: watchcache.Store) -> list[dict[str, Any]]:
    return [orjson.loads(e.raw) for e in store.items(selection.Selection())]


async def test_a_protobuf_streaming_list_fills_the_store_with_the_apiservers_json() -> None:
    _, enveloped, rv, want = services()

    async def handle(request: web.Request, stop: asyncio.Event) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": WATCH_TYPE})
        await resp.prepare(request)
        if request.query.get("sendInitialEvents") == "true":
            frames = [enveloping.watch_frame("ADDED", body) for body in enveloped]
            end = enveloping.bookmark("v1", "Service", rv, {"k8s.io/initial-events-end": "true"})
            frames.append(enveloping.watch_frame("BOOKMARK", end))
            stream = b"".join(frames)
            for at in range(0, len(stream), 700):  # frames cut across chunks
                await resp.write(stream[at : at + 700])
        await stop.wait()
        return resp

    async with feeding_from(handle) as (store, seen):
        await synced(store)
        assert store.rv == int(rv)
        assert held(store) == sorted(
            ({"kind": "Service", "apiVersion": "v1", **o} for o in want),
            key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]),
        )
        assert seen[0][1] == feeding.CLOUD_ACCEPT  # protobuf first, as kube-proxy asks


async def test_a_protobuf_list_then_its_watch_when_streaming_is_refused() -> None:
    body, enveloped, rv, want = services()
    first = enveloped[0]
    _, _, name, namespace, _ = converting.Converter().identity(first)

    async def handle(request: web.Request, stop: asyncio.Event) -> web.StreamResponse:
        if request.query.get("sendInitialEvents") == "true":
            return web.Response(status=400)  # an apiserver without WatchList
        if request.query.get("watch") != "true":
            return web.Response(body=body, headers={"Content-Type": converting.CONTENT_TYPE})
        resp = web.StreamResponse(headers={"Content-Type": WATCH_TYPE})
        await resp.prepare(request)
        later = enveloping.bookmark("v1", "Service", str(int(rv) + 5))
        await resp.write(enveloping.watch_frame("BOOKMARK", later))
        await stop.wait()
        return resp

    async with feeding_from(handle) as (store, seen):
        await synced(store)
        assert len(held(store)) == len(want)
        got = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in held(store)}
        assert (namespace, name) in got
        async with asyncio.timeout(10):
            while store.rv != int(rv) + 5:  # the protobuf watch's bookmark advanced it
                await asyncio.sleep(0.02)
        queries = [q for q, _ in seen]
        assert queries[1] == {"resourceVersion": "0"}  # the list, after the refused stream
