"""The offline Event journal on disk: Events recorded while the cloud is away, until posted.

Role: ``local`` (through ``localcreates`` and the patch answer) appends creates and folds
patches; ``eventposting`` reads the oldest entries after the heal and removes them as the
cloud takes them. The decisions (aggregation key, folding, bounds, bodies) are
``eventfolding``'s.

Storage: one SQLite file, ``offline-events.sqlite`` in the cache directory (0600, WAL,
synchronous NORMAL), separate from the cache's database: one transaction per append or fold,
so a kill -9 mid-write leaves the journal as it was before or after that Event. A hub restarted
during the outage keeps it. A file that is damaged at open is removed and started empty
(Events are worth less than a hub that starts).

Invariants: at most ``Bounds`` entries and bytes (oldest first out, each drop counted with the
time of the first and last; the count is cleared only once the summary Event is posted); every
call is one hop to the journal's own thread (the loop never blocks on SQLite); an entry is
removed after posting only if no fold changed it meanwhile (``rev``), else the next round
posts again (the 409 then patches the newer count).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import os
import pathlib
import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from yurthub.cache import eventfolding

log = logging.getLogger(__name__)

FILE_NAME = "offline-events.sqlite"

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS entries (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        api TEXT NOT NULL,
        namespace TEXT NOT NULL,
        key TEXT NOT NULL,
        body BLOB NOT NULL,
        size INTEGER NOT NULL,
        rev INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX IF NOT EXISTS entries_by_key ON entries (key)",
    """CREATE TABLE IF NOT EXISTS names (
        api TEXT NOT NULL,
        namespace TEXT NOT NULL,
        name TEXT NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY (api, namespace, name)
    )""",
    "CREATE INDEX IF NOT EXISTS names_by_seq ON names (seq)",
    """CREATE TABLE IF NOT EXISTS drops (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        count INTEGER NOT NULL,
        first REAL NOT NULL,
        last REAL NOT NULL
    )""",
)


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    seq: int
    api: str
    namespace: str
    body: dict[str, Any]
    rev: int


@dataclasses.dataclass(frozen=True, slots=True)
class Drops:
    count: int
    first: float
    last: float


class _Db:
    """The SQLite side; every method runs on the journal's one thread."""

    def __init__(self, path: pathlib.Path, bounds: eventfolding.Bounds) -> None:
        self.bounds = bounds
        try:
            self._conn = self._open(path)
        except sqlite3.DatabaseError as e:
            log.error("the offline Event journal %s is damaged (%s): starting it empty", path, e)
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{path}{suffix}")
            self._conn = self._open(path)
        self.pending = 0
        self.dropped = 0
        self._count()

    @staticmethod
    def _open(path: pathlib.Path) -> sqlite3.Connection:
        # Created 0600 before SQLite touches it (its -wal and -shm files take the same mode).
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        os.chmod(path, 0o600)
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            for statement in _SCHEMA:
                conn.execute(statement)
            # Damaged pages under a sound header open fine and fail every later query: the
            # check's answer is what tells ("ok", else what it found).
            check = conn.execute("PRAGMA quick_check").fetchone()
            if check is None or check[0] != "ok":
                found = " ".join(str(check[0] if check else "no answer").split())
                raise sqlite3.DatabaseError(f"quick_check: {found[:200]}")
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        self._conn.close()

    def _store(self, seq: int, body: Mapping[str, Any]) -> None:
        raw = orjson.dumps(body)
        self._conn.execute(
            "UPDATE entries SET body = ?, size = ?, rev = rev + 1 WHERE seq = ?",
            (raw, len(raw), seq),
        )

    def _bound(self, now: float) -> None:
        count, total, largest = self._conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(size), 0), COALESCE(MAX(size), 0) FROM entries"
        ).fetchone()
        bounds = self.bounds
        if count <= bounds.events and total <= bounds.bytes and largest <= bounds.bytes:
            return
        sizes = self._conn.execute("SELECT seq, size FROM entries ORDER BY seq").fetchall()
        gone = eventfolding.evictions(sizes, self.bounds)
        if not gone:
            return
        for seq in gone:
            self._conn.execute("DELETE FROM entries WHERE seq = ?", (seq,))
            self._conn.execute("DELETE FROM names WHERE seq = ?", (seq,))
        self._conn.execute(
            "INSERT INTO drops (id, count, first, last) VALUES (1, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET count = count + excluded.count, last = excluded.last",
            (len(gone), now, now),
        )

    def create(self, api: str, namespace: str, event: Mapping[str, Any], now: float) -> None:
        name = eventfolding.name(event)
        fold = eventfolding.key(api, namespace, event)
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            row = self._conn.execute(
                "SELECT seq FROM names WHERE api = ? AND namespace = ? AND name = ?",
                (api, namespace, name),
            ).fetchone()
            by_key = False
            if row is None:
                row = self._conn.execute(
                    "SELECT seq FROM entries WHERE key = ? ORDER BY seq DESC LIMIT 1", (fold,)
                ).fetchone()
                by_key = row is not None
            if row is not None:
                (seq,) = row
                old = orjson.loads(
                    self._conn.execute("SELECT body FROM entries WHERE seq = ?", (seq,)).fetchone()[
                        0
                    ]
                )
                self._store(seq, eventfolding.folded(api, old, event))
            else:
                raw = orjson.dumps(event)
                seq = self._conn.execute(
                    "INSERT INTO entries (api, namespace, key, body, size) VALUES (?, ?, ?, ?, ?)",
                    (api, namespace, fold, raw, len(raw)),
                ).lastrowid
            if by_key:
                # A recorder that forgot (kubelet restarted) patches by the new name only: the
                # names of the old one go, so an entry has a bounded number of them.
                self._conn.execute("DELETE FROM names WHERE seq = ?", (seq,))
            if name:
                self._conn.execute(
                    "INSERT OR REPLACE INTO names (api, namespace, name, seq) VALUES (?, ?, ?, ?)",
                    (api, namespace, name, seq),
                )
            self._bound(now)
        self._count()

    def patch(
        self, api: str, namespace: str, name: str, patch: Any, now: float
    ) -> dict[str, Any] | None:
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            row = self._conn.execute(
                "SELECT e.seq, e.body FROM names n JOIN entries e ON e.seq = n.seq "
                "WHERE n.api = ? AND n.namespace = ? AND n.name = ?",
                (api, namespace, name),
            ).fetchone()
            if row is None:
                return None
            seq, raw = row
            body = eventfolding.patched(orjson.loads(raw), patch)
            self._store(seq, body)
            self._bound(now)
        self._count()
        return body

    def head(self, limit: int) -> list[Entry]:
        rows = self._conn.execute(
            "SELECT seq, api, namespace, body, rev FROM entries ORDER BY seq LIMIT ?", (limit,)
        ).fetchall()
        return [Entry(seq, api, ns, orjson.loads(raw), rev) for seq, api, ns, raw, rev in rows]

    def remove(self, seq: int, rev: int | None) -> bool:
        """Remove entry ``seq`` (only at ``rev`` unless None); False when a fold changed it."""
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            query = "DELETE FROM entries WHERE seq = ?" + (
                " AND rev = ?" if rev is not None else ""
            )
            gone = self._conn.execute(query, (seq,) if rev is None else (seq, rev)).rowcount
            if gone:
                self._conn.execute("DELETE FROM names WHERE seq = ?", (seq,))
        self._count()
        return bool(gone)

    def drops(self) -> Drops | None:
        row = self._conn.execute("SELECT count, first, last FROM drops WHERE id = 1").fetchone()
        return Drops(*row) if row is not None and row[0] > 0 else None

    def told(self, count: int) -> None:
        """The summary of ``count`` drops was posted: forget them (not later ones)."""
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute("UPDATE drops SET count = count - ? WHERE id = 1", (count,))
            self._conn.execute("DELETE FROM drops WHERE count <= 0")
        self._count()

    def _count(self) -> None:
        self.pending = self._conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
        row = self._conn.execute("SELECT count FROM drops WHERE id = 1").fetchone()
        self.dropped = row[0] if row is not None else 0


