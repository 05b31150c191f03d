"""Splitting response bodies into what the cache stores: watch events, list items, one object.

PURE: bytes in, decoded values and byte slices out; no I/O.

- ``LineSplitter`` cuts a JSON watch stream into event documents incrementally (the apiserver's
  JSON framing writes one document per line), holding at most ``max_line`` bytes of an
  unfinished event: a longer one raises ``FrameTooLarge`` so the tee can drop that stream.
- ``parse_event`` decodes one event and keeps the object's own bytes when the event has the
  canonical two-member shape ``{"type":...,"object":...}`` (no re-encode); otherwise the object
  is re-encoded, which is byte-different but the same JSON value.
- ``parse_list`` walks a list body item by item with the stdlib's C scanner so only one item is
  decoded at a time (a 10,000-pod list is ~25 MB of JSON; decoding it whole would cost several
  times that in Python objects). Items get their ``kind``/``apiVersion`` from the list, as
  the apiserver omits them in list items and an offline get must return them.

Danger: ``parse_list`` trusts the top-level shape only after checking it; anything unexpected
raises ``BadBody`` and the tee drops that response instead of caching half of it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from typing import Any

import orjson

from yurthub import jsonbytes
from yurthub.cache import entries
from yurthub.kubeproto import wire


class BadBody(ValueError):
    """A body the cache cannot interpret (not JSON, wrong shape)."""


class FrameTooLarge(BadBody):
    """One watch event longer than the configured bound."""


class LineSplitter:
    """Incremental newline framing with a bound on the unfinished tail."""

    __slots__ = ("_max_line", "_tail")

    def __init__(self, max_line: int) -> None:
        self._max_line = max_line
        self._tail = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """Complete, non-blank lines in ``chunk`` (with the tail of earlier chunks)."""
        if b"\n" not in chunk:
            self._tail += chunk
            if len(self._tail) > self._max_line:
                raise FrameTooLarge(f"watch event longer than {self._max_line} bytes")
            return []
        data = self._tail + chunk if self._tail else chunk
        lines = data.split(b"\n")
        self._tail = lines.pop()
        if len(self._tail) > self._max_line:
            raise FrameTooLarge(f"watch event longer than {self._max_line} bytes")
        return [line for line in lines if line.strip()]

    def rest(self) -> bytes:
        """What is left once the stream ended (an event without its final newline)."""
        tail, self._tail = self._tail, b""
        return tail if tail.strip() else b""


class FrameSplitter:
    """Incremental framing of a protobuf watch stream: each frame is a 4-byte big-endian length
    and that many bytes (a ``WatchEvent`` message). A frame announcing more than ``max_frame``
    bytes raises ``FrameTooLarge`` before any of it is held."""

    __slots__ = ("_buf", "_max_frame")

    def __init__(self, max_frame: int) -> None:
        self._max_frame = max_frame
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        """The frames ``chunk`` completes (length prefixes removed), in order."""
        buf = self._buf
        buf += chunk
        frames: list[bytes] = []
        pos = 0
        while len(buf) - pos >= 4:
            size = int.from_bytes(buf[pos : pos + 4], "big")
            if size > self._max_frame:
                self._buf = bytearray()
                raise FrameTooLarge(f"watch event longer than {self._max_frame} bytes")
            if len(buf) - pos - 4 < size:
                break
            frames.append(bytes(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return frames

    def rest(self) -> bytes:
        """Bytes of an unfinished frame once the stream ended (never a frame: dropped)."""
        tail = bytes(self._buf)
        self._buf = bytearray()
        return tail


@dataclasses.dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str
    object: dict[str, Any]
    raw: bytes
    """The object's JSON bytes."""


def parse_event(line: bytes) -> WatchEvent:
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise BadBody(f"watch event is not JSON: {e}") from e
    if not isinstance(event, dict):
        raise BadBody("watch event is not an object")
    kind = event.get("type")
    obj = event.get("object")
    if not isinstance(kind, str) or not isinstance(obj, dict):
        raise BadBody("watch event lacks type or object")
    return WatchEvent(kind, obj, _object_slice(line, kind, len(event)) or jsonbytes.dumps(obj))


def _object_slice(line: bytes, kind: str, members: int) -> bytes | None:
    # Valid JSON with exactly two members that starts with this exact prefix: everything after
    # the prefix, up to the object's closing brace, is the "object" value (plus whitespace).
    if members != 2:
        return None
    prefix = b'{"type":' + orjson.dumps(kind) + b',"object":'
    if not line.startswith(prefix):
        return None
    body = line.rstrip()
    if not body.endswith(b"}"):
        return None
    return body[len(prefix) : -1].strip()


