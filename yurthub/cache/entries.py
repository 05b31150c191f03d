"""What one cache entry holds: an object's bytes plus the fields answered without decoding.

PURE: bytes in, bytes out.

An entry value is ``MAGIC | u32 CRC-32 | u32 header length | header JSON | body``. The header
carries what an offline answer needs without decoding the body (resourceVersion, labels, the
field-selector fields of that kind, kind/apiVersion) and which lists cover the object
(``owners``); the body is the object exactly as stored: its JSON, or its protobuf in the
``k8s\\x00`` envelope a get answers with (``store.is_protobuf`` tells them apart: JSON starts
with ``{``). List records use the same layout
with an empty body. The CRC covers everything after itself: a flipped or lost byte anywhere
but in the magic makes the value ``CorruptEntry`` (the magic itself is compared). One C call
over a view of the value: checking 10,000 pods (~17 MB) costs a few milliseconds.
It is a check against a failing disk, not against someone who can write the cache (root).

Older hubs wrote ``EHC1`` values (no CRC): ``is_legacy`` tells them apart, ``upgrade`` checks
one as well as it can be checked (header decodes, an object's body is a JSON object) and
re-encodes it with a CRC. The store does that once, when it opens a cache (``store``).

Invariants:

- The body is never re-encoded on the way out: offline answers splice stored bytes.
- ``owners`` holds list-key strings (``keys.ListKey``), each naming a list record, and ``DIRECT``
  for objects that came from a get/create/update/patch response (or a watch or page no record
  stands behind). An object with no owner is deleted, never stored.
- Field values are kept only when non-empty: a missing field reads as ``""`` when matching
  (``selectors.FieldTerm.matches``), so dropping empties changes no answer and saves memory.

Danger: the header is trusted at startup to rebuild the in-memory index; ``verifying`` is what
cross-checks it against the body.
"""

from __future__ import annotations

import dataclasses
import struct
import sys
import zlib
from collections.abc import Mapping
from typing import Any

import orjson

from yurthub.kubeproto import wire

MAGIC = b"EHC2"
LEGACY_MAGIC = b"EHC1"
"""Values of hubs before entries carried a CRC."""
_LEN = struct.Struct(">I")
_CRC_LENGTH = struct.Struct(">II")
_LEGACY_HEAD = len(LEGACY_MAGIC) + _LEN.size
_COVERED = len(MAGIC) + _LEN.size
"""Where the bytes the CRC covers start (the length, the header, the body)."""
_HEAD = _COVERED + _LEN.size

_KEY_FIELDS = frozenset({"metadata.name", "metadata.namespace"})

DIRECT = ""
"""Owner of objects cached from single-object responses (get/create/update/patch), and from
responses that say nothing about a whole list: watch events of a list without a record, pages
of a chunked list before its last."""


Parts = tuple[wire.Bytes, ...]
"""An object's body in pieces, in order: a protobuf list item is its envelope's head, a view
of its message inside the list body, and the envelope's tail."""
Body = wire.Buffer | Parts
"""An object's body as ``encode_object`` takes it: whole, or in ``Parts`` joined only into the
entry value written (no item of a big list is copied out of it on its own)."""


def body_size(body: Body) -> int:
    """The bytes of ``body`` (whole or in parts)."""
    return sum(map(len, body)) if isinstance(body, tuple) else len(body)


class CorruptEntry(ValueError):
    """A stored value that does not decode."""


