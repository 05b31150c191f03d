"""Cache write failures: their names, the readiness warning's episode, the lists they lost."""

from __future__ import annotations

import errno
import sqlite3

import pytest

from yurthub.cache import failures, keys, selectors

POD = keys.Scope("kubelet", "pods", "v1")
T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def sqlite_error(code: int) -> sqlite3.Error:
    error = sqlite3.OperationalError("database or disk is full")
    error.sqlite_errorcode = code  # type: ignore[attr-defined]
    return error


@pytest.mark.parametrize(
    ("error", "described"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), "disk full (ENOSPC)"),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), "disk quota exceeded (EDQUOT)"),
        (OSError(errno.EIO, "Input/output error"), "I/O error (EIO)"),
        (OSError(errno.EROFS, "Read-only file system"), "read-only file system (EROFS)"),
        (sqlite_error(13), "disk full (ENOSPC)"),  # SQLITE_FULL
        (sqlite_error(10 | 3 << 8), "I/O error (SQLITE_IOERR)"),  # SQLITE_IOERR_WRITE
        (sqlite_error(5), "database locked by another process (SQLITE_BUSY)"),
        (sqlite_error(1), "OperationalError: database or disk is full"),  # no known code
        (sqlite3.OperationalError("no code"), "OperationalError: no code"),
        (OSError(errno.ENOENT, "gone"), "FileNotFoundError: [Errno 2] gone"),
        (TimeoutError("locked"), "TimeoutError: locked"),
    ],
)
def test_describe(error: BaseException, described: str) -> None:
    assert failures.describe(error) == described


def pods(labels: str = "", namespace: str = "") -> keys.ListKey:
    return keys.list_key(POD, namespace, selectors.parse_labels(labels).canonical(), "")


def test_no_failure_no_warning() -> None:
    found = failures.Failures()
    assert not found.active(T0) and found.warning(T0) == ""


def test_the_warning_names_the_cause_and_when_it_began() -> None:
    found = failures.Failures()
    found.failed("disk full (ENOSPC)", T0)
    found.failed("I/O error (EIO)", T0 + 60)
    assert found.since == T0 and found.last == T0 + 60
    # Long after the last failure, still failing: nothing has been written since.
    assert found.warning(T0 + 3600) == (
        "write failures: I/O error (EIO) since 2027-01-15T08:00:00Z; what the hub reads is not "
        "stored for offline use"
    )


def test_the_warning_outlives_a_write_that_fits_then_clears() -> None:
    found = failures.Failures(window=300.0)
    found.failed("disk full (ENOSPC)", T0)
    found.succeeded()  # a lease renewal fits in the WAL; the lists still do not
    assert found.warning(T0 + 299) == (
        "write failures: disk full (ENOSPC) since 2027-01-15T08:00:00Z, the last at "
        "2027-01-15T08:00:00Z (some writes succeed again)"
    )
    assert found.warning(T0 + 300) == ""
    found.failed("disk full (ENOSPC)", T0 + 400)  # a new episode
    assert found.since == T0 + 400


def test_a_failure_while_the_warning_holds_keeps_the_episode() -> None:
    found = failures.Failures(window=300.0)
    found.failed("disk full (ENOSPC)", T0)
    found.succeeded()
    found.failed("disk full (ENOSPC)", T0 + 200)
    assert found.since == T0 and found.failing


@pytest.mark.parametrize(
    ("lost", "namespace", "labels", "why"),
    [
        (pods(), "", "", "disk full (ENOSPC)"),  # the same list
        (pods(), "d", "app=a", "disk full (ENOSPC)"),  # a list it would have covered
        (pods(namespace="d"), "d", "", "disk full (ENOSPC)"),
        (pods(namespace="d"), "e", "", ""),  # another namespace
        (pods("app=a"), "", "", ""),  # narrower than the request
        (keys.list_key(keys.Scope("kubectl", "pods", "v1"), "", "", ""), "", "", ""),  # scope
    ],
)
def test_lost_lists_answer_the_requests_they_would_have_covered(
    lost: keys.ListKey, namespace: str, labels: str, why: str
) -> None:
    found = failures.Failures()
    found.failed("disk full (ENOSPC)", T0, [lost])
    wanted = selectors.parse_labels(labels), selectors.parse_fields("")
    assert found.lost(POD, namespace, *wanted) == why


def test_a_list_stored_since_is_no_longer_lost() -> None:
    found = failures.Failures()
    found.failed("disk full (ENOSPC)", T0, [pods(), pods("app=a")])
    found.succeeded([pods()])
    assert list(found.lost_lists) == [pods("app=a")]


def test_lost_lists_are_bounded_oldest_forgotten_first() -> None:
    found = failures.Failures(kept=2)
    found.failed("disk full (ENOSPC)", T0, [pods("a=1"), pods("a=2")])
    found.failed("disk full (ENOSPC)", T0 + 1, [pods("a=1")])  # seen again: the newest now
    found.failed("disk full (ENOSPC)", T0 + 2, [pods("a=3")])
    assert list(found.lost_lists) == [pods("a=1"), pods("a=3")]