@dataclasses.dataclass(slots=True)
class ListItem:
    """One list item: its identity at once, its decoded form and final bytes on demand.

    A relist mostly repeats what the cache holds; the writer compares name and
    resourceVersion first and decodes only the items that changed.
    """

    name: str
    namespace: str
    resource_version: str
    source: bytes
    """The item's bytes as received."""
    head: ListHead | None = None
    """Set when the item lacks kind/apiVersion: they come from the list."""
    decoded: dict[str, Any] | None = None
    cells: tuple[Any, ...] | None = None
    """A Table row's cells, when the item came from one (kept so an offline Table has the
    columns the apiserver printed)."""

    @classmethod
    def of(cls, obj: dict[str, Any], raw: bytes, cells: tuple[Any, ...] | None = None) -> ListItem:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        return cls(
            str(meta.get("name") or ""),
            str(meta.get("namespace") or ""),
            str(meta.get("resourceVersion") or ""),
            raw,
            None,
            obj,
            cells,
        )

    @property
    def object(self) -> dict[str, Any]:
        if self.decoded is None:
            obj = _decode_item(self.source)
            if self.head is not None:
                obj.setdefault("kind", self.head.item_kind)
                obj.setdefault("apiVersion", self.head.api_version)
            self.decoded = obj
        return self.decoded

    @property
    def stored(self) -> entries.Body:
        """What the cache stores: ``raw`` (a protobuf item gives its parts, ``transcoding``)."""
        return self.raw

    @property
    def raw(self) -> bytes:
        if self.head is None:
            return self.source
        # Splice kind/apiVersion in front of the item's own members: no re-encode.
        prefix = orjson.dumps({"kind": self.head.item_kind, "apiVersion": self.head.api_version})
        rest = self.source[1:].lstrip()
        return prefix[:-1] + (rest if rest[:1] == b"}" else b"," + rest)


@dataclasses.dataclass(frozen=True, slots=True)
class ListHead:
    kind: str
    """The list kind, e.g. ``PodList``."""
    api_version: str
    resource_version: str
    continue_token: str
    """Non-empty: more pages follow (a chunked list, ``limit=``)."""
    has_items: bool = True
    """The body has an ``items`` member (an array, or null for an empty Go slice): a Status or
    an object answered with 2xx to a list request has none."""
    columns: tuple[Any, ...] | None = None
    """A Table's ``columnDefinitions``."""

    @property
    def item_kind(self) -> str:
        return self.kind.removesuffix("List") if self.kind.endswith("List") else self.kind


