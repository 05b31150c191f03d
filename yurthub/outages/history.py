"""The outage history on disk: the last ``records.HISTORY`` outages, the ongoing one included.

Storage: one SQLite file, ``outages.sqlite`` in the cache directory (0600, WAL, synchronous
NORMAL), apart from the cache's database and the offline Event journal: a row per outage (its
record as JSON compressed with zlib, ``encode``: a few hundred bytes in practice, at most about
150 KiB before compression: ``records``), its insertion sequence ``seq``, and the state of its
Event in a column of its own, which only ``set_event`` writes (a record saved later with more
counts never undoes "posted"). A hub restarted during an outage finds it here by its stored
state (the newest row not ended: ``ongoing``) and goes on with it; a kill -9 loses what was
counted since the last save (``recording`` saves at most every ``--outage-save-interval-
seconds``, and at once when an outage begins or ends). A file damaged at open (a header SQLite
refuses, or pages ``PRAGMA quick_check`` does not find "ok") is removed and started empty (a
history is worth less than a hub that starts). ``path=None``: kept in memory (no cache
directory: the history lasts as long as the process).

Order is the insertion sequence, never a time: the wall clock a record shows may be far
behind or ahead (a node with no battery-backed clock, NTP stepping it), and the newest
outage must stay the newest. A file from an older hub (no ``seq``) is given one from its
rows' insertion order (SQLite's rowid) when opened. Fields a record gained later (``until``,
``flaps``, ``flapSeconds``) live in its JSON, not in columns: a row an older hub wrote reads
back with their defaults (no flaps; no end reading, so its outage is final at once), and an
older hub reading a newer row ignores them. A reopened outage (a flap) keeps its row and its
``seq``: saved with ``ended`` NULL again, it is the ongoing one, not a new row.

Invariants: at most ``limit`` rows, oldest inserted first out; every call one hop to the
history's own thread (the loop never blocks on SQLite); a row that does not read back as a
record is skipped (and logged once), never an exception.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import pathlib
import sqlite3
import zlib
from typing import Any

import orjson

from yurthub import sqlitefiles
from yurthub.outages import records

log = logging.getLogger(__name__)

FILE_NAME = "outages.sqlite"
LIMIT = 50
"""Outages kept (the ongoing one counts)."""
MAX_RECORD = 1 << 20
"""Bytes a stored record may inflate to (a record is at most about 150 KiB)."""

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS outages (
        id TEXT PRIMARY KEY,
        began REAL NOT NULL,
        ended REAL,
        event TEXT NOT NULL DEFAULT '',
        record BLOB NOT NULL,
        seq INTEGER
    )""",
)
_INDEXES = (
    "DROP INDEX IF EXISTS outages_by_began",
    "CREATE INDEX IF NOT EXISTS outages_by_seq ON outages (seq)",
)


def encode(outage: records.Outage) -> bytes:
    """A record as stored: its JSON, zlib-compressed (a few hundred bytes: fewer pages written
    at each save)."""
    return zlib.compress(orjson.dumps(records.to_stored(outage)), 6)


def decode(raw: bytes) -> records.Outage:
    """A stored record read back (compressed, or plain JSON from an older hub); ``ValueError``
    when it is not one."""
    raw = bytes(raw)
    if not raw.startswith(b"{"):
        inflate = zlib.decompressobj()
        try:
            raw = inflate.decompress(raw, MAX_RECORD)
        except zlib.error as e:
            raise ValueError(f"not a compressed record: {e}") from e
        if inflate.unconsumed_tail or not inflate.eof:
            raise ValueError("a stored record larger than its bound, or cut short")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from e
    return records.from_stored(data)


