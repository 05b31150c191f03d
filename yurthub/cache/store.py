"""The disk cache: ``diskcache`` (SQLite) for the bytes, an in-memory index for the questions.

Role: hold every cached object, list record and discovery document of one hub, answer
"which objects of this component/resource/namespace match" from memory, and fetch bodies from
disk. Nothing here decides what to cache or how a response changes it (``cacheability``,
``applying``); this module carries those decisions out.

Invariants:

- The event loop never touches SQLite. Writes go through one single-thread executor (so writers
  are serialised and decisions see the state left by the previous write); reads of bodies go
  through a small reader pool (SQLite WAL lets them run beside a write). One executor hop per
  operation; jobs queued while a hop runs are applied together in the next hop, in one
  transaction (group commit), which is what makes watch ingest fast.
- The in-memory index is mutated only on the event loop, and only between writer hops, with the
  outcome of a committed transaction. The writer thread reads it during its hop (through an
  overlay of its own uncommitted changes); the loop reads it any time. So the index always
  describes a committed disk state, no lock is needed, and a failed transaction leaves both
  untouched.
- A list replacement (its items, the objects it released, its list record) is one transaction:
  a kill -9 leaves the previous list or the new one, never half of each.
- A list record means "this list was seen whole": only a whole list response (the last page of
  a chunked one whose first page was seen) makes one. Watch events and BOOKMARKs only advance
  an existing record; pages before the last, and events of a watch whose list has no record,
  store their objects under a direct claim (gets can use them, no list is answered from them:
  a hub restarted on an empty cache sees clients re-watch without relisting). So every list
  owner an object names has a record, and the record's member count is exact (``verifying``).
- The directory is 0700 and the SQLite files (database, WAL, shared memory) 0600: Secrets are
  cached, and nothing in here is for other users. Values are kept inside SQLite (no side files),
  so there is no other file to protect.

Dangers: submission is bounded in bytes; over the bound a job is refused (the tee then drops
that response's caching and counts it). Disk errors (full, I/O) fail the whole batch: it is
counted, logged once per episode, and the hub keeps serving.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import ctypes
import ctypes.util
import dataclasses
import logging
import os
import pathlib
import sqlite3
import stat
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any

import diskcache
import diskcache.core

from yurthub.cache import applying, coverage, entries, framing, keys, transcoding
from yurthub.kubeproto import converting, enveloping, wire

logger = logging.getLogger(__name__)

# Seconds between two "cache write failed" warnings of a flapping disk.
WARN_EVERY = 300.0

DB_FILES = ("cache.db", "cache.db-wal", "cache.db-shm")
# Everything stays inside SQLite: no value is large enough to be pushed to a side file (an
# object is at most ~1.5 MB in etcd; discovery documents are smaller).
_INLINE_LIMIT = 1 << 30
_DISKCACHE_SETTINGS: dict[str, Any] = {
    "eviction_policy": "none",  # a get never writes (no access-time bookkeeping)
    "cull_limit": 0,  # a set never evicts: the cache is not a bounded LRU
    "statistics": False,
    "size_limit": 1 << 62,
    "disk_min_file_size": _INLINE_LIMIT,
    "sqlite_synchronous": 1,  # NORMAL + WAL: crash-consistent, each commit is atomic
    # Memory: no mmap (touched pages would count as the hub's RSS) and a 1 MiB page cache; the
    # index answers the questions, SQLite only serves bodies (a sequential scan gains nothing
    # from more; up to four connections each hold one: 4 MiB pages cost ~12 MB after an offline
    # list of 10,000 pods, this ~3 MB, as fast).
    "sqlite_mmap_size": 0,
    "sqlite_cache_size": 256,
}
PAGE_SESSION_TTL = 120.0
GATHER_DELAY = 0.005
"""Seconds a small write waits for others to share its executor hop and transaction."""
GATHER_BYTES = 256 << 10
"""Queued bytes past which the writer starts at once."""
_PARTIAL = "PartialObjectMetadata"


def _row_scope(scope: keys.Scope, obj: Mapping[str, Any]) -> keys.Scope:
    """Where a Table row's object goes: metadata-only rows live in the partial scope."""
    if obj.get("kind") == _PARTIAL:
        version = str(obj.get("apiVersion") or "meta.k8s.io/v1").rpartition("/")[2] or "v1"
        return dataclasses.replace(scope, partial=version)
    return scope


# Offline reads bypass diskcache's per-key get (Python overhead ~8 us per key) and read its
# documented ``Cache`` table directly, read-only: key (TEXT for str keys), raw, mode, value.
# Values in MODE_RAW rows are our bytes as given to ``Cache.set``. A range holds objects only:
# a namespaced list's record (``<scope>/<ns>?<selector>``) sorts inside its scope's range, and
# only list keys have a raw ``?`` (``keys.escape`` encodes it in every segment).
# ``filename`` is read so that a row pointing at a side file is refused, never followed.
_SELECT_RANGE = (
    "SELECT key, mode, value, filename FROM Cache WHERE key >= ? AND key < ? AND raw = 1"
    " AND instr(key, '?') = 0 ORDER BY key"
)
_SELECT_PAGE = (
    "SELECT key, mode, value, filename FROM Cache WHERE key > ? AND key < ? AND raw = 1"
    " AND instr(key, '?') = 0 ORDER BY key LIMIT ?"
)
PAGE_ROWS = 1000
"""Rows per page of an offline list read (``Store.pages``)."""
_SELECT_IN = "SELECT key, mode, value, filename FROM Cache WHERE key IN ({}) AND raw = 1"
_SELECT_ONE = "SELECT mode, value, filename FROM Cache WHERE key = ? AND raw = 1"
_IN_CHUNK = 500
_RANGE_READ_MIN = 64
_MODE_RAW = diskcache.core.MODE_RAW


def is_protobuf(body: bytes) -> bool:
    """Is this stored body protobuf (an enveloped object, as a get answers it)?"""
    return body.startswith(enveloping.MAGIC)


_TRIM_AFTER = 1 << 20
"""Bytes of a batch after which the writer gives freed heap back (a list of ~300 pods and up;
malloc_trim costs a few ms at most)."""


def _load_trim() -> Callable[[], object] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    return lambda: trim(0)


_MALLOC_TRIM = _load_trim()