def parse_rv(resource_version: str) -> int:
    """A resourceVersion as a number for ordering; -1 when it is not a decimal (opaque)."""
    if resource_version.isdigit() and resource_version.isascii():
        return int(resource_version)
    return -1


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """The in-memory index entry of one stored object (its body stays on disk)."""

    resource_version: str
    rv: int
    """``parse_rv(resource_version)``."""
    kind: str
    api_version: str
    labels: Mapping[str, str] | None
    fields: Mapping[str, str]
    """Non-empty field-selector fields of the kind (``selectors.field_values``)."""
    owners: frozenset[str]
    size: int
    """Body bytes."""
    cells: tuple[Any, ...] | None = None
    """The cells of the Table row this version of the object came in, if it came in one: an
    offline Table then shows what the apiserver printed (``tables``)."""

    def with_owners(self, owners: frozenset[str]) -> Entry:
        # Not dataclasses.replace: this runs once per object of every list (hot path).
        return Entry(
            self.resource_version,
            self.rv,
            self.kind,
            self.api_version,
            self.labels,
            self.fields,
            shared_owners(owners),
            self.size,
            self.cells,
        )

    def with_cells(self, cells: tuple[Any, ...] | None) -> Entry:
        return dataclasses.replace(self, cells=cells)


@dataclasses.dataclass(frozen=True, slots=True)
class ListRecord:
    """One list (component + resource + namespace + selector) that was seen whole.

    Made only by a whole list response; what makes offline lists answerable (``coverage``).
    """

    resource_version: str
    rv: int
    kind: str
    """Item kind (``Pod``), for bookmarks and empty lists."""
    api_version: str
    members: int
    """Objects owned by this list after the write that stored this record."""
    columns: tuple[Any, ...] | None = None
    """The Table ``columnDefinitions`` of a list fetched as a Table."""


_SHARED_LIMIT = 1 << 16
"""Distinct label/field maps and owner sets kept for sharing; past it the tables start anew
(sharing is a saving, never a meaning: equal values stay equal either way)."""
_shared_maps: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
_shared_owners: dict[frozenset[str], frozenset[str]] = {}


def _intern_map(values: Mapping[str, Any] | None) -> dict[str, str] | None:
    if not values:
        return None
    # Node names, phases and label values repeat across thousands of objects: share them.
    return {sys.intern(str(k)): sys.intern(str(v)) for k, v in values.items() if v != ""}


def _shared_labels(values: Mapping[str, Any] | None) -> dict[str, str] | None:
    """``_intern_map``, and the same dict object for every equal label map (the pods of one
    ReplicaSet share theirs). Not for fields: a pod's IP makes nearly every field map unique,
    and the table would only add to them. Never mutated: ``Entry`` is read-only."""
    if not values:
        return None
    items = tuple((sys.intern(str(k)), sys.intern(str(v))) for k, v in values.items() if v != "")
    if not items:
        return None
    found = _shared_maps.get(items)
    if found is None:
        if len(_shared_maps) >= _SHARED_LIMIT:
            _shared_maps.clear()
        found = _shared_maps.setdefault(items, dict(items))
    return found


def shared_owners(owners: frozenset[str]) -> frozenset[str]:
    """``owners`` as the one frozenset every entry with the same owners holds (most entries
    of a list have exactly that list as owner: ~200 bytes each saved)."""
    found = _shared_owners.get(owners)
    if found is None:
        if len(_shared_owners) >= _SHARED_LIMIT:
            _shared_owners.clear()
        found = _shared_owners.setdefault(owners, owners)
    return found


