"""``realcluster._failing_checks``: what a not-ready apiserver's ``/readyz`` says failed, for
the test bed's "not ready in time" errors (a 200-byte cut of the answer showed only the
checks that passed)."""

from __future__ import annotations

from yurthub.testing import realcluster

NOT_READY = (
    b"[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]etcd-readiness ok\n[+]informer-sync ok\n"
    b"[+]poststarthook/start-apiserver-admission-initializer ok\n"
    b"[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n"
    b"[+]poststarthook/scheduling/bootstrap-system-priority-classes ok\n"
    b"[-]shutdown failed: reason withheld\nreadyz check failed\n"
)


def test_the_failing_checks_are_named() -> None:
    assert realcluster._failing_checks(NOT_READY) == (
        "[-]poststarthook/rbac/bootstrap-roles failed: reason withheld; "
        "[-]shutdown failed: reason withheld"
    )


def test_an_answer_without_failing_checks_names_none() -> None:
    assert realcluster._failing_checks(b"ok") == ""
    assert realcluster._failing_checks(b"[+]ping ok\n") == ""
