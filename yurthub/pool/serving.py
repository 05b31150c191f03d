"""Answering one list or watch client from a store (the multiplexer's half of a request).

A list is written in chunks from the entries the selection covers (each through the client's
response filters, if any: a dropped object is left out). A watch writes the initial state when
asked for (ADDED events, then the ``k8s.io/initial-events-end`` BOOKMARK for a streaming list),
then the events its watcher receives, in batches, as they come; a BOOKMARK every
``bookmark_interval`` while idle for clients that allow them (every
``follower_bookmark_interval`` for other hubs' multiplexers: their liveness signal); the stream
ends cleanly at ``timeoutSeconds`` (or the apiserver's 1-2x ``--min-request-timeout`` when not
given), when the watcher is closed (slow, resource dropped, hub stopping) or when the client
goes. A filtered watch event whose object the filters drop becomes DELETED with the object as
it was (YurtHub's rule).

Invariant: this coroutine is the only writer to its response; the store only wakes it. Any write
(headers included) may find the client gone: that ends the answer with one debug line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterator

from aiohttp import web

from yurthub import statuses
from yurthub.pool import encoding, rvrules, selection, watchcache
from yurthub.proxy import seams

log = logging.getLogger(__name__)

_GONE = (ConnectionResetError, RuntimeError)
"""What a write to a client that has gone raises (aiohttp's ``ClientConnectionResetError`` is a
``ConnectionResetError``; a response whose connection was lost raises ``RuntimeError``)."""
BATCH = 256
"""Events written per socket write when a watcher has a backlog."""
JSON = "application/json"


def status_response(status: statuses.Status, *, retry_after: int | None = None) -> web.Response:
    resp = web.Response(
        status=status["code"], body=statuses.encode(status), content_type="application/json"
    )
    if retry_after is not None:
        resp.headers["Retry-After"] = str(retry_after)
    return resp


async def answer_list(
    request: web.BaseRequest,
    store: watchcache.Store,
    sel: selection.Selection,
    flt: seams.StoredObjects | None,
    on_bytes: Callable[[int], None],
) -> web.StreamResponse:
    """The list; ``on_bytes`` hears of each write."""
    entries = store.items(sel)
    resp = web.StreamResponse(status=200, headers={"Content-Type": JSON})
    try:
        await resp.prepare(request)
        for chunk in encoding.list_chunks(
            store.list_kind, store.api_version, store.rv, _filtered(entries, flt)
        ):
            await resp.write(chunk)
            on_bytes(len(chunk))
        await resp.write_eof()
    except _GONE as e:
        log.debug("list client of %s went away: %s", store.resource, e)
    return resp


def _filtered(entries: list[watchcache.Entry], flt: seams.StoredObjects | None) -> Iterator[bytes]:
    for entry in entries:
        if flt is None:
            yield entry.raw
            continue
        out = flt.item(entry.raw)
        if out is not None:
            yield out


class WatchAnswer:
    """One watch client."""

    def __init__(
        self,
        store: watchcache.Store,
        plan: rvrules.WatchPlan,
        sel: selection.Selection,
        flt: seams.StoredObjects | None,
        *,
        timeout: float,
        bookmarks: bool,
        bookmark_interval: float,
        wait_fresh: Callable[[int, float], Awaitable[bool]] | None = None,
        on_bytes: Callable[[int], None] = lambda n: None,
    ) -> None:
        self.store = store
        self.plan = plan
        self.selection = sel
        self.filter = flt
        self.timeout = timeout
        self.bookmarks = bookmarks
        self.bookmark_interval = bookmark_interval
        self._on_bytes = on_bytes
        self._wait_fresh = wait_fresh
        self._wake = asyncio.Event()

    async def run(self, request: web.BaseRequest) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": JSON})
        resp.enable_chunked_encoding()
        try:
            await self._run(request, resp)
        except _GONE as e:
            # Every write may meet a client that has gone (a follower that switched away, a
            # closing TLS connection the handler was not cancelled for yet): one debug line.
            log.debug("watch client of %s went away: %s", self.store.resource, e)
        return await _end(resp)

    async def _run(self, request: web.BaseRequest, resp: web.StreamResponse) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        await resp.prepare(request)
        store = self.store
        kind, api_version = store.kind, store.api_version
        if self.plan.min_rv > store.rv and self._wait_fresh is not None:
            await self._wait_fresh(self.plan.min_rv, rvrules.FRESHNESS_WAIT)
        if self.plan.min_rv > store.rv:
            await self._write(resp, encoding.error(rvrules.too_large(self.plan.min_rv, store.rv)))
            return
        try:
            watcher = store.watch(self.selection, initial=self.plan.initial, since=self.plan.since)
        except watchcache.Expired as e:
            await self._write(resp, encoding.error(e.status))
            return
        watcher.notify = self._wake.set
        try:
            batch: list[bytes] = []
            for entry in watcher.initial:
                line = self._line(watchcache.ADDED, entry.raw, initial=True)
                if line:
                    batch.append(line)
                if len(batch) >= BATCH:
                    await self._write(resp, b"".join(batch))
                    batch.clear()
            watcher.initial = []
            if batch:
                await self._write(resp, b"".join(batch))
            if self.plan.initial_end_bookmark:
                await self._write(
                    resp, encoding.bookmark(kind, api_version, watcher.start_rv, initial_end=True)
                )
            await self._pump(resp, watcher, deadline, kind, api_version)
        finally:
            store.unwatch(watcher)

    async def _pump(
        self,
        resp: web.StreamResponse,
        watcher: watchcache.Watcher,
        deadline: float,
        kind: str,
        api_version: str,
    ) -> None:
        loop = asyncio.get_running_loop()
        next_bookmark = loop.time() + self.bookmark_interval
        while watcher.closed is None:
            deliveries = watcher.take(BATCH)
            if deliveries:
                lines = [self._delivery(d) for d in deliveries]
                await self._write(resp, b"".join(line for line in lines if line))
                continue
            now = loop.time()
            if now >= deadline:
                return
            if self.bookmarks and now >= next_bookmark:
                await self._write(resp, encoding.bookmark(kind, api_version, self.store.rv))
                next_bookmark = now + self.bookmark_interval
                continue
            wake = min(deadline, next_bookmark) if self.bookmarks else deadline
            self._wake.clear()
            if watcher.pending or watcher.closed is not None:
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, wake - now)):
                    await self._wake.wait()
        if watcher.closed == "slow":
            log.info("a watch client of %s could not keep up; ended it", self.store.resource)

    def _delivery(self, delivery: watchcache.Delivery) -> bytes:
        raw = delivery.entry.raw
        if delivery.rv_override is not None:
            raw = encoding.with_resource_version(raw, delivery.rv_override)
        return self._line(delivery.type, raw)

    def _line(self, kind: str, raw: bytes, *, initial: bool = False) -> bytes:
        if self.filter is None:
            return encoding.event(kind, raw)
        out = self.filter.item(raw)
        if out is None:
            # Dropped by the client's filters: the initial state leaves it out; a change says
            # DELETED with the object as it was, so the client forgets what it may hold.
            return b"" if initial else encoding.event(watchcache.DELETED, raw)
        if kind == watchcache.DELETED:
            return encoding.event(kind, raw)
        return encoding.event(kind, out)

    async def _write(self, resp: web.StreamResponse, data: bytes) -> None:
        if data:
            await resp.write(data)
            self._on_bytes(len(data))


async def _end(resp: web.StreamResponse) -> web.StreamResponse:
    with contextlib.suppress(*_GONE):
        await resp.write_eof()
    return resp


def watch_timeout(timeout_seconds: int | None, min_request_timeout: float) -> float:
    """``timeoutSeconds`` when given, else the apiserver's random 1-2x min request timeout."""
    if timeout_seconds:
        return float(timeout_seconds)
    return min_request_timeout * (1 + random.random())
