"""Filtering JSON bodies: one object, a list as it streams, a watch stream event by event.

PURE: bytes in, bytes out; each ``feed`` returns what can be sent now.

- ``ObjectBody`` (get, patch, ...): the body is held (bounded) and filtered once complete. A
  dropped object is sent as it came: a get never turns into something else (YurtHub).
- ``ListBody``: items are filtered as they arrive (``jsonlists.ListReader``): a dropped item is
  left out, the list's own members (``kind``, ``apiVersion``, ``metadata``) are kept, so a list
  whose every item is dropped is still a list, with ``"items":[]``. Memory: one item.
- ``WatchStream``: each complete line (one event; the apiserver's JSON framing) is filtered and
  sent at once; nothing waits for the next event. BOOKMARK and ERROR events pass untouched; an
  object a filter drops becomes a DELETED event carrying the object as it came, so the client
  forgets it (it may have seen it before). Memory: one event.

Unchanged objects are sent as the bytes that came (no re-encode); changed ones are encoded
compactly. What cannot be decoded passes as it came and is counted (``Counts.undecodable``):
a line that is not an event, an item that is not JSON, a body or event over the bound (the
rest of that event, or of the body, is passed through untouched).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import orjson

from yurthub import jsonlists
from yurthub.cache import framing
from yurthub.filters import chaining

PASS_THROUGH_EVENTS = frozenset({"BOOKMARK", "ERROR"})


@dataclasses.dataclass(slots=True)
class Counts:
    """What one body's filtering saw (for the debug log and the metrics)."""

    objects: int = 0
    changed: int = 0
    dropped: int = 0
    undecodable: int = 0
    """Objects, events or bodies passed unchanged because they could not be read."""


def item_kind(list_kind: object, default: str) -> str:
    """``ServiceList`` -> ``Service``; the resource's kind when the list does not say."""
    if isinstance(list_kind, str) and list_kind.endswith("List") and len(list_kind) > 4:
        return list_kind[:-4]
    return default


def _encode(obj: object) -> bytes | None:
    try:
        return orjson.dumps(obj)
    except (TypeError, ValueError):  # e.g. an integer beyond 64 bits the stdlib decoded
        return None


class ObjectBody:
    """A single object (or, defensively, a whole list) held until the body ends."""

    def __init__(self, chain: chaining.Chain, kind: str, *, max_bytes: int) -> None:
        self._chain = chain
        self._kind = kind
        self._max = max_bytes
        self._parts: list[bytes] = []
        self._size = 0
        self._passing = False
        self.counts = Counts()

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        if self._passing:
            yield chunk
            return
        self._size += len(chunk)
        self._parts.append(chunk)
        if self._size > self._max:
            self._passing = True
            self.counts.undecodable += 1
            held, self._parts = self._parts, []
            yield from held

    def finish(self) -> Iterator[bytes]:
        if self._passing:
            return
        body = b"".join(self._parts)
        self._parts = []
        yield filter_object(self._chain, body, self._kind, self.counts)


def filter_object(chain: chaining.Chain, body: bytes, kind: str, counts: Counts) -> bytes:
    """One JSON object's bytes filtered; the same bytes when unchanged, dropped or unreadable.

    A ``*List`` body has its items filtered (dropped ones removed).
    """
    if not chain.may_change(body):
        return body
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        counts.undecodable += 1
        return body
    if not isinstance(obj, dict):
        counts.undecodable += 1
        return body
    own = obj.get("kind")
    items = obj.get("items")
    if isinstance(own, str) and own.endswith("List") and isinstance(items, list):
        kept: list[object] = []
        changed = False
        for item in items:
            result = apply_counted(chain, item, item_kind(own, kind), counts)
            changed = changed or result is not item
            if result is not None:
                kept.append(result)
        if not changed:
            return body
        return _encode({**obj, "items": kept}) or body
    result = apply_counted(chain, obj, own if isinstance(own, str) and own else kind, counts)
    if result is obj or result is None:
        return body
    return _encode(result) or body


def filter_item(chain: chaining.Chain, body: bytes, kind: str, counts: Counts) -> bytes | None:
    """One stored object for an answer built from items (offline lists): None when dropped."""
    if not chain.may_change(body):
        counts.objects += 1
        return body
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        counts.undecodable += 1
        return body
    if not isinstance(obj, dict):
        counts.undecodable += 1
        return body
    own = obj.get("kind")
    result = apply_counted(chain, obj, own if isinstance(own, str) and own else kind, counts)
    if result is None:
        return None
    if result is obj:
        return body
    return _encode(result) or body


def apply_counted(chain: chaining.Chain, obj: object, kind: str, counts: Counts) -> object | None:
    """``chain.apply`` on one decoded object, counted (objects, dropped, changed; not a JSON
    object: undecodable, passed as it is)."""
    if not isinstance(obj, dict):
        counts.undecodable += 1
        return obj
    counts.objects += 1
    result = chain.apply(obj, kind)
    if result is None:
        counts.dropped += 1
    elif result is not obj:
        counts.changed += 1
    return result


