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
from collections.abc import Callable, Mapping
from typing import Any

import diskcache

from yurthub.cache import entries, keys, keysealing, sealing, sqlrows

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
    # Freed pages are zeroed, not left holding what a deleted or replaced entry held.
    "sqlite_secure_delete": 1,
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
    migrated: int = 0
    """Plaintext entries sealed in place."""
    resealed: int = 0
    """Entries re-encrypted under the current data key (a rotation)."""
    unsealable: int = 0
    """Sealed entries that did not open (dropped; counted in ``corrupt`` too)."""


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


@dataclasses.dataclass(frozen=True, slots=True)
class Keys:
    """The node's data keys, opened from the cache directory (``open_keys``). They seal the
    cache's entries and, derived (``certs.sealedkeys``), the hub's private keys."""

    sealer: sealing.Sealer
    ring: keysealing.Ring | None = None
    kek: keysealing.Kek | None = None
    reset: str = ""
    """Why the cache and its data key were moved aside and started anew ("" when not)."""

    @property
    def sealed_by(self) -> str:
        """What seals the data key (``keysealing.Kek.describe``); "" when nothing does."""
        return self.kek.describe if self.kek is not None and self.ring is not None else ""


PLAIN_KEYS = Keys(sealing.PLAIN)


@dataclasses.dataclass
class Opened:
    cache: diskcache.Cache
    loaded: Loaded
    reset: str
    """Why the database was moved aside and started empty; "" when it was not."""
    sealer: sealing.Sealer
    sealed_by: str
    """What seals the data key (``keysealing.Kek.describe``); "" when nothing does."""
    keys: Keys = PLAIN_KEYS
    retirable: bool = False
    """Every entry is sealed under the current data key: the older ones may go
    (``retire_keys``)."""


def open_keys(
    path: pathlib.Path,
    key_source: keysealing.Source | None,
    environ: Mapping[str, str] | None = None,
    random: Callable[[int], bytes] = os.urandom,
) -> Keys:
    """The data keys of the cache at ``path``, as ``key_source`` says (None: plaintext, no key
    looked for): opened, or made when there are none. A key that does not open here (another
    node's TPM blobs or KEK) moves the database and the key aside and starts both anew
    (``Keys.reset`` says why, one error line). Raises ``StoreError`` for what starting anew
    would not cure (the directory, a key source that gives no key, ``auto`` finding no key for
    a sealed cache)."""
    try:
        _secure_dir(path)
    except OSError as e:
        raise StoreError(f"cannot open the cache at {path}: {e}") from e
    reason = ""
    kek = None
    if key_source is not None:
        env = os.environ if environ is None else environ
        try:
            try:
                kek = keysealing.resolve(key_source, env, path, random=random)
            except keysealing.Unsealable as e:
                # The TPM's blobs are another TPM's: the cache they seal cannot be read here.
                reason = _start_anew(path, f"the cache's key does not unseal on this node ({e})")
                kek = keysealing.resolve(key_source, env, path, random=random)
        except keysealing.KeySourceError as e:
            raise StoreError(f"cannot seal the cache at {path}: {e}") from e
    try:
        sealer, ring = _sealer(path, key_source, kek, random)
    except keysealing.Unsealable as e:
        reason = _start_anew(
            path, f"the cache was sealed under a data key that does not open here ({e})"
        )
        sealer, ring = _sealer(path, key_source, kek, random)
    return Keys(sealer, ring, kek, reason)


def _start_anew(path: pathlib.Path, why: str) -> str:
    aside = _move_aside(path)
    reason = (
        f"{why}; moved to {aside.name} and started empty under a new data key (the hub's"
        " private keys sealed under the old one are requested anew)"
    )
    logger.error("disk cache %s: %s", path, reason)
    return reason


def open_checked(
    path: pathlib.Path,
    key_source: keysealing.Source | None = None,
    environ: Mapping[str, str] | None = None,
    random: Callable[[int], bytes] = os.urandom,
    *,
    keys: Keys | None = None,
    retire: bool = True,
) -> Opened:
    """Open and load the cache at ``path``, sealed with ``keys`` (opened here from
    ``key_source`` when not given: ``open_keys``); a damaged database is moved aside and a new
    one started under the same data key (``Opened.reset`` says why). ``retire``: once every
    entry is sealed under the current data key, drop the older ones from ``cache.key`` (the
    hub does that later, ``retire_keys``, once its private keys are re-sealed too). Raises
    ``StoreError`` for what a new database would not cure (permissions, a full disk, a database
    another process holds locked, a key source that gives no key, ``auto`` finding no key for
    a sealed cache)."""
    if keys is None:
        keys = open_keys(path, key_source, environ, random)
    reason = keys.reset
    sealer = keys.sealer
    try:
        cache, loaded = _open_and_load(path, sealer)
    except StoreError as e:
        damage = e.__cause__
        if not _is_damage(damage):
            raise
        aside = _move_aside(path, keep_keys=True)
        reason = f"the database was damaged ({damage}); moved to {aside.name} and started empty"
        logger.error("disk cache %s: %s", path, reason)
        cache, loaded = _open_and_load(path, sealer)
    opened = Opened(
        cache, loaded, reason, sealer, keys.sealed_by, keys, retirable=not loaded.unsealable
    )
    if retire and opened.retirable:
        retire_keys(path, keys, random)
    return opened


