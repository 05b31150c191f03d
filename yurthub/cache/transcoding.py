"""Protobuf response bodies the tee kept, stored as received (cache writer thread).

The hub passes protobuf from the apiserver to clients that asked for it (kubelet, kube-proxy:
fewer bytes on the edge link, less apiserver CPU), and the cache stores those objects as they
came: each object in the ``k8s\\x00`` envelope a get of it answers with (a list item is put in
one, ``kubeproto.enveloping``). What the index needs (name, namespace, resourceVersion,
labels, the kind's selectable fields: ``selectors.index_paths``) is read from the message by
the converter's plans restricted to those fields (``Converter.skeleton``): a parse and a few
field reads, ~10x cheaper than converting the object. Offline, protobuf clients get the stored
messages back (lists concatenated, ``proxy.local``); JSON readers (kubectl, patches, Tables,
the JSON filters, leases) get exactly the apiserver's JSON, converted when read
(``as_json``, in the store's reader threads). Views (Tables, metadata-only objects) and what
is no list of the built-in API are converted to JSON here, whole, as before.

A relist mostly repeats what is stored: each item's name, namespace and resourceVersion are
read from its ObjectMeta on the wire first, and only items the cache does not hold at that
version are read further.

Invariants: a body that does not decode (a kind outside the built-in API such as a CRD, a
corrupt message) stores nothing: the client has its bytes anyway; a streaming list's initial
events are stored all or nothing (never half a list); in a plain watch a frame that does not
decode is skipped (the object it carried stays as cached until it changes again). Each kind
that fails is logged once (WARNING), later failures at DEBUG.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

from yurthub import jsonbytes
from yurthub.cache import entries, framing, selectors
from yurthub.kubeproto import converting, enveloping, wire

logger = logging.getLogger(__name__)


class Transcoder:
    """Protobuf -> JSON bytes for the cache writer; ``failures`` counts what did not convert."""

    def __init__(self) -> None:
        self._converter = converting.Converter()
        self._logged: set[str] = set()
        self.failures = 0

    @property
    def converter(self) -> converting.Converter:
        """The hub's one converter (local answers read protobuf request bodies with it)."""
        return self._converter

    def body(self, body: wire.Buffer) -> bytes | None:
        """An object (or a view: a Table, a list without items) as JSON, None when it does not
        convert. Lists of the built-in API go through ``parse_list`` instead."""
        try:
            return self.as_json(body)
        except converting.Undecodable as e:
            self.failed(e)
            return None

    def parse_list(
        self, body: wire.Buffer, resource: str
    ) -> tuple[framing.ListHead, Iterator[framing.ListItem]] | None:
        """A protobuf list as ``framing.parse_list`` gives a JSON one: its head, and its items
        with their identity at once, each stored as received (enveloped as a get answers it)
        with the fields the index needs read on demand (``selectors.index_paths`` of
        ``resource``). None: not a list of the built-in API with items (convert it whole with
        ``body``). Raises ``framing.BadBody`` for a list that does not decode, and from an
        item's ``object`` for an item that does not (a list is stored whole or not at all)."""
        try:
            split = self._converter.split_list(body)
        except converting.Undecodable as e:
            self.failed(e)
            raise framing.BadBody(f"protobuf list does not convert: {e}") from e
        if split is None:
            return None
        meta = split.head.get("metadata") or {}
        head = framing.ListHead(
            kind=split.head["kind"],
            api_version=split.head["apiVersion"],
            resource_version=str(meta.get("resourceVersion") or ""),
            continue_token=str(meta.get("continue") or ""),
        )
        paths = selectors.index_paths(resource)

        def items() -> Iterator[framing.ListItem]:
            for span in split.items:
                name, namespace, rv = split.identity(span)
                yield _Lazy(
                    name,
                    namespace,
                    rv,
                    b"",
                    read=functools.partial(_list_item, split, span, head, paths),
                    enveloped=functools.partial(
                        enveloping.envelope_parts, head.api_version, head.item_kind, span
                    ),
                    transcoder=self,
                )

        return head, items()

    def initial_list(
        self, frames: tuple[bytes, ...], resource: str
    ) -> tuple[list[framing.ListItem], str, str, str] | None:
        """A completed protobuf streaming list as (items, end resourceVersion, kind,
        apiVersion): the ADDED objects as ``parse_list``'s items (stored as received, the
        index's fields read when asked). None when it holds anything else (another event
        type, a view, an undecodable frame): convert it whole with ``events``."""
        items: list[framing.ListItem] = []
        end_rv = kind = api_version = ""
        converter = self._converter
        paths = selectors.index_paths(resource)
        for frame in frames:
            try:
                event_type, body = converter.event_parts(frame)
                if event_type == "ADDED":
                    _, item_kind, name, namespace, rv = converter.identity(body)
                    if item_kind in _VIEWS:
                        return None
                    read = functools.partial(converter.skeleton, body, paths)
                    items.append(
                        _Lazy(
                            name,
                            namespace,
                            rv,
                            b"",
                            read=read,
                            enveloped=functools.partial(bytes, body),
                            transcoder=self,
                        )
                    )
                    continue
                if event_type != "BOOKMARK":
                    return None
                bookmark = converter.object(body)
            except converting.Undecodable:
                return None
            meta = bookmark.get("metadata") or {}
            end_rv = str(meta.get("resourceVersion") or "")
            kind, api_version = (
                str(bookmark.get("kind") or ""),
                str(bookmark.get("apiVersion") or ""),
            )
        if not end_rv:
            return None
        return items, end_rv, kind, api_version

    def indexed(self, body: wire.Buffer, resource: str) -> dict[str, Any] | None:
        """What the index needs of one enveloped object (``selectors.index_paths``), which is
        stored as received; None when the body is a view (a Table, metadata only: converted
        whole with ``body``). Raises ``converting.Undecodable`` (the caller counts it with
        ``failed``)."""
        _, kind, _, _ = converting.envelope_at(body)
        if kind in _VIEWS:
            return None
        return self._converter.skeleton(body, selectors.index_paths(resource))

    def watch_events(
        self, frames: tuple[bytes, ...], resource: str
    ) -> Iterator[framing.WatchEvent]:
        """Watch frames as events whose objects are stored as received (``indexed``; views
        and bookmarks converted whole). A frame that does not decode is left out (counted)."""
        for frame in frames:
            try:
                event_type, body = self._converter.event_parts(frame)
                if event_type in ("BOOKMARK", "ERROR"):
                    yield framing.WatchEvent(event_type, self._converter.object(body), b"")
                    continue
                found = self.indexed(body, resource)
                if found is None:
                    obj = self._converter.object(body)
                    yield framing.WatchEvent(event_type, obj, jsonbytes.dumps(obj))
                    continue
                yield framing.WatchEvent(event_type, found, bytes(body))
            except converting.Undecodable as e:
                self.failed(e)

    def as_json(self, body: wire.Buffer) -> bytes:
        """A stored protobuf object as its JSON (offline answers to JSON clients, filters,
        patches, Tables). Raises ``converting.Undecodable``."""
        return jsonbytes.dumps(self._converter.object(body))

    def events(self, frames: tuple[bytes, ...], *, whole: bool) -> tuple[bytes, ...] | None:
        """Watch frames as JSON event lines; ``whole``: all or None."""
        lines: list[bytes] = []
        for frame in frames:
            try:
                lines.append(jsonbytes.dumps(self._converter.event(frame)))
            except converting.Undecodable as e:
                self.failed(e)
                if whole:
                    return None
        return tuple(lines)

    def is_initial_events_end(self, frame: bytes) -> bool:
        """Is this frame the BOOKMARK annotated ``k8s.io/initial-events-end: "true"`` (the tee
        asks on the event loop: a bookmark is a few hundred bytes; every other frame is turned
        away by the byte test)."""
        if b"BOOKMARK" not in frame or b"k8s.io/initial-events-end" not in frame:
            return False
        try:
            event = self._converter.event(frame)
        except converting.Undecodable:
            return False
        meta = event["object"].get("metadata") or {}
        notes = meta.get("annotations") or {}
        return event["type"] == "BOOKMARK" and notes.get("k8s.io/initial-events-end") == "true"

    def failed(self, error: converting.Undecodable) -> None:
        """Count (and log once per kind) a body that did not convert."""
        self.failures += 1
        if error.kind in self._logged:
            logger.debug("cache: protobuf body not cached: %s", error)
            return
        self._logged.add(error.kind)
        logger.warning(
            "cache: a protobuf %s does not convert to JSON, not cached (the client got it "
            "unchanged): %s; further ones are only counted",
            error.kind or "body",
            error,
        )


