"""Opening the cache directory: permissions, the database, its check and the index load.

Role: everything ``store.Store.open`` does before the store exists, on an executor thread:
make the directory 0700 and the SQLite files 0600, open diskcache, check the database, read
every entry's header into a ``Loaded`` index and repair what does not check. A damaged
database is moved aside and a new one started (``open_checked`` says why); what a new one would
not cure (permissions, a full disk, a lock another process holds) is a ``StoreError``.

Invariants: no file ever exists with a wider mode than 0600; values stay inside SQLite (no side
files); rows this hub did not write are deleted by rowid, never unpickled or followed; a list
record whose members do not all check is removed with its claim (no list is answered from less
than it saw).

Dangers: at most ``_KEEP_ASIDE`` damaged copies are kept, so a node whose disk keeps failing
does not fill it with them.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import pathlib
import sqlite3
import stat
import time
from collections.abc import Mapping
from typing import Any

import diskcache

from yurthub.cache import entries, keys, sqlrows

logger = logging.getLogger(__name__)

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


class StoreError(OSError):
    """The cache directory cannot be opened (permissions, not a cache, corrupt database)."""


def _secure_dir(path: pathlib.Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode != 0o700:
        logger.info("tightening cache directory %s from %o to 0700", path, mode)
        path.chmod(0o700)


def _secure_files(path: pathlib.Path) -> None:
    for name in sqlrows.DB_FILES:
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
class Loaded:
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


def open_checked(path: pathlib.Path) -> tuple[diskcache.Cache, Loaded, str]:
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


def _open_and_load(path: pathlib.Path) -> tuple[diskcache.Cache, Loaded]:
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
        old = sorted(path.glob(f"{sqlrows.DB_FILES[0]}.damaged-*"))
        stamps = sorted({f.name.rsplit("-", 1)[-1] for f in old if "-" in f.name})
        for gone in stamps[: max(0, len(stamps) - _KEEP_ASIDE + 1)]:
            for file in path.glob(f"*.damaged-{gone}"):
                file.unlink(missing_ok=True)
        target = path / f"{sqlrows.DB_FILES[0]}.damaged-{stamp}"
        for name in sqlrows.DB_FILES:
            source = path / name
            if source.exists():
                source.rename(path / f"{name}.damaged-{stamp}")
    except OSError as e:
        raise StoreError(f"cannot move the damaged cache at {path} aside: {e}") from e
    return target


def _load_index(cache: diskcache.Cache) -> Loaded:
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
    loaded = Loaded([], [], [], [])
    directory = pathlib.Path(cache.directory)
    uri = (directory / sqlrows.DB_FILES[0]).resolve().as_uri() + "?mode=ro"
    con = sqlite3.connect(uri, uri=True)
    bad_rows: list[int] = []
    upgrades: list[tuple[str, bytes]] = []
    pending = 0
    try:
        check = [row[0] for row in con.execute("PRAGMA quick_check")]
        if check != ["ok"]:
            raise _Damaged(f"quick_check: {'; '.join(map(str, check[:3]))}")
        cursor = con.execute("SELECT rowid, key, raw, mode, value, filename FROM Cache")
        for rowid, key, raw, mode, value, filename in cursor:
            name = key if isinstance(key, str) else repr(key)
            try:
                if not raw or not isinstance(key, str):
                    raise entries.CorruptEntry("the key is not text")
                value = sqlrows.raw_value(mode, value, filename)
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


def _index(loaded: Loaded, key: str, value: bytes) -> None:
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


def _repair_lists(cache: diskcache.Cache, loaded: Loaded, bad_rows: list[int]) -> None:
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
            sqlrows.delete_row(cache, owner)
        for object_key, entry in loaded.objects:
            lost = entry.owners & broken
            if not lost:
                kept.append((object_key, entry))
                continue
            name = str(object_key)
            remaining = entry.owners - lost or frozenset({entries.DIRECT})
            value = sqlrows.raw_get(cache, name)
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
