"""The hub's small SQLite side files (the outage history, the offline Event journal): created
private, opened in WAL mode, and checked before use.

A damaged file opens fine when only pages under a sound header are broken, and then fails every
later query: ``open_private`` runs ``PRAGMA quick_check`` and raises ``sqlite3.DatabaseError``
with what it found, so the caller can start the file afresh at once (the disk cache proper has
its own recovery in ``yurthub.cache.opening``).
"""

from __future__ import annotations

import os
import pathlib
import sqlite3
from collections.abc import Callable, Iterable


def open_private(
    path: pathlib.Path | None,
    schema: Iterable[str],
    migrate: Callable[[sqlite3.Connection], None] | None = None,
) -> sqlite3.Connection:
    """``path`` (``None``: in memory) opened in autocommit mode, usable from the hub's one
    writer thread, created ``0600`` before SQLite touches it (its -wal and -shm files take the
    same mode); ``schema``'s statements run, then ``migrate`` (for a file an older hub wrote),
    then the check. The connection is closed if any step fails."""
    if path is not None:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        os.chmod(path, 0o600)
    conn = sqlite3.connect(
        ":memory:" if path is None else path, isolation_level=None, check_same_thread=False
    )
    try:
        if path is not None:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        for statement in schema:
            conn.execute(statement)
        if migrate is not None:
            migrate(conn)
        check = conn.execute("PRAGMA quick_check").fetchone()
        if check is None or check[0] != "ok":
            found = " ".join(str(check[0] if check else "no answer").split())
            raise sqlite3.DatabaseError(f"quick_check: {found[:200]}")
    except BaseException:
        conn.close()
        raise
    return conn
