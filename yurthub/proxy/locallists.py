"""Offline lists (``local.Answerer``'s list answers, and the listings a watch's initial events
stream): complete or a 404, never partial.

``Lists.listing`` decides what answers (``cache.coverage``: only a whole cached list covering
the request); ``Lists.answer`` writes it as JSON a page at a time, as the stored protobuf
messages concatenated (``kubeproto.enveloping``), or as a view (Table, PartialObjectMetadata)
built a page at a time. The rules are in ``local``'s module docstring.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from aiohttp import web

from yurthub import requestinfo
from yurthub.cache import cacheability, coverage, entries, framing, keys, selectors, store, tables
from yurthub.kubeproto import converting, enveloping, wire
from yurthub.proxy import localkinds, localreplies, seams

ONE_WRITE = 1 << 20
"""Protobuf list bytes up to which the answer is one write (a bigger one streams in parts)."""


def raw_span(body: bytes) -> tuple[int, int]:
    """Where a stored protobuf object's message lies in its envelope."""
    try:
        return enveloping.raw_span(body)
    except wire.DecodeError:
        _, _, start, end = converting.envelope_at(body)
        return start, end


@dataclasses.dataclass(frozen=True, slots=True)
class Listing:
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


def listing_version(listing: Listing) -> str:
    """The resourceVersion an offline answer from ``listing`` is at: its covering list's (its
    record, advanced by watch events and bookmarks), not a newer object's (an object stored
    from a get or a patch answer may be ahead of the events the cache saw for the list, and a
    client that resumes its watch after the heal from a version past events it never received
    would miss them: a pod deleted meanwhile would run on; from the list's version it gets them
    all, the newer object's change once more, which does no harm); a list by name with no
    record: its object's; "" when there is neither. PURE."""
    record = listing.record
    rv = record.rv if record is not None and record.rv >= 0 else listing.rv
    if record is not None and record.rv == rv:
        return record.resource_version
    return "" if rv < 0 else str(rv)


