"""The disk cache: ``diskcache`` (SQLite) for the bytes, an in-memory index for the questions.

Role: hold every cached object, list record and discovery document of one hub, answer
"which objects of this component/resource/namespace match" from memory, and fetch bodies from
disk. Nothing here decides what to cache or how a response changes it (``cacheability``,
``applying``); the store carries those decisions out. ``Store`` is the entry point; its parts:

- ``index``: the in-memory index (scope -> namespace -> name -> entry; list records; documents);
- ``writing``: the writer thread, its bounded queue and group commit (``Stats``);
- ``batching``: one writer batch's decisions over index + overlay, and its writes;
- ``reading``: the reader pool (bodies, pages, documents);
- ``opening``: permissions, opening, checking, loading and repairing the database;
- ``jobs``: what callers submit (named here too: ``store.PutList(...)``); ``rows``: the SQL.

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
- A list record means "this list was seen whole" (``batching``).
- The directory is 0700 and the SQLite files (database, WAL, shared memory) 0600: Secrets are
  cached, and nothing in here is for other users. Values are kept inside SQLite (no side files);
  the only other files are the sealed data key ``cache.key`` and, sealed to a TPM, its blobs
  (0600, ``keysealing``, ``tpmsealing``).
- Sealed (``key_source``): every value on disk is ``sealing``'s AES-GCM of the entry, opened on
  the reader and writer threads, never on the loop; a plaintext value is read only while the
  open migrates it (``opening``).

Dangers: submission is bounded in bytes; over the bound a job is refused (the tee then drops
that response's caching and counts it). Disk errors (full, I/O) fail the whole batch: it is
counted, logged once per episode, and the hub keeps serving.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import pathlib
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping

import diskcache

from yurthub.cache import (
    entries,
    failures,
    index,
    jobs,
    keys,
    keysealing,
    opening,
    reading,
    sealing,
    selectors,
    sqlrows,
    transcoding,
    writing,
)

# The store's vocabulary, defined beside the parts that use it.
PutObject = jobs.PutObject
PutList = jobs.PutList
WatchLines = jobs.WatchLines
InitialEvents = jobs.InitialEvents
PutDocument = jobs.PutDocument
DropCorrupt = jobs.DropCorrupt
Job = jobs.Job
Stats = writing.Stats
StoreError = opening.StoreError
Keys = opening.Keys
PLAIN_KEYS = opening.PLAIN_KEYS
CorruptRead = reading.CorruptRead
DB_FILES = sqlrows.DB_FILES
PAGE_ROWS = reading.PAGE_ROWS
is_protobuf = reading.is_protobuf
trim_heap = writing.trim_heap


async def open_keys(
    path: pathlib.Path,
    key_source: keysealing.Source | None,
    environ: Mapping[str, str] | None = None,
) -> opening.Keys:
    """The data keys of the cache at ``path`` (``opening.open_keys``, off the loop): opened
    once at the hub's start and shared by the cache and the hub's private keys. Raises
    ``StoreError``."""
    loop = asyncio.get_running_loop()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cache-keys") as pool:
        return await loop.run_in_executor(pool, opening.open_keys, path, key_source, environ)


class Store:
    """One cache directory. Create with ``await Store.open(path)``; ``await close()`` at the end."""

    def __init__(
        self,
        path: pathlib.Path,
        cache: diskcache.Cache,
        max_pending_bytes: int,
        sealer: sealing.Sealer = sealing.PLAIN,
    ) -> None:
        self.path = path
        self.sealer = sealer
        """What seals the values (``sealing.PLAIN`` when nothing does)."""
        self.transcoder = transcoding.Transcoder()
        """Protobuf bodies -> JSON (the writer's; the tee asks it about end bookmarks)."""
        self.stats = Stats()
        self.failures = failures.Failures()
        """The current write-failure episode and the whole lists it lost (``failures``)."""
        self._index = index.Index()
        self._writer = writing.Writer(
            cache,
            self._index,
            self.transcoder,
            self.stats,
            self.failures,
            max_pending_bytes,
            sealer=sealer,
        )
        self._readers = reading.Readers(path, self.transcoder, self._writer.drop_corrupt, sealer)
        self.corrupt_at_load: list[str] = []
        self.sealed_by = ""
        """What seals the data key (a key file, a credential); "" when the cache is plaintext."""
        self.reset = ""
        """Why the database was moved aside and started empty at open; "" when it was not."""
        self.keys = opening.PLAIN_KEYS
        """The data keys it was opened with (``opening.Keys``)."""
        self._retirable = False

    # --- life cycle --------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        path: pathlib.Path,
        *,
        max_pending_bytes: int = 64 << 20,
        key_source: keysealing.Source | None = None,
        environ: Mapping[str, str] | None = None,
        keys: opening.Keys | None = None,
        retire: bool = True,
    ) -> Store:
        """Open (or create) the cache at ``path`` and load the index, sealed as ``key_source``
        says (None: plaintext, and a sealed cache is refused), or with ``keys`` already opened
        (``open_keys``). ``retire``: drop older data keys once every entry is re-encrypted
        (else ``retire_old_keys`` later). Raises ``StoreError``."""
        loop = asyncio.get_running_loop()
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cache-open") as pool:
            opened = await loop.run_in_executor(
                pool,
                functools.partial(
                    opening.open_checked, path, key_source, environ, keys=keys, retire=retire
                ),
            )
        store = cls(path, opened.cache, max_pending_bytes, opened.sealer)
        store._install(opened.loaded)
        store.reset = opened.reset
        store.sealed_by = opened.sealed_by
        store.keys = opened.keys
        store._retirable = opened.retirable and not retire
        return store

    async def retire_old_keys(self) -> bool:
        """Drop the data keys older than the current one from ``cache.key`` (opened with
        ``retire=False``, once whatever else they sealed is re-sealed). Raises ``StoreError``."""
        if not self._retirable:
            return False
        self._retirable = False
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, opening.retire_keys, self.path, self.keys)

    def _install(self, loaded: opening.Loaded) -> None:
        for key, entry in loaded.objects:
            self._index.set_entry(key, entry)
        self._index.lists = dict(loaded.lists)
        self._index.documents = set(loaded.documents)
        self.corrupt_at_load = loaded.corrupt
        self.stats.corrupt_entries += len(loaded.corrupt)

    async def close(self, grace: float = 10.0) -> None:
        """Apply what is queued (within ``grace`` seconds), then close the database."""
        if self._writer.closed:
            return
        try:
            await self.flush(grace)
        finally:
            self._writer.stop()
            try:
                await self._writer.close_cache()
                await self._readers.drain()
            finally:
                self._writer.shutdown()
                self._readers.shutdown()
                self._readers.close_connections()

    async def flush(self, grace: float | None = None) -> bool:
        """Wait until every job submitted so far is applied (or failed). False on timeout."""
        return await self._writer.flush(grace)

    async def settled(self, grace: float) -> bool:
        """Wait (at most ``grace``) until the writes queued before this call are applied: not
        for later ones (``writing.Writer.settled``)."""
        return await self._writer.settled(grace)

    # --- index queries (loop) ----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._index)

    def entry(self, key: keys.ObjectKey) -> entries.Entry | None:
        return self._index.lookup(key)

    def scopes(self) -> list[keys.Scope]:
        return self._index.scopes()

    def objects(
        self, scope: keys.Scope, namespace: str = "", *, ordered: bool = True
    ) -> Iterator[tuple[keys.ObjectKey, entries.Entry]]:
        """Entries of ``scope``; in ``namespace`` only when given. Sorted by namespace, name,
        unless ``ordered`` is False."""
        return self._index.objects(scope, namespace, ordered=ordered)

    def summary(self, scope: keys.Scope, namespace: str = "") -> tuple[int, int, str]:
        """(objects, highest resourceVersion or -1, the kind of one of them) of ``scope`` (in
        ``namespace`` when given), without making a key per object."""
        return self._index.summary(scope, namespace)

    def count(self, scope: keys.Scope, namespace: str = "") -> int:
        """Objects of ``scope`` (in ``namespace`` when given)."""
        return self._index.count(scope, namespace)

    def list_count(self) -> int:
        """Lists recorded (safe from a scrape thread: one ``len``)."""
        return len(self._index.lists)

    def list_record(self, list_key: keys.ListKey) -> entries.ListRecord | None:
        return self._index.lists.get(list_key)

    def list_records(
        self, scope: keys.Scope | None = None
    ) -> list[tuple[keys.ListKey, entries.ListRecord]]:
        return self._index.list_records(scope)

    def documents(self) -> list[str]:
        return sorted(self._index.documents)

    def list_failure(
        self,
        scope: keys.Scope,
        namespace: str,
        labels: selectors.LabelSelector,
        fields: selectors.FieldSelector,
    ) -> str:
        """Why no list of ``scope`` covers this request although one that would was read whole
        online: its write failed (``failures.describe``); "" when none was."""
        return self.failures.lost(scope, namespace, labels, fields)

    # --- reads (reader pool) -----------------------------------------------------------------

    async def bodies(
        self,
        object_keys: Iterable[keys.ObjectKey],
        *,
        within: keys.ObjectKey | None = None,
        as_stored: bool = False,
    ) -> list[bytes | None]:
        """The stored bodies, in order, as JSON (``as_stored``: protobuf ones as stored, see
        ``is_protobuf``); None for a key removed since the index was read. ``within``: a key
        whose scope (and namespace) contains every wanted key (one range scan). Raises
        ``CorruptRead``."""
        return await self._readers.bodies(object_keys, within=within, as_stored=as_stored)

    def chosen_pages(
        self,
        object_keys: list[keys.ObjectKey],
        within: keys.ObjectKey,
        *,
        as_stored: bool = False,
    ) -> AsyncIterator[list[bytes]]:
        """The stored bodies of ``object_keys`` a page at a time (gone ones left out), the
        next page read ahead (``reading.Readers.chosen_pages``). Raises ``CorruptRead``."""
        return self._readers.chosen_pages(object_keys, within, as_stored=as_stored)

    async def all_bodies(self, within: keys.ObjectKey) -> list[bytes]:
        """Every stored body of ``within``'s scope (and namespace, when set), in key order (all
        pages of ``pages`` at once: for small ranges and tests)."""
        return await self._readers.all_bodies(within)

    def pages(
        self, within: keys.ObjectKey, size: int = PAGE_ROWS, *, as_stored: bool = False
    ) -> AsyncIterator[list[bytes]]:
        """Every stored body of ``within``'s range in key order, ``size`` at a time, one
        executor hop per page (``reading.Readers.pages``). Raises ``CorruptRead``."""
        return self._readers.pages(within, size, as_stored=as_stored)

    async def list_store_times(self) -> dict[keys.ListKey, float]:
        """When each list record was last written (diskcache's ``store_time``: a relist, or a
        watch event or bookmark advancing it): how fresh what the cache answers offline is
        (``/v1/status``). Read on the reader pool, never on the loop."""
        wanted = {str(k): k for k in self._index.lists}
        found = await self._readers.store_times(list(wanted))
        return {wanted[name]: when for name, when in found.items() if name in wanted}

    def disk_bytes(self) -> int:
        """Bytes of the database files on disk (a ``stat`` each: call it off the loop)."""
        total = 0
        for name in DB_FILES:
            try:
                total += (self.path / name).stat().st_size
            except OSError:
                pass
        return total

    async def body(self, key: keys.ObjectKey, *, as_stored: bool = False) -> bytes | None:
        return (await self.bodies((key,), as_stored=as_stored))[0]

    async def document(self, key: str) -> tuple[str, bytes] | None:
        if key not in self._index.documents:
            return None
        return await self._readers.document(key)

    # --- writes (writer thread, through the pump) --------------------------------------------

    @property
    def pending_bytes(self) -> int:
        """Bytes queued for the writer (not yet in a batch)."""
        return self._writer.pending_bytes

    @property
    def max_pending_bytes(self) -> int:
        return self._writer.max_pending_bytes

    def submit(self, job: Job) -> bool:
        """Queue a write; False (and nothing queued) when the queue is over its byte bound."""
        return self._writer.submit(job)