_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def parse_list(body: wire.Buffer) -> tuple[ListHead, Iterator[ListItem]]:
    """A list response: its head, and its items (lazily, in order) with kind/apiVersion filled.

    The first pass finds the item boundaries and decodes only the head; the items are decoded
    one at a time as the iterator is consumed, so at most one item is a Python object at once.
    Item bytes are the received bytes, with ``kind``/``apiVersion`` spliced in front.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadBody(f"list body is not UTF-8: {e}") from e
    spans: list[_Span] = []
    head: dict[str, Any] = {}
    has_items = False
    try:
        pos = _skip(text, 0)
        if text[pos : pos + 1] != "{":
            raise BadBody("list body is not a JSON object")
        pos = _skip(text, pos + 1)
        if text[pos : pos + 1] == "}":
            pos += 1
        else:
            while True:
                key, pos = _DECODER.raw_decode(text, pos)
                pos = _skip(text, pos)
                if text[pos : pos + 1] != ":" or not isinstance(key, str):
                    raise BadBody("list body has a malformed member")
                pos = _skip(text, pos + 1)
                if key == "items" and text[pos : pos + 1] == "[":
                    pos = _items(text, pos, spans)
                    has_items = True
                else:
                    head[key], pos = _DECODER.raw_decode(text, pos)
                pos = _skip(text, pos)
                sep = text[pos : pos + 1]
                pos = _skip(text, pos + 1)
                if sep == "}":
                    break
                if sep != ",":
                    raise BadBody("list body has a malformed member separator")
        if text[pos:].strip():
            raise BadBody("list body has trailing data")
    except json.JSONDecodeError as e:
        raise BadBody(f"list body is not JSON: {e}") from e
    meta = head.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    kind = head.get("kind")
    api_version = head.get("apiVersion")
    if not isinstance(kind, str) or not isinstance(api_version, str):
        raise BadBody("list body lacks kind or apiVersion")
    if "items" in head:
        if head["items"] is not None:
            raise BadBody("list items are not an array")
        has_items = True
    list_head = ListHead(
        kind=kind,
        api_version=api_version,
        resource_version=str(meta.get("resourceVersion") or ""),
        continue_token=str(meta.get("continue") or ""),
        has_items=has_items,
    )
    ascii_only = text.isascii()
    view = memoryview(body)

    def items() -> Iterator[ListItem]:
        for start, end, name, namespace, rv, typed in spans:
            # str offsets are byte offsets only for ASCII; else re-encoding the slice gives back
            # the same bytes.
            raw = bytes(view[start:end]) if ascii_only else text[start:end].encode("utf-8")
            if typed is True:
                yield ListItem(name, namespace, rv, raw)
            elif typed is False:
                yield ListItem(name, namespace, rv, raw, list_head)
            else:
                yield _half_typed(name, namespace, rv, raw, list_head)

    return list_head, items()


def _decode_item(raw: bytes) -> dict[str, Any]:
    # The scanner (stdlib json) accepts what orjson refuses: NaN, 1e999, lone surrogates.
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise BadBody(f"list item is not JSON: {e}") from e
    if not isinstance(obj, dict):
        raise BadBody("list item is not an object")
    return obj


_Span = tuple[int, int, str, str, str, bool | None]
"""(start, end, name, namespace, resourceVersion, typed): typed is True with kind and
apiVersion, False with neither, None with only one of them."""


def _half_typed(name: str, namespace: str, rv: str, raw: bytes, head: ListHead) -> ListItem:
    # Complete and re-encode: splicing would duplicate the member it has.
    decoded = _decode_item(raw)
    decoded.setdefault("kind", head.item_kind)
    decoded.setdefault("apiVersion", head.api_version)
    return ListItem(name, namespace, rv, jsonbytes.dumps(decoded), None, decoded)


_PEEK = 64 << 10
_CONTINUE = re.compile(rb'"continue"\s*:\s*"([^"]*)"')
_KIND = re.compile(rb'"kind"\s*:\s*"([^"]*)"')


def whole_list_kind(body: wire.Buffer) -> str:
    """The list kind (``PodList``) when the list's metadata (before its items) shows no
    ``continue`` token; "" otherwise.

    A cheap look at the head so a queued list can be dropped for a newer one of the same list
    and form (a metadata-only list must not supersede a full one: some servers label both
    ``application/json``); anything it cannot tell (metadata after the items, a huge head, no
    items, a kind that is no list such as a Status answered 2xx) answers "".
    """
    head = body[:_PEEK]
    meta = head.find(b'"metadata"')
    items = head.find(b'"items"')
    if meta < 0 or items < 0 or items < meta:
        return ""
    kind = _KIND.search(head, 0, items)
    if kind is None or not kind.group(1).endswith(b"List"):
        return ""
    match = _CONTINUE.search(head, meta, items)
    if match is not None and match.group(1):
        return ""
    return kind.group(1).decode("utf-8", "replace")


def is_whole_list(body: bytes) -> bool:
    """``whole_list_kind`` says it is one."""
    return bool(whole_list_kind(body))


def _typed(kind: bool, api_version: bool) -> bool | None:
    if kind and api_version:
        return True
    if not kind and not api_version:
        return False
    return None


def _skip(text: str, pos: int) -> int:
    match = _WS.match(text, pos)
    return match.end() if match else pos


def _items(text: str, pos: int, out: list[_Span]) -> int:
    pos = _skip(text, pos + 1)
    if text[pos : pos + 1] == "]":
        return pos + 1
    while True:
        start = pos
        item, pos = _DECODER.raw_decode(text, pos)
        if not isinstance(item, dict):
            raise BadBody("list item is not an object")
        meta = item.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
        out.append(
            (
                start,
                pos,
                str(meta.get("name") or ""),
                str(meta.get("namespace") or ""),
                str(meta.get("resourceVersion") or ""),
                _typed("kind" in item, "apiVersion" in item),
            )
        )
        pos = _skip(text, pos)
        sep = text[pos : pos + 1]
        pos = _skip(text, pos + 1)
        if sep == "]":
            return pos
        if sep != ",":
            raise BadBody("list items have a malformed separator")


def table_rows(table: dict[str, Any]) -> list[ListItem]:
    """The objects inside a decoded Table's rows (full objects or PartialObjectMetadata), each
    with its row's cells.

    A Table is a view and is never stored; the objects its rows carry are (``includeObject``
    decides which: the apiserver's default is PartialObjectMetadata), and their cells with them.
    """
    if table.get("kind") != "Table":
        raise BadBody("not a Table")
    out = []
    for row in table.get("rows") or ():
        obj = row.get("object") if isinstance(row, dict) else None
        if isinstance(obj, dict) and obj:
            assert isinstance(row, dict)
            cells = row.get("cells")
            kept = tuple(cells) if isinstance(cells, list) else None
            out.append(ListItem.of(obj, jsonbytes.dumps(obj), kept))
    return out


def table_columns(table: dict[str, Any]) -> tuple[Any, ...] | None:
    """A Table's column definitions, when it has usable ones (watch events after the first may
    carry none)."""
    columns = table.get("columnDefinitions")
    if not isinstance(columns, list) or not columns:
        return None
    if not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in columns):
        return None
    return tuple(columns)


def parse_table(body: wire.Buffer) -> tuple[ListHead, list[ListItem]]:
    """A Table list response: its head (with its columns) and the objects of its rows."""
    table = parse_object(body)
    meta = table.get("metadata") if isinstance(table.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    head = ListHead(
        kind="Table",
        api_version=str(table.get("apiVersion") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        continue_token=str(meta.get("continue") or ""),
        columns=table_columns(table),
    )
    return head, table_rows(table)


def parse_object(body: wire.Buffer) -> dict[str, Any]:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise BadBody(f"body is not JSON: {e}") from e
    if not isinstance(obj, dict):
        raise BadBody("body is not a JSON object")
    return obj
