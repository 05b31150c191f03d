"""Readiness conditions and warnings (pure)."""

from __future__ import annotations

from yurthub import readiness


def test_a_warning_check_shows_only_while_it_has_something_to_say() -> None:
    ready = readiness.Readiness()
    ready.add("cloud", lambda: "")
    ready.warn("disk-cache", "started anew")
    said = [""]
    ready.add_warning("disk-cache", lambda: said[0])
    assert ready.report() == ([], ["disk-cache: started anew"])
    said[0] = "write failures: disk full (ENOSPC) since 2027-01-15T08:00:00Z"
    assert ready.report() == (
        [],
        [
            "disk-cache: started anew",
            "disk-cache: write failures: disk full (ENOSPC) since 2027-01-15T08:00:00Z",
        ],
    )
    # A warning never makes the hub unready, nor gates the proxy.
    assert ready.not_ready() == []


def test_failing_conditions_and_warnings_are_reported_together() -> None:
    ready = readiness.Readiness()
    ready.add("cloud-or-cache", lambda: "no healthy apiserver", gates_proxy=False)
    ready.add_warning("disk-cache", lambda: "write failures: I/O error (EIO) since t")
    assert ready.report() == (
        ["cloud-or-cache (no healthy apiserver)"],
        ["disk-cache: write failures: I/O error (EIO) since t"],
    )
    assert ready.not_ready() == []


def test_a_failing_condition_always_says_why_and_ready_means_readyz_200() -> None:
    ready = readiness.Readiness()
    why = ["probing https://a:6443 for the first time"]
    ready.add("initial-health-probe", lambda: why[0])
    ready.add("disk-cache", lambda: "cannot open the cache at /c: EEXIST", gates_proxy=False)
    assert ready.not_ready() == ["initial-health-probe (probing https://a:6443 for the first time)"]
    assert ready.report()[0] == [
        "initial-health-probe (probing https://a:6443 for the first time)",
        "disk-cache (cannot open the cache at /c: EEXIST)",
    ]
    assert not ready.ready()
    why[0] = ""
    assert ready.not_ready() == [] and not ready.ready()  # readyz still 500: the disk cache
