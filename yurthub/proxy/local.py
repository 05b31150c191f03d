"""Offline answers from the cache (reference §4), the ``seams.LocalAnswerer`` implementation.

The router asks when no backend is healthy (``offline``), when a get/list failed with a transport
error (``upstream-error``: answered from the cache at once, or ``None`` so the router reports
the error), and always for kubelet's own lease and ``get node`` (``kubelet-lease`` /
``kubelet-node``: answered when the cache has the object, else ``None`` and the router proxies).

Answers (decisions that differ from YurtHub are marked *):

- get: the cached object, or 404. Table / PartialObjectMetadata views when the client asks.
- list: complete or 404*. Answered only when a list the cache saw whole covers it: same
  component and resource, all namespaces or the request's, and every requirement
  of its label and field selectors among the request's (``cache.coverage``). Then the answer
  is the component's objects of that resource in the namespace filtered by the request's
  selectors* (YurtHub ignores selectors), at the highest resourceVersion seen (the covering
  list's record, advanced by watch events and bookmarks*, or an object's). A view (Table,
  PartialObjectMetadata) is answered from the newest covering list whatever form it was
  fetched in (full objects, metadata only, a Table)*; a Table keeps the columns and cells the
  apiserver's Table had (``cache.tables``)*. Anything else is
  a 404 (YurtHub answers whatever files it has): a watch alone (a hub restarted on an empty
  cache), gets, a narrower or other-namespace list, hold some objects, not all, and kubelet
  reads a pod missing from its list as deleted and kills it. Except a ``metadata.name`` field
  selector, answered like a get (the object, else an empty list); and kubelet's empty pods
  list, always 404 (§3.7: kubelet must not kill pods after a wipe).
- watch: 200, held open; BOOKMARK events every ``bookmark_interval`` when the client allows
  them*; ``sendInitialEvents=true`` gets the cached objects as ADDED plus the end bookmark*,
  under the list rule (a list streamed as events: complete, or a 404 before the stream).
  Closed when ``timeoutSeconds`` elapses (absent or 0: ``min-request-timeout`` x (1+rand)),
  when the cloud is healthy again (so clients re-watch upstream), or at hub shutdown.
- create: 201 echo of the body; Events are also cached. A ServiceAccount TokenRequest gets a
  short-lived unverifiable token* (see ``_token``). A create that asks the apiserver for a
  decision (Subject/Self/LocalSubjectAccessReview, TokenReview, SelfSubjectRulesReview,
  CertificateSigningRequest) or acts through a subresource (an eviction, a binding) is a 503
  Status naming why*: YurtHub echoes 201, a review without a decision, an eviction that never
  happened.
- delete/deletecollection: 403 Status.
- update/patch: the cached object (the mutation goes nowhere and is not stored); a JSON merge
  patch is applied to the answer* so the client reads back what it set (``cache.patching``).
- a component that is not a cache agent: 503* (YurtHub: 400), since the real cause is the cloud
  being away, and 503 makes clients retry rather than give up.
- ``/version`` and discovery documents: the cached document (aggregated or legacy, whichever the
  Accept header prefers and the cache holds); 404 for an uncached discovery path*. Any other
  non-resource request (``/healthz``, ``/openapi/v2``, a POST): a 503 Status naming the path and
  why* (YurtHub: 400 "local proxy does not support request").

Errors are Kubernetes Status objects. Bodies are spliced from stored bytes, never re-encoded
(except for views, which are built, and objects a response filter changes: the cache stores
what the cloud sent, and offline answers go through the same filters as online ones).

Wire format: the cache holds each object as it came, JSON or protobuf (kubelet and kube-proxy
ask for protobuf). A get or list of whole objects by a client that lists protobuf first is
answered in protobuf when every object it returns is stored so: a list is the stored messages
concatenated in the list message (``kubeproto.enveloping``; byte for byte what the apiserver
sends for the same objects), never decoded unless a filter reads them; so is a streaming list
(``sendInitialEvents``: protobuf watch frames of the stored objects). Otherwise, and for JSON
clients, views and plain watches (offline they carry bookmarks only), the answer is JSON
(protobuf objects converted as they are read); a client that takes only protobuf then gets a
406 offline (online, the cloud answers), except a plain watch: protobuf bookmarks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from aiohttp import web

from inputbounds import nesting
from yurthub import requestinfo, statuses
from yurthub.authn import offlinetokens
from yurthub.cache import (
    agents,
    cacheability,
    coverage,
    entries,
    framing,
    keys,
    patching,
    selectors,
    store,
    tables,
)
from yurthub.kubeproto import converting, enveloping, wire
from yurthub.proxy import seams

logger = logging.getLogger(__name__)

JSON = "application/json"
MAX_REQUEST_BODY = 3 << 20
"""The apiserver's own request body limit (3 MiB)."""
HEALTH_POLL = 0.5
"""Seconds between looks at cloud health while holding a watch open."""

HealthView = Callable[[], bool]
"""True when some backend is healthy (``health.HealthChecker.any_healthy``)."""


