"""Offline watches (``local.Answerer``'s watch answers): held open, with bookmarks.

``Watches.hold`` answers 200 and keeps the stream open with BOOKMARK events every
``bookmark_interval`` when the client allows them; ``sendInitialEvents=true`` first gets the
cached objects as ADDED plus the end bookmark, under the list rule (``locallists``: complete, or
a 404 before the stream). The stream ends when ``timeoutSeconds`` elapses (absent or 0:
``min-request-timeout`` x (1+rand)), when the cloud is healthy again (clients re-watch
upstream; each at a random moment within ``heal_spread``, ``--heal-spread-seconds``, so a
fleet's clients do not all come back in the same half second, and not at all if the cloud is
gone again before that moment; a few, ``seams.HEAL_AT_ONCE``, at once, and kubelet's watch
of its own Node first gets that Node as the cloud has it now: ``seams.HEAL_CURRENT``; a
watch held because every apiserver failed it, not before ``seams.HOLD_AT_LEAST``), or
at hub shutdown (``close``). A protobuf-first client gets protobuf frames when every object is
stored so; a plain watch carries bookmarks only.

The resourceVersion a held watch's BOOKMARKs carry is where the client resumes upstream after
the heal (client-go's reflector watches again from the last one), so it must be one the
apiserver has given this client's stream and must never skip an event the client has not seen:
a watch from ``N`` gets bookmarks at ``N`` (the hub delivers nothing offline, so the client is
still exactly there; the cache's own version for that list may be older, which would replay,
or newer, from events this client never received, which would skip them); a streaming list
gets bookmarks at the version of the state it was sent (the covering list's, as an offline
list of the same is at: ``locallists.listing_version``). Only a watch from "now" (no version,
or ``0``) gets the cache's version of the list covering it, which the apiserver gave it. So
after a heal kubelet and kube-proxy resume their watches instead of listing again, as long as
the apiserver still has that version.

Every BOOKMARK names the kind of the resource (client-go decodes a watch event's object by its
own ``kind`` and fails the watch on an empty one): ``localkinds.Kinds.kind``, decided once per
watch from the built-in resources, the list's record, the cached discovery documents, then any
stored object or list of the resource. When nothing names it (a custom resource the hub never
saw), a plain watch is held with no bookmarks at all (they are optional to every client, and
one it cannot decode would end its watch with an error each interval), and a streaming list is
refused with a 503 before it starts (its end bookmark is not optional; client-go falls back to
a plain list on the error).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from aiohttp import web

from yurthub import requestinfo
from yurthub.cache import keys, selectors, store
from yurthub.kubeproto import converting, enveloping
from yurthub.proxy import locallists, localreplies, seams

log = logging.getLogger(__name__)

HEALTH_POLL = 0.5
"""Seconds between looks at cloud health while holding a watch open."""

END = {"k8s.io/initial-events-end": "true"}
"""The annotation of the bookmark that ends a streaming list's initial events."""


def held_rv(requested: str) -> str:
    """The version a held watch from ``requested`` stays at: the request's own when it names
    one (a positive integer), else "" (the cache's version of the list). PURE."""
    return requested if requested.isdigit() and requested.strip("0") else ""


def heal_end(
    ends: float | None,
    now: float,
    healthy: bool,
    spread: float,
    rand: Callable[[], float],
    not_before: float = 0.0,
) -> float | None:
    """When a held watch ends, given when it was to end (``ends``, None: not yet decided), the
    time, and whether the cloud is healthy: once healthy, at a random moment within
    ``spread`` seconds (kept while it stays healthy), never before ``not_before`` (a watch
    every apiserver failed: the hub's back-off, ``seams.HOLD_AT_LEAST``); unhealthy again
    before that, not at all (a link that flaps does not send the client to it). PURE
    (``rand`` in [0, 1))."""
    if not healthy:
        return None
    if ends is not None:
        return ends
    return max(now + max(spread, 0.0) * min(max(rand(), 0.0), 1.0), not_before)


