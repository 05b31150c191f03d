"""Offline inspection of a cache directory: listing, reading and verifying entries.

For ``edgehub cache ls|get|stats|verify``. Reads SQLite READ-ONLY (never through
``diskcache.Cache``, which writes its settings on open), so it is safe beside a running hub and
never changes what it inspects.

``verify`` checks what the hub relies on:

- SQLite's own ``integrity_check``;
- every key parses as an object key, a list key or a document key, and every value decodes;
- every object body is JSON (or a protobuf object that converts to JSON) whose name, namespace
  and resourceVersion match its key and header;
- every object has at least one owner, and every list owner names a list record of the same
  resource that covers the object's namespace;
- every list record's member count equals the objects that name it as owner (a list replaced
  halfway would break this: the replacement and the record are one transaction).
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib
import sqlite3
from collections.abc import Iterator

import diskcache.core
import orjson

from yurthub.cache import entries, keys, sealing, store
from yurthub.kubeproto import converting


class NotACache(OSError):
    """The path has no cache database."""


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    key: str
    kind: str
    """``object``, ``list``, ``document`` or ``unknown``."""
    value: bytes | None
    """None when the value lives outside SQLite (not produced by this hub)."""


def connect(path: pathlib.Path) -> sqlite3.Connection:
    db = path / store.DB_FILES[0]
    if not db.is_file():
        raise NotACache(f"{path} holds no cache ({db.name} missing)")
    try:
        return sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise NotACache(f"cannot open {db}: {e}") from e


def rows(con: sqlite3.Connection, prefix: str = "") -> Iterator[Row]:
    query = "SELECT key, raw, mode, value FROM Cache"
    params: tuple[str, ...] = ()
    if prefix:
        query += " WHERE key >= ? AND key < ?"
        params = (prefix, prefix + "\U0010ffff")
    for found in con.execute(query + " ORDER BY key", params):
        yield _row(found)


def read(con: sqlite3.Connection, key: str) -> Row | None:
    query = "SELECT key, raw, mode, value FROM Cache WHERE key = ? AND raw = 1"
    for found in con.execute(query, (key,)):
        return _row(found)
    return None


def _row(found: tuple[object, int, int, bytes | None]) -> Row:
    key, raw, mode, value = found
    if not raw or not isinstance(key, str):
        return Row(repr(key), "unknown", None)
    blob = bytes(value) if mode == diskcache.core.MODE_RAW and value is not None else None
    if keys.is_nonresource_key(key):
        return Row(key, "document", blob)
    if keys.is_list_key(key):
        return Row(key, "list", blob)
    return Row(key, "object", blob)


@dataclasses.dataclass
class Stats:
    objects: int = 0
    lists: int = 0
    documents: int = 0
    unknown: int = 0
    body_bytes: int = 0
    by_scope: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


def stats(con: sqlite3.Connection) -> Stats:
    out = Stats()
    for row in rows(con):
        if row.kind == "object":
            out.objects += 1
            out.body_bytes += len(row.value or b"")
            try:
                scope = keys.parse_object_key(row.key).scope
                out.by_scope[scope.prefix()] += 1
            except keys.BadKey:
                out.unknown += 1
        elif row.kind == "list":
            out.lists += 1
        elif row.kind == "document":
            out.documents += 1
        else:
            out.unknown += 1
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class Problem:
    key: str
    what: str

    def __str__(self) -> str:
        return f"{self.key}: {self.what}"


@dataclasses.dataclass
class Report:
    objects: int = 0
    lists: int = 0
    documents: int = 0
    problems: list[Problem] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(con: sqlite3.Connection, sealer: sealing.Sealer = sealing.PLAIN) -> Report:
    """Every entry decodes (opened by ``sealer`` in a sealed cache: one that fails
    authentication is a problem) and the list records match their objects."""
    report = Report()
    integrity = [r[0] for r in con.execute("PRAGMA integrity_check")]
    if integrity != ["ok"]:
        report.problems.extend(Problem("(sqlite)", line) for line in integrity)
    records: dict[str, entries.ListRecord] = {}
    converter = converting.Converter()  # loads its descriptors only if a body is protobuf
    members: collections.Counter[str] = collections.Counter()
    claims: list[tuple[str, keys.ObjectKey, str]] = []
    for row in rows(con):
        if row.value is None:
            report.problems.append(Problem(row.key, "value not stored in the database"))
            continue
        try:
            value = sealer.unseal(row.key, row.value)
            if row.kind == "document":
                entries.decode_document(value)
                report.documents += 1
            elif row.kind == "list":
                keys.parse_list_key(row.key)
                records[row.key] = entries.decode_list(value)
                report.lists += 1
            elif row.kind == "object":
                key = keys.parse_object_key(row.key)
                entry, body = entries.decode_object(value)
                report.objects += 1
                for what in _check_object(key, entry, body, converter):
                    report.problems.append(Problem(row.key, what))
                for owner in entry.owners:
                    if owner != entries.DIRECT:
                        members[owner] += 1
                        claims.append((row.key, key, owner))
            else:
                report.problems.append(Problem(row.key, "not a key this hub writes"))
        except (entries.CorruptEntry, keys.BadKey) as e:
            report.problems.append(Problem(row.key, str(e)))
    for object_key, key, owner in claims:
        record_key = _owner_problem(key, owner, records)
        if record_key:
            report.problems.append(Problem(object_key, record_key))
    for list_key, record in records.items():
        if record.members != members[list_key]:
            report.problems.append(
                Problem(
                    list_key,
                    f"list record says {record.members} members, {members[list_key]} objects "
                    f"name it (half-replaced list?)",
                )
            )
    return report


def as_json(body: bytes, converter: converting.Converter | None = None) -> bytes:
    """A stored object's body as JSON: itself, or a protobuf one converted (raises
    ``converting.Undecodable``)."""
    if not store.is_protobuf(body):
        return body
    return orjson.dumps((converter or converting.Converter()).object(body))


def _check_object(
    key: keys.ObjectKey, entry: entries.Entry, body: bytes, converter: converting.Converter
) -> Iterator[str]:
    if store.is_protobuf(body):
        try:
            obj = converter.object(body)
        except converting.Undecodable as e:
            yield f"protobuf body does not decode: {e}"
            return
    else:
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError as e:
            yield f"body is not JSON: {e}"
            return
    if not isinstance(obj, dict):
        yield "body is not a JSON object"
        return
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    if meta.get("name") != key.name:
        yield f"body names {meta.get('name')!r}, key names {key.name!r}"
    namespace = meta.get("namespace") or ""
    if key.scope.namespaced_keys and namespace != key.namespace:
        yield f"body namespace {namespace!r}, key namespace {key.namespace!r}"
    if str(meta.get("resourceVersion") or "") != entry.resource_version:
        yield "header resourceVersion differs from the body's"
    if not entry.owners:
        yield "object has no owner (neither a list nor a direct answer)"


def _owner_problem(key: keys.ObjectKey, owner: str, records: dict[str, entries.ListRecord]) -> str:
    try:
        list_key = keys.parse_list_key(owner)
    except keys.BadKey:
        return f"owner {owner!r} is not a list key"
    if owner not in records:
        return f"owner {owner!r} has no list record"
    if list_key.scope != key.scope or not list_key.covers_namespace(key.namespace):
        return f"owner {owner!r} does not cover this object"
    return ""