class Answerer:
    """``seams.LocalAnswerer`` over one ``store.Store``."""

    def __init__(
        self,
        cache: store.Store,
        agent_set: agents.AgentSet,
        *,
        min_request_timeout: float,
        bookmark_interval: float,
        cloud_healthy: HealthView | None = None,
        clock: Callable[[], float] = time.time,
        tokens: offlinetokens.OfflineTokens | None = None,
    ) -> None:
        """``tokens``: issues offline TokenRequest answers (shared with the hub's token
        verifier, so a pod holding one is recognised)."""
        self._store = cache
        self._agents = agent_set
        self._min_request_timeout = min_request_timeout
        self._bookmark_interval = bookmark_interval
        self.cloud_healthy: HealthView = cloud_healthy or (lambda: False)
        self._clock = clock
        self._closing = asyncio.Event()
        self.tokens = tokens or offlinetokens.OfflineTokens(lambda: ())
        self.filters: seams.ResponseFilter | None = None
        """The response filters: offline answers are filtered as online ones (set by the
        assembly; None: unfiltered)."""

    def close(self) -> None:
        """End every held watch now (hub shutdown)."""
        self._closing.set()

    async def answer(
        self, request: web.Request, info: requestinfo.RequestInfo, *, reason: str
    ) -> web.StreamResponse | None:
        why = seams.LocalReason(reason)
        try:
            return await self._answer(request, info, why)
        except _Reply as reply:
            return reply.response
        except store.CorruptRead:
            # Counted and being dropped by the store: a cache miss like any other. Online the
            # request goes (or went) upstream; offline nothing else can answer.
            if why is not seams.LocalReason.OFFLINE:
                return None
            return _not_found(info, "" if info.verb == "list" else None)

    async def _answer(
        self, request: web.Request, info: requestinfo.RequestInfo, reason: seams.LocalReason
    ) -> web.StreamResponse | None:
        if reason is seams.LocalReason.KUBELET_LEASE:
            return await self._kubelet_lease(request, info)
        if reason is seams.LocalReason.KUBELET_NODE:
            if info.verb != "get" or not self._store.entry(self._object_key(info)):
                return None
            return await self._get(request, info, reason)
        if not info.is_resource_request:
            return await self._document(info, reason)
        if info.partition is None:
            # A Bearer token the hub cannot verify proves no identity: its partition is
            # unknown, and the component's belongs to the node (THREAT_MODEL.md).
            if reason is seams.LocalReason.UPSTREAM_ERROR:
                return None
            return _status(
                401,
                "Unauthorized: the cloud is unreachable and the hub cannot verify this token "
                "offline (expired, another audience, or the issuer's keys are not known yet)",
            )
        verb = info.verb
        if verb == "watch":
            return await self._watch(request, info)
        if reason is seams.LocalReason.UPSTREAM_ERROR and verb not in ("get", "list"):
            return None
        if verb == "create":
            if info.resource in cacheability.NEVER_CACHED_RESOURCES or (
                info.subresource and (info.resource, info.subresource) != _TOKEN_REQUEST
            ):
                what = f"{info.resource}/{info.subresource}" if info.subresource else info.resource
                return _unavailable(
                    f"the cloud is unreachable: only the apiserver can answer a create of {what} "
                    "(the hub does not make up its decision)"
                )
            return await self._create(request, info)
        if verb in ("delete", "deletecollection"):
            return _status(
                403,
                "delete request is not supported in local cache",
                details={"name": info.name, "group": info.group, "kind": info.resource},
            )
        if verb not in ("get", "list", "update", "patch"):
            return None
        if not cacheability.is_cacheable_request(info, self._agents.allows):
            if reason is seams.LocalReason.UPSTREAM_ERROR:
                return None
            return _status(
                503,
                f"the cloud is unreachable and the hub does not cache for component "
                f"{info.component!r} ({info.verb} {info.resource}); add it to --cache-agents "
                f"or the yurt-hub-cfg ConfigMap",
            )
        if verb == "list":
            return await self._list(request, info, reason)
        if verb == "get":
            return await self._get(request, info, reason)
        return await self._mutation(request, info)

    # --- get / update / patch ------------------------------------------------------------------

    def _object_key(self, info: requestinfo.RequestInfo, partial: str = "") -> keys.ObjectKey:
        scope = keys.Scope(info.owner, info.resource, info.version, info.group, partial)
        return keys.object_key(scope, info.namespace, info.name)

    async def _read(self, key: keys.ObjectKey, *, as_stored: bool = False) -> bytes | None:
        if self._store.entry(key) is None:
            return None
        return await self._store.body(key, as_stored=as_stored)

    def _scopes(
        self, info: requestinfo.RequestInfo, media: cacheability.MediaType
    ) -> list[keys.Scope]:
        """Scopes that can answer, best first: a view is built from full objects when cached,
        else from the metadata-only objects kubectl's Tables carried."""
        full = keys.Scope(info.owner, info.resource, info.version, info.group)
        if media.representation is cacheability.Representation.PARTIAL:
            return [dataclasses.replace(full, partial=media.partial_version), full]
        if media.representation is cacheability.Representation.TABLE:
            return [full, dataclasses.replace(full, partial="v1")]
        return [full]

    async def _get(
        self, request: web.Request, info: requestinfo.RequestInfo, reason: seams.LocalReason
    ) -> web.StreamResponse | None:
        media = _requested(info, reason)
        if media is None:
            return None
        body = None
        scope = None
        candidates = self._scopes(info, media)
        protobuf = _wants_protobuf(info, media)
        for scope in candidates:
            key = keys.object_key(scope, info.namespace, info.name)
            body = await self._read(key, as_stored=protobuf)
            if body is not None:
                break
        if body is None or scope is None:
            if reason is seams.LocalReason.UPSTREAM_ERROR:
                return None
            return _not_found(info)
        if protobuf:
            if store.is_protobuf(body):
                stored = self.filters.stored(info) if self.filters is not None else None
                return _protobuf(body if stored is None else stored.protobuf_object(body))
            if not requestinfo.accepts_json(info.accept):
                return _unacceptable(reason)
        if media.representation is cacheability.Representation.OBJECT:
            return _json(200, self._filtered(info, body))
        if media.representation is cacheability.Representation.PARTIAL and scope.partial:
            return _json(200, body)
        obj = framing.parse_object(body)
        if media.representation is cacheability.Representation.PARTIAL:
            return _json(200, orjson.dumps(tables.partial(obj, media.partial_version)))
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        entry = self._store.entry(keys.object_key(scope, info.namespace, info.name))
        view = tables.table(
            info.resource,
            [obj],
            resource_version=rv,
            now=self._clock(),
            include_object=request.query.get("includeObject", "Metadata"),
            columns=self._columns(candidates),
            cells=[entry.cells if entry is not None else None],
        )
        return _json(200, orjson.dumps(view))

    async def _mutation(
        self, request: web.Request, info: requestinfo.RequestInfo
    ) -> web.StreamResponse:
        body = await self._read(self._object_key(info))
        if body is None:
            return _not_found(info)
        if info.verb == "patch" and info.body_content_type == patching.MERGE_PATCH:
            patch = await _read_json(request)
            cached = framing.parse_object(body)
            try:
                patched = patching.merge_patch(cached, patch)
            except patching.PatchError as e:
                logger.info("refused an offline merge patch of %s: %s", info.describe(), e)
                return _status(400, str(e))
            if isinstance(patched, dict):
                # The identity of the object is not the client's to change (nor its shape).
                meta = patched.get("metadata")
                patched["metadata"] = {
                    **(meta if isinstance(meta, dict) else {}),
                    **_identity(cached),
                }
                return _json(200, self._filtered(info, orjson.dumps(patched)))
        return _json(200, self._filtered(info, body))

    # --- response filters (the cache stores what the cloud sent) ---------------------------------

    def _filtered(self, info: requestinfo.RequestInfo, body: bytes) -> bytes:
        stored = self.filters.stored(info) if self.filters is not None else None
        return body if stored is None else stored.object(body)

    # --- list ------------------------------------------------------------------------------------

    async def _list(
        self, request: web.Request, info: requestinfo.RequestInfo, reason: seams.LocalReason
    ) -> web.StreamResponse | None:
        media = _requested(info, reason)
        if media is None:
            return None
        try:
            labels = selectors.parse_labels(info.label_selector)
            fields = selectors.parse_fields(info.field_selector)
        except selectors.SelectorError as e:
            return _status(400, str(e))
        scopes = self._scopes(info, media)
        listing = self._listing(info, scopes, labels, fields)
        if listing is None or (
            not listing.count and (_kubelet_pods(info) or listing.record is None)
        ):
            if reason is seams.LocalReason.UPSTREAM_ERROR:
                return None  # the upstream's failure is the truer answer
            if listing is None or _kubelet_pods(info):
                lost = self._lost(info, scopes, labels, fields) if listing is None else ""
                return _not_found(info, "", lost=lost)
            # Named, and not cached: an empty list, as YurtHub answers (reference §3.7 step 3).
        scope, record = listing.scope, listing.record
        rv = max(listing.rv, record.rv if record is not None else -1)
        resource_version = "" if rv < 0 else str(rv)
        if record is not None and record.rv == rv:
            resource_version = record.resource_version
        if _wants_protobuf(info, media):
            answer = await self._protobuf_list(request, info, listing, resource_version)
            if answer is not None:
                return answer
            if not requestinfo.accepts_json(info.accept):
                return _unacceptable(reason)
        pages = self._pages(info, listing)
        if media.representation is cacheability.Representation.OBJECT:
            pages = self._filtered_pages(info, pages)
        if media.representation is cacheability.Representation.OBJECT or (
            media.representation is cacheability.Representation.PARTIAL and scope.partial
        ):
            kind = self._kind(scope, record, listing)
            api_version = f"meta.k8s.io/{scope.partial}" if scope.partial else _api_version(info)
            meta = {"resourceVersion": resource_version}
            head = {"kind": f"{kind}List", "apiVersion": api_version, "metadata": meta, "items": []}
            return await _stream_items(request, _open_items(head), pages)
        # A view: each stored object is decoded, turned into its row or item and encoded again,
        # a slice at a time (decoding 10,000 pods at once would take ~7x their JSON in memory).
        version = media.partial_version
        if media.representation is cacheability.Representation.PARTIAL:
            view = tables.partial_list([], resource_version, version)

            def convert(body: bytes) -> bytes:
                return orjson.dumps(tables.partial(framing.parse_object(body), version))
        else:
            full = not scope.partial  # the partial scope holds metadata only
            columns = (record.columns if record is not None else None) or self._columns(
                self._scopes(info, media)
            )
            view = tables.table_head(
                info.resource,
                full_objects=full,
                resource_version=resource_version,
                columns=columns,
            )
            now = self._clock()
            include = request.query.get("includeObject", "Metadata")
            cells = {
                key: entry.cells for key, entry in self._chosen(listing) if entry.cells is not None
            }

            def convert(body: bytes) -> bytes:
                obj = framing.parse_object(body)
                meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
                assert isinstance(meta, dict)
                key = keys.object_key(
                    scope, str(meta.get("namespace") or ""), str(meta.get("name") or "")
                )
                row = tables.table_row(
                    info.resource,
                    obj,
                    full_objects=full,
                    now=now,
                    include_object=include,
                    columns=columns,
                    cells=cells.get(key),
                )
                return orjson.dumps(row)

        return await _stream_items(request, _open_items(view), pages, convert)

    async def _protobuf_list(
        self,
        request: web.Request,
        info: requestinfo.RequestInfo,
        listing: _Listing,
        resource_version: str,
    ) -> web.StreamResponse | None:
        """The list in protobuf, its items' stored messages concatenated (never decoded unless
        a filter reads them); None when some object is stored as JSON (a JSON client cached it,
        or an older hub did): then the JSON answer."""
        stored = self.filters.stored(info) if self.filters is not None else None
        items: list[wire.Bytes] = []
        async for page in self._pages(info, listing, as_stored=True):
            for body in page:
                if not store.is_protobuf(body):
                    return None
                start, end = _raw_span(body)
                if stored is None:
                    items.append(memoryview(body)[start:end])
                    continue
                kept = stored.protobuf_item(body[start:end])
                if kept is not None:
                    items.append(kept)
        kind = self._kind(listing.scope, listing.record, listing)
        assembled = enveloping.ListBody(_api_version(info), f"{kind}List", resource_version, items)
        count = len(items)
        del items
        if assembled.size <= _ONE_WRITE:
            return _protobuf(b"".join(assembled.parts()))
        resp = web.StreamResponse(status=200)
        resp.headers["Content-Type"] = PROTOBUF
        resp.content_length = assembled.size
        try:
            await resp.prepare(request)
            for part in assembled.parts():
                await resp.write(part)
            await resp.write_eof()
        except ConnectionError:
            pass  # the client went away mid-list
        del assembled
        if count > _TRIM_ITEMS:
            # The list was held whole (its length comes first): give the heap back.
            await asyncio.get_running_loop().run_in_executor(None, store.trim_heap)
        return resp

    def _chosen(self, listing: _Listing) -> list[tuple[keys.ObjectKey, entries.Entry]]:
        """The listing's objects (keys made now when it is the whole range)."""
        if listing.chosen is not None:
            return listing.chosen
        return list(self._store.objects(listing.scope, listing.namespace))

    async def _pages(
        self, info: requestinfo.RequestInfo, listing: _Listing, *, as_stored: bool = False
    ) -> AsyncIterator[list[bytes]]:
        """The stored bodies of a listing, a page at a time: the whole range streamed from
        SQLite (the usual offline list: no key per object, never all bodies at once), or the
        chosen keys' bodies."""
        within = _within(listing.scope, info.namespace)
        if listing.chosen is None:
            async for page in self._store.pages(within, as_stored=as_stored):
                yield page
            return
        keys_ = [k for k, _ in listing.chosen]
        for start in range(0, len(keys_), store.PAGE_ROWS):
            chunk = keys_[start : start + store.PAGE_ROWS]
            found = await self._store.bodies(chunk, within=within, as_stored=as_stored)
            yield [b for b in found if b is not None]

    async def _filtered_pages(
        self, info: requestinfo.RequestInfo, pages: AsyncIterator[list[bytes]]
    ) -> AsyncIterator[list[bytes]]:
        """Each page's items through the request's filters, dropped ones left out."""
        stored = self.filters.stored(info) if self.filters is not None else None
        async for page in pages:
            if stored is None:
                yield page
                continue
            kept = []
            for body in page:
                out = stored.item(body)
                if out is not None:
                    kept.append(out)
            yield kept

    def _listing(
        self,
        info: requestinfo.RequestInfo,
        candidates: list[keys.Scope],
        labels: selectors.LabelSelector,
        fields: selectors.FieldSelector,
    ) -> _Listing | None:
        """What a list answers with; None when nothing may answer it (a 404).

        Complete or nothing: only a whole cached list that covers the request answers it
        (``coverage``), with the objects of the scope that match the request's selectors: a
        partial pod list served as whole would make kubelet kill the pods it lacks. Among the
        ``candidates`` (the forms that can answer, best first) the newest covering list wins;
        an equal or undecidable resourceVersion goes to the better form. A request no list
        covers that names its object (``metadata.name``) is answered like a get.
        """
        newest: tuple[keys.Scope, entries.ListRecord] | None = None
        for scope in candidates:
            wanted = keys.list_key(scope, info.namespace, labels.canonical(), fields.canonical())
            found = coverage.best(
                self._store.list_records(scope), wanted, info.namespace, labels, fields
            )
            if found is not None and (newest is None or found[1].rv > newest[1].rv >= 0):
                newest = scope, found[1]
        if newest is not None:
            scope, record = newest
            return self._select(scope, record, info.namespace, labels, fields)
        if fields.name is None:
            return None
        for scope in candidates:
            named = self._select(scope, None, info.namespace, labels, fields)
            if named.count:
                return named
        return _Listing(candidates[0], info.namespace, None, [], 0, -1, "")

    def _lost(
        self,
        info: requestinfo.RequestInfo,
        scopes: list[keys.Scope],
        labels: selectors.LabelSelector,
        fields: selectors.FieldSelector,
    ) -> str:
        """Why a list that would answer was read online but is not cached ("" when none was)."""
        for scope in scopes:
            if why := self._store.list_failure(scope, info.namespace, labels, fields):
                return why
        return ""

    def _select(
        self,
        scope: keys.Scope,
        record: entries.ListRecord | None,
        namespace: str,
        labels: selectors.LabelSelector,
        fields: selectors.FieldSelector,
    ) -> _Listing:
        """The objects of ``scope`` in ``namespace`` (all when empty) the selectors match."""
        if labels.empty() and fields.empty():
            # Everything in range: counted, never keyed (10,000 pods cost no 10,000 keys).
            count, rv, kind = self._store.summary(scope, namespace)
            return _Listing(scope, namespace, record, None, count, rv, kind)
        chosen = _select(self._store, scope, namespace, labels, fields)
        rv = max((e.rv for _, e in chosen), default=-1)
        kind = chosen[0][1].kind if chosen else ""
        return _Listing(scope, namespace, record, chosen, len(chosen), rv, kind)

    def _columns(self, scopes: list[keys.Scope]) -> tuple[Any, ...] | None:
        """The newest Table column definitions cached for these scopes' resource."""
        best: entries.ListRecord | None = None
        for scope in scopes:
            for _, record in self._store.list_records(scope):
                if record.columns and (best is None or record.rv > best.rv):
                    best = record
        return best.columns if best is not None else None

    def _kind(
        self, scope: keys.Scope, record: entries.ListRecord | None, listing: _Listing | None
    ) -> str:
        if scope.partial:
            return "PartialObjectMetadata"
        if record is not None and record.kind:
            return record.kind
        if listing is not None and listing.kind:
            return listing.kind
        for _, other in self._store.list_records(scope):
            if other.kind:
                return other.kind
        return ""

    # --- watch -----------------------------------------------------------------------------------

    async def _watch(
        self, request: web.Request, info: requestinfo.RequestInfo
    ) -> web.StreamResponse:
        if info.timeout_seconds:  # 0 is "not given", as on the apiserver
            hold = float(info.timeout_seconds)
        else:
            hold = self._min_request_timeout * (1 + random.random())
        deadline = asyncio.get_running_loop().time() + hold
        scope = keys.Scope(info.owner, info.resource, info.version, info.group)
        try:
            labels = selectors.parse_labels(info.label_selector)
            fields = selectors.parse_fields(info.field_selector)
        except selectors.SelectorError as e:
            return _status(400, str(e))
        list_key = keys.list_key(scope, info.namespace, labels.canonical(), fields.canonical())
        bookmarks = info.allow_watch_bookmarks
        initial = None
        protobuf = _protobuf_first(info)
        stored: list[bytes] | None = None
        if _flag(request.query.get("sendInitialEvents", "")) and bookmarks:
            # A list streamed as events: complete or nothing, as a list (``_listing``).
            initial = self._listing(info, [scope], labels, fields)
            if initial is None or (not initial.count and _kubelet_pods(info)):
                lost = self._lost(info, [scope], labels, fields) if initial is None else ""
                return _not_found(info, "", lost=lost)
            if protobuf:
                stored = await self._protobuf_objects(info, initial)
                if stored is None:
                    if not requestinfo.accepts_json(info.accept):
                        return _status(406, NOT_ACCEPTABLE)
                    protobuf = False
        elif requestinfo.accepts_json(info.accept):
            # Offline a plain watch carries bookmarks only: JSON, as before, for any client
            # that takes it; a protobuf-only client gets protobuf ones.
            protobuf = False
        content_type = enveloping.WATCH_CONTENT_TYPE if protobuf else JSON
        resp = web.StreamResponse(status=200, headers={"Content-Type": content_type})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            if stored is not None and initial is not None:
                await self._protobuf_initial_events(resp, info, list_key, initial, stored)
                held = len(stored)
                del stored
                if held > _TRIM_ITEMS:
                    await asyncio.get_running_loop().run_in_executor(None, store.trim_heap)
            elif initial is not None:
                try:
                    await self._initial_events(resp, info, list_key, initial)
                except store.CorruptRead:
                    # The list it streams is no longer whole: end the watch, the client lists
                    # again and gets the 404 a miss is.
                    await resp.write_eof()
                    return resp
            next_bookmark = asyncio.get_running_loop().time() + self._bookmark_interval
            while True:
                now = asyncio.get_running_loop().time()
                if now >= deadline or self._closing.is_set() or self.cloud_healthy():
                    break
                if request.transport is None or request.transport.is_closing():
                    break
                if bookmarks and now >= next_bookmark:
                    await resp.write(self._bookmark(info, scope, list_key, protobuf=protobuf))
                    next_bookmark = now + self._bookmark_interval
                wake = min(deadline, next_bookmark if bookmarks else deadline, now + HEALTH_POLL)
                await asyncio.sleep(max(0.0, wake - now))
            await resp.write_eof()
        except ConnectionError:
            pass
        return resp

    def _watch_rv(self, scope: keys.Scope, list_key: keys.ListKey, namespace: str) -> str:
        record = self._store.list_record(list_key)
        if record is not None and record.resource_version:
            return record.resource_version
        best = max((e.rv for _, e in self._store.objects(scope, namespace)), default=-1)
        return str(best) if best >= 0 else "0"

    def _bookmark(
        self,
        info: requestinfo.RequestInfo,
        scope: keys.Scope,
        list_key: keys.ListKey,
        *,
        protobuf: bool = False,
        annotations: dict[str, str] | None = None,
    ) -> bytes:
        record = self._store.list_record(list_key)
        kind = self._kind(scope, record, None)
        rv = self._watch_rv(scope, list_key, info.namespace)
        if protobuf:
            body = enveloping.bookmark(_api_version(info), kind, rv, annotations)
            return enveloping.watch_frame("BOOKMARK", body)
        meta: dict[str, Any] = {"resourceVersion": rv}
        if annotations:
            meta["annotations"] = annotations
        obj = {"kind": kind, "apiVersion": _api_version(info), "metadata": meta}
        return orjson.dumps({"type": "BOOKMARK", "object": obj}) + b"\n"

    async def _protobuf_objects(
        self, info: requestinfo.RequestInfo, listing: _Listing
    ) -> list[bytes] | None:
        """The listing's stored objects when every one is protobuf (filtered, dropped ones
        left out), else None; read whole before a stream starts, as a list answer is."""
        stored = self.filters.stored(info) if self.filters is not None else None
        out: list[bytes] = []
        async for page in self._pages(info, listing, as_stored=True):
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
        list_key: keys.ListKey,
        listing: _Listing,
        bodies: list[bytes],
    ) -> None:
        """A streaming list in protobuf frames: each stored object as ADDED, then the end
        bookmark."""
        frame = enveloping.watch_frame
        for start in range(0, len(bodies), store.PAGE_ROWS):
            page = bodies[start : start + store.PAGE_ROWS]
            await resp.write(b"".join(frame("ADDED", body) for body in page))
        await resp.write(
            self._bookmark(info, listing.scope, list_key, protobuf=True, annotations=_END)
        )

    async def _initial_events(
        self,
        resp: web.StreamResponse,
        info: requestinfo.RequestInfo,
        list_key: keys.ListKey,
        listing: _Listing,
    ) -> None:
        # A list streamed: a filter's dropped object is left out.
        async for page in self._filtered_pages(info, self._pages(info, listing)):
            if page:
                events = b"}\n".join(b'{"type":"ADDED","object":' + body for body in page)
                await resp.write(events + b"}\n")
        await resp.write(self._bookmark(info, listing.scope, list_key, annotations=_END))

    # --- create ----------------------------------------------------------------------------------

    async def _create(
        self, request: web.Request, info: requestinfo.RequestInfo
    ) -> web.StreamResponse:
        body = await _read_body(request)
        if info.resource == "serviceaccounts" and info.subresource == "token":
            return self._token(info, body)
        if (
            info.resource == "events"
            and not info.subresource
            and info.body_content_type == JSON
            and cacheability.is_cacheable_request(info, self._agents.allows)
        ):
            scope = keys.Scope(info.owner, info.resource, info.version, info.group)
            self._store.submit(store.PutObject(scope, body, info.namespace))
        resp = web.Response(status=201, body=body)
        resp.content_type = info.body_content_type or JSON
        return resp

    def _token(self, info: requestinfo.RequestInfo, body: bytes) -> web.StreamResponse:
        """A TokenRequest answered offline.

        kubelet needs a token to start (or restart) a pod with a projected service-account
        volume. Like YurtHub we answer with a token of our own; unlike YurtHub it is signed with
        a random per-process key (``authn.offlinetokens``: nobody can verify it but this hub,
        nobody can forge one from a well-known key) and lives one minute, so kubelet swaps it
        for a real one soon after the cloud comes back. The pod reaches the hub with it and
        reads its ServiceAccount's cache partition; the real apiserver rejects it, which is
        right.
        """
        try:
            request_obj = _decoded(info, body, self._store.transcoder.converter) if body else {}
        except ValueError as e:
            return _status(400, f"the TokenRequest body cannot be read: {e}")
        spec = request_obj.get("spec") if isinstance(request_obj.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        audiences = spec.get("audiences")
        wanted = [str(a) for a in audiences] if isinstance(audiences, list) else []
        token, expiry = self.tokens.mint(info.namespace, info.name, wanted, self._clock())
        expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expiry))
        answer = {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": info.name, "namespace": info.namespace},
            "spec": {**spec, "expirationSeconds": offlinetokens.LIFETIME},
            "status": {"token": token, "expirationTimestamp": expires},
        }
        return _json(201, orjson.dumps(answer))

    # --- kubelet's lease -------------------------------------------------------------------------

    async def _kubelet_lease(
        self, request: web.Request, info: requestinfo.RequestInfo
    ) -> web.StreamResponse | None:
        """kubelet's node lease, answered locally while the hub renews the real one (§2.5).

        With nothing cached and the cloud healthy we return None: the request goes upstream
        once and its answer is cached; from then on the hub answers.
        """
        if info.verb not in ("get", "update", "create", "patch") or (
            not info.name and info.verb != "create"
        ):
            return None
        key = self._object_key(info)
        cached = self._store.entry(key) is not None
        if not cached and self.cloud_healthy():
            return None
        if info.verb == "get":
            body = await self._read(key)
            if body is None:
                return _not_found(info)
            return _json(200, body)
        if info.verb == "patch":
            return await self._mutation(request, info)
        body = await _read_body(request)
        try:
            lease = _decoded(info, body, self._store.transcoder.converter)
        except ValueError as e:
            return _status(400, f"the Lease body cannot be read: {e}")
        # The cache keeps JSON (kubelet PUTs protobuf and accepts a JSON answer).
        body = orjson.dumps(lease) if info.body_content_type == PROTOBUF else body
        if lease.get("kind") not in (None, "Lease"):
            return _status(400, f"the body is a {lease.get('kind')!r}, not a Lease")
        meta = lease.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name or (info.name and name != info.name):
            # It is stored under the name it carries: it has to be the one asked for.
            return _status(
                400, f"the Lease's metadata.name {name!r} must be set and match the URL's"
            )
        scope = keys.Scope(info.owner, info.resource, info.version, info.group)
        # A create is POSTed to the collection: the name to look for is the body's.
        if info.verb == "create" and self._store.entry(
            keys.object_key(scope, info.namespace, name)
        ):
            return _json(
                409, statuses.encode(statuses.already_exists(info.resource, name, info.group))
            )
        # kubelet's renewal is what the cloud would have stored: keep it so a later GET agrees.
        self._store.submit(store.PutObject(scope, body, info.namespace, local=True))
        return _json(201 if info.verb == "create" else 200, body)

    # --- non-resource documents -----------------------------------------------------------------

    async def _document(
        self, info: requestinfo.RequestInfo, reason: seams.LocalReason
    ) -> web.StreamResponse | None:
        path = info.path.rstrip("/") or "/"
        offline = reason is seams.LocalReason.OFFLINE
        if info.verb != "get":
            return _unreachable_path(path) if offline else None
        try:
            candidates = _document_keys(path, info.accept)
        except keys.BadKey:
            return _unreachable_path(path) if offline else None
        for key in candidates:
            found = await self._store.document(key)
            if found is not None:
                content_type, body = found
                resp = web.Response(status=200, body=body)
                resp.headers["Content-Type"] = content_type
                return resp
        if reason is seams.LocalReason.UPSTREAM_ERROR:
            return None
        if _is_discovery(path):
            return _status(
                404,
                f"the cloud is unreachable and {path} is not in the hub's offline cache (the hub "
                "keeps /version, /api and /apis; other discovery documents only once a client "
                "read them online)",
            )
        return _unreachable_path(path)