@dataclasses.dataclass(slots=True)
class _Lazy(framing.ListItem):
    """A protobuf list item or streaming-list object: identity read from the wire, the
    fields the index needs (``read``) on first use, stored as received (``enveloped``: the
    enveloped object, a list item's in parts around a view of the list body, joined only
    into the entry written; ``source`` stays empty)."""

    read: Callable[[], dict[str, Any]] | None = None
    enveloped: Callable[[], entries.Body] | None = None
    transcoder: Transcoder | None = None

    @property
    def object(self) -> dict[str, Any]:
        if self.decoded is None:
            assert self.read is not None and self.transcoder is not None
            try:
                self.decoded = self.read()
            except converting.Undecodable as e:
                self.transcoder.failed(e)
                raise framing.BadBody(f"protobuf object does not decode: {e}") from e
        return self.decoded

    @property
    def stored(self) -> entries.Body:
        assert self.enveloped is not None
        return self.enveloped()

    @property
    def raw(self) -> bytes:
        stored = self.stored
        return b"".join(stored) if isinstance(stored, tuple) else bytes(stored)


def _list_item(
    split: converting.SplitList,
    span: memoryview,
    head: framing.ListHead,
    paths: selectors.Paths,
) -> dict[str, Any]:
    obj: dict[str, Any] = {"kind": head.item_kind, "apiVersion": head.api_version}
    obj.update(split.skeleton(span, paths))
    return obj