def retire_keys(
    path: pathlib.Path, keys: Keys, random: Callable[[int], bytes] = os.urandom
) -> bool:
    """Drop every data key but the current one from ``path/cache.key``, once nothing is
    sealed under them any more (the caller knows: the cache's entries re-encrypted at open,
    the hub's private keys re-sealed). Nothing happens when ``cache.key`` changed since
    ``keys`` were read (``edgehub cache rotate-key`` meanwhile: the next start retires).
    True when keys were dropped. Raises ``StoreError``."""
    ring, kek = keys.ring, keys.kek
    if ring is None or kek is None or len(ring.keys) <= 1:
        return False
    try:
        if keysealing.load_ring(path, kek) != ring:
            return False
        keysealing.save_ring(path, keysealing.pruned(ring), kek, random)
    except (keysealing.KeySourceError, OSError) as e:
        raise StoreError(f"cannot retire the older data keys of {path}: {e}") from e
    logger.info("disk cache %s: older data keys retired after re-encryption", path)
    return True


def _sealer(
    path: pathlib.Path,
    key_source: keysealing.Source | None,
    kek: keysealing.Kek | None,
    random: Callable[[int], bytes],
) -> tuple[sealing.Sealer, keysealing.Ring | None]:
    """The sealer of the cache at ``path``: its data keys opened with ``kek`` (made when the
    cache has none yet). Raises ``Unsealable`` when the cache holds data keys that do not open:
    with this KEK, or with none at all (sealed, then opened with ``none``)."""
    if kek is None:
        if keysealing.has_ring(path):
            if key_source is None:
                # A tool that was given no key source must not drop what it cannot read.
                raise StoreError(f"the cache at {path} is sealed: give its --cache-key-source")
            if key_source.kind is not keysealing.Kind.NONE:
                # ``auto`` found none of the keys it tries (a systemd credential no longer
                # passed): starting over would cache Secrets in plaintext from then on. Only
                # ``none``, said explicitly, starts a sealed cache over unsealed.
                raise StoreError(
                    f"the cache at {path} is sealed, but --cache-key-source auto finds no key "
                    "now (no TPM, no systemd credential, no --cache-key-file): give the source "
                    "that sealed it, or --cache-key-source none to start over unsealed"
                )
            raise keysealing.Unsealable("no --cache-key-source gives a key")
        return sealing.PLAIN, None
    try:
        ring = keysealing.load_ring(path, kek)
    except keysealing.Unsealable:
        raise
    except keysealing.KeySourceError as e:
        raise StoreError(f"cannot read the cache's data key at {path}: {e}") from e
    if ring is None:
        ring = keysealing.new_ring(random)
        try:
            keysealing.save_ring(path, ring, kek, random)
        except OSError as e:
            raise StoreError(f"cannot write the cache's data key at {path}: {e}") from e
    return ring.sealer(random), ring


def _open_and_load(path: pathlib.Path, sealer: sealing.Sealer) -> tuple[diskcache.Cache, Loaded]:
    cache = _open_cache(path)
    try:
        loaded = _load_index(cache, sealer)
        if loaded.migrated:
            _scrub(cache)
        return cache, loaded
    except (sqlite3.Error, OSError) as e:
        cache.close()
        # Damaged pages show only when read: the same answer as a file that will not open.
        raise StoreError(f"cannot read the cache at {path}: {e}") from e
    except BaseException:
        cache.close()
        raise


def _move_aside(path: pathlib.Path, *, keep_keys: bool = False) -> pathlib.Path:
    """Rename the database files to ``cache.db.damaged-<UTC time>`` (mode kept: 0600, Secrets
    may be inside); older damaged copies beyond ``_KEEP_ASIDE`` are removed. The data key goes
    with them (useless without it, and the reverse); ``keep_keys`` (a damaged database, a key
    that still opens): a copy goes, the key stays (the hub's private keys are sealed under
    it)."""
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
        if keep_keys:
            keysealing.copy_ring(path, f".damaged-{stamp}")
        else:
            keysealing.remove_ring(path, f".damaged-{stamp}")
    except OSError as e:
        raise StoreError(f"cannot move the damaged cache at {path} aside: {e}") from e
    return target