@dataclasses.dataclass(frozen=True, slots=True)
class _Listing:
    """What an offline list answers with."""

    scope: keys.Scope
    namespace: str
    record: entries.ListRecord | None
    """The cached list covering the request (its own when cached); None: answered by name."""
    chosen: list[tuple[keys.ObjectKey, entries.Entry]] | None
    """The objects selected; None: every object of the scope (in the namespace)."""
    count: int
    rv: int
    """The highest resourceVersion among them (-1: none)."""
    kind: str
    """The kind of one of them ("" when none)."""


class _Reply(Exception):
    """Raised with a finished answer from deep inside (bad request bodies)."""

    def __init__(self, response: web.StreamResponse) -> None:
        super().__init__(response.status)
        self.response = response


# --- helpers -------------------------------------------------------------------------------------


PROTOBUF = requestinfo.PROTOBUF_MEDIA_TYPE


def _decoded(
    info: requestinfo.RequestInfo, body: bytes, converter: converting.Converter
) -> dict[str, Any]:
    """A request body as a JSON-shaped dict: JSON, or protobuf (what Go clients send by
    default: kubelet's lease renewals and TokenRequests). ``ValueError`` when unreadable."""
    if info.body_content_type == PROTOBUF:
        obj = converter.object(body)
    else:
        try:
            obj = framing.parse_object(body)
        except framing.BadBody as e:
            raise ValueError(f"not JSON: {e}") from e
    nesting.check(obj)  # a ValueError: it is re-encoded, and orjson stops at 254 levels
    return obj


