"""Filtering Kubernetes protobuf bodies: one object, a list, a watch stream frame by frame.

PURE: bytes in, bytes out.

The hub asks upstream for JSON whenever a client accepts it (DESIGN.md "Wire format"), so this
path serves clients that accept only ``application/vnd.kubernetes.protobuf``. Such a client must
be filtered like the others, or a protobuf-only kube-proxy would see every endpoint.

Format (apimachinery's protobuf serializer): a body is ``k8s\\x00`` + ``runtime.Unknown``
{1: TypeMeta {1: apiVersion, 2: kind}, 2: raw (the object's message), 3: contentEncoding,
4: contentType}. A list's message is {1: ListMeta, 2: items (repeated)}. A watch stream is
frames of a 4-byte big-endian length and a ``WatchEvent`` {1: type, 2: RawExtension {1: raw}}
whose raw is an object body as above (``k8s\\x00`` included).

Decoding is partial and lossless: ``SCHEMAS`` names, per message, only the fields the filters
read or write (field numbers from the ``generated.proto`` files, which never renumber). Every
other field is kept as its original bytes under a hidden key and written back as it was, so
an object a filter changes loses nothing. An object nobody changed is sent as the bytes that
came. Not covered, passed as they came: kinds outside ``SCHEMAS``, ``ephemeralContainers``
(their env sits one message deeper in protobuf than in JSON).

Bounds: an object or list body is held whole (protobuf length prefixes come before the data
they count, so a list cannot be sent before it is filtered) up to ``max_bytes``; past it the
body passes unfiltered. Watch frames are held one at a time up to ``max_event``; a bigger frame
passes as it comes. What does not decode passes unchanged and is counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from yurthub.filters import chaining, jsonbodies, objects
from yurthub.kubeproto import wire

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
UNKNOWN_FIELDS = "\x00protobuf-unknown"
"""Hidden key of a decoded message: the bytes of the fields ``SCHEMAS`` does not name."""

# Field spec: (json name, type). Types: "s" string, "i" int (varint), "b" bool, "s[]" repeated
# string, "ms" map<string,string>, a message name, or a message name + "[]" (repeated).
SCHEMAS: dict[str, dict[int, tuple[str, str]]] = {
    "ObjectMeta": {
        1: ("name", "s"),
        3: ("namespace", "s"),
        11: ("labels", "ms"),
        12: ("annotations", "ms"),
    },
    "Service": {1: ("metadata", "ObjectMeta"), 2: ("spec", "ServiceSpec")},
    "ServiceSpec": {
        1: ("ports", "ServicePort[]"),
        3: ("clusterIP", "s"),
        4: ("type", "s"),
        18: ("clusterIPs", "s[]"),
    },
    "ServicePort": {1: ("name", "s"), 3: ("port", "i")},
    "EndpointSlice": {
        1: ("metadata", "ObjectMeta"),
        2: ("endpoints", "Endpoint[]"),
        3: ("ports", "EndpointPort[]"),
        4: ("addressType", "s"),
    },
    "Endpoint": {
        1: ("addresses", "s[]"),
        2: ("conditions", "EndpointConditions"),
        5: ("topology", "ms"),  # v1beta1 topology; v1's read-only deprecatedTopology
        6: ("nodeName", "s"),
    },
    "EndpointConditions": {1: ("ready", "b")},
    "EndpointPort": {1: ("name", "s"), 3: ("port", "i")},
    "Endpoints": {1: ("metadata", "ObjectMeta"), 2: ("subsets", "EndpointSubset[]")},
    "EndpointSubset": {
        1: ("addresses", "EndpointAddress[]"),
        2: ("notReadyAddresses", "EndpointAddress[]"),
    },
    "EndpointAddress": {1: ("ip", "s"), 4: ("nodeName", "s")},
    "ConfigMap": {1: ("metadata", "ObjectMeta"), 2: ("data", "ms")},
    "Pod": {1: ("metadata", "ObjectMeta"), 2: ("spec", "PodSpec")},
    "PodSpec": {2: ("containers", "Container[]"), 20: ("initContainers", "Container[]")},
    "Container": {1: ("name", "s"), 7: ("env", "EnvVar[]")},
    "EnvVar": {1: ("name", "s"), 2: ("value", "s")},
}
KINDS = frozenset({"Service", "EndpointSlice", "Endpoints", "ConfigMap", "Pod"})
PASS_THROUGH_EVENTS = frozenset({"BOOKMARK", "ERROR"})


DecodeError = wire.DecodeError
_varint = wire.varint
_fields = wire.fields


# --- wire format ---------------------------------------------------------------------------


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise DecodeError("a string field is not length-delimited")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError(f"a string field is not UTF-8: {e}") from e


# --- messages <-> JSON-shaped dicts ---------------------------------------------------------


def decode_message(name: str, data: bytes) -> objects.Obj:
    schema = SCHEMAS[name]
    out: objects.Obj = {}
    unknown: list[tuple[int, bytes]] = []
    for number, _wire, value, raw in _fields(data):
        spec = schema.get(number)
        if spec is None:
            unknown.append((number, raw))
            continue
        field, kind = spec
        if kind == "s":
            out[field] = _text(value)
        elif kind == "i":
            if not isinstance(value, int):
                raise DecodeError(f"{name}.{field} is not a varint")
            out[field] = _signed(value)
        elif kind == "b":
            out[field] = bool(value)
        elif kind == "s[]":
            out.setdefault(field, []).append(_text(value))
        elif kind == "ms":
            key, entry = _map_entry(value)
            out.setdefault(field, {})[key] = entry
        else:
            if not isinstance(value, bytes):
                raise DecodeError(f"{name}.{field} is not a message")
            message = kind.removesuffix("[]")
            decoded = decode_message(message, value)
            if kind.endswith("[]"):
                out.setdefault(field, []).append(decoded)
            else:
                out[field] = decoded
    if unknown:
        out[UNKNOWN_FIELDS] = unknown
    return out


def _map_entry(value: int | bytes) -> tuple[str, str]:
    if not isinstance(value, bytes):
        raise DecodeError("a map entry is not a message")
    key = entry = ""
    for number, _wire, v, _raw in _fields(value):
        if number == 1:
            key = _text(v)
        elif number == 2:
            entry = _text(v)
    return key, entry


def encode_message(name: str, obj: objects.Obj) -> bytes:
    """``obj`` (as ``decode_message`` made it, possibly changed by a filter) as protobuf."""
    schema = SCHEMAS[name]
    by_name = {field: (number, kind) for number, (field, kind) in schema.items()}
    parts: list[tuple[int, bytes]] = list(obj.get(UNKNOWN_FIELDS, ()))
    for field, value in obj.items():
        if field == UNKNOWN_FIELDS or value is None:
            continue
        found = by_name.get(field)
        if found is None:
            raise DecodeError(f"{name} has no field {field!r} in this codec")
        number, kind = found
        parts.append((number, _encode_field(number, kind, value)))
    parts.sort(key=lambda p: p[0])  # stable: repeated fields keep their order
    return b"".join(p[1] for p in parts)


def _encode_field(number: int, kind: str, value: Any) -> bytes:
    if kind == "s":
        return wire.delimited(number, str(value).encode())
    if kind == "i":
        return wire.tag(number, 0) + wire.encode_varint(int(value))
    if kind == "b":
        return wire.tag(number, 0) + wire.encode_varint(1 if value else 0)
    if kind == "s[]":
        return b"".join(wire.delimited(number, str(v).encode()) for v in value)
    if kind == "ms":
        # Sorted by key, as the Go marshaller writes maps.
        return b"".join(
            wire.delimited(
                number,
                wire.delimited(1, str(k).encode()) + wire.delimited(2, str(value[k]).encode()),
            )
            for k in sorted(value)
        )
    message = kind.removesuffix("[]")
    if kind.endswith("[]"):
        return b"".join(wire.delimited(number, encode_message(message, v)) for v in value)
    return wire.delimited(number, encode_message(message, value))


# --- the envelope -----------------------------------------------------------------------------


def _envelope(body: bytes) -> tuple[str, bytes, list[tuple[int, bytes]]]:
    """(kind, raw, the Unknown's fields as (number, bytes)) of a ``k8s\\0`` body."""
    if not body.startswith(MAGIC):
        raise DecodeError("no k8s protobuf magic")
    kind = ""
    raw: bytes | None = None
    fields: list[tuple[int, bytes]] = []
    for number, _wire, value, field in _fields(body[len(MAGIC) :]):
        fields.append((number, field))
        if number == 1 and isinstance(value, bytes):
            for n, _w, v, _r in _fields(value):
                if n == 2:
                    kind = _text(v)
        elif number == 2 and isinstance(value, bytes):
            raw = value
    if raw is None:
        raise DecodeError("the envelope carries no object")
    return kind, raw, fields


def _rewrap(fields: list[tuple[int, bytes]], raw: bytes) -> bytes:
    return MAGIC + b"".join(wire.delimited(2, raw) if n == 2 else f for n, f in fields)


def filter_object(
    chain: chaining.Chain, body: bytes, counts: jsonbodies.Counts
) -> tuple[bytes, bool]:
    """(the body filtered, dropped). A list's items are filtered (dropped ones removed)."""
    if not chain.may_change(body):
        return body, False
    try:
        kind, raw, fields = _envelope(body)
        if kind.endswith("List") and kind[:-4] in KINDS:
            items = _filter_list(chain, kind[:-4], raw, counts)
            return (body if items is raw else _rewrap(fields, items)), False
    except DecodeError:
        counts.undecodable += 1
        return body, False
    result = filter_item(chain, kind, raw, counts)
    if result is None:
        return body, True
    return (body if result is raw else _rewrap(fields, result)), False


def _filter_list(chain: chaining.Chain, kind: str, raw: bytes, counts: jsonbodies.Counts) -> bytes:
    out: list[bytes] = []
    changed = False
    for number, _wire, value, field in _fields(raw):
        if number != 2 or not isinstance(value, bytes):
            out.append(field)
            continue
        result = filter_item(chain, kind, value, counts)
        if result is None:
            changed = True
        elif result is value:
            out.append(field)
        else:
            out.append(wire.delimited(2, result))
            changed = True
    return b"".join(out) if changed else raw


def filter_item(
    chain: chaining.Chain, kind: str, raw: bytes, counts: jsonbodies.Counts
) -> bytes | None:
    """One list item's message (no envelope) of ``kind`` filtered: ``raw`` itself when
    nothing changed (or it does not decode: passed, counted), None when dropped."""
    if kind not in KINDS or not chain.may_change(raw):
        return raw
    try:
        item = decode_message(kind, raw)
    except DecodeError:
        counts.undecodable += 1
        return raw
    result = jsonbodies.apply_counted(chain, item, kind, counts)
    if result is None or result is item or not isinstance(result, dict):
        return None if result is None else raw
    try:
        return encode_message(kind, result)
    except (DecodeError, TypeError, ValueError):
        counts.undecodable += 1
        return raw


# --- streaming shapes -------------------------------------------------------------------------


class ObjectBody:
    """A protobuf get/list body, held (bounded) and filtered once complete."""

    def __init__(self, chain: chaining.Chain, *, max_bytes: int) -> None:
        self._chain = chain
        self._max = max_bytes
        self._parts: list[bytes] = []
        self._size = 0
        self._passing = False
        self.counts = jsonbodies.Counts()

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        if self._passing:
            yield chunk
            return
        self._parts.append(chunk)
        self._size += len(chunk)
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
        # A get never turns into something else: a dropped object goes as it came.
        yield filter_object(self._chain, body, self.counts)[0]


class WatchStream:
    """A protobuf watch stream: length-prefixed ``WatchEvent`` frames, one at a time."""

    def __init__(self, chain: chaining.Chain, *, max_event: int) -> None:
        self._chain = chain
        self._max = max_event
        self._buffer = b""
        self._passing = 0
        """Bytes of an oversized frame still to pass through untouched."""
        self.counts = jsonbodies.Counts()

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        data = self._buffer + chunk if self._buffer else chunk
        self._buffer = b""
        pos = 0
        out: list[bytes] = []
        while pos < len(data):
            if self._passing:
                take = min(self._passing, len(data) - pos)
                out.append(data[pos : pos + take])
                self._passing -= take
                pos += take
                continue
            if len(data) - pos < 4:
                break
            length = int.from_bytes(data[pos : pos + 4], "big")
            if length > self._max:
                self.counts.undecodable += 1
                out.append(data[pos : pos + 4])
                self._passing = length
                pos += 4
                continue
            if len(data) - pos - 4 < length:
                break
            frame = data[pos + 4 : pos + 4 + length]
            out.append(self._frame(data[pos : pos + 4 + length], frame))
            pos += 4 + length
        self._buffer = data[pos:]
        if out:
            yield b"".join(out)

    def finish(self) -> Iterator[bytes]:
        if self._buffer:
            self.counts.undecodable += 1
            rest, self._buffer = self._buffer, b""
            yield rest

    def _frame(self, whole: bytes, frame: bytes) -> bytes:
        try:
            event_type = ""
            raw: bytes | None = None
            fields: list[tuple[int, bytes]] = []
            for number, _wire, value, field in _fields(frame):
                fields.append((number, field))
                if number == 1:
                    event_type = _text(value)
                elif number == 2 and isinstance(value, bytes):
                    for n, _w, v, _r in _fields(value):
                        if n == 1 and isinstance(v, bytes):
                            raw = v
        except DecodeError:
            self.counts.undecodable += 1
            return whole
        if event_type in PASS_THROUGH_EVENTS or raw is None:
            return whole
        filtered, dropped = filter_object(self._chain, raw, self.counts)
        if dropped:
            event_type = "DELETED"  # with the object as it came
        elif filtered is raw:
            return whole
        body = b"".join(
            wire.delimited(1, event_type.encode())
            if n == 1
            else wire.delimited(2, wire.delimited(1, filtered))
            if n == 2
            else f
            for n, f in fields
        )
        return len(body).to_bytes(4, "big") + body