def trim_heap() -> None:
    """Give freed heap back to the OS after a big list (glibc keeps it otherwise).

    A 10,000-pod list is decoded item by item; the thousands of freed ~2 KB blocks stay mapped
    by glibc's malloc and the hub's RSS would keep the high-water mark for good.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM()


def _raw_value(mode: object, value: object, filename: object) -> bytes:
    """A row's value as stored by this hub: raw bytes inside the row. Anything else (a pickled
    value, a side file, text) was not written by us: ``CorruptEntry``, never unpickled or read
    from a path the database names (a copied cache could name any file, or run code)."""
    if mode != _MODE_RAW or filename is not None or not isinstance(value, bytes):
        raise entries.CorruptEntry("not a raw row written by this hub")
    return value


def _raw_body(mode: object, value: object, filename: object) -> bytes:
    """The checked body of an object row; raises ``CorruptEntry``."""
    return entries.body_of(_raw_value(mode, value, filename))


def raw_get(cache: diskcache.Cache, key: str) -> bytes | None:
    """``cache.get(key)`` for the writer, without diskcache's unpickling or side files: None when
    absent; raises ``CorruptEntry`` for a row this hub did not write."""
    row = cache._sql(_SELECT_ONE, (key,)).fetchone()
    return None if row is None else _raw_value(*row)


def delete_row(cache: diskcache.Cache, key: str) -> None:
    """``cache.delete(key)`` inside the writer's transaction, by SQL: diskcache's own would also
    unlink whatever side file a (tampered) row names."""
    cache._sql("DELETE FROM Cache WHERE key = ? AND raw = 1", (key,))


class CorruptRead(Exception):
    """Stored entries failed their checksum (or were not this hub's) when read. They are being
    dropped (with the lists that needed them); the caller treats the read as a cache miss."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(f"{len(names)} corrupt cache entries: {', '.join(names[:3])}")
        self.names = names


class StoreError(OSError):
    """The cache directory cannot be opened (permissions, not a cache, corrupt database)."""


@dataclasses.dataclass
class Stats:
    """Counters for metrics and ``edgehub cache stats``; mutated on the loop only."""

    batches: int = 0
    jobs_applied: int = 0
    objects_written: int = 0
    objects_removed: int = 0
    write_failures: int = 0
    """Jobs lost because their transaction failed (disk full, I/O error)."""
    refused_jobs: int = 0
    """Jobs refused because the write queue was over its byte bound."""
    bad_bodies: int = 0
    """Responses the cache could not interpret (not JSON, wrong shape)."""
    dropped_responses: int = 0
    """Responses whose caching the tee gave up (over a size bound, queue full)."""
    superseded_lists: int = 0
    """Queued lists dropped because a newer whole list of the same key came in."""
    corrupt_entries: int = 0
    """Stored entries dropped because they failed their checksum or were not this hub's (at
    open, or when read)."""
    refused_objects: int = 0
    """Objects not stored because their body named another object than the request's URL, or
    lay outside their list's namespace."""
    error_keys: set[str] = dataclasses.field(default_factory=set)
    """Keys whose last write failed (YurtHub's "error keys")."""
    last_error: str = ""


# --- jobs: what the tee and the runtime ask the writer to do --------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class PutObject:
    """A single-object response body (get/create/update/patch); owner ``entries.DIRECT``."""

    scope: keys.Scope
    body: wire.Buffer
    namespace: str = ""
    """Request namespace, used when the object does not name its own; an object naming another
    one is not stored."""
    name: str = ""
    """The name in the request's URL (get/update/patch), "" for a create: an object naming
    another one is not stored."""
    local: bool = False
    """Made by the hub offline (kubelet's lease renewal): may differ at the same version."""
    protobuf: bool = False
    """``body`` is the apiserver's protobuf: stored as received (``transcoding``)."""

    @property
    def size(self) -> int:
        return len(self.body)


@dataclasses.dataclass(frozen=True, slots=True)
class PutList:
    """A complete list response body (or one page of a chunked list)."""

    list_key: keys.ListKey
    body: wire.Buffer
    continued: bool | None = None
    """The request carried ``continue=`` (a later page); None when unknown."""
    protobuf: bool = False
    """``body`` is the apiserver's protobuf: stored as received (``transcoding``)."""

    @property
    def size(self) -> int:
        return len(self.body)


@dataclasses.dataclass(frozen=True, slots=True)
class WatchLines:
    """Complete watch event documents, in stream order, of the watch continuing ``list_key``."""

    list_key: keys.ListKey
    lines: tuple[bytes, ...]
    protobuf: bool = False
    """``lines`` are protobuf frames (``WatchEvent`` messages): their objects are stored as
    received (``transcoding``)."""

    @property
    def size(self) -> int:
        return sum(len(line) for line in self.lines)


@dataclasses.dataclass(frozen=True, slots=True)
class InitialEvents:
    """A streaming list's initial events, up to and including the BOOKMARK annotated
    ``k8s.io/initial-events-end``: the whole state of ``list_key`` at the bookmark's
    resourceVersion, applied exactly as a whole list response would be."""

    list_key: keys.ListKey
    lines: tuple[bytes, ...]
    protobuf: bool = False
    """``lines`` are protobuf frames: converted to JSON first, all or nothing."""

    @property
    def size(self) -> int:
        return sum(len(line) for line in self.lines)


@dataclasses.dataclass(frozen=True, slots=True)
class PutDocument:
    """A non-resource document (``/version``, discovery) as received."""

    key: str
    content_type: str
    body: wire.Buffer

    @property
    def size(self) -> int:
        return len(self.body)


@dataclasses.dataclass(frozen=True, slots=True)
class DropCorrupt:
    """Rows that failed their check when read: remove them, and every list record that counted
    one of them as a member (that list is no longer whole)."""

    names: tuple[str, ...]

    @property
    def size(self) -> int:
        return 0


Job = PutObject | PutList | WatchLines | InitialEvents | PutDocument | DropCorrupt


@dataclasses.dataclass
class _Outcome:
    """What one committed batch changed, applied to the index on the loop."""

    objects: dict[keys.ObjectKey, entries.Entry | None] = dataclasses.field(default_factory=dict)
    lists: dict[keys.ListKey, entries.ListRecord] = dataclasses.field(default_factory=dict)
    documents: set[str] = dataclasses.field(default_factory=set)
    dropped_lists: set[keys.ListKey] = dataclasses.field(default_factory=set)
    """List records removed (a member was corrupt)."""
    dropped_documents: set[str] = dataclasses.field(default_factory=set)
    dropped: set[str] = dataclasses.field(default_factory=set)
    """Names of ``DropCorrupt`` rows handled (deleted, or already gone)."""
    corrupt: set[str] = dataclasses.field(default_factory=set)
    """Rows found corrupt by the writer itself (a header-only rewrite): dropped next."""
    bad_bodies: int = 0
    refused_objects: int = 0
    error: str = ""
    jobs: int = 0


@dataclasses.dataclass
class _PageSession:
    """A chunked list between its first page and its last (writer thread only)."""

    names: set[keys.ObjectKey]
    started: float
    direct: set[keys.ObjectKey] = dataclasses.field(default_factory=set)
    """Items its pages held by a direct claim they did not have before (the list had no record
    yet): at the last page that claim becomes the list's."""


class Store:
    """One cache directory. Create with ``await Store.open(path)``; ``await close()`` at the end."""

    def __init__(self, path: pathlib.Path, cache: diskcache.Cache, max_pending_bytes: int) -> None:
        self.path = path
        self._cache = cache
        self._max_pending = max_pending_bytes
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cache-writer")
        self.transcoder = transcoding.Transcoder()
        """Protobuf bodies -> JSON (the writer's; the tee asks it about end bookmarks)."""
        self._readers = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="cache-reader")
        self._reader_local = threading.local()
        self._reader_lock = threading.Lock()
        self._reader_cons: list[sqlite3.Connection] = []
        self.stats = Stats()
        # The index: scope -> namespace -> name -> entry.
        self._objects: dict[keys.Scope, dict[str, dict[str, entries.Entry]]] = {}
        self._lists: dict[keys.ListKey, entries.ListRecord] = {}
        self._documents: set[str] = set()
        self._count = 0
        # Writer state (touched by the writer thread only).
        self._pages: dict[keys.ListKey, _PageSession] = {}
        # Pump state (loop only).
        self._pending: collections.deque[Job] = collections.deque()
        self._pending_bytes = 0
        self._in_flight: asyncio.Future[_Outcome] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._gather: asyncio.TimerHandle | None = None
        self._closed = False
        self._failing = False
        self._warned_at: float | None = None
        self._dropping: set[str] = set()
        self.corrupt_at_load: list[str] = []
        self.reset = ""
        """Why the database was moved aside and started empty at open; "" when it was not."""

    # --- life cycle --------------------------------------------------------------------------

    @classmethod
    async def open(cls, path: pathlib.Path, *, max_pending_bytes: int = 64 << 20) -> Store:
        """Open (or create) the cache at ``path`` and load the index. Raises ``StoreError``."""
        loop = asyncio.get_running_loop()
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cache-open") as pool:
            cache, loaded, reset = await loop.run_in_executor(pool, _open_checked, path)
        store = cls(path, cache, max_pending_bytes)
        store._install(loaded)
        store.reset = reset
        return store

    def _install(self, loaded: _Loaded) -> None:
        for key, entry in loaded.objects:
            self._set_entry(key, entry)
        self._lists = dict(loaded.lists)
        self._documents = set(loaded.documents)
        self.corrupt_at_load = loaded.corrupt
        self.stats.corrupt_entries += len(loaded.corrupt)

    async def close(self, grace: float = 10.0) -> None:
        """Apply what is queued (within ``grace`` seconds), then close the database."""
        if self._closed:
            return
        try:
            await self.flush(grace)
        finally:
            self._closed = True
            self._pending.clear()
            if self._gather is not None:
                self._gather.cancel()
                self._gather = None
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(self._writer, self._cache.close)
                # Wait for in-flight reads (short) so their connections are free to close.
                await loop.run_in_executor(None, self._readers.shutdown, True)
            finally:
                self._shutdown_executors()
                with self._reader_lock:
                    cons, self._reader_cons = self._reader_cons, []
                for con in cons:
                    con.close()

    def _shutdown_executors(self) -> None:
        # Threads exit after their current item; their SQLite connections die with them.
        self._writer.shutdown(wait=False, cancel_futures=True)
        self._readers.shutdown(wait=False, cancel_futures=True)

    async def flush(self, grace: float | None = None) -> bool:
        """Wait until every job submitted so far is applied (or failed). False on timeout."""
        try:
            async with asyncio.timeout(grace):
                while self._pending or self._in_flight is not None:
                    await self._idle.wait()
                    await asyncio.sleep(0)
        except TimeoutError:
            return False
        return True

    # --- index queries (loop) ----------------------------------------------------------------

    def __len__(self) -> int:
        return self._count

    def entry(self, key: keys.ObjectKey) -> entries.Entry | None:
        return self._lookup(key)

    def _lookup(self, key: keys.ObjectKey) -> entries.Entry | None:
        namespaces = self._objects.get(key.scope)
        if namespaces is None:
            return None
        names = namespaces.get(key.namespace)
        return None if names is None else names.get(key.name)

    def scopes(self) -> list[keys.Scope]:
        return list(self._objects)

    def objects(
        self, scope: keys.Scope, namespace: str = "", *, ordered: bool = True
    ) -> Iterator[tuple[keys.ObjectKey, entries.Entry]]:
        """Entries of ``scope``; in ``namespace`` only when given. Sorted by namespace, name,
        unless ``ordered`` is False (the writer looking for a list's members needs no order)."""
        chosen = self._namespaces(scope, namespace)
        for ns, names in sorted(chosen) if ordered else chosen:
            for name in sorted(names) if ordered else names:
                yield keys.ObjectKey(scope, ns, name), names[name]

    def _namespaces(
        self, scope: keys.Scope, namespace: str = ""
    ) -> list[tuple[str, dict[str, entries.Entry]]]:
        """The index of ``scope`` by namespace: ``namespace``'s only when given."""
        namespaces = self._objects.get(scope)
        if not namespaces:
            return []
        if namespace and scope.namespaced_keys:
            return [(namespace, namespaces.get(namespace) or {})]
        return list(namespaces.items())

    def summary(self, scope: keys.Scope, namespace: str = "") -> tuple[int, int, str]:
        """(objects, highest resourceVersion or -1, the kind of one of them) of ``scope`` (in
        ``namespace`` when given), without making a key per object (an offline list of
        everything needs no more)."""
        count, best, kind = 0, -1, ""
        for _, names in self._namespaces(scope, namespace):
            count += len(names)
            for entry in names.values():
                if entry.rv > best:
                    best = entry.rv
                if not kind:
                    kind = entry.kind
        return count, best, kind

    def count(self, scope: keys.Scope, namespace: str = "") -> int:
        """Objects of ``scope`` (in ``namespace`` when given)."""
        namespaces = self._objects.get(scope)
        if not namespaces:
            return 0
        if namespace and scope.namespaced_keys:
            return len(namespaces.get(namespace) or ())
        return sum(len(names) for names in namespaces.values())

    def list_count(self) -> int:
        """Lists recorded (safe from a scrape thread: one ``len``)."""
        return len(self._lists)

    def list_record(self, list_key: keys.ListKey) -> entries.ListRecord | None:
        return self._lists.get(list_key)

    def list_records(
        self, scope: keys.Scope | None = None
    ) -> list[tuple[keys.ListKey, entries.ListRecord]]:
        return [(k, r) for k, r in self._lists.items() if scope is None or k.scope == scope]

    def documents(self) -> list[str]:
        return sorted(self._documents)

    # --- reads (reader pool) -----------------------------------------------------------------

    async def bodies(
        self,
        object_keys: Iterable[keys.ObjectKey],
        *,
        within: keys.ObjectKey | None = None,
        as_stored: bool = False,
    ) -> list[bytes | None]:
        """The stored bodies, in order, as JSON (``as_stored``: protobuf ones as stored, see
        ``is_protobuf``); None for a key removed since the index was read.

        ``within``: a key whose scope (and namespace, when set) contains every wanted key;
        large reads then become one range scan over SQLite's key index instead of point reads.
        """
        wanted = [str(k) for k in object_keys]
        prefix = None
        if within is not None:
            prefix = within.scope.prefix() + "/"
            if within.namespace:
                prefix += keys.escape(within.namespace) + "/"
        loop = asyncio.get_running_loop()
        found, corrupt = await loop.run_in_executor(
            self._readers, self._read_bodies, wanted, prefix, as_stored
        )
        if corrupt:
            self._corrupt_found(corrupt)
            raise CorruptRead(corrupt)
        return found

    async def all_bodies(self, within: keys.ObjectKey) -> list[bytes]:
        """Every stored body of ``within``'s scope (and namespace, when set), in key order (all
        pages of ``pages`` at once: for small ranges and tests)."""
        out: list[bytes] = []
        async for page in self.pages(within):
            out.extend(page)
        return out

    async def pages(
        self, within: keys.ObjectKey, size: int = PAGE_ROWS, *, as_stored: bool = False
    ) -> AsyncIterator[list[bytes]]:
        """Every stored body of ``within``'s range in key order, ``size`` at a time: one
        executor hop per page, so an answer streams while the rest is read and at most a page of
        bodies is in memory (a 10,000-pod list is ~20 MB). Pages are read one after the other
        (keyset paging): a body written meanwhile is included when its key is still ahead.
        Raises ``CorruptRead`` at the page holding a corrupt row (being dropped). Bodies
        are JSON unless ``as_stored`` (as ``bodies``)."""
        prefix = within.scope.prefix() + "/"
        if within.namespace:
            prefix += keys.escape(within.namespace) + "/"
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        loop = asyncio.get_running_loop()
        after = prefix
        while True:
            found, corrupt, last = await loop.run_in_executor(
                self._readers, self._read_page, after, upper, size, as_stored
            )
            if corrupt:
                self._corrupt_found(corrupt)
                raise CorruptRead(corrupt)
            if found:
                yield found
            if last is None:
                return
            after = last

    def _read_page(
        self, after: str, upper: str, size: int, as_stored: bool = False
    ) -> tuple[list[bytes], list[str], str | None]:
        """(bodies of up to ``size`` rows with ``after < key < upper``, names of corrupt rows,
        the last key read, None when the range ended)."""
        out: list[bytes] = []
        corrupt: list[str] = []
        body_of = entries.body_of
        key = None
        rows = 0
        for key, mode, value, filename in self._reader_connection().execute(
            _SELECT_PAGE, (after, upper, size)
        ):
            rows += 1
            try:
                if mode != _MODE_RAW or filename is not None or value.__class__ is not bytes:
                    raise entries.CorruptEntry("not a raw row written by this hub")
                body = body_of(value)
                out.append(self._json(body) if not as_stored and is_protobuf(body) else body)
            except entries.CorruptEntry:
                corrupt.append(key)
        return out, corrupt, (key if rows == size else None)

    def _json(self, body: bytes) -> bytes:
        """A stored protobuf object as JSON (reader thread); ``CorruptEntry`` when it does not
        convert (dropped like a row that rotted: nothing could answer with it)."""
        try:
            return self.transcoder.as_json(body)
        except converting.Undecodable as e:
            self.transcoder.failed(e)
            raise entries.CorruptEntry(f"stored protobuf does not convert: {e}") from e

    def _read_bodies(
        self, wanted: list[str], prefix: str | None, as_stored: bool = False
    ) -> tuple[list[bytes | None], list[str]]:
        """(bodies in the order of ``wanted``, None when gone; names of corrupt rows)."""
        if not wanted:
            return [], []
        found: dict[str, bytes] = {}
        corrupt: list[str] = []
        con = self._reader_connection()

        def take(key: str, row: list[Any]) -> None:
            try:
                body = _raw_body(*row)
                found[key] = self._json(body) if not as_stored and is_protobuf(body) else body
            except entries.CorruptEntry:
                corrupt.append(key)

        if prefix is not None and len(wanted) > _RANGE_READ_MIN:
            # '/' + 1 == '0': the range holds exactly the keys that start with the prefix.
            upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
            wanted_set = set(wanted)
            for key, *row in con.execute(_SELECT_RANGE, (prefix, upper)):
                if key in wanted_set:
                    take(key, row)
        else:
            for start in range(0, len(wanted), _IN_CHUNK):
                chunk = wanted[start : start + _IN_CHUNK]
                query = _SELECT_IN.format(",".join("?" * len(chunk)))
                for key, *row in con.execute(query, chunk):
                    take(key, row)
        return [found.get(key) for key in wanted], corrupt

    async def list_store_times(self) -> dict[keys.ListKey, float]:
        """When each list record was last written (diskcache's ``store_time``: a relist, or a
        watch event or bookmark advancing it): how fresh what the cache answers offline is
        (``/v1/status``). Read on the reader pool, never on the loop."""
        wanted = {str(k): k for k in self._lists}
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(self._readers, self._read_store_times, list(wanted))
        return {wanted[name]: when for name, when in found.items() if name in wanted}

    def _read_store_times(self, names: list[str]) -> dict[str, float]:
        con = self._reader_connection()
        out: dict[str, float] = {}
        for start in range(0, len(names), _IN_CHUNK):
            chunk = names[start : start + _IN_CHUNK]
            query = f"SELECT key, store_time FROM Cache WHERE key IN ({','.join('?' * len(chunk))})"
            for name, when in con.execute(query, chunk):
                if isinstance(name, str) and when is not None:
                    out[name] = float(when)
        return out

    def disk_bytes(self) -> int:
        """Bytes of the database files on disk (a ``stat`` each: call it off the loop)."""
        total = 0
        for name in DB_FILES:
            try:
                total += (self.path / name).stat().st_size
            except OSError:
                pass
        return total

    def _read_document(self, key: str) -> tuple[tuple[str, bytes] | None, list[str]]:
        row = self._reader_connection().execute(_SELECT_ONE, (key,)).fetchone()
        if row is None:
            return None, []
        try:
            return entries.decode_document(_raw_value(*row)), []
        except entries.CorruptEntry:
            return None, [key]

    def _corrupt_found(self, names: list[str]) -> None:
        """Corrupt rows met by a read: counted, logged, and dropped by the writer (with every
        list record that needed them: such a list is no longer whole)."""
        fresh = [n for n in names if n not in self._dropping]
        if not fresh:
            return
        self._dropping.update(fresh)
        self.stats.corrupt_entries += len(fresh)
        logger.warning(
            "dropping %d corrupt cache entries (answered as cache misses): %s",
            len(fresh),
            ", ".join(fresh[:5]),
        )
        self.submit(DropCorrupt(tuple(fresh)))

    def _reader_connection(self) -> sqlite3.Connection:
        local = self._reader_local
        con: sqlite3.Connection | None = getattr(local, "con", None)
        if con is None:
            uri = (self.path / DB_FILES[0]).resolve().as_uri() + "?mode=ro"
            # Used by this thread only; closed by ``close`` once the reader pool has stopped.
            con = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            local.con = con
            with self._reader_lock:
                self._reader_cons.append(con)
        return con

    async def body(self, key: keys.ObjectKey, *, as_stored: bool = False) -> bytes | None:
        return (await self.bodies((key,), as_stored=as_stored))[0]

    async def document(self, key: str) -> tuple[str, bytes] | None:
        if key not in self._documents:
            return None
        loop = asyncio.get_running_loop()
        found, corrupt = await loop.run_in_executor(self._readers, self._read_document, key)
        if corrupt:
            self._corrupt_found(corrupt)
        return found

    # --- writes (writer thread, through the pump) --------------------------------------------

    @property
    def pending_bytes(self) -> int:
        """Bytes queued for the writer (not yet in a batch)."""
        return self._pending_bytes

    @property
    def max_pending_bytes(self) -> int:
        return self._max_pending

    def submit(self, job: Job) -> bool:
        """Queue a write; False (and nothing queued) when the queue is over its byte bound."""
        if self._closed:
            return False
        size = job.size
        if isinstance(job, PutList):
            self._drop_superseded(job)
        over = self._pending_bytes + size > self._max_pending
        if over and self._pending and self._in_flight is None:
            self._kick()  # what gathers goes now; the bound is on what still waits after it
        if over and self._pending:
            self.stats.refused_jobs += 1
            return False
        self._pending.append(job)
        self._pending_bytes += size
        self._idle.clear()
        if self._in_flight is None and self._gather is None:
            if self._pending_bytes >= GATHER_BYTES:
                self._kick()
            else:
                # Small jobs (the answers to gets, watch events) wait a moment for company:
                # one executor hop and at most one transaction for all of them.
                loop = asyncio.get_running_loop()
                self._gather = loop.call_later(GATHER_DELAY, self._gathered)
        return True

    def _gathered(self) -> None:
        self._gather = None
        self._kick()

    def _drop_superseded(self, job: PutList) -> None:
        """A whole list makes a queued whole list of the same key pointless: drop that one.

        Back-to-back lists (a client relisting, kubectl in a loop) otherwise queue tens of MB
        each and cost a parse each, for a state the newest one replaces anyway.
        """
        kind = "" if job.continued is True else _whole_list_kind(job)
        if not kind:
            return
        for queued in list(self._pending):
            if (
                isinstance(queued, PutList)
                and queued.list_key == job.list_key
                and queued.continued is not True
                and _whole_list_kind(queued) == kind
            ):
                self._pending.remove(queued)
                self._pending_bytes -= queued.size
                self.stats.superseded_lists += 1

    def _kick(self) -> None:
        if self._gather is not None:
            self._gather.cancel()
            self._gather = None
        if self._in_flight is not None:
            return
        if not self._pending or self._closed:
            self._idle.set()
            return
        batch: list[Job] = []
        size = 0
        # A batch is everything queued, up to a byte budget so one hop stays short.
        while self._pending and (not batch or size < 16 << 20):
            job = self._pending.popleft()
            size += job.size
            batch.append(job)
        self._pending_bytes -= size
        self._idle.clear()
        loop = asyncio.get_running_loop()
        self._in_flight = loop.run_in_executor(self._writer, self._run_batch, batch)
        self._in_flight.add_done_callback(self._batch_done)

    def _batch_done(self, future: asyncio.Future[_Outcome]) -> None:
        self._in_flight = None
        try:
            if future.cancelled():
                return
            exc = future.exception()
            if exc is not None:
                # _run_batch catches what it expects; anything else is a bug, keep serving.
                logger.error("cache writer crashed", exc_info=exc)
                self.stats.last_error = f"writer crashed: {exc!r}"
                return
            self._apply(future.result())
        finally:
            if not self._pending or self._closed:
                self._idle.set()
            self._kick()

    def _apply(self, outcome: _Outcome) -> None:
        self.stats.batches += 1
        self.stats.bad_bodies += outcome.bad_bodies
        self.stats.refused_objects += outcome.refused_objects
        if outcome.corrupt:
            self._corrupt_found(sorted(outcome.corrupt))
        if outcome.error:
            self.stats.write_failures += outcome.jobs
            self.stats.last_error = outcome.error
            if len(self.stats.error_keys) < 100_000:
                self.stats.error_keys.update(str(k) for k in outcome.objects)
            if not self._failing:
                self._failing = True
                now = time.monotonic()
                # A nearly full disk flaps (small batches fit, big ones fail): one warning per
                # WARN_EVERY, the rest is counted (node_yurthub_cache_write_failures_total).
                if self._warned_at is None or now - self._warned_at >= WARN_EVERY:
                    self._warned_at = now
                    logger.warning(
                        "cache write failed, the cache falls behind "
                        "(online traffic is unaffected): %s",
                        outcome.error,
                    )
                else:
                    logger.debug("cache write failed again: %s", outcome.error)
            return
        if self._failing:
            self._failing = False
            logger.debug("cache writes succeed again")
        self.stats.jobs_applied += outcome.jobs
        for key, entry in outcome.objects.items():
            if self.stats.error_keys:
                self.stats.error_keys.discard(str(key))
            if entry is None:
                self._del_entry(key)
                self.stats.objects_removed += 1
            else:
                self._set_entry(key, entry)
                self.stats.objects_written += 1
        for list_key in outcome.dropped_lists:
            self._lists.pop(list_key, None)
        self._lists.update(outcome.lists)
        self._documents -= outcome.dropped_documents
        self._documents |= outcome.documents
        self._dropping -= outcome.dropped

    def _set_entry(self, key: keys.ObjectKey, entry: entries.Entry) -> None:
        namespaces = self._objects.setdefault(key.scope, {})
        names = namespaces.get(key.namespace)
        if names is None:
            names = namespaces[sys.intern(key.namespace)] = {}
        if key.name not in names:
            self._count += 1
        names[key.name] = entry

    def _del_entry(self, key: keys.ObjectKey) -> None:
        namespaces = self._objects.get(key.scope)
        if namespaces is None:
            return
        names = namespaces.get(key.namespace)
        if names is None or names.pop(key.name, None) is None:
            return
        self._count -= 1
        if not names:
            del namespaces[key.namespace]
            if not namespaces:
                del self._objects[key.scope]

    # --- the writer thread -------------------------------------------------------------------

    def _run_batch(self, batch: list[Job]) -> _Outcome:
        big = sum(job.size for job in batch) > _TRIM_AFTER
        outcome = self._write_batch(batch)
        if big:
            # Once the batch's state and its jobs are gone (the executor holds this list until
            # we return; a body on the heap would stay mapped); also after a batch that
            # changed nothing: a relist decodes as much as a first list.
            batch.clear()
            trim_heap()
        return outcome

    def _write_batch(self, batch: list[Job]) -> _Outcome:
        batch_state = _Batch(self)
        for queued in batch:
            job = self._as_json(queued)
            if job is None:
                batch_state.outcome.bad_bodies += 1
                continue
            try:
                batch_state.run(job)
            except (framing.BadBody, applying.NotStorable, entries.CorruptEntry) as e:
                batch_state.outcome.bad_bodies += 1
                logger.debug("cache skipped a response body: %s", e)
        outcome = batch_state.outcome
        outcome.jobs = len(batch)
        if batch_state.unchanged():
            # Most gets repeat what is stored (same version, same claim): no transaction.
            return outcome
        try:
            with self._cache.transact():
                batch_state.write(self._cache)
        except _CorruptStored as e:
            # A header-only rewrite met a stored body that rotted: the batch is lost (counted as
            # a failed write, the cache stays as it was) and that row is dropped next.
            outcome.error = f"corrupt stored entry {e.name!r}"
            outcome.corrupt.add(e.name)
            self._pages.clear()
        except (sqlite3.Error, OSError, diskcache.Timeout) as e:
            outcome.error = f"{type(e).__name__}: {e}"
            self._pages.clear()
        return outcome

    def _as_json(self, job: Job) -> Job | None:
        """A protobuf job as the JSON job it stands for (writer thread); None: not storable.
        Protobuf objects, lists, streaming lists and watch frames stay as they are (stored as
        received, the index's fields read from the wire); views (Tables, metadata only) and
        what is no list of the built-in API are converted here."""
        if isinstance(job, PutList) and job.protobuf and transcoding.list_kind(job.body):
            return job
        if isinstance(job, PutObject) and job.protobuf and transcoding.storable(job.body):
            return job
        if isinstance(job, PutObject | PutList) and job.protobuf:
            body = self.transcoder.body(job.body)
            return None if body is None else dataclasses.replace(job, body=body, protobuf=False)
        return job