def _status(code: int, message: str, details: statuses.StatusDetails | None = None) -> web.Response:
    return _json(code, statuses.encode(statuses.failure(code, message, details=details)))


_TOKEN_REQUEST = ("serviceaccounts", "token")


def _unavailable(message: str) -> web.Response:
    """503 ServiceUnavailable with ``Retry-After``: clients retry, and get the real answer
    once the cloud is back."""
    resp = _status(503, message)
    resp.headers["Retry-After"] = "10"
    return resp


def _unreachable_path(path: str) -> web.Response:
    shown = path if len(path) <= 200 else path[:200] + "..."
    return _unavailable(
        f"the cloud is unreachable: {shown} is answered only by the apiserver (offline the hub "
        "serves /version and the discovery documents it cached)"
    )


OFFLINE_LIST_MISS = "not in the hub's offline cache (never listed while online)"
OFFLINE_LIST_LOST = (
    "not in the hub's offline cache (the list was read online but could not be stored: {})"
)
OFFLINE_OBJECT_MISS = "not in the hub's offline cache (never read while online, or deleted since)"


def _not_found(
    info: requestinfo.RequestInfo, name: str | None = None, *, lost: str = ""
) -> web.Response:
    """The apiserver's NotFound (clients read ``reason``), its message saying why: offline a 404
    is a cache miss, not a deletion the cloud reported. ``lost``: why the list that would answer
    was not stored (its write failed: a full disk)."""
    what = info.name if name is None else name
    status = statuses.not_found(info.resource, what, info.group)
    why = OFFLINE_OBJECT_MISS if what else OFFLINE_LIST_MISS
    if lost and not what:
        why = OFFLINE_LIST_LOST.format(lost)
    status["message"] = f"{status['message']}: {why}"
    return _json(404, statuses.encode(status))