class Journal:
    """The journal's async face: each call one hop to its own thread."""

    def __init__(self, db: _Db, clock: Callable[[], float]) -> None:
        self._db = db
        self._clock = clock
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="event-journal")
        self.appended = asyncio.Event()
        """Set on every append (the poster waits on it; it clears it)."""

    @property
    def bounds(self) -> eventfolding.Bounds:
        return self._db.bounds

    @property
    def pending(self) -> int:
        """Entries waiting to be posted (as of the last write)."""
        return int(self._db.pending)

    @property
    def dropped(self) -> int:
        """Entries dropped over the bounds and not told yet (as of the last write)."""
        return int(self._db.dropped)

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def create(self, api: str, namespace: str, event: Mapping[str, Any]) -> None:
        await self._run(self._db.create, api, namespace, event, self._clock())
        self.appended.set()

    async def patch(self, api: str, namespace: str, name: str, patch: Any) -> dict[str, Any] | None:
        """The patched Event, or None when the journal does not hold it
        (``cache.patching.PatchError`` when the patch cannot apply)."""
        body: dict[str, Any] | None = await self._run(
            self._db.patch, api, namespace, name, patch, self._clock()
        )
        if body is not None:
            self.appended.set()
        return body

    async def head(self, limit: int) -> list[Entry]:
        entries: list[Entry] = await self._run(self._db.head, limit)
        return entries

    async def remove(self, entry: Entry, *, unless_changed: bool = True) -> bool:
        removed: bool = await self._run(
            self._db.remove, entry.seq, entry.rev if unless_changed else None
        )
        return removed

    async def drops(self) -> Drops | None:
        drops: Drops | None = await self._run(self._db.drops)
        return drops

    async def told(self, count: int) -> None:
        await self._run(self._db.told, count)

    async def close(self) -> None:
        await self._run(self._db.close)
        self._thread.shutdown(wait=True)


async def open_journal(
    directory: pathlib.Path, bounds: eventfolding.Bounds, clock: Callable[[], float]
) -> Journal:
    """Open (or create) the journal in ``directory`` (which must exist), off the loop."""
    db = await asyncio.to_thread(_Db, directory / FILE_NAME, bounds)
    return Journal(db, clock)
