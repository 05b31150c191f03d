"""The wire form of multiplexer answers: JSON lists, watch event lines, bookmarks, errors.

PURE. Objects are written as the bytes the store holds (never re-encoded on the hot path);
only a DELETED made of a previous state gets its resourceVersion rewritten.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import orjson

from yurthub import statuses

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
LIST_CHUNK = 256 << 10
"""Bytes gathered before a list body is written (fewer, larger writes)."""


def list_chunks(
    list_kind: str, api_version: str, rv: int, items: Iterable[bytes]
) -> Iterator[bytes]:
    """A ``<Kind>List`` body in chunks of about ``LIST_CHUNK`` bytes."""
    head = orjson.dumps(
        {"kind": list_kind, "apiVersion": api_version, "metadata": {"resourceVersion": str(rv)}}
    )
    buf = bytearray(head[:-1])
    buf += b',"items":['
    first = True
    for raw in items:
        if not first:
            buf += b","
        first = False
        buf += raw
        if len(buf) >= LIST_CHUNK:
            yield bytes(buf)
            buf.clear()
    buf += b"]}"
    yield bytes(buf)


def event(kind: str, raw: bytes) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + raw + b"}\n"


def bookmark(kind: str, api_version: str, rv: int, *, initial_end: bool = False) -> bytes:
    meta: dict[str, object] = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {INITIAL_EVENTS_END: "true"}
    obj = {"kind": kind, "apiVersion": api_version, "metadata": meta}
    return orjson.dumps({"type": "BOOKMARK", "object": obj}) + b"\n"


def error(status: statuses.Status) -> bytes:
    return orjson.dumps({"type": "ERROR", "object": status}) + b"\n"


def with_resource_version(raw: bytes, rv: int) -> bytes:
    """``raw`` with ``metadata.resourceVersion`` set to ``rv``."""
    obj = orjson.loads(raw)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta["resourceVersion"] = str(rv)
    return orjson.dumps(obj)
