"""Kubernetes protobuf bodies assembled from stored objects. PURE: bytes in, bytes out.

The cache stores each protobuf object as received, in the ``k8s\\x00`` envelope
(``runtime.Unknown``) a get answers with; an offline list for a protobuf client is the list
message around those objects' messages, never decoded or re-encoded: a ``List`` message is
its ``ListMeta`` (field 1) followed by its items (field 2, each length-prefixed), so the
answer is a concatenation. gogo-protobuf (the apiserver's encoder) writes every non-pointer
string even when empty; so does this module, so an assembled body equals the apiserver's
byte for byte for the same items (tested against captured answers).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from yurthub.kubeproto import wire

MAGIC = b"k8s\x00"
"""How every Kubernetes protobuf body starts (a JSON one starts with ``{``)."""
_EMPTY_TAIL = b"\x1a\x00\x22\x00"
"""The envelope's empty ``contentEncoding`` (3) and ``contentType`` (4)."""
_ITEMS = wire.tag(2, 2)


def _head(api_version: str, kind: str, raw_length: int) -> bytes:
    type_meta = wire.delimited(1, api_version.encode()) + wire.delimited(2, kind.encode())
    return b"".join(
        (MAGIC, wire.delimited(1, type_meta), wire.tag(2, 2), wire.encode_varint(raw_length))
    )


def raw_span(body: bytes) -> tuple[int, int]:
    """(start, end) of the object's message in an enveloped body laid out as the apiserver
    and ``envelope`` write it (TypeMeta first, then raw): two varints read, the hot path of
    an offline list. Raises ``wire.DecodeError`` for any other layout (the caller reads it
    the general way)."""
    if body[:5] != MAGIC + b"\x0a":
        raise wire.DecodeError("not an envelope starting with its TypeMeta")
    length, pos = wire.varint(body, 5)
    pos += length
    if pos >= len(body) or body[pos] != 0x12:
        raise wire.DecodeError("no raw object after the TypeMeta")
    length, start = wire.varint(body, pos + 1)
    if start + length > len(body):
        raise wire.DecodeError("truncated raw object")
    return start, start + length


def envelope(api_version: str, kind: str, raw: wire.Bytes) -> bytes:
    """An object's message in the envelope a get of it is answered with."""
    return b"".join(envelope_parts(api_version, kind, raw))


def envelope_parts(api_version: str, kind: str, raw: wire.Bytes) -> tuple[bytes, wire.Bytes, bytes]:
    """``envelope`` not joined: its head, ``raw`` itself (a view stays a view) and its tail."""
    return _head(api_version, kind, len(raw)), raw, _EMPTY_TAIL


class ListBody:
    """A protobuf list body of ``items`` (messages, no envelopes), written in parts: ``size``
    is known before the first byte (a Content-Length), and ``parts`` yields the body a group of
    items at a time (no copy of the whole list)."""

    def __init__(
        self, api_version: str, kind: str, resource_version: str, items: Sequence[wire.Bytes]
    ) -> None:
        list_meta = b"\x0a\x00" + wire.delimited(2, resource_version.encode()) + b"\x1a\x00"
        self._meta = wire.delimited(1, list_meta)
        self._items = items
        self._prefixes = [_ITEMS + wire.encode_varint(len(item)) for item in items]
        raw_length = len(self._meta) + sum(map(len, self._prefixes)) + sum(map(len, items))
        self._head = _head(api_version, kind, raw_length)
        self.size = len(self._head) + raw_length + len(_EMPTY_TAIL)

    def parts(self, group: int = 1000) -> Iterator[bytes]:
        yield self._head + self._meta
        items, prefixes = self._items, self._prefixes
        for start in range(0, len(items), group):
            chunk: list[wire.Bytes] = []
            for prefix, item in zip(
                prefixes[start : start + group], items[start : start + group], strict=True
            ):
                chunk.append(prefix)
                chunk.append(item)
            yield b"".join(chunk)
        yield _EMPTY_TAIL


WATCH_CONTENT_TYPE = "application/vnd.kubernetes.protobuf;stream=watch"


def watch_frame(event_type: str, body: bytes) -> bytes:
    """One frame of a protobuf watch stream: a 4-byte big-endian length and the
    ``WatchEvent`` {1: type, 2: RawExtension {1: the enveloped object}}."""
    event = wire.delimited(1, event_type.encode()) + wire.delimited(2, wire.delimited(1, body))
    return len(event).to_bytes(4, "big") + event


def bookmark(
    api_version: str, kind: str, resource_version: str, annotations: dict[str, str] | None = None
) -> bytes:
    """The enveloped object of a BOOKMARK event: only ``metadata`` (field 1 of every
    top-level kind) with its resourceVersion (6) and annotations (12)."""
    meta = [wire.delimited(6, resource_version.encode())]
    for key, value in sorted((annotations or {}).items()):
        entry = wire.delimited(1, key.encode()) + wire.delimited(2, value.encode())
        meta.append(wire.delimited(12, entry))
    return envelope(api_version, kind, wire.delimited(1, b"".join(meta)))