def _whole_list_kind(job: PutList) -> str:
    if job.protobuf:
        return transcoding.whole_list_kind(job.body)
    return framing.whole_list_kind(job.body)


class _CorruptStored(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _Batch:
    """Decisions of one batch against index + overlay, then the writes (writer thread only)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.outcome = _Outcome()
        self.bodies: dict[keys.ObjectKey, entries.Body | None] = {}
        """New bodies; None: header-only rewrite (owners changed, body kept)."""
        self.counts: dict[str, int] = {}
        self.documents: dict[str, bytes] = {}

    def unchanged(self) -> bool:
        """Nothing to write: every job of the batch left the cache as it was."""
        outcome = self.outcome
        return not (
            outcome.objects
            or outcome.lists
            or outcome.dropped_lists
            or outcome.dropped_documents
            or self.documents
        )

    # overlay lookups

    def lookup(self, key: keys.ObjectKey) -> entries.Entry | None:
        if key in self.outcome.objects:
            return self.outcome.objects[key]
        return self.store._lookup(key)

    def record(self, list_key: keys.ListKey) -> entries.ListRecord | None:
        found = self.outcome.lists.get(list_key)
        if found is not None or list_key in self.outcome.dropped_lists:
            return found
        return self.store._lists.get(list_key)

    def has_record(self, list_key: keys.ListKey) -> bool:
        return self.record(list_key) is not None

    def scope_entries(
        self, list_key: keys.ListKey, wanted: coverage.Matcher
    ) -> Iterator[tuple[keys.ObjectKey, entries.Entry]]:
        """The objects of ``list_key``'s scope and namespace (index + overlay) ``wanted`` picks.

        A relist of a narrow list scans every object of a large scope: the index is read as it
        is, and a key made only for what ``wanted`` picks.
        """
        scope = list_key.scope
        overlay = self.outcome.objects
        touched: dict[str, set[str]] = {}
        for key in overlay:
            if key.scope == scope and list_key.covers_namespace(key.namespace):
                touched.setdefault(key.namespace, set()).add(key.name)
        for namespace, names in self.store._namespaces(scope, list_key.namespace):
            skip = touched.get(namespace)
            for name, entry in names.items():
                if skip and name in skip:
                    continue  # the overlay's entry is the current one
                if wanted(namespace, name, entry):
                    yield keys.ObjectKey(scope, namespace, name), entry
        for namespace, changed in touched.items():
            for name in changed:
                key = keys.ObjectKey(scope, namespace, name)
                found = overlay[key]
                if found is not None and wanted(namespace, name, found):
                    yield key, found

    def members(self, list_key: keys.ListKey) -> list[keys.ObjectKey]:
        """Current members of ``list_key`` (index + overlay)."""
        owner = str(list_key)
        found = [
            key
            for key, entry in self.store.objects(list_key.scope, list_key.namespace, ordered=False)
            if owner in entry.owners and key not in self.outcome.objects
        ]
        found.extend(
            key
            for key, entry in self.outcome.objects.items()
            if entry is not None
            and owner in entry.owners
            and key.scope == list_key.scope
            and list_key.covers_namespace(key.namespace)
        )
        return found

    def member_count(self, list_key: keys.ListKey) -> int:
        owner = str(list_key)
        if owner not in self.counts:
            record = self.record(list_key)
            base = record.members if record is not None else len(self.members(list_key))
            self.counts[owner] = base
            return base
        return self.counts[owner]

    def change(self, change: applying.Change) -> None:
        before = self.lookup(change.key)
        after = change.entry if isinstance(change, applying.Write) else None
        before_owners = before.owners if before is not None else frozenset()
        after_owners = after.owners if after is not None else frozenset()
        for owner in before_owners ^ after_owners:
            if owner == entries.DIRECT:
                continue
            list_key = keys.parse_list_key(owner)
            count = self.member_count(list_key)
            self.counts[owner] = count + (1 if owner in after_owners else -1)
        self.outcome.objects[change.key] = after
        if isinstance(change, applying.Write):
            if change.body is not None or change.key not in self.bodies:
                self.bodies[change.key] = change.body
        else:
            self.bodies.pop(change.key, None)

    def touch_list(
        self,
        list_key: keys.ListKey,
        resource_version: str,
        kind: str,
        api_version: str,
        *,
        create: bool = False,
        columns: tuple[Any, ...] | None = None,
    ) -> None:
        """Advance ``list_key``'s record; make it only when ``create`` (a whole list was seen).
        ``columns``: a Table's column definitions (None keeps the record's)."""
        current = self.record(list_key)
        if current is None and not create:
            return
        self.outcome.dropped_lists.discard(list_key)
        rv = entries.parse_rv(resource_version)
        if current is not None:
            if not resource_version or (0 <= rv < current.rv):
                resource_version, rv = current.resource_version, current.rv
            kind = kind or current.kind
            api_version = api_version or current.api_version
            columns = columns if columns is not None else current.columns
        self.outcome.lists[list_key] = entries.ListRecord(
            resource_version=resource_version,
            rv=rv,
            kind=kind,
            api_version=api_version,
            members=self.member_count(list_key),
            columns=columns,
        )

    # jobs

    def run(self, job: Job) -> None:
        if isinstance(job, PutObject):
            self.put_object(job)
        elif isinstance(job, PutList):
            self.put_list(job)
        elif isinstance(job, WatchLines):
            self.watch_lines(job)
        elif isinstance(job, InitialEvents):
            self.initial_events(job)
        elif isinstance(job, DropCorrupt):
            self.drop_corrupt(job)
        else:
            self.documents[job.key] = entries.encode_document(job.content_type, job.body)
            self.outcome.dropped_documents.discard(job.key)

    def drop_corrupt(self, job: DropCorrupt) -> None:
        for name in job.names:
            self.outcome.dropped.add(name)
            if keys.is_nonresource_key(name):
                self.documents.pop(name, None)
                self.outcome.dropped_documents.add(name)
                continue
            if keys.is_list_key(name):
                try:
                    self.drop_list(keys.parse_list_key(name))
                except keys.BadKey:
                    self.outcome.dropped_documents.add(name)  # deleted by name all the same
                continue
            try:
                key = keys.parse_object_key(name)
            except keys.BadKey:
                self.outcome.dropped_documents.add(name)
                continue
            current = self.lookup(key)
            if current is None:
                self.outcome.dropped_documents.add(name)  # not indexed: delete the row anyway
                continue
            for owner in sorted(current.owners - {entries.DIRECT}):
                self.drop_list(keys.parse_list_key(owner))
            self.change(applying.Remove(key))

    def drop_list(self, list_key: keys.ListKey) -> None:
        """Forget that ``list_key`` was seen whole: its record goes, its members lose its claim
        (held by a direct claim when nothing else holds them: a get may still use them)."""
        if self.record(list_key) is None:
            return
        owner = str(list_key)
        for key in self.members(list_key):
            current = self.lookup(key)
            if current is None:
                continue
            remaining = current.owners - {owner} or frozenset({entries.DIRECT})
            self.change(applying.Write(key, current.with_owners(remaining), None))
        self.outcome.lists.pop(list_key, None)
        self.outcome.dropped_lists.add(list_key)
        logger.warning("cache: list %s is no longer whole (a member was corrupt)", owner)

    def put_object(self, job: PutObject) -> None:
        if job.protobuf:
            try:
                indexed = self.store.transcoder.indexed(job.body, job.scope.resource)
            except converting.Undecodable as e:
                self.store.transcoder.failed(e)
                raise framing.BadBody(f"protobuf object does not decode: {e}") from e
            assert indexed is not None  # ``_as_json`` converted views
            self._put_one(job.scope, indexed, job.body, job.namespace, job.name, job.local)
            return
        obj = framing.parse_object(job.body)
        if obj.get("kind") == "Table":
            for row in framing.table_rows(obj):
                self._put_one(
                    _row_scope(job.scope, row.object),
                    row.object,
                    row.raw,
                    job.namespace,
                    job.name,
                    cells=row.cells,
                )
            return
        self._put_one(_row_scope(job.scope, obj), obj, job.body, job.namespace, job.name, job.local)

    def _put_one(
        self,
        scope: keys.Scope,
        obj: dict[str, Any],
        body: entries.Body,
        namespace: str,
        name: str,
        local: bool = False,
        *,
        cells: tuple[Any, ...] | None = None,
    ) -> None:
        item = applying.item_from_object(
            scope, obj, body, fallback_namespace=namespace, cells=cells
        )
        try:
            applying.check_identity(item, name, namespace)
        except applying.WrongObject as e:
            self.outcome.refused_objects += 1
            logger.warning("cache: not storing %s: %s", item.key, e)
            return
        change = applying.apply_object(
            self.lookup(item.key), item, entries.DIRECT, same_version_differs=local
        )
        if change is not None:
            self.change(change)

    def _items(
        self, list_key: keys.ListKey, parsed: Iterable[framing.ListItem], seen: set[keys.ObjectKey]
    ) -> Iterator[applying.Item]:
        """Items that may change the cache; unchanged ones only go into ``seen``.

        A relist mostly repeats what is stored: same name, same resourceVersion, same claim.
        Those are recognised without decoding the object.
        """
        owner = str(list_key)
        scope = list_key.scope
        namespace = list_key.namespace if scope.namespaced_keys else ""
        for item in parsed:
            if namespace and item.namespace and item.namespace != namespace:
                self.outcome.refused_objects += 1
                raise framing.BadBody(
                    f"list of namespace {namespace!r} holds an object of {item.namespace!r}"
                )
            if item.name:
                key = keys.object_key(scope, item.namespace or list_key.namespace, item.name)
                current = self.lookup(key)
                if (
                    current is not None
                    and owner in current.owners
                    and 0 <= entries.parse_rv(item.resource_version) == current.rv
                    and (item.cells is None or current.cells is not None)
                ):
                    seen.add(key)
                    continue
            try:
                yield applying.item_from_object(
                    scope,
                    item.object,
                    item.stored,
                    fallback_namespace=list_key.namespace,
                    cells=item.cells,
                )
            except applying.NotStorable as e:
                # A list is stored whole or not at all: one it would answer incomplete is none.
                raise framing.BadBody(f"list item not storable: {e}") from e

    def _parse_list(self, job: PutList) -> tuple[framing.ListHead, Iterator[framing.ListItem]]:
        if not job.protobuf:
            return framing.parse_list(job.body)
        transcoder = self.store.transcoder
        split = transcoder.parse_list(job.body, job.list_key.scope.resource)
        if split is not None:
            return split
        # Not a list with items (a Table, another view): converted whole, then read as JSON.
        body = transcoder.body(job.body)
        if body is None:
            raise framing.BadBody("a protobuf list body that does not convert")
        return framing.parse_list(body)

    def put_list(self, job: PutList) -> None:
        list_key = job.list_key
        # The body says what it is (some servers send a bare application/json for views). A 2xx
        # whose body is no list (a Status, an object) neither makes nor replaces a list record.
        head, parsed = self._parse_list(job)
        if head.kind != "Table" and (not head.kind.endswith("List") or not head.has_items):
            raise framing.BadBody(f"a list response whose body is a {head.kind or 'no kind'}")
        columns = None
        if head.kind == "Table":
            head, rows = framing.parse_table(job.body)
            columns = head.columns
            # The rows are full objects with includeObject=Object, else metadata only.
            kind = str(rows[0].object.get("kind", "")) if rows else _PARTIAL
            head = dataclasses.replace(head, kind=f"{kind}List")
            parsed = iter(rows)
        list_key = dataclasses.replace(
            list_key,
            scope=_row_scope(
                list_key.scope, {"kind": head.item_kind, "apiVersion": head.api_version}
            ),
        )
        pages = self.store._pages
        now = time.monotonic()
        for stale in [k for k, s in pages.items() if now - s.started > PAGE_SESSION_TTL]:
            del pages[stale]
        session = pages.get(list_key)
        unchanged: set[keys.ObjectKey] = set()
        items = list(self._items(list_key, parsed, unchanged))
        later_page = job.continued is True or (job.continued is None and session is not None)
        touch = (list_key, head.resource_version, head.item_kind, head.api_version)
        if head.continue_token:
            # One page of a chunked list: store its items, release nothing until the last page.
            if not later_page or session is None:
                session = pages[list_key] = _PageSession(set(), now)
            session.names.update(item.key for item in items)
            session.names.update(unchanged)
            self._claim(list_key, items, session)
            self.touch_list(*touch, columns=columns)
            return
        if later_page and session is None:
            # The last page of a list whose first pages we never saw: keep, release nothing; it
            # proves no list whole, so it makes no record.
            self._claim(list_key, items, None)
            self.touch_list(*touch, columns=columns)
            return
        if later_page and session is not None:
            del pages[list_key]
            keep = session.names | unchanged
            self._adopt(list_key, session)
        else:
            pages.pop(list_key, None)
            keep = unchanged
        self._replace_whole(list_key, items, keep, head.resource_version)
        self.touch_list(*touch, create=True, columns=columns)

    def _replace_whole(
        self,
        list_key: keys.ListKey,
        items: list[applying.Item],
        keep: set[keys.ObjectKey],
        resource_version: str,
    ) -> None:
        """A list seen whole: it is authoritative for everything its selector covers."""
        list_rv = entries.parse_rv(resource_version)
        candidates = self.scope_entries(list_key, applying.concerned(list_key))
        for change in applying.replace_list(
            self.lookup, candidates, items, list_key, list_rv, keep
        ):
            self.change(change)

    def initial_events(self, job: InitialEvents) -> None:
        """A completed streaming list is as good as a list response: replace what it covers and
        make the list answerable. Anything but ADDED events and one end BOOKMARK (a view, an
        undecodable line) and the events are applied one by one instead, as any watch's."""
        list_key = job.list_key
        found = self._initial_protobuf(job) if job.protobuf else self._initial_json(job)
        if found is None:
            self.watch_lines(WatchLines(list_key, job.lines))
            return
        if isinstance(found, InitialEvents):
            self.initial_events(found)  # converted whole: now JSON
            return
        listed, end_rv, kind, api_version = found
        self.store._pages.pop(list_key, None)
        unchanged: set[keys.ObjectKey] = set()
        items = list(self._items(list_key, iter(listed), unchanged))
        self._replace_whole(list_key, items, unchanged, end_rv)
        self.touch_list(list_key, end_rv, kind, api_version, create=True)

    def _initial_json(
        self, job: InitialEvents
    ) -> tuple[list[framing.ListItem], str, str, str] | None:
        """(items, end resourceVersion, kind, apiVersion) of a JSON streaming list; None: not
        a plain one (a view, another event type, an undecodable line)."""
        listed: list[framing.ListItem] = []
        end_rv = kind = api_version = ""
        for line in job.lines:
            try:
                event = framing.parse_event(line)
            except framing.BadBody:
                return None
            obj_kind = str(event.object.get("kind") or "")
            if obj_kind in ("Table", _PARTIAL):
                return None
            if event.type == "ADDED":
                listed.append(framing.ListItem.of(event.object, event.raw))
                continue
            meta = event.object.get("metadata")
            if event.type != "BOOKMARK" or not isinstance(meta, dict):
                return None
            end_rv = str(meta.get("resourceVersion") or "")
            kind, api_version = obj_kind, str(event.object.get("apiVersion") or "")
        if not end_rv:
            return None
        return listed, end_rv, kind, api_version

    def _initial_protobuf(
        self, job: InitialEvents
    ) -> tuple[list[framing.ListItem], str, str, str] | InitialEvents:
        """A protobuf streaming list's items, converted lazily; else the job converted whole
        (to JSON, all or nothing) for the JSON path."""
        transcoder = self.store.transcoder
        found = transcoder.initial_list(job.lines, job.list_key.scope.resource)
        if found is not None:
            return found
        lines = transcoder.events(job.lines, whole=True)
        if lines is None:
            raise framing.BadBody("a protobuf streaming list that does not convert")
        return dataclasses.replace(job, lines=lines, protobuf=False)

    def _claim(
        self, list_key: keys.ListKey, items: list[applying.Item], session: _PageSession | None
    ) -> None:
        """Items of one page: the list's when it has a record. A list without one owns nothing
        yet (an owner always names a record): its items are held by a direct claim, which the
        last page turns into the list's (``_adopt``)."""
        recorded = self.has_record(list_key)
        owner = str(list_key) if recorded else entries.DIRECT
        for item in items:
            current = self.lookup(item.key)
            if (
                not recorded
                and session is not None
                and (current is None or entries.DIRECT not in current.owners)
            ):
                session.direct.add(item.key)
            change = applying.apply_object(current, item, owner)
            if change is not None:
                self.change(change)

    def _adopt(self, list_key: keys.ListKey, session: _PageSession) -> None:
        """The last page: every earlier page's item becomes the list's."""
        for key in session.names:
            change = applying.adopt(self.lookup(key), key, list_key, key in session.direct)
            if change is not None:
                self.change(change)

    def watch_lines(self, job: WatchLines) -> None:
        events: list[tuple[framing.WatchEvent, tuple[Any, ...] | None]] = []
        if job.protobuf:
            transcoder = self.store.transcoder
            failures = transcoder.failures
            found = transcoder.watch_events(job.lines, job.list_key.scope.resource)
            events.extend((event, None) for event in found)
            self.outcome.bad_bodies += transcoder.failures - failures
            self._events(job.list_key, events)
            return
        for line in job.lines:
            try:
                events.append((framing.parse_event(line), None))
            except framing.BadBody:
                self.outcome.bad_bodies += 1
        self._events(job.list_key, events)

    def _events(
        self,
        list_key: keys.ListKey,
        events: Iterable[tuple[framing.WatchEvent, tuple[Any, ...] | None]],
    ) -> None:
        """Watch events (with the cells of the Table row each came in, if any), in order."""
        # A watch never makes a list whole: without the list's record its events are held like
        # gets (a hub restarted on an empty cache sees clients re-watch without relisting).
        owner = str(list_key) if self.has_record(list_key) else entries.DIRECT
        last_rv = ""
        kind = api_version = ""
        for event, cells in events:
            meta = event.object.get("metadata")
            rv = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
            if event.type == "ERROR":
                continue
            if event.type == "BOOKMARK":
                last_rv = rv or last_rv
                if event.object.get("kind") not in ("Table", _PARTIAL):
                    kind = str(event.object.get("kind") or kind)
                    api_version = str(event.object.get("apiVersion") or api_version)
                continue
            if event.object.get("kind") == "Table":
                self._table_event(list_key, event)
                continue
            if event.object.get("kind") == _PARTIAL and not list_key.scope.partial:
                self._table_event(list_key, event, rows=False)
                continue
            try:
                item = applying.item_from_object(
                    list_key.scope,
                    event.object,
                    event.raw,
                    fallback_namespace=list_key.namespace,
                    cells=cells,
                )
            except applying.NotStorable:
                if event.type != "DELETED":
                    last_rv = rv or last_rv
                    continue
                # A DELETED object the cache cannot decode (a Status) still names what goes.
                meta_map = meta if isinstance(meta, dict) else {}
                name = meta_map.get("name")
                if not isinstance(name, str) or not name:
                    continue
                key = keys.object_key(
                    list_key.scope, str(meta_map.get("namespace") or list_key.namespace), name
                )
                change = applying.apply_deleted(self.lookup(key), key, list_key)
            else:
                try:
                    applying.check_identity(item, "", list_key.namespace)
                except applying.WrongObject as e:
                    self.outcome.refused_objects += 1
                    logger.warning("cache: not storing a watch event's %s: %s", item.key, e)
                    continue
                kind, api_version = item.entry.kind or kind, item.entry.api_version or api_version
                if event.type == "DELETED":
                    change = applying.apply_deleted(self.lookup(item.key), item.key, list_key)
                elif event.type in ("ADDED", "MODIFIED"):
                    change = applying.apply_object(self.lookup(item.key), item, owner)
                else:
                    self.outcome.bad_bodies += 1
                    continue
            last_rv = rv or last_rv
            if change is not None:
                self.change(change)
        if kind or last_rv:
            self.touch_list(list_key, last_rv, kind, api_version)

    def _table_event(
        self, list_key: keys.ListKey, event: framing.WatchEvent, *, rows: bool = True
    ) -> None:
        """A view event (a Table, or metadata only): apply its objects where they belong, each
        with its row's cells; a Table's column definitions update its list's record."""
        if rows:
            found = framing.table_rows(event.object)
            columns = framing.table_columns(event.object)
        else:
            found, columns = [framing.ListItem.of(event.object, event.raw)], None
        for row in found:
            row_key = dataclasses.replace(list_key, scope=_row_scope(list_key.scope, row.object))
            row_event = framing.WatchEvent(event.type, row.object, row.raw)
            self._events(row_key, [(row_event, row.cells)])
            if columns is not None:
                self.touch_list(row_key, "", "", "", columns=columns)

    # writing (inside the transaction)

    def write(self, cache: diskcache.Cache) -> None:
        # A list replacement can remove objects other lists own: their records' counts change.
        for owner, count in self.counts.items():
            list_key = keys.parse_list_key(owner)
            record = self.record(list_key)
            if record is not None and record.members != count:
                self.outcome.lists.setdefault(list_key, record)
        for list_key in self.outcome.dropped_lists:
            delete_row(cache, str(list_key))
        for name in self.outcome.dropped_documents:
            delete_row(cache, name)
        for key, entry in self.outcome.objects.items():
            name = str(key)
            if entry is None:
                delete_row(cache, name)
                continue
            body = self.bodies.get(key)
            if body is None:
                try:
                    value = raw_get(cache, name)
                    if value is None:
                        raise sqlite3.DatabaseError(f"entry {name!r} vanished under the writer")
                    body = entries.body_of(value)
                except entries.CorruptEntry as e:
                    raise _CorruptStored(name) from e
            cache.set(name, entries.encode_object(entry, body))
        for list_key, record in self.outcome.lists.items():
            record = dataclasses.replace(record, members=self.member_count(list_key))
            self.outcome.lists[list_key] = record
            cache.set(str(list_key), entries.encode_list(record))
        for doc_key, value in self.documents.items():
            cache.set(doc_key, value)
            self.outcome.documents.add(doc_key)