_VIEWS = ("Table", "PartialObjectMetadata")
"""Kinds a streaming list of views carries: applied event by event, as their JSON form is."""


def storable(body: wire.Buffer) -> bool:
    """Is this protobuf body an object the cache stores as received (not a view, not a list,
    of a readable envelope)?"""
    try:
        _, kind, _, _ = converting.envelope_at(body)
    except converting.Undecodable:
        return False
    return bool(kind) and kind not in _VIEWS and not kind.endswith("List")


def list_kind(body: wire.Buffer) -> str:
    """The kind a protobuf body's envelope names when it is a list (``PodList``), else ""."""
    return _list_kind(body)[0]


def whole_list_kind(body: wire.Buffer) -> str:
    """``framing.whole_list_kind`` for a protobuf list body: its kind (``PodList``) when its
    ListMeta has no ``continue`` token, "" otherwise or when unreadable."""
    kind, whole = _list_kind(body)
    return kind if whole else ""


def _list_kind(body: wire.Buffer) -> tuple[str, bool]:
    """(list kind or "", no continue token). Reads a few fields at the front; never copies
    the items (the event loop asks for every queued protobuf list)."""
    try:
        _, kind, start, end = converting.envelope_at(body)
        if not kind.endswith("List"):
            return "", False
        list_meta = wire.spans(body, start, end, (1,), first_only=True)[0]
        if list_meta is not None:
            token = wire.spans(body, list_meta[0], list_meta[1], (3,))[0]
            if token is not None and token[1] > token[0]:  # gogo writes an empty one too
                return kind, False
    except (converting.Undecodable, wire.DecodeError):
        return "", False
    return kind, True