def _json(code: int, body: bytes) -> web.Response:
    resp = web.Response(status=code, body=body)
    resp.headers["Content-Type"] = JSON
    return resp


def _requested(
    info: requestinfo.RequestInfo, reason: seams.LocalReason
) -> cacheability.MediaType | None:
    """What to answer with; None when only the cloud could answer this client (not JSON).

    Offline that is a 406. Otherwise the request goes (or went) upstream, which speaks protobuf
    (kubelet's get-node) or whose failure is the truer answer (a transport error).
    """
    media = cacheability.requested_media(info)
    if media.representation is not cacheability.Representation.OTHER:
        return media
    if _protobuf_first(info):
        # Protobuf only: answered when the cache holds the objects as protobuf (else a 406).
        return cacheability.MediaType(cacheability.Representation.OBJECT)
    response = _unacceptable(reason)
    if response is not None:
        raise _Reply(response)
    return None


NOT_ACCEPTABLE = (
    "offline, the hub answers from what it cached: JSON, or protobuf for what came as "
    "protobuf; accept application/json"
)


def _protobuf_first(info: requestinfo.RequestInfo) -> bool:
    return info.content_type == PROTOBUF and info.partial_object_metadata is None


def _wants_protobuf(info: requestinfo.RequestInfo, media: cacheability.MediaType) -> bool:
    """Whole objects for a client that prefers protobuf (kubelet, kube-proxy: what they
    asked for, and what the cache holds for them as received)."""
    return media.representation is cacheability.Representation.OBJECT and _protobuf_first(info)