def entry_from_object(
    obj: Mapping[str, Any],
    fields: Mapping[str, str],
    owners: frozenset[str],
    size: int,
    cells: tuple[Any, ...] | None = None,
) -> Entry:
    """The index entry of a decoded object (``fields`` from ``selectors.field_values``)."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        meta = {}
    rv = str(meta.get("resourceVersion") or "")
    labels = meta.get("labels")
    # Name and namespace are the key's; keeping them again would double the index.
    fields = {k: v for k, v in fields.items() if k not in _KEY_FIELDS}
    return Entry(
        resource_version=rv,
        rv=parse_rv(rv),
        kind=sys.intern(str(obj.get("kind") or "")),
        api_version=sys.intern(str(obj.get("apiVersion") or "")),
        labels=_shared_labels(labels if isinstance(labels, Mapping) else None),
        fields=_intern_map(fields) or {},
        owners=shared_owners(owners),
        size=size,
        cells=cells,
    )


def _pack(header: Mapping[str, Any], body: Body) -> bytes:
    """The entry value: the one copy of a body in parts ever made, and only for its write."""
    parts = body if isinstance(body, tuple) else (body,)
    head = orjson.dumps(header)
    length = _LEN.pack(len(head))
    crc = zlib.crc32(head, zlib.crc32(length))
    for part in parts:
        crc = zlib.crc32(part, crc)
    return b"".join((MAGIC, _LEN.pack(crc), length, head, *parts))


def _unpack(value: bytes) -> tuple[dict[str, Any], bytes]:
    header, end = _header(value)
    return header, value[end:]


def _checked(value: bytes) -> int:
    """The offset where the header ends (and the body starts), once the CRC matched.

    The hot path of every offline list: kept to a handful of C calls per entry."""
    if value[:4] != MAGIC or len(value) < _HEAD:
        if isinstance(value, bytes) and value[: len(LEGACY_MAGIC)] == LEGACY_MAGIC:
            raise CorruptEntry("an entry of an older hub (no checksum)")
        raise CorruptEntry("not a cache entry (bad magic or truncated)")
    crc, length = _CRC_LENGTH.unpack_from(value, 4)
    # memoryview: no copy of a large body just to checksum it.
    if zlib.crc32(memoryview(value)[_COVERED:]) != crc:
        raise CorruptEntry("checksum mismatch (the stored bytes changed)")
    end: int = _HEAD + length
    if end > len(value):
        raise CorruptEntry("truncated entry header")
    return end


def _header(value: bytes) -> tuple[dict[str, Any], int]:
    """The decoded header and the offset where the body starts."""
    end = _checked(value)
    return _decode_header(value[_HEAD:end]), end


def _decode_header(raw: bytes) -> dict[str, Any]:
    try:
        header = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise CorruptEntry(f"entry header is not JSON: {e}") from e
    if not isinstance(header, dict):
        raise CorruptEntry("entry header is not an object")
    return header


def encode_object(entry: Entry, body: Body) -> bytes:
    header: dict[str, Any] = {
        "t": "o",
        "rv": entry.resource_version,
        "k": entry.kind,
        "av": entry.api_version,
        "o": sorted(entry.owners),
    }
    if entry.labels:
        header["l"] = entry.labels
    if entry.fields:
        header["f"] = entry.fields
    if entry.cells is not None:
        header["c"] = entry.cells
    return _pack(header, body)


def decode_object(value: bytes) -> tuple[Entry, bytes]:
    header, end = _header(value)
    return _entry(header, len(value) - end), value[end:]


def decode_header(value: bytes, *, authenticated: bool = False) -> Entry:
    """Only the index entry, without copying the body (startup index load). ``authenticated``:
    the bytes were already authenticated (a sealed entry's tag matched), so the CRC is not
    computed again."""
    if authenticated:
        end = _end_unchecked(value)
        return _entry(_decode_header(value[_HEAD:end]), len(value) - end)
    header, end = _header(value)
    return _entry(header, len(value) - end)


def body_of(value: bytes) -> bytes:
    """Only the body of an entry, checked but without decoding the header (the hot path of
    offline lists). Raises ``CorruptEntry``."""
    return value[_checked(value) :]


def body_after_header(value: bytes) -> bytes:
    """Only the body of an entry whose bytes were already authenticated (a sealed entry whose
    AES-GCM tag matched: ``sealing``), without the CRC the tag makes redundant. Raises
    ``CorruptEntry`` for a value that is not an entry."""
    return value[_end_unchecked(value) :]


def body_start_unchecked(value: bytes) -> int:
    """Where the body of an authenticated entry starts (``body_after_header`` without the
    slice). Raises ``CorruptEntry``."""
    if value[:4] != MAGIC or len(value) < _HEAD:
        raise CorruptEntry("not a cache entry (bad magic or truncated)")
    end = _HEAD + int.from_bytes(value[_COVERED:_HEAD], "big")
    if end > len(value):
        raise CorruptEntry("truncated entry header")
    return end


_end_unchecked = body_start_unchecked


def is_legacy(value: bytes) -> bool:
    """An ``EHC1`` value (written before entries carried a CRC)."""
    return value[: len(LEGACY_MAGIC)] == LEGACY_MAGIC


def upgrade(value: bytes) -> bytes:
    """An ``EHC1`` value re-encoded with a CRC, after the checks that can still be made without
    one: the header decodes as the kind of entry it says it is, and an object's or document's
    body is a JSON object. Raises ``CorruptEntry`` for one that fails them.

    A byte flipped inside a string of an old body passes (nothing recorded what it was); that
    is the price of keeping a cache across the upgrade instead of starting every node empty.
    """
    if len(value) < _LEGACY_HEAD or not is_legacy(value):
        raise CorruptEntry("not an entry of an older hub")
    (length,) = _LEN.unpack_from(value, len(LEGACY_MAGIC))
    end = _LEGACY_HEAD + length
    if end > len(value):
        raise CorruptEntry("truncated entry header")
    header = _decode_header(value[_LEGACY_HEAD:end])
    body = value[end:]
    kind = header.get("t")
    if kind == "o":
        _entry(header, len(body))
    elif kind == "l":
        if body:
            raise CorruptEntry("a list record with a body")
    elif kind != "d":
        raise CorruptEntry("unknown entry type")
    if kind != "l":
        try:
            decoded = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            raise CorruptEntry(f"body is not JSON: {e}") from e
        if not isinstance(decoded, dict):
            raise CorruptEntry("body is not a JSON object")
    packed = _pack(header, body)
    if kind == "l":
        decode_list(packed)
    return packed


def _entry(header: Mapping[str, Any], size: int) -> Entry:
    if header.get("t") != "o":
        raise CorruptEntry("entry is not an object entry")
    try:
        rv = str(header["rv"])
        owners = header["o"]
        if not isinstance(owners, list) or not all(isinstance(o, str) for o in owners):
            raise CorruptEntry("entry owners are not a list of strings")
        cells = header.get("c")
        entry = Entry(
            resource_version=rv,
            rv=parse_rv(rv),
            kind=sys.intern(str(header["k"])),
            api_version=sys.intern(str(header["av"])),
            labels=_shared_labels(header.get("l")),
            fields=_intern_map(header.get("f")) or {},
            owners=shared_owners(frozenset(sys.intern(o) for o in owners)),
            size=size,
            cells=tuple(cells) if isinstance(cells, list) else None,
        )
    except (KeyError, TypeError, AttributeError) as e:
        raise CorruptEntry(f"entry header misses fields: {e}") from e
    return entry


def encode_list(record: ListRecord) -> bytes:
    header: dict[str, Any] = {
        "t": "l",
        "rv": record.resource_version,
        "k": record.kind,
        "av": record.api_version,
        "n": record.members,
    }
    if record.columns is not None:
        header["cd"] = record.columns
    return _pack(header, b"")


def decode_list(value: bytes) -> ListRecord:
    header, _ = _unpack(value)
    if header.get("t") != "l":
        raise CorruptEntry("entry is not a list record")
    try:
        rv = str(header["rv"])
        columns = header.get("cd")
        return ListRecord(
            resource_version=rv,
            rv=parse_rv(rv),
            kind=str(header["k"]),
            api_version=str(header["av"]),
            members=int(header["n"]),
            columns=tuple(columns) if isinstance(columns, list) else None,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptEntry(f"list record misses fields: {e}") from e


def encode_document(content_type: str, body: wire.Buffer) -> bytes:
    """A non-resource document (``/version``, discovery) and the Content-Type it came with."""
    return _pack({"t": "d", "ct": content_type}, body)


def decode_document(value: bytes) -> tuple[str, bytes]:
    header, body = _unpack(value)
    if header.get("t") != "d":
        raise CorruptEntry("entry is not a document")
    return str(header.get("ct", "application/json")), body


def kind_of(value: bytes) -> str:
    """``o`` object, ``l`` list record, ``d`` document."""
    header, _ = _unpack(value)
    return str(header.get("t", ""))
