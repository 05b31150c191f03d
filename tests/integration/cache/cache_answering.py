"""The local answerer alone on a real loopback server over a real store, for cache tests.

``async with answering(tmp_path, *jobs) as (session, base)`` applies ``jobs`` to a fresh store,
then serves ``local.Answerer`` at ``base``. The hub's router picks the reason from its health
checker; here the test names it (header ``X-Reason``). ``None`` from the answerer (the router
then proxies or reports the upstream's error) shows as status ``UNANSWERED`` (599).
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from yurthub import requestinfo
from yurthub.cache import agents, keys, store
from yurthub.proxy import local, seams

NODE = "n1"
KUBELET = "kubelet/v1.32.4 (linux/amd64) kubernetes/abcdef0"
UNANSWERED = 599
PODS = keys.Scope("kubelet", "pods", "v1")
NODES = keys.Scope("kubelet", "nodes", "v1")
MY_PODS = keys.list_key(PODS, "", "", f"spec.nodeName={NODE}")


@contextlib.asynccontextmanager
async def answering(
    tmp_path: pathlib.Path, *jobs: store.Job, filters: seams.ResponseFilter | None = None
) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    cache = await store.Store.open(tmp_path / "cache")
    for job in jobs:
        assert cache.submit(job)
    assert await cache.flush(5)
    answerer = local.Answerer(
        cache,
        agents.AgentSet(node_name=NODE),
        node_name=NODE,
        min_request_timeout=30.0,
        bookmark_interval=0.2,
    )
    answerer.filters = filters

    async def handle(request: web.Request) -> web.StreamResponse:
        info = requestinfo.classify(
            request.method, request.path, request.query.items(), request.headers
        )
        reason = request.headers.get("X-Reason", "offline")
        answer = await answerer.answer(request, info, reason=reason)
        return answer if answer is not None else web.Response(status=UNANSWERED)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        async with aiohttp.ClientSession() as session:
            yield session, f"http://127.0.0.1:{port}"
    finally:
        answerer.close()
        await runner.cleanup()
        await cache.close()


async def get(
    session: aiohttp.ClientSession,
    url: str,
    reason: str,
    *,
    accept: str = "application/json",
    params: dict[str, str] | None = None,
    ua: str = KUBELET,
) -> tuple[int, Any]:
    headers = {"User-Agent": ua, "Accept": accept, "X-Reason": reason}
    async with session.get(url, params=params, headers=headers) as resp:
        raw = await resp.read()
        return resp.status, orjson.loads(raw) if raw else None


def pod_list(*names: str) -> bytes:
    items = [
        {
            "metadata": {"name": n, "namespace": "d", "resourceVersion": "1"},
            "spec": {"nodeName": NODE},
        }
        for n in names
    ]
    return orjson.dumps(
        {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "5"},
            "items": items,
        }
    )