def _unacceptable(reason: seams.LocalReason) -> web.Response | None:
    """A protobuf-only client asking for what the cache holds as JSON: offline a 406, else
    left to the cloud."""
    return _status(406, NOT_ACCEPTABLE) if reason is seams.LocalReason.OFFLINE else None


_END = {"k8s.io/initial-events-end": "true"}
"""The annotation of the bookmark that ends a streaming list's initial events."""

_ONE_WRITE = 1 << 20
"""Protobuf list bytes up to which the answer is one write (a bigger one streams in parts)."""


def _raw_span(body: bytes) -> tuple[int, int]:
    """Where a stored protobuf object's message lies in its envelope."""
    try:
        return enveloping.raw_span(body)
    except wire.DecodeError:
        _, _, start, end = converting.envelope_at(body)
        return start, end


def _protobuf(body: bytes) -> web.Response:
    resp = web.Response(status=200, body=body)
    resp.headers["Content-Type"] = PROTOBUF
    return resp


def _flag(value: str) -> bool:
    return value not in ("", "0") and value.lower() != "false"


def _api_version(info: requestinfo.RequestInfo) -> str:
    return f"{info.group}/{info.version}" if info.group else info.version


def _within(scope: keys.Scope, namespace: str) -> keys.ObjectKey:
    return keys.ObjectKey(scope, namespace if scope.namespaced_keys else "", "")