# --- opening and loading (executor threads) ---------------------------------------------------


def _secure_dir(path: pathlib.Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode != 0o700:
        logger.info("tightening cache directory %s from %o to 0700", path, mode)
        path.chmod(0o700)


def _secure_files(path: pathlib.Path) -> None:
    for name in DB_FILES:
        file = path / name
        # SQLite gives the WAL and shm files the database's mode; create the database 0600
        # before SQLite does, so no file ever exists with a wider mode.
        if name == "cache.db" and not file.exists():
            os.close(os.open(file, os.O_CREAT | os.O_WRONLY, 0o600))
        if file.exists() and stat.S_IMODE(file.stat().st_mode) != 0o600:
            file.chmod(0o600)


def _open_cache(path: pathlib.Path) -> diskcache.Cache:
    try:
        _secure_dir(path)
        _secure_files(path)
        cache = diskcache.Cache(str(path), **_DISKCACHE_SETTINGS)
        _secure_files(path)
    except (OSError, sqlite3.Error, diskcache.Timeout) as e:
        raise StoreError(f"cannot open the cache at {path}: {e}") from e
    return cache


@dataclasses.dataclass
class _Loaded:
    objects: list[tuple[keys.ObjectKey, entries.Entry]]
    lists: list[tuple[keys.ListKey, entries.ListRecord]]
    documents: list[str]
    corrupt: list[str]
    """Rows dropped at open (their keys, or ``repr`` of a key that is not text)."""
    upgraded: int = 0
    """Entries of an older hub re-encoded with a checksum."""


class _Damaged(sqlite3.DatabaseError):
    """SQLite's own check found the database damaged."""


_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
_KEEP_ASIDE = 1
"""Damaged databases kept beside the cache (the newest): enough to look at what happened,
never a disk filled by a node whose disk keeps failing."""
_UPGRADE_BATCH = 16 << 20


def _is_damage(error: BaseException | None) -> bool:
    """A database SQLite cannot read as one (not a locked, missing or unwritable one: those are
    not repaired by starting anew, and a locked one may be another hub's)."""
    if isinstance(error, _Damaged):
        return True
    code = getattr(error, "sqlite_errorcode", None)
    return (
        isinstance(error, sqlite3.DatabaseError)
        and isinstance(code, int)
        and (code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB))
    )