class _Db:
    """The SQLite side; every method runs on the history's one thread."""

    def __init__(self, path: pathlib.Path | None, limit: int) -> None:
        self.limit = limit
        self._bad_logged = False
        if path is None:
            self._conn = self._open(None)
            return
        try:
            self._conn = self._open(path)
        except sqlite3.DatabaseError as e:
            log.error("the outage history %s is damaged (%s): starting it empty", path, e)
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{path}{suffix}")
            self._conn = self._open(path)

    @staticmethod
    def _open(path: pathlib.Path | None) -> sqlite3.Connection:
        return sqlitefiles.open_private(path, _SCHEMA, _migrate)

    def close(self) -> None:
        self._conn.close()

    def save(self, outage_id: str, began: float, ended: float | None, raw: bytes) -> None:
        """Insert (the next ``seq``) or update (its ``seq`` kept); the oldest inserted past
        ``limit`` go."""
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute(
                "INSERT INTO outages (id, began, ended, record, seq) "
                "VALUES (?, ?, ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM outages)) "
                "ON CONFLICT (id) DO UPDATE SET ended = excluded.ended, record = excluded.record",
                (outage_id, began, ended, raw),
            )
            self._conn.execute(
                "DELETE FROM outages WHERE seq <= "
                "(SELECT seq FROM outages ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                (self.limit,),
            )

    def set_event(self, outage_id: str, state: str) -> None:
        self._conn.execute("UPDATE outages SET event = ? WHERE id = ?", (state, outage_id))

    def _read(self, rows: list[tuple[bytes, str, int]]) -> list[records.Outage]:
        out = []
        for raw, event, seq in rows:
            try:
                outage = decode(raw)
            except ValueError as e:
                if not self._bad_logged:
                    self._bad_logged = True
                    log.warning("an unreadable outage record is skipped: %s", e)
                continue
            outage.event = event
            outage.seq = seq
            out.append(outage)
        return out

    def newest(self, limit: int) -> list[records.Outage]:
        rows = self._conn.execute(
            "SELECT record, event, seq FROM outages ORDER BY seq DESC LIMIT ?", (limit,)
        ).fetchall()
        return self._read(rows)

    def ongoing(self) -> list[records.Outage]:
        rows = self._conn.execute(
            "SELECT record, event, seq FROM outages WHERE ended IS NULL ORDER BY seq DESC LIMIT ?",
            (self.limit,),
        ).fetchall()
        return self._read(rows)

    def last_ended(self) -> list[records.Outage]:
        rows = self._conn.execute(
            "SELECT record, event, seq FROM outages WHERE ended IS NOT NULL "
            "ORDER BY seq DESC LIMIT 1"
        ).fetchall()
        return self._read(rows)

    def unposted(self) -> list[records.Outage]:
        rows = self._conn.execute(
            "SELECT record, event, seq FROM outages WHERE ended IS NOT NULL AND event = '' "
            "ORDER BY seq LIMIT ?",
            (self.limit,),
        ).fetchall()
        return self._read(rows)


class History:
    """The history's async face: each call one hop to its own thread."""

    def __init__(self, db: _Db) -> None:
        self._db = db
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="outages")
        self._closed = False

    @property
    def limit(self) -> int:
        return self._db.limit

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def save(self, outage: records.Outage) -> None:
        """Insert or update ``outage`` (its Event state is ``set_event``'s)."""
        raw = encode(outage)
        await self._run(self._db.save, outage.id, outage.began, outage.ended, raw)

    async def set_event(self, outage_id: str, state: str) -> None:
        await self._run(self._db.set_event, outage_id, state)

    async def newest(self, limit: int | None = None) -> list[records.Outage]:
        """Newest (last inserted) first."""
        found: list[records.Outage] = await self._run(
            self._db.newest, self.limit if limit is None else limit
        )
        return found

    async def ongoing(self) -> list[records.Outage]:
        """The records not ended, newest first (one, unless a hub failed to save an end)."""
        found: list[records.Outage] = await self._run(self._db.ongoing)
        return found

    async def last_ended(self) -> records.Outage | None:
        """The newest ended record."""
        found: list[records.Outage] = await self._run(self._db.last_ended)
        return found[0] if found else None

    async def unposted(self) -> list[records.Outage]:
        """Ended outages whose Event the cloud does not hold yet, oldest first."""
        found: list[records.Outage] = await self._run(self._db.unposted)
        return found

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._run(self._db.close)
        self._thread.shutdown(wait=True)


async def open_history(directory: pathlib.Path | None, limit: int = LIMIT) -> History:
    """Open (or create) the history in ``directory`` (which must exist), off the loop;
    ``None``: in memory."""
    path = None if directory is None else directory / FILE_NAME
    db = await asyncio.to_thread(_Db, path, limit)
    return History(db)


def _migrate(conn: sqlite3.Connection) -> None:
    """A file from an older hub has no ``seq``: its rowid is its insertion order."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(outages)")}
    if "seq" not in columns:
        conn.execute("ALTER TABLE outages ADD COLUMN seq INTEGER")
    conn.execute(
        "UPDATE outages SET seq = rowid + (SELECT COALESCE(MAX(seq), 0) FROM outages) "
        "WHERE seq IS NULL"
    )
    for statement in _INDEXES:
        conn.execute(statement)