def _load_index(cache: diskcache.Cache, sealer: sealing.Sealer) -> Loaded:
    """Check the database, then read every entry's header; repair what does not check.

    One read-only scan of diskcache's table instead of a ``get`` per key (the restart-to-first-
    answer time is mostly this). Every value's checksum is verified on the way. Then, in one
    transaction:

    - rows this hub did not write (a pickled key or value, a side file, text) or that fail
      their check are deleted by rowid: never unpickled, never followed to a file they name;
    - entries of an older hub (``EHC1``, no checksum) are checked as far as they can be and
      re-encoded with one (``entries.upgrade``), or deleted;
    - a list record whose member count no longer matches the objects that name it (one of them
      was dropped) is removed, and its claim with it: that list is no longer whole;
    - in a sealed cache, plaintext entries (a cache from before sealing) are sealed in place and
      those of an older data key re-encrypted under the current one (``sealing.Sealer.stale``);
      sealed entries that do not open (another machine's) are dropped, with one log line.
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
                stored = sqlrows.raw_value(mode, value, filename)
                value = sealer.unseal(key, stored, strict=False)
                rewrite = sealer.stale(stored)
                if entries.is_legacy(value):
                    value = entries.upgrade(value)
                    rewrite = True
                _index(loaded, key, value, authenticated=sealing.is_sealed(stored))
                if rewrite:
                    upgrades.append((key, sealer.seal(key, value)))
                    pending += len(value)
                    if not sealer.sealing:
                        loaded.upgraded += 1
                    elif sealing.is_sealed(stored):
                        loaded.resealed += 1
                    else:
                        loaded.migrated += 1
            except sealing.SealError:
                loaded.unsealable += 1
                loaded.corrupt.append(name)
                bad_rows.append(rowid)
                continue
            except (entries.CorruptEntry, keys.BadKey) as e:
                logger.warning("dropping corrupt cache entry %r: %s", name[:200], e)
                loaded.corrupt.append(name)
                bad_rows.append(rowid)
                continue
            if pending > _UPGRADE_BATCH:
                _rewrite(cache, upgrades)
                upgrades, pending = [], 0
        _rewrite(cache, upgrades)
        if loaded.upgraded:
            logger.info("disk cache: %d entries of an older hub now carry a CRC", loaded.upgraded)
        if loaded.migrated:
            logger.info("disk cache: %d plaintext entries sealed in place", loaded.migrated)
        if loaded.resealed:
            logger.info(
                "disk cache: %d entries re-encrypted under the current data key", loaded.resealed
            )
        if loaded.unsealable:
            logger.error(
                "disk cache: %d sealed entries do not open with this node's data key (a cache"
                " copied from another node, or changed); they are dropped",
                loaded.unsealable,
            )
        _repair_lists(cache, loaded, bad_rows, sealer)
    finally:
        con.close()
    return loaded


def _index(loaded: Loaded, key: str, value: bytes, *, authenticated: bool = False) -> None:
    if keys.is_nonresource_key(key):
        entries.decode_document(value)
        loaded.documents.append(key)
    elif keys.is_list_key(key):
        loaded.lists.append((keys.parse_list_key(key), entries.decode_list(value)))
    else:
        object_key = keys.parse_object_key(key)
        loaded.objects.append(
            (object_key, entries.decode_header(value, authenticated=authenticated))
        )


def _rewrite(cache: diskcache.Cache, values: list[tuple[str, bytes]]) -> None:
    if values:
        with cache.transact():
            for key, value in values:
                cache.set(key, value)


def _repair_lists(
    cache: diskcache.Cache, loaded: Loaded, bad_rows: list[int], sealer: sealing.Sealer
) -> None:
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
            body = entries.body_of(sealer.unseal(name, value, strict=False))
            cache.set(name, sealer.seal(name, entries.encode_object(entry, body)))
            kept.append((object_key, entry))
    loaded.objects = kept
    loaded.lists = [(k, r) for k, r in loaded.lists if str(k) not in broken]


def _scrub(cache: diskcache.Cache) -> None:
    """After sealing plaintext entries in place: rebuild the database so that no freed page
    keeps their old bytes, and empty the WAL that held them (``secure_delete`` zeroes pages
    freed from now on; VACUUM copies only live pages, all sealed). VACUUM needs room for a
    copy of the database: on a disk too full for it the entries stay sealed and the cache opens,
    with one warning (``edgehub cache`` cannot redo it: run ``sqlite3 cache.db VACUUM`` with
    the hub stopped)."""
    try:
        cache._sql("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        cache._sql("VACUUM").fetchall()
        cache._sql("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except sqlite3.OperationalError as e:
        logger.warning(
            "disk cache %s: every entry is sealed, but the rebuild that drops freed plaintext"
            " pages failed (%s); they stay until SQLite reuses them",
            cache.directory,
            e,
        )
        return
    logger.info("disk cache %s: rebuilt without the plaintext pages", cache.directory)


def _record_of(
    owner: str, records: Mapping[keys.ListKey, entries.ListRecord]
) -> entries.ListRecord | None:
    try:
        return records.get(keys.parse_list_key(owner))
    except keys.BadKey:
        return None