class GatedList:
    """A list whose chain changes only bodies that hold one of its needles
    (``chaining.Chain.gated``): held, up to ``max_bytes``, and passed as it came when the whole
    body shows no needle, so its items are never decoded (kubelet's pods set no
    KUBERNETES_SERVICE_* variable: decoding each of 10,000 took seconds). As soon as a needle
    shows, or the bound is reached, what was held and everything after it go through
    ``ListBody`` as any list. The price: a list without needles reaches the client once the
    upstream has sent all of it (within the bound), not item by item.
    """

    def __init__(self, chain: chaining.Chain, kind: str, *, max_item: int, max_bytes: int) -> None:
        self._chain = chain
        self._kind = kind
        self._max_item = max_item
        self._max = max_bytes
        self._held: list[bytes] = []
        self._size = 0
        self._tail = b""
        self._list: ListBody | None = None
        self._counts = Counts()

    @property
    def counts(self) -> Counts:
        return self._list.counts if self._list is not None else self._counts

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        if self._list is not None:
            yield from self._list.feed(chunk)
            return
        self._held.append(chunk)
        self._size += len(chunk)
        window = self._tail + chunk
        if self._size > self._max or self._chain.may_change(window):
            self._list = ListBody(self._chain, self._kind, max_item=self._max_item)
            held, self._held = self._held, []
            for part in held:
                yield from self._list.feed(part)
            return
        self._tail = window[-chaining.NEEDLE_MAX :]

    def finish(self) -> Iterator[bytes]:
        if self._list is not None:
            yield from self._list.finish()
            return
        held, self._held = self._held, []
        if held:
            yield b"".join(held)


class ListBody:
    """A list filtered item by item as it streams."""

    def __init__(self, chain: chaining.Chain, kind: str, *, max_item: int) -> None:
        self._chain = chain
        self._kind = kind
        self._reader = jsonlists.ListReader(max_item)
        self._kept = False
        self._gave_up = False
        self.counts = Counts()

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        out = self._render(self._reader.feed(chunk))
        if out:
            yield out

    def finish(self) -> Iterator[bytes]:
        out = self._render(self._reader.finish())
        if out:
            yield out

    def _render(self, pieces: list[jsonlists.Piece]) -> bytes:
        out: list[bytes] = []
        for piece in pieces:
            if isinstance(piece, jsonlists.Item):
                encoded = self._item(piece)
                if encoded is None:
                    continue
                if self._kept:
                    out.append(b",")
                self._kept = True
                out.append(encoded)
            elif isinstance(piece, jsonlists.Text):
                out.append(piece.text.encode())
            else:
                out.append(piece.data)
        if self._reader.broken and not self._gave_up:
            self._gave_up = True
            self.counts.undecodable += 1
        return b"".join(out)

    def _item(self, piece: jsonlists.Item) -> bytes | None:
        kind = item_kind(self._reader.head.get("kind"), self._kind)
        result = apply_counted(self._chain, piece.value, kind, self.counts)
        if result is None:
            return None
        if result is piece.value:
            return piece.text.encode()
        assert isinstance(result, dict)
        return _encode(result) or piece.text.encode()


class WatchStream:
    """A JSON watch stream, one line (event) at a time."""

    def __init__(self, chain: chaining.Chain, kind: str, *, max_event: int) -> None:
        self._chain = chain
        self._kind = kind
        self._max = max_event
        self._tail: list[bytes] = []
        self._tail_size = 0
        self._skipping = False
        self.counts = Counts()

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        if self._skipping:
            # The rest of an oversized event passes as it came, up to its newline.
            end = chunk.find(b"\n")
            if end < 0:
                yield chunk
                return
            self._skipping = False
            yield chunk[: end + 1]
            chunk = chunk[end + 1 :]
        if b"\n" not in chunk:
            if chunk:
                self._tail.append(chunk)
                self._tail_size += len(chunk)
            if self._tail_size > self._max:
                yield from self._overflow()
            return
        data = b"".join([*self._tail, chunk]) if self._tail else chunk
        lines = data.split(b"\n")
        last = lines.pop()
        self._tail = [last] if last else []
        self._tail_size = len(last)
        out = b"".join([self._event(line) + b"\n" for line in lines])
        if out:
            yield out
        if self._tail_size > self._max:
            yield from self._overflow()

    def finish(self) -> Iterator[bytes]:
        if self._tail:
            tail, self._tail = b"".join(self._tail), []
            self._tail_size = 0
            yield self._event(tail)

    def _overflow(self) -> Iterator[bytes]:
        self.counts.undecodable += 1
        self._skipping = True
        tail, self._tail = b"".join(self._tail), []
        self._tail_size = 0
        yield tail

    def _event(self, line: bytes) -> bytes:
        if not line.strip() or not self._chain.may_change(line):
            return line
        try:
            event = framing.parse_event(line)
        except framing.BadBody:
            self.counts.undecodable += 1
            return line
        if event.type in PASS_THROUGH_EVENTS:
            return line
        obj = event.object
        own = obj.get("kind")
        kind = own if isinstance(own, str) and own else self._kind
        result = apply_counted(self._chain, obj, kind, self.counts)
        if result is obj:
            return line
        if result is None:
            return b'{"type":"DELETED","object":' + event.raw + b"}"
        assert isinstance(result, dict)
        encoded = _encode(result)
        if encoded is None:
            return line
        return b'{"type":' + orjson.dumps(event.type) + b',"object":' + encoded + b"}"