def _open_checked(path: pathlib.Path) -> tuple[diskcache.Cache, _Loaded, str]:
    """Open and load the cache at ``path``; a damaged database is moved aside and a new one
    started (third value: why, "" when not). Raises ``StoreError`` for what a new database would
    not cure (permissions, a full disk, a database another process holds locked)."""
    try:
        return (*_open_and_load(path), "")
    except StoreError as e:
        damage = e.__cause__
        if not _is_damage(damage):
            raise
    aside = _move_aside(path)
    reason = f"the database was damaged ({damage}); moved to {aside.name} and started empty"
    logger.error("disk cache %s: %s", path, reason)
    return (*_open_and_load(path), reason)


def _open_and_load(path: pathlib.Path) -> tuple[diskcache.Cache, _Loaded]:
    cache = _open_cache(path)
    try:
        return cache, _load_index(cache)
    except (sqlite3.Error, OSError) as e:
        cache.close()
        # Damaged pages show only when read: the same answer as a file that will not open.
        raise StoreError(f"cannot read the cache at {path}: {e}") from e
    except BaseException:
        cache.close()
        raise


def _move_aside(path: pathlib.Path) -> pathlib.Path:
    """Rename the database files to ``cache.db.damaged-<UTC time>`` (mode kept: 0600, Secrets
    may be inside); older damaged copies beyond ``_KEEP_ASIDE`` are removed."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    try:
        old = sorted(path.glob(f"{DB_FILES[0]}.damaged-*"))
        stamps = sorted({f.name.rsplit("-", 1)[-1] for f in old if "-" in f.name})
        for gone in stamps[: max(0, len(stamps) - _KEEP_ASIDE + 1)]:
            for file in path.glob(f"*.damaged-{gone}"):
                file.unlink(missing_ok=True)
        target = path / f"{DB_FILES[0]}.damaged-{stamp}"
        for name in DB_FILES:
            source = path / name
            if source.exists():
                source.rename(path / f"{name}.damaged-{stamp}")
    except OSError as e:
        raise StoreError(f"cannot move the damaged cache at {path} aside: {e}") from e
    return target


def _load_index(cache: diskcache.Cache) -> _Loaded:
    """Check the database, then read every entry's header; repair what does not check.

    One read-only scan of diskcache's table instead of a ``get`` per key (the restart-to-first-
    answer time is mostly this). Every value's checksum is verified on the way. Then, in one
    transaction:

    - rows this hub did not write (a pickled key or value, a side file, text) or that fail
      their check are deleted by rowid: never unpickled, never followed to a file they name;
    - entries of an older hub (``EHC1``, no checksum) are checked as far as they can be and
      re-encoded with one (``entries.upgrade``), or deleted;
    - a list record whose member count no longer matches the objects that name it (one of them
      was dropped) is removed, and its claim with it: that list is no longer whole.
    """
    loaded = _Loaded([], [], [], [])
    directory = pathlib.Path(cache.directory)
    uri = (directory / DB_FILES[0]).resolve().as_uri() + "?mode=ro"
    con = sqlite3.connect(uri, uri=True)
    bad_rows: list[int] = []
    upgrades: list[tuple[str, bytes]] = []
    pending = 0
    try:
        check = [row[0] for row in con.execute("PRAGMA quick_check")]
        if check != ["ok"]:
            raise _Damaged(f"quick_check: {'; '.join(map(str, check[:3]))}")
        rows = con.execute("SELECT rowid, key, raw, mode, value, filename FROM Cache")
        for rowid, key, raw, mode, value, filename in rows:
            name = key if isinstance(key, str) else repr(key)
            try:
                if not raw or not isinstance(key, str):
                    raise entries.CorruptEntry("the key is not text")
                value = _raw_value(mode, value, filename)
                if entries.is_legacy(value):
                    value = entries.upgrade(value)
                    upgrades.append((key, value))
                    pending += len(value)
                _index(loaded, key, value)
            except (entries.CorruptEntry, keys.BadKey) as e:
                logger.warning("dropping corrupt cache entry %r: %s", name[:200], e)
                loaded.corrupt.append(name)
                bad_rows.append(rowid)
                continue
            if pending > _UPGRADE_BATCH:
                _rewrite(cache, upgrades)
                loaded.upgraded += len(upgrades)
                upgrades, pending = [], 0
        _rewrite(cache, upgrades)
        loaded.upgraded += len(upgrades)
        if loaded.upgraded:
            logger.info("disk cache: %d entries of an older hub now carry a CRC", loaded.upgraded)
        _repair_lists(cache, loaded, bad_rows)
    finally:
        con.close()
    return loaded


def _index(loaded: _Loaded, key: str, value: bytes) -> None:
    if keys.is_nonresource_key(key):
        entries.decode_document(value)
        loaded.documents.append(key)
    elif keys.is_list_key(key):
        loaded.lists.append((keys.parse_list_key(key), entries.decode_list(value)))
    else:
        object_key = keys.parse_object_key(key)
        loaded.objects.append((object_key, entries.decode_header(value)))


def _rewrite(cache: diskcache.Cache, values: list[tuple[str, bytes]]) -> None:
    if values:
        with cache.transact():
            for key, value in values:
                cache.set(key, value)


def _repair_lists(cache: diskcache.Cache, loaded: _Loaded, bad_rows: list[int]) -> None:
    """Drop the rows in ``bad_rows`` and every list record that lost a member to them (or that
    an object names without a record: no list may be answered from less than it saw)."""
    counts: collections.Counter[str] = collections.Counter()
    for _, entry in loaded.objects:
        counts.update(o for o in entry.owners if o != entries.DIRECT)
    records = dict(loaded.lists)
    broken = {
        str(list_key)
        for list_key, record in records.items()
        if counts.get(str(list_key), 0) != record.members
    }
    broken |= {owner for owner in counts if _record_of(owner, records) is None}
    if not bad_rows and not broken:
        return
    kept: list[tuple[keys.ObjectKey, entries.Entry]] = []
    with cache.transact():
        for rowid in bad_rows:
            cache._sql("DELETE FROM Cache WHERE rowid = ?", (rowid,))
        for owner in broken:
            logger.warning("disk cache: list %s lost members; it is no longer answered", owner)
            delete_row(cache, owner)
        for object_key, entry in loaded.objects:
            lost = entry.owners & broken
            if not lost:
                kept.append((object_key, entry))
                continue
            name = str(object_key)
            remaining = entry.owners - lost or frozenset({entries.DIRECT})
            value = raw_get(cache, name)
            if value is None:
                continue
            entry = entry.with_owners(remaining)
            cache.set(name, entries.encode_object(entry, entries.body_of(value)))
            kept.append((object_key, entry))
    loaded.objects = kept
    loaded.lists = [(k, r) for k, r in loaded.lists if str(k) not in broken]


def _record_of(
    owner: str, records: Mapping[keys.ListKey, entries.ListRecord]
) -> entries.ListRecord | None:
    try:
        return records.get(keys.parse_list_key(owner))
    except keys.BadKey:
        return None