def current_version(body: bytes) -> tuple[str, str] | None:
    """The name and resourceVersion of one object's JSON, or None when it is not one. PURE."""
    try:
        meta = orjson.loads(body)["metadata"]
        name, rv = meta["name"], meta["resourceVersion"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    if not isinstance(name, str) or not isinstance(rv, str) or not name:
        return None
    return name, rv


def newer(fetched: str, held: str) -> bool:
    """Whether an object at ``fetched`` is news to a watch at ``held`` (both the apiserver's
    decimal versions; anything else is not compared, so not news). PURE."""
    return fetched.isdigit() and held.isdigit() and int(fetched) > int(held)


async def _single(body: bytes) -> AsyncIterator[list[bytes]]:
    yield [body]


def unnamed(info: requestinfo.RequestInfo) -> str:
    """Why a streaming list of a resource the hub cannot name the kind of is refused. PURE."""
    resource = f"{info.resource}.{info.group}" if info.group else info.resource
    return (
        f"the cloud is unreachable and the hub knows no kind for {resource} in "
        f"{localreplies.api_version(info)} (no discovery document, object or list of it is "
        "cached), so it cannot end a streaming list with a bookmark the client decodes"
    )


class Watches:
    """The watches held open over one ``localreplies.Reader``."""

    def __init__(
        self,
        reader: localreplies.Reader,
        lists: locallists.Lists,
        *,
        min_request_timeout: float,
        bookmark_interval: float,
        cloud_healthy: Callable[[], bool],
        heal_spread: float = 0.0,
        rand: Callable[[], float] = random.random,
    ) -> None:
        """``cloud_healthy``: asked while holding (a watch ends when the cloud is back, at a
        random moment within ``heal_spread`` seconds: ``heal_end``)."""
        self._reader = reader
        self._lists = lists
        self._min_request_timeout = min_request_timeout
        self._bookmark_interval = bookmark_interval
        self._cloud_healthy = cloud_healthy
        self._heal_spread = heal_spread
        self._rand = rand
        self._closing = asyncio.Event()

    def close(self) -> None:
        """End every held watch now (hub shutdown)."""
        self._closing.set()

    async def hold(self, request: web.Request, info: requestinfo.RequestInfo) -> web.StreamResponse:
        if info.timeout_seconds:  # 0 is "not given", as on the apiserver
            hold = float(info.timeout_seconds)
        else:
            hold = self._min_request_timeout * (1 + random.random())
        started = asyncio.get_running_loop().time()
        deadline = started + hold
        not_before = started + request.get(seams.HOLD_AT_LEAST, 0.0)
        scope = keys.Scope(info.owner, info.resource, info.version, info.group)
        try:
            labels = selectors.parse_labels(info.label_selector)
            fields = selectors.parse_fields(info.field_selector)
        except selectors.SelectorError as e:
            return localreplies.status(400, str(e))
        list_key = keys.list_key(scope, info.namespace, labels.canonical(), fields.canonical())
        bookmarks = info.allow_watch_bookmarks
        initial = None
        protobuf = localreplies.protobuf_first(info)
        stored: list[bytes] | None = None
        if localreplies.flag(request.query.get("sendInitialEvents", "")) and bookmarks:
            # A list streamed as events: complete or nothing, as a list (``Lists.listing``).
            initial = self._lists.listing(info, [scope], labels, fields)
            if initial is None or (not initial.count and locallists.kubelet_pods(info)):
                lost = self._lists.lost(info, [scope], labels, fields) if initial is None else ""
                return localreplies.not_found(info, "", lost=lost)
            if protobuf:
                stored = await self._protobuf_objects(info, initial)
                if stored is None:
                    if not requestinfo.accepts_json(info.accept):
                        return localreplies.status(406, localreplies.NOT_ACCEPTABLE)
                    protobuf = False
        elif requestinfo.accepts_json(info.accept):
            # Offline a plain watch carries bookmarks only: JSON, as before, for any client
            # that takes it; a protobuf-only client gets protobuf ones.
            protobuf = False
        record = self._reader.store.list_record(list_key)
        kind = await self._lists.kind(scope, record, initial) if bookmarks else ""
        if initial is not None and not kind:
            # Its end bookmark would not decode: an error now (client-go's reflector falls
            # back to a plain list) beats a stream the client fails on at its end.
            return localreplies.status(503, unnamed(info))
        content_type = enveloping.WATCH_CONTENT_TYPE if protobuf else localreplies.JSON
        resp = web.StreamResponse(status=200, headers={"Content-Type": content_type})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        since = held_rv(info.resource_version)
        try:
            if stored is not None and initial is not None:
                since = await self._protobuf_initial_events(resp, info, kind, initial, stored)
                held = len(stored)
                del stored
                if held > locallists.TRIM_ITEMS:
                    await asyncio.get_running_loop().run_in_executor(None, store.trim_heap)
            elif initial is not None:
                try:
                    since = await self._initial_events(resp, info, kind, initial)
                except store.CorruptRead:
                    # The list it streams is no longer whole: end the watch, the client lists
                    # again and gets the 404 a miss is.
                    await resp.write_eof()
                    return resp
            next_bookmark = asyncio.get_running_loop().time() + self._bookmark_interval
            ends: float | None = None
            spread = 0.0 if request.get(seams.HEAL_AT_ONCE, False) else self._heal_spread
            while True:
                now = asyncio.get_running_loop().time()
                if now >= deadline or self._closing.is_set():
                    break
                ends = heal_end(ends, now, self._cloud_healthy(), spread, self._rand, not_before)
                if ends is not None and now >= ends:
                    current = request.get(seams.HEAL_CURRENT)
                    if current is not None and not protobuf:
                        rv = since or self._now_rv(info, scope, list_key, labels, fields)
                        await self._send_current(resp, info, scope, current, rv)
                    break
                if request.transport is None or request.transport.is_closing():
                    break
                if kind and now >= next_bookmark:
                    rv = since or self._now_rv(info, scope, list_key, labels, fields)
                    await resp.write(self._bookmark(info, kind, rv, protobuf=protobuf))
                    next_bookmark = now + self._bookmark_interval
                wake = min(deadline, next_bookmark if kind else deadline, now + HEALTH_POLL)
                if ends is not None:
                    wake = min(wake, ends)
                await asyncio.sleep(max(0.0, wake - now))
            await resp.write_eof()
        except ConnectionError:
            pass
        return resp

    async def _send_current(
        self,
        resp: web.StreamResponse,
        info: requestinfo.RequestInfo,
        scope: keys.Scope,
        fetch: seams.FetchCurrent,
        since: str,
    ) -> None:
        """At the heal: the watched object as the cloud has it now, as one MODIFIED event,
        when it is newer than ``since`` (the client resumes from its version); kept in the
        cache as a read of it would be. Nothing when it could not be had."""
        body = await fetch()
        if body is None:
            return
        found = current_version(body)
        if found is None:
            log.info("the cloud's answer for %s at the heal is not an object", info.describe())
            return
        name, rv = found
        if not newer(rv, since):
            return
        self._reader.store.submit(store.PutObject(scope, body, "", name=name))
        async for page in self._lists.filtered_pages(info, _single(body)):
            for item in page:
                await resp.write(b'{"type":"MODIFIED","object":' + item + b"}\n")

    def _now_rv(
        self,
        info: requestinfo.RequestInfo,
        scope: keys.Scope,
        list_key: keys.ListKey,
        labels: selectors.LabelSelector,
        fields: selectors.FieldSelector,
    ) -> str:
        """The version of a watch from "now": the cached list covering it (an offline list
        of the same is at that version, ``locallists.listing_version``), else the cache's
        version of ``list_key``."""
        found = self._lists.covering(info, [scope], labels, fields)
        if found is not None and found[1].resource_version:
            return found[1].resource_version
        return self._watch_rv(scope, list_key, info.namespace)

    def _watch_rv(self, scope: keys.Scope, list_key: keys.ListKey, namespace: str) -> str:
        """The cache's version of ``list_key`` (its record, else its newest object)."""
        record = self._reader.store.list_record(list_key)
        if record is not None and record.resource_version:
            return record.resource_version
        best = max((e.rv for _, e in self._reader.store.objects(scope, namespace)), default=-1)
        return str(best) if best >= 0 else "0"

    def _bookmark(
        self,
        info: requestinfo.RequestInfo,
        kind: str,
        rv: str,
        *,
        protobuf: bool = False,
        annotations: dict[str, str] | None = None,
    ) -> bytes:
        """A BOOKMARK of a ``kind`` object at ``rv``."""
        if protobuf:
            body = enveloping.bookmark(localreplies.api_version(info), kind, rv, annotations)
            return enveloping.watch_frame("BOOKMARK", body)
        meta: dict[str, Any] = {"resourceVersion": rv}
        if annotations:
            meta["annotations"] = annotations
        obj = {"kind": kind, "apiVersion": localreplies.api_version(info), "metadata": meta}
        return orjson.dumps({"type": "BOOKMARK", "object": obj}) + b"\n"

    async def _protobuf_objects(
        self, info: requestinfo.RequestInfo, listing: locallists.Listing
    ) -> list[bytes] | None:
        """The listing's stored objects when every one is protobuf (filtered, dropped ones
        left out), else None; read whole before a stream starts, as a list answer is."""
        stored = self._reader.stored(info)
        out: list[bytes] = []
        async for page in self._lists.pages(info, listing, as_stored=True):
            for body in page:
                if not store.is_protobuf(body):
                    return None
                if stored is None:
                    out.append(body)
                    continue
                api_version, kind, start, end = converting.envelope_at(body)
                raw = body[start:end]
                kept = stored.protobuf_item(raw)
                if kept is not None:
                    out.append(
                        body if kept is raw else enveloping.envelope(api_version, kind, kept)
                    )
        return out

    async def _protobuf_initial_events(
        self,
        resp: web.StreamResponse,
        info: requestinfo.RequestInfo,
        kind: str,
        listing: locallists.Listing,
        bodies: list[bytes],
    ) -> str:
        """A streaming list in protobuf frames: each stored object as ADDED, then the end
        bookmark."""
        frame = enveloping.watch_frame
        for start in range(0, len(bodies), store.PAGE_ROWS):
            page = bodies[start : start + store.PAGE_ROWS]
            await resp.write(b"".join(frame("ADDED", body) for body in page))
        sent = locallists.listing_version(listing) or "0"
        await resp.write(self._bookmark(info, kind, sent, protobuf=True, annotations=END))
        return sent

    async def _initial_events(
        self,
        resp: web.StreamResponse,
        info: requestinfo.RequestInfo,
        kind: str,
        listing: locallists.Listing,
    ) -> str:
        # A list streamed: a filter's dropped object is left out.
        async for page in self._lists.filtered_pages(info, self._lists.pages(info, listing)):
            if page:
                events = b"}\n".join(b'{"type":"ADDED","object":' + body for body in page)
                await resp.write(events + b"}\n")
        sent = locallists.listing_version(listing) or "0"
        await resp.write(self._bookmark(info, kind, sent, annotations=END))
        return sent