def _identity(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}


def _kubelet_pods(info: requestinfo.RequestInfo) -> bool:
    """Reference §3.7: an empty pod list would make kubelet delete every pod; it is a 404."""
    return info.component == "kubelet" and info.resource == "pods"


def _select(
    cache: store.Store,
    scope: keys.Scope,
    namespace: str,
    labels: selectors.LabelSelector,
    fields: selectors.FieldSelector,
) -> list[tuple[keys.ObjectKey, entries.Entry]]:
    """The objects of ``scope`` in ``namespace`` (all when empty) the selectors match."""
    name = fields.name
    if name is not None and namespace:
        key = keys.object_key(scope, namespace, name)
        found = cache.entry(key)
        candidates = [] if found is None else [(key, found)]
    else:
        candidates = list(cache.objects(scope, namespace))
    if labels.empty() and fields.empty():
        return candidates
    matches = coverage.matcher(labels, fields)
    return [(key, entry) for key, entry in candidates if matches(key.namespace, key.name, entry)]


def _open_items(document: dict[str, Any]) -> bytes:
    """``document`` encoded up to the inside of its last member, an empty list of items."""
    encoded = orjson.dumps(document)
    if not encoded.endswith(b"[]}"):
        raise AssertionError("the item list must be the document's last member")
    return encoded[:-2]


