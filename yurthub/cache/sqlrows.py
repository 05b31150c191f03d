"""The cache's rows in SQLite: diskcache's ``Cache`` table read and written by SQL of our own.

Role: the one place that knows how this hub's values sit in diskcache's table, shared by the
readers (``reading``), the writer (``batching``) and the loader (``opening``).

Invariants: a value this hub wrote is raw bytes inside its row (MODE_RAW, no side file); any
other row (a pickled value, a side file, text) was not written by us and reads as
``entries.CorruptEntry``: never unpickled, never followed to a path the database names (a
copied cache could name any file, or run code).
"""

from __future__ import annotations

import diskcache
import diskcache.core

from yurthub.cache import entries

DB_FILES = ("cache.db", "cache.db-wal", "cache.db-shm")

# Offline reads bypass diskcache's per-key get (Python overhead ~8 us per key) and read its
# documented ``Cache`` table directly, read-only: key (TEXT for str keys), raw, mode, value.
# Values in MODE_RAW rows are our bytes as given to ``Cache.set``. A range holds objects only:
# a namespaced list's record (``<scope>/<ns>?<selector>``) sorts inside its scope's range, and
# only list keys have a raw ``?`` (``keys.escape`` encodes it in every segment).
# ``filename`` is read so that a row pointing at a side file is refused, never followed.
SELECT_RANGE = (
    "SELECT key, mode, value, filename FROM Cache WHERE key >= ? AND key < ? AND raw = 1"
    " AND instr(key, '?') = 0 ORDER BY key"
)
SELECT_PAGE = (
    "SELECT key, mode, value, filename FROM Cache WHERE key > ? AND key < ? AND raw = 1"
    " AND instr(key, '?') = 0 ORDER BY key LIMIT ?"
)
SELECT_IN = "SELECT key, mode, value, filename FROM Cache WHERE key IN ({}) AND raw = 1"
SELECT_ONE = "SELECT mode, value, filename FROM Cache WHERE key = ? AND raw = 1"
IN_CHUNK = 500
MODE_RAW = diskcache.core.MODE_RAW


def raw_value(mode: object, value: object, filename: object) -> bytes:
    """A row's value as stored by this hub: raw bytes inside the row. Anything else (a pickled
    value, a side file, text) was not written by us: ``CorruptEntry``, never unpickled or read
    from a path the database names (a copied cache could name any file, or run code)."""
    if mode != MODE_RAW or filename is not None or not isinstance(value, bytes):
        raise entries.CorruptEntry("not a raw row written by this hub")
    return value


def raw_body(mode: object, value: object, filename: object) -> bytes:
    """The checked body of an object row; raises ``CorruptEntry``."""
    return entries.body_of(raw_value(mode, value, filename))


def raw_get(cache: diskcache.Cache, key: str) -> bytes | None:
    """``cache.get(key)`` for the writer, without diskcache's unpickling or side files: None when
    absent; raises ``CorruptEntry`` for a row this hub did not write."""
    row = cache._sql(SELECT_ONE, (key,)).fetchone()
    return None if row is None else raw_value(*row)


def delete_row(cache: diskcache.Cache, key: str) -> None:
    """``cache.delete(key)`` inside the writer's transaction, by SQL: diskcache's own would also
    unlink whatever side file a (tampered) row names."""
    cache._sql("DELETE FROM Cache WHERE key = ? AND raw = 1", (key,))
