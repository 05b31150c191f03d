"""Cache write failures: what a disk error is called, and what the hub says while writes fail.

PURE: errors, list keys, selectors and clock readings in, texts out; no I/O, no clock of its
own (the writer passes the wall time of each outcome, the readiness check the time it asks).

Why: a full disk must not be hidden. The hub keeps proxying online when its cache cannot be
written (readiness only warns: nothing online needs the cache), so the operator learns of it
from ``/v1/readyz``'s and ``/v1/status``'s warning (``warning``), and a client offline from the
404 of a list the hub read online but could not store (``lost``), instead of a misleading "never
listed while online".

Invariants:

- An episode starts at the first failure after the warning cleared and lasts while the latest
  write failed, and ``WARN_FOR`` seconds past the latest failure: a nearly full disk flaps
  (small writes fit, lists do not), and a lease renewal that fits must not hide the lists that
  do not.
- The lost lists are bounded (``LISTS_KEPT``, oldest forgotten first); a list written whole
  since is no longer lost.
"""

from __future__ import annotations

import dataclasses
import errno
import sqlite3
import time
from collections.abc import Iterable

from yurthub.cache import coverage, keys, selectors

WARN_FOR = 300.0
"""Seconds a write failure keeps warning after writes succeed again."""
LISTS_KEPT = 1024
"""Whole lists whose write failed, remembered for the 404 that would answer them offline."""

_ERRNOS = {
    errno.ENOSPC: "disk full (ENOSPC)",
    errno.EDQUOT: "disk quota exceeded (EDQUOT)",
    errno.EIO: "I/O error (EIO)",
    errno.EROFS: "read-only file system (EROFS)",
    errno.EACCES: "permission denied (EACCES)",
}
# SQLite's primary result codes (the low byte of an extended one).
_SQLITE_CODES = {
    13: "disk full (ENOSPC)",  # SQLITE_FULL: SQLite's name for ENOSPC (and EDQUOT)
    10: "I/O error (SQLITE_IOERR)",
    8: "read-only database (SQLITE_READONLY)",
    5: "database locked by another process (SQLITE_BUSY)",
    3: "permission denied (SQLITE_PERM)",
}


def describe(error: BaseException) -> str:
    """A failed write's cause as an operator reads it: ``disk full (ENOSPC)``, ...; else the
    exception's type and text."""
    number = getattr(error, "errno", None)
    if isinstance(error, OSError) and number in _ERRNOS:
        return _ERRNOS[number]
    code = getattr(error, "sqlite_errorcode", None)
    if isinstance(error, sqlite3.Error) and isinstance(code, int) and code & 0xFF in _SQLITE_CODES:
        return _SQLITE_CODES[code & 0xFF]
    return f"{type(error).__name__}: {error}"


def _iso(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


@dataclasses.dataclass
class Failures:
    """The write failures of one cache (mutated on the loop, with each writer outcome)."""

    since: float | None = None
    """Wall time the current episode began; None before the first failure."""
    last: float | None = None
    """Wall time of the latest failure."""
    reason: str = ""
    """``describe`` of the latest failure."""
    failing: bool = False
    """The latest write failed (no write succeeded since)."""
    lost_lists: dict[keys.ListKey, str] = dataclasses.field(default_factory=dict)
    """Whole lists whose write failed, oldest first, with why."""
    kept: int = LISTS_KEPT
    window: float = WARN_FOR

    def failed(self, reason: str, now: float, lists: Iterable[keys.ListKey] = ()) -> None:
        """A write failed at ``now``; ``lists``: the whole lists it would have stored."""
        if not self.active(now):
            self.since = now
        self.last, self.reason, self.failing = now, reason, True
        for list_key in lists:
            self.lost_lists.pop(list_key, None)
            self.lost_lists[list_key] = reason
        while len(self.lost_lists) > self.kept:
            del self.lost_lists[next(iter(self.lost_lists))]

    def succeeded(self, lists: Iterable[keys.ListKey] = ()) -> None:
        """A write committed; ``lists``: the list records it wrote (those lists are stored)."""
        self.failing = False
        if self.lost_lists:
            for list_key in lists:
                self.lost_lists.pop(list_key, None)

    def active(self, now: float) -> bool:
        """Is the episode still on (the latest write failed, or one did recently)?"""
        return self.last is not None and (self.failing or now - self.last < self.window)

    def warning(self, now: float) -> str:
        """The readiness warning at ``now``; "" when there is none."""
        if not self.active(now) or self.since is None or self.last is None:
            return ""
        text = f"write failures: {self.reason} since {_iso(self.since)}"
        if self.failing:
            return f"{text}; what the hub reads is not stored for offline use"
        return f"{text}, the last at {_iso(self.last)} (some writes succeed again)"

    def lost(
        self,
        scope: keys.Scope,
        namespace: str,
        labels: selectors.LabelSelector,
        fields: selectors.FieldSelector,
    ) -> str:
        """Why no list of ``scope`` answers this request although one that would was read
        online (its write failed); "" when none was."""
        for list_key, reason in reversed(self.lost_lists.items()):
            if list_key.scope == scope and coverage.covers(list_key, namespace, labels, fields):
                return reason
        return ""