class Lists:
    """The list answers over one ``localreplies.Reader``."""

    def __init__(self, reader: localreplies.Reader) -> None:
        self._reader = reader
        self._kinds = localkinds.Kinds(reader.store)

    async def answer(
        self, request: web.Request, info: requestinfo.RequestInfo, reason: seams.LocalReason
    ) -> web.StreamResponse | None:
        media = localreplies.requested(info, reason)
        if media is None:
            return None
        try:
            labels = selectors.parse_labels(info.label_selector)
            fields = selectors.parse_fields(info.field_selector)
        except selectors.SelectorError as e:
            return localreplies.status(400, str(e))
        scopes = localreplies.scopes(info, media)
        listing = self.listing(info, scopes, labels, fields)
        if listing is None or (
            not listing.count and (kubelet_pods(info) or listing.record is None)
        ):
            if reason is seams.LocalReason.UPSTREAM_ERROR:
                return None  # the upstream's failure is the truer answer
            if listing is None or kubelet_pods(info):
                lost = self.lost(info, scopes, labels, fields) if listing is None else ""
                return localreplies.not_found(info, "", lost=lost)
            # Named, and not cached: an empty list, as YurtHub answers (reference §3.7 step 3).
        scope, record = listing.scope, listing.record
        resource_version = listing_version(listing)
        if localreplies.wants_protobuf(info, media):
            answer = await self._protobuf_list(request, info, listing, resource_version)
            if answer is not None:
                return answer
            if not requestinfo.accepts_json(info.accept):
                return localreplies.unacceptable(reason)
        pages = self.pages(info, listing)
        if media.representation is cacheability.Representation.OBJECT:
            pages = self.filtered_pages(info, pages)
        if media.representation is cacheability.Representation.OBJECT or (
            media.representation is cacheability.Representation.PARTIAL and scope.partial
        ):
            kind = await self.kind(scope, record, listing)
            api_version = (
                f"meta.k8s.io/{scope.partial}" if scope.partial else localreplies.api_version(info)
            )
            meta = {"resourceVersion": resource_version}
            head = {"kind": f"{kind}List", "apiVersion": api_version, "metadata": meta, "items": []}
            return await stream_items(request, open_items(head), pages)
        # A view: each stored object is decoded, turned into its row or item and encoded again,
        # a slice at a time (decoding 10,000 pods at once would take ~7x their JSON in memory).
        version = media.partial_version
        if media.representation is cacheability.Representation.PARTIAL:
            view = tables.partial_list([], resource_version, version)

            def convert(body: bytes) -> bytes:
                return orjson.dumps(tables.partial(framing.parse_object(body), version))
        else:
            full = not scope.partial  # the partial scope holds metadata only
            columns = (record.columns if record is not None else None) or self.columns(
                localreplies.scopes(info, media)
            )
            view = tables.table_head(
                info.resource,
                full_objects=full,
                resource_version=resource_version,
                columns=columns,
            )
            now = self._reader.clock()
            include = request.query.get("includeObject", "Metadata")
            cells = {
                key: entry.cells for key, entry in self.chosen(listing) if entry.cells is not None
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

        return await stream_items(request, open_items(view), pages, convert)

    async def _protobuf_list(
        self,
        request: web.Request,
        info: requestinfo.RequestInfo,
        listing: Listing,
        resource_version: str,
    ) -> web.StreamResponse | None:
        """The list in protobuf, its items' stored messages concatenated (never decoded unless
        a filter reads them); None when some object is stored as JSON (a JSON client cached it,
        or an older hub did): then the JSON answer."""
        stored = self._reader.stored(info)
        items: list[wire.Bytes] = []
        async for page in self.pages(info, listing, as_stored=True):
            for body in page:
                if not store.is_protobuf(body):
                    return None
                start, end = raw_span(body)
                if stored is None:
                    items.append(memoryview(body)[start:end])
                    continue
                kept = stored.protobuf_item(body[start:end])
                if kept is not None:
                    items.append(kept)
        kind = await self.kind(listing.scope, listing.record, listing)
        assembled = enveloping.ListBody(
            localreplies.api_version(info), f"{kind}List", resource_version, items
        )
        count = len(items)
        del items
        if assembled.size <= ONE_WRITE:
            return localreplies.protobuf(b"".join(assembled.parts()))
        resp = web.StreamResponse(status=200)
        resp.headers["Content-Type"] = localreplies.PROTOBUF
        resp.content_length = assembled.size
        try:
            await resp.prepare(request)
            for part in assembled.parts():
                await resp.write(part)
            await resp.write_eof()
        except ConnectionError:
            pass  # the client went away mid-list
        del assembled
        if count > TRIM_ITEMS:
            # The list was held whole (its length comes first): give the heap back.
            await asyncio.get_running_loop().run_in_executor(None, store.trim_heap)
        return resp

    def chosen(self, listing: Listing) -> list[tuple[keys.ObjectKey, entries.Entry]]:
        """The listing's objects (keys made now when it is the whole range)."""
        if listing.chosen is not None:
            return listing.chosen
        return list(self._reader.store.objects(listing.scope, listing.namespace))

    async def pages(
        self, info: requestinfo.RequestInfo, listing: Listing, *, as_stored: bool = False
    ) -> AsyncIterator[list[bytes]]:
        """The stored bodies of a listing, a page at a time: the whole range streamed from
        SQLite (the usual offline list: no key per object, never all bodies at once), or the
        chosen keys' bodies."""
        bounds = within(listing.scope, info.namespace)
        if listing.chosen is None:
            async for page in self._reader.store.pages(bounds, as_stored=as_stored):
                yield page
            return
        chosen = [k for k, _ in listing.chosen]
        async for page in self._reader.store.chosen_pages(chosen, bounds, as_stored=as_stored):
            yield page

    async def filtered_pages(
        self, info: requestinfo.RequestInfo, pages: AsyncIterator[list[bytes]]
    ) -> AsyncIterator[list[bytes]]:
        """Each page's items through the request's filters, dropped ones left out."""
        stored = self._reader.stored(info)
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

    def lost(
        self,
        info: requestinfo.RequestInfo,
        scopes: list[keys.Scope],
        labels: selectors.LabelSelector,
        fields: selectors.FieldSelector,
    ) -> str:
        """Why a list that would answer was read online but is not cached ("" when none was)."""
        for scope in scopes:
            if why := self._reader.store.list_failure(scope, info.namespace, labels, fields):
                return why
        return ""

    def listing(
        self,
        info: requestinfo.RequestInfo,
        candidates: list[keys.Scope],
        labels: selectors.LabelSelector,
        fields: selectors.FieldSelector,
    ) -> Listing | None:
        """What a list answers with; None when nothing may answer it (a 404).

        Complete or nothing: only a whole cached list that covers the request answers it
        (``coverage``), with the objects of the scope that match the request's selectors: a
        partial pod list served as whole would make kubelet kill the pods it lacks. Among the
        ``candidates`` (the forms that can answer, best first) the newest covering list wins;
        an equal or undecidable resourceVersion goes to the better form. A request no list
        covers that names its object (``metadata.name``) is answered like a get.
        """
        newest = self.covering(info, candidates, labels, fields)
        if newest is not None:
            scope, record = newest
            return self.select(scope, record, info.namespace, labels, fields)
        if fields.name is None:
            return None
        for scope in candidates:
            named = self.select(scope, None, info.namespace, labels, fields)
            if named.count:
                return named
        return Listing(candidates[0], info.namespace, None, [], 0, -1, "")

    def covering(
        self,
        info: requestinfo.RequestInfo,
        candidates: list[keys.Scope],
        labels: selectors.LabelSelector,
        fields: selectors.FieldSelector,
    ) -> tuple[keys.Scope, entries.ListRecord] | None:
        """The cached list that answers the request (``listing``'s), with its scope; None
        when no whole list covers it."""
        newest: tuple[keys.Scope, entries.ListRecord] | None = None
        for scope in candidates:
            wanted = keys.list_key(scope, info.namespace, labels.canonical(), fields.canonical())
            found = coverage.best(
                self._reader.store.list_records(scope), wanted, info.namespace, labels, fields
            )
            if found is not None and (newest is None or found[1].rv > newest[1].rv >= 0):
                newest = scope, found[1]
        return newest

    def select(
        self,
        scope: keys.Scope,
        record: entries.ListRecord | None,
        namespace: str,
        labels: selectors.LabelSelector,
        fields: selectors.FieldSelector,
    ) -> Listing:
        """The objects of ``scope`` in ``namespace`` (all when empty) the selectors match."""
        if labels.empty() and fields.empty():
            # Everything in range: counted, never keyed (10,000 pods cost no 10,000 keys).
            count, rv, kind = self._reader.store.summary(scope, namespace)
            return Listing(scope, namespace, record, None, count, rv, kind)
        chosen = select_objects(self._reader.store, scope, namespace, labels, fields)
        rv = max((e.rv for _, e in chosen), default=-1)
        kind = chosen[0][1].kind if chosen else ""
        return Listing(scope, namespace, record, chosen, len(chosen), rv, kind)

    def columns(self, scopes: list[keys.Scope]) -> tuple[Any, ...] | None:
        """The newest Table column definitions cached for these scopes' resource."""
        best: entries.ListRecord | None = None
        for scope in scopes:
            for _, record in self._reader.store.list_records(scope):
                if record.columns and (best is None or record.rv > best.rv):
                    best = record
        return best.columns if best is not None else None

    async def kind(
        self, scope: keys.Scope, record: entries.ListRecord | None, listing: Listing | None
    ) -> str:
        """The item kind of an answer over ``scope`` (``localkinds.Kinds.kind``)."""
        listed = (record.kind if record is not None else "") or (
            listing.kind if listing is not None else ""
        )
        return await self._kinds.kind(scope, listed)


# --- helpers -------------------------------------------------------------------------------------


def within(scope: keys.Scope, namespace: str) -> keys.ObjectKey:
    return keys.ObjectKey(scope, namespace if scope.namespaced_keys else "", "")


def kubelet_pods(info: requestinfo.RequestInfo) -> bool:
    """Reference §3.7: an empty pod list would make kubelet delete every pod; it is a 404."""
    return info.component == "kubelet" and info.resource == "pods"


def select_objects(
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


def open_items(document: dict[str, Any]) -> bytes:
    """``document`` encoded up to the inside of its last member, an empty list of items."""
    encoded = orjson.dumps(document)
    if not encoded.endswith(b"[]}"):
        raise AssertionError("the item list must be the document's last member")
    return encoded[:-2]


async def stream_items(
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
    # Asked even after a short first page: a page of chosen keys is short when some of them
    # went meanwhile, and more pages may follow (a range's short page is its last: free).
    second = await anext(pages, None)
    if second is None:
        items = first if convert is None else [convert(b) for b in first]
        return localreplies.json(200, b"".join((head, b",".join(items), b"]}")))
    resp = web.StreamResponse(status=200)
    resp.headers["Content-Type"] = localreplies.JSON
    resp.enable_chunked_encoding()
    written = 0
    try:
        await resp.prepare(request)
        await resp.write(head)
        for page in (first, second):
            written = await write_page(resp, page, convert, written)
        del first, second
        async for page in pages:
            written = await write_page(resp, page, convert, written)
        await resp.write(b"]}")
        await resp.write_eof()
    except ConnectionError:
        pass  # the client went away mid-list (reset, or "Connection lost" while draining)
    except store.CorruptRead:
        if request.transport is not None:
            request.transport.close()
    if written > TRIM_ITEMS:
        await asyncio.get_running_loop().run_in_executor(None, store.trim_heap)
    return resp


TRIM_ITEMS = 2000
"""Items past which a streamed list gives freed heap back to the OS (``store.trim_heap``)."""


async def write_page(
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
