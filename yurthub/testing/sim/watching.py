"""The watch stream: newline-delimited ``{"type": ..., "object": ...}`` events, written as they
happen in chunked encoding.

Order on the wire: synthetic ADDED events (resourceVersion unset or "0", or
``sendInitialEvents``), or the history replay after the requested
resourceVersion; then, with ``sendInitialEvents``, a BOOKMARK annotated
``k8s.io/initial-events-end``; then live events. An idle watch that asked for
bookmarks gets a BOOKMARK every ``bookmark_interval`` seconds carrying the
current resourceVersion (only when its queue is empty, so the bookmark never
overtakes an event). A resourceVersion older than the history is an ERROR event
with a 410 Expired Status. ``timeoutSeconds`` ends the stream cleanly.

Events for a Table watch carry column definitions in the first event only, as
the apiserver does to save bandwidth.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from typing import Any

import orjson
from aiohttp import web

from yurthub.cache import selectors
from yurthub.testing.sim import (
    bodies,
    context,
    conversion,
    crud,
    errors,
    negotiation,
    paths,
    resources,
    storage,
    tables,
)

log = logging.getLogger(__name__)

# Events written per socket write when a watcher has a backlog.
BATCH = 256


class _Encoder:
    def __init__(
        self,
        rt: resources.ResourceType,
        neg: negotiation.Negotiated,
        include: str,
        now: Any,
    ) -> None:
        self.rt = rt
        self.neg = neg
        self.include = include
        self.now = now
        self.headers_sent = False

    def event(self, kind: str, stored: storage.Stored) -> bytes:
        form = self.neg.form
        if form is negotiation.Form.OBJECT:
            obj = conversion.encode(self.rt, stored.obj, stored.raw)
        elif form is negotiation.Form.PARTIAL:
            obj = orjson.dumps(tables.partial(stored.obj, self.neg.version))
        else:
            table = tables.table(
                self.rt,
                [conversion.from_storage(self.rt, stored.obj)],
                now=self.now(),
                include=self.include,
                version=self.neg.version,
                list_meta={"resourceVersion": str(stored.rv)},
                headers=not self.headers_sent,
            )
            self.headers_sent = True
            obj = orjson.dumps(table)
        return b'{"type":"' + kind.encode() + b'","object":' + obj + b"}\n"

    def bookmark(self, rv: int, *, initial_end: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        if self.neg.form is negotiation.Form.PARTIAL:
            obj: dict[str, Any] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": f"meta.k8s.io/{self.neg.version}",
                "metadata": meta,
            }
        else:
            obj = {"kind": self.rt.kind, "apiVersion": self.rt.api_version, "metadata": meta}
        return orjson.dumps({"type": "BOOKMARK", "object": obj}) + b"\n"


def _error_event(e: errors.ApiError) -> bytes:
    return orjson.dumps({"type": "ERROR", "object": e.status}) + b"\n"


async def watch(
    ctx: context.ServerContext,
    request: web.Request,
    rt: resources.ResourceType,
    rp: paths.ResourcePath,
) -> web.StreamResponse:
    query = request.query
    neg = negotiation.negotiate(request.headers.get("Accept"), table=True, partial=True)
    if neg.yaml:
        neg = negotiation.Negotiated()
    flt = crud.list_filter(rt, rp, query)
    if rp.name is not None:
        # /watch/namespaces/ns/pods/name: a watch on one object.
        fields = storage.Filter(
            flt.namespace,
            flt.labels,
            selectors.parse_fields(
                ",".join(x for x in (flt.fields.canonical(), f"metadata.name={rp.name}") if x)
            ),
        )
        flt = fields
    bookmarks = bool(crud.flag(query, "allowWatchBookmarks"))
    send_initial = crud.flag(query, "sendInitialEvents")
    if send_initial and query.get("resourceVersionMatch") != "NotOlderThan":
        raise errors.invalid(
            "ListOptions",
            "",
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
            "resourceVersionMatch to NotOlderThan",
        )
    timeout = crud.int_param(query, "timeoutSeconds")
    duration = float(timeout) if timeout else ctx.default_watch_timeout
    encoder = _Encoder(rt, neg, crud.include_object(query), ctx.state.clock)

    # A streaming list replaces a LIST, and kube-apiserver compresses it like one: every write
    # a gzip member of its own (plain watches stay uncompressed).
    gzipped = bool(send_initial) and bodies.accepts_gzip(request)
    headers = {"Content-Type": neg.content_type}
    if gzipped:
        headers["Content-Encoding"] = "gzip"
    response = web.StreamResponse(status=200, headers=headers)
    response.enable_chunked_encoding()
    write = _Writer(response, gzipped)
    try:
        start = ctx.state.watch(
            rt,
            flt,
            resource_version=query.get("resourceVersion"),
            send_initial_events=send_initial,
        )
    except errors.ApiError as e:
        if e.code != 410:
            raise
        await response.prepare(request)
        await write(_error_event(e))
        await response.write_eof()
        return response

    watcher = start.watcher
    ctx.watchers.add(watcher)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + duration
    try:
        await response.prepare(request)
        batch: list[bytes] = []
        for kind, stored in start.initial:
            batch.append(encoder.event(kind, stored))
            if len(batch) >= BATCH:
                await write(b"".join(batch))
                batch.clear()
        if batch:
            await write(b"".join(batch))
            batch.clear()
        if send_initial and bookmarks:
            await write(encoder.bookmark(start.rv, initial_end=True))
        await _pump(ctx, write, watcher, encoder, deadline, bookmarks)
    except (ConnectionResetError, RuntimeError) as e:
        # The client went away mid-write; nothing to tell it.
        log.debug("watch client disconnected: %s", e)
    finally:
        ctx.state.unwatch(watcher)
        ctx.watchers.discard(watcher)
    with contextlib.suppress(ConnectionResetError, RuntimeError):
        await response.write_eof()
    return response


class _Writer:
    """Writes to a watch response, each write a gzip member of its own when compressing.

    A member's data goes in a flushed non-final block and the final block is empty, as Go's
    gzip writer makes it (write, flush, close): Go's gzip reader hands out the data of a
    final block only after it has read the next member's header, so data in the final
    block (``gzip.compress``) would reach a Go client one write late (kubectl's
    ``delete --wait`` saw the end-of-initial-events bookmark only with the next event)."""

    def __init__(self, response: web.StreamResponse, gzipped: bool) -> None:
        self._response = response
        self._gzipped = gzipped

    async def __call__(self, data: bytes) -> None:
        if self._gzipped:
            member = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            data = member.compress(data) + member.flush(zlib.Z_SYNC_FLUSH) + member.flush()
        await self._response.write(data)


async def _pump(
    ctx: context.ServerContext,
    write: _Writer,
    watcher: storage.Watcher,
    encoder: _Encoder,
    deadline: float,
    bookmarks: bool,
) -> None:
    loop = asyncio.get_running_loop()
    next_bookmark = loop.time() + ctx.bookmark_interval
    while True:
        now = loop.time()
        if now >= deadline:
            return
        wake = min(deadline, next_bookmark) if bookmarks else deadline
        try:
            async with asyncio.timeout(max(0.0, wake - now)):
                kind, event = await watcher.next()
        except TimeoutError:
            if bookmarks and loop.time() >= next_bookmark and watcher.pending() == 0:
                await write(encoder.bookmark(ctx.state.resource_version))
                next_bookmark = loop.time() + ctx.bookmark_interval
            continue
        except storage.WatcherClosed as e:
            log.debug("watcher closed: %s", e)
            return
        batch = [encoder.event(kind, event.obj)]
        closed = False
        while len(batch) < BATCH and watcher.pending():
            try:
                kind, event = await watcher.next()
            except storage.WatcherClosed:
                closed = True
                break
            batch.append(encoder.event(kind, event.obj))
        await write(b"".join(batch))
        if closed:
            return
