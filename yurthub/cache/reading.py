"""Reading bodies off the loop: the cache's reader pool and its read-only connections.

Role: fetch stored bodies (by key, by range, a page at a time), list records' store times and
documents for ``store.Store``, converting stored protobuf for JSON readers. The index
(``index``) says what to read; this module only reads.

Invariants: the event loop never touches SQLite: one executor hop per operation, on a small
pool whose threads each hold one read-only connection (WAL lets them read beside a write).
A row that fails its check is reported (``on_corrupt``: the store drops it, with the lists
that needed it) and the read raises ``CorruptRead``: the caller treats it as a cache miss.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import pathlib
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from yurthub.cache import entries, keys, sealing, sqlrows, transcoding
from yurthub.kubeproto import converting, enveloping

PAGE_ROWS = 1000
"""Rows per page of an offline list read (``Store.pages``)."""
_RANGE_READ_MIN = 64


def is_protobuf(body: bytes) -> bool:
    """Is this stored body protobuf (an enveloped object, as a get answers it)?"""
    return body.startswith(enveloping.MAGIC)


class CorruptRead(Exception):
    """Stored entries failed their checksum (or were not this hub's) when read. They are being
    dropped (with the lists that needed them); the caller treats the read as a cache miss."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(f"{len(names)} corrupt cache entries: {', '.join(names[:3])}")
        self.names = names


class Readers:
    """The reader pool of one cache directory; ``close`` once the store stops."""

    def __init__(
        self,
        path: pathlib.Path,
        transcoder: transcoding.Transcoder,
        on_corrupt: Callable[[list[str]], None],
        sealer: sealing.Sealer = sealing.PLAIN,
    ) -> None:
        self._path = path
        self._sealer = sealer
        self._transcoder = transcoder
        self._on_corrupt = on_corrupt
        self._pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="cache-reader")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._cons: list[sqlite3.Connection] = []

    async def drain(self) -> None:
        """Wait for in-flight reads (short) so their connections are free to close."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._pool.shutdown, True)

    def shutdown(self) -> None:
        # Threads exit after their current item; their SQLite connections die with them.
        self._pool.shutdown(wait=False, cancel_futures=True)

    def close_connections(self) -> None:
        """Close every thread's connection (once the pool has stopped)."""
        with self._lock:
            cons, self._cons = self._cons, []
        for con in cons:
            con.close()

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
            self._pool, self._read_bodies, wanted, prefix, as_stored
        )
        if corrupt:
            self._on_corrupt(corrupt)
            raise CorruptRead(corrupt)
        return found

    async def chosen_pages(
        self,
        object_keys: list[keys.ObjectKey],
        within: keys.ObjectKey,
        size: int = PAGE_ROWS,
        *,
        as_stored: bool = False,
    ) -> AsyncIterator[list[bytes]]:
        """The stored bodies of ``object_keys`` (in their order, gone ones left out), ``size``
        at a time, the next page read while the caller writes this one (as ``pages``). Only
        these keys' values are opened (a sealed cache decrypts what the selector matched).
        Raises ``CorruptRead``."""
        prefix = within.scope.prefix() + "/"
        if within.namespace:
            prefix += keys.escape(within.namespace) + "/"
        chunks = [
            [str(k) for k in object_keys[i : i + size]] for i in range(0, len(object_keys), size)
        ]
        loop = asyncio.get_running_loop()

        def read(index: int) -> asyncio.Future[tuple[list[bytes | None], list[str]]]:
            return loop.run_in_executor(
                self._pool, self._read_bodies, chunks[index], prefix, as_stored
            )

        pending = read(0) if chunks else None
        try:
            for index in range(len(chunks)):
                assert pending is not None
                found, corrupt = await pending
                pending = read(index + 1) if index + 1 < len(chunks) and not corrupt else None
                if corrupt:
                    self._on_corrupt(corrupt)
                    raise CorruptRead(corrupt)
                yield [b for b in found if b is not None]
        finally:
            if pending is not None:
                pending.cancel()

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
        executor hop per page, so an answer streams while the rest is read and at most two
        pages of bodies are in memory (a 10,000-pod list is ~20 MB). Pages are read one after
        the other (keyset paging), the next one while the caller writes this one: reading (and,
        sealed, decrypting) a page overlaps sending the one before. A body written meanwhile is
        included when its key is still ahead. Raises ``CorruptRead`` at the page holding a
        corrupt row (being dropped). Bodies are JSON unless ``as_stored`` (as ``bodies``)."""
        prefix = within.scope.prefix() + "/"
        if within.namespace:
            prefix += keys.escape(within.namespace) + "/"
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        loop = asyncio.get_running_loop()
        pending: asyncio.Future[tuple[list[bytes], list[str], str | None]] | None
        pending = loop.run_in_executor(self._pool, self._read_page, prefix, upper, size, as_stored)
        try:
            while pending is not None:
                found, corrupt, last = await pending
                pending = None
                if corrupt:
                    self._on_corrupt(corrupt)
                    raise CorruptRead(corrupt)
                if last is not None:
                    pending = loop.run_in_executor(
                        self._pool, self._read_page, last, upper, size, as_stored
                    )
                if found:
                    yield found
        finally:
            if pending is not None:
                # The caller stopped early (a client gone): the read ahead is not wanted.
                pending.cancel()

    def _read_page(
        self, after: str, upper: str, size: int, as_stored: bool = False
    ) -> tuple[list[bytes], list[str], str | None]:
        """(bodies of up to ``size`` rows with ``after < key < upper``, names of corrupt rows,
        the last key read, None when the range ended)."""
        out: list[bytes] = []
        corrupt: list[str] = []
        # Unsealed here, on the reader thread: the loop never decrypts.
        body_of = self._sealer.read_body
        key = None
        count = 0
        for key, mode, value, filename in self._connection().execute(
            sqlrows.SELECT_PAGE, (after, upper, size)
        ):
            count += 1
            try:
                if mode != sqlrows.MODE_RAW or filename is not None or value.__class__ is not bytes:
                    raise entries.CorruptEntry("not a raw row written by this hub")
                body = body_of(key, value)
                out.append(self._json(body) if not as_stored and is_protobuf(body) else body)
            except entries.CorruptEntry:
                corrupt.append(key)
        return out, corrupt, (key if count == size else None)

    def _json(self, body: bytes) -> bytes:
        """A stored protobuf object as JSON (reader thread); ``CorruptEntry`` when it does not
        convert (dropped like a row that rotted: nothing could answer with it)."""
        try:
            return self._transcoder.as_json(body)
        except converting.Undecodable as e:
            self._transcoder.failed(e)
            raise entries.CorruptEntry(f"stored protobuf does not convert: {e}") from e

    def _read_bodies(
        self, wanted: list[str], prefix: str | None, as_stored: bool = False
    ) -> tuple[list[bytes | None], list[str]]:
        """(bodies in the order of ``wanted``, None when gone; names of corrupt rows)."""
        if not wanted:
            return [], []
        found: dict[str, bytes] = {}
        corrupt: list[str] = []
        con = self._connection()

        def take(key: str, row: list[Any]) -> None:
            try:
                body = self._sealer.body(key, sqlrows.raw_value(*row))
                found[key] = self._json(body) if not as_stored and is_protobuf(body) else body
            except entries.CorruptEntry:
                corrupt.append(key)

        if prefix is not None and len(wanted) > _RANGE_READ_MIN:
            # '/' + 1 == '0': the range holds exactly the keys that start with the prefix.
            upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
            wanted_set = set(wanted)
            for key, *row in con.execute(sqlrows.SELECT_RANGE, (prefix, upper)):
                if key in wanted_set:
                    take(key, row)
        else:
            for start in range(0, len(wanted), sqlrows.IN_CHUNK):
                chunk = wanted[start : start + sqlrows.IN_CHUNK]
                query = sqlrows.SELECT_IN.format(",".join("?" * len(chunk)))
                for key, *row in con.execute(query, chunk):
                    take(key, row)
        return [found.get(key) for key in wanted], corrupt

    def _read_store_times(self, names: list[str]) -> dict[str, float]:
        con = self._connection()
        out: dict[str, float] = {}
        for start in range(0, len(names), sqlrows.IN_CHUNK):
            chunk = names[start : start + sqlrows.IN_CHUNK]
            query = f"SELECT key, store_time FROM Cache WHERE key IN ({','.join('?' * len(chunk))})"
            for name, when in con.execute(query, chunk):
                if isinstance(name, str) and when is not None:
                    out[name] = float(when)
        return out

    def _read_document(self, key: str) -> tuple[tuple[str, bytes] | None, list[str]]:
        row = self._connection().execute(sqlrows.SELECT_ONE, (key,)).fetchone()
        if row is None:
            return None, []
        try:
            return entries.decode_document(self._sealer.unseal(key, sqlrows.raw_value(*row))), []
        except entries.CorruptEntry:
            return None, [key]

    def _connection(self) -> sqlite3.Connection:
        local = self._local
        con: sqlite3.Connection | None = getattr(local, "con", None)
        if con is None:
            uri = (self._path / sqlrows.DB_FILES[0]).resolve().as_uri() + "?mode=ro"
            # Used by this thread only; closed by ``close_connections`` once the pool has stopped.
            con = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            local.con = con
            with self._lock:
                self._cons.append(con)
        return con

    async def store_times(self, names: list[str]) -> dict[str, float]:
        """When each of the rows ``names`` was last written (diskcache's ``store_time``)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._read_store_times, names)

    async def document(self, key: str) -> tuple[str, bytes] | None:
        loop = asyncio.get_running_loop()
        found, corrupt = await loop.run_in_executor(self._pool, self._read_document, key)
        if corrupt:
            self._on_corrupt(corrupt)
        return found