async def _stream_items(
    request: web.Request,
    head: bytes,
    pages: AsyncIterator[list[bytes]],
    convert: Callable[[bytes], bytes] | None = None,
) -> web.StreamResponse:
    """A list written a page of stored bodies at a time, never joined into one buffer.

    With ``convert`` (a view made from each stored object) the items are made a page at a
    time too: at most one page of decoded objects exists, and the loop gets a turn between
    pages. A list that fits one page is one answer with its length; a longer one is sent
    chunked while the next page is read. A read that fails past the first page (a corrupt
    row) cuts the answer: the client sees a broken body, never a shorter list.
    """
    first: list[bytes] = await anext(pages, [])
    second = await anext(pages, None) if len(first) >= store.PAGE_ROWS else None
    if second is None:
        items = first if convert is None else [convert(b) for b in first]
        return _json(200, b"".join((head, b",".join(items), b"]}")))
    resp = web.StreamResponse(status=200)
    resp.headers["Content-Type"] = JSON
    resp.enable_chunked_encoding()
    written = 0
    try:
        await resp.prepare(request)
        await resp.write(head)
        for page in (first, second):
            written = await _write_page(resp, page, convert, written)
        del first, second
        async for page in pages:
            written = await _write_page(resp, page, convert, written)
        await resp.write(b"]}")
        await resp.write_eof()
    except ConnectionError:
        pass  # the client went away mid-list (reset, or "Connection lost" while draining)
    except store.CorruptRead:
        if request.transport is not None:
            request.transport.close()
    if written > _TRIM_ITEMS:
        await asyncio.get_running_loop().run_in_executor(None, store.trim_heap)
    return resp


_TRIM_ITEMS = 2000
"""Items past which a streamed list gives freed heap back to the OS (``store.trim_heap``)."""


async def _write_page(
    resp: web.StreamResponse,
    page: list[bytes],
    convert: Callable[[bytes], bytes] | None,
    written: int,
) -> int:
    """Write one page's items (after ``written`` others); returns the items written so far."""
    if not page:
        return written
    items = page if convert is None else [convert(b) for b in page]
    if written:
        await resp.write(b"," + b",".join(items))
    else:
        await resp.write(b",".join(items))
    return written + len(items)


def _document_keys(path: str, accept: str) -> list[str]:
    """Stored documents that could answer, in the client's order of preference."""
    out: list[str] = []
    for media, params in requestinfo.media_ranges(accept) or [(JSON, {})]:
        if media not in (JSON, "application/*", "*/*"):
            continue
        profile = ";".join(f"{p}={params[p]}" for p in ("as", "g", "v") if p in params)
        key = keys.nonresource_key(path, profile)
        if key not in out:
            out.append(key)
    return out or [keys.nonresource_key(path)]


def _is_discovery(path: str) -> bool:
    parts = path.strip("/").split("/")
    return path == "/version" or (parts[0] in ("api", "apis") and len(parts) <= 3)


async def _read_body(request: web.Request) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await request.content.read(64 << 10)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_REQUEST_BODY:
            raise _Reply(_status(413, f"request body larger than {MAX_REQUEST_BODY} bytes"))
        chunks.append(chunk)


async def _read_json(request: web.Request) -> Any:
    body = await _read_body(request)
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise _Reply(_status(400, f"the patch is not JSON: {e}")) from e
