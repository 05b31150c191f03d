"""``edgehub static-pod-upgrade``'s decisions as tables: which files, whether to install, when
the new static Pod counts as ready."""

from __future__ import annotations

import pytest
import yaml
from edgehub import staticpodupgrading


def manifest(digest: str | None) -> str:
    meta: dict[str, object] = {"name": "edgehub-hub", "namespace": "kube-system"}
    if digest is not None:
        meta["annotations"] = {staticpodupgrading.HASH_ANNOTATION: digest}
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {}})


DECISIONS = [
    ("new hash over the old one", manifest("old"), manifest("new"), "new", "install"),
    ("no live manifest yet", None, manifest("new"), "new", "install"),
    ("a live manifest without a hash", manifest(None), manifest("new"), "new", "install"),
    ("already installed", manifest("new"), manifest("new"), "new", "already"),
    ("the ConfigMap moved on", manifest("old"), manifest("newer"), "new", "refuse"),
    ("not a manifest", manifest("old"), "- a\n- list\n", "new", "refuse"),
    ("not YAML", manifest("old"), "{unclosed", "new", "refuse"),
]


@pytest.mark.parametrize(
    ("live", "new", "want", "action"),
    [c[1:] for c in DECISIONS],
    ids=[c[0] for c in DECISIONS],
)
def test_decide(live: str | None, new: str, want: str, action: str) -> None:
    decision = staticpodupgrading.decide(live, new, want)
    assert decision.action == action
    assert bool(decision.reason) is (action != "install")


DURATIONS = [
    ("120", 120.0),
    ("120s", 120.0),
    ("2m", 120.0),
    ("2m0s", 120.0),
    ("1h30m", 5400.0),
    ("0.5s", 0.5),
    ("0", None),
    ("", None),
    ("2 minutes", None),
    ("-1", None),
]


@pytest.mark.parametrize(("text", "seconds"), DURATIONS, ids=[d[0] or "empty" for d in DURATIONS])
def test_parse_duration(text: str, seconds: float | None) -> None:
    assert staticpodupgrading.parse_duration(text) == seconds


MANIFESTS = [
    ("plain", "edgehub-hub", ""),
    ("a path", "../kubelet", "must be a plain file name"),
    ("hidden", ".edgehub-hub", "must be a plain file name"),
    ("empty", "", "must be a plain file name"),
    # the hub's OTA bound: ".<name>.yaml.upgrading" must still fit a file name
    ("too long", "a" * 201, "must be a plain file name"),
]


@pytest.mark.parametrize(
    ("name", "problem"), [m[1:] for m in MANIFESTS], ids=[m[0] for m in MANIFESTS]
)
def test_manifest_names(name: str, problem: str) -> None:
    assert problem in staticpodupgrading.manifest_problem(name)
    assert bool(staticpodupgrading.manifest_problem(name)) is bool(problem)


WRITTEN = 1767225600.7  # 2026-01-01T00:00:00.7Z
READY = [
    ("200 from a hub started after the write", 200, WRITTEN + 3, True, True),
    ("200 from a hub started in the second of the write", 200, 1767225600.0, True, True),
    ("200 from the old hub, started before", 200, WRITTEN - 3600, True, False),
    ("200, no startedAt", 200, None, True, False),
    ("200, start not checked", 200, None, False, True),
    ("503", 503, WRITTEN + 3, True, False),
    ("no answer", None, None, False, False),
]


@pytest.mark.parametrize(
    ("readyz", "started", "check", "ready"), [r[1:] for r in READY], ids=[r[0] for r in READY]
)
def test_ready(readyz: int | None, started: float | None, check: bool, ready: bool) -> None:
    assert staticpodupgrading.ready(readyz, started, WRITTEN, check_start=check) is ready


# A static Pod with no status document (its status URL answers 404: YurtHub on a rollback).
NO_STATUS = [
    ("200 before anything failed: the old process", False, False),
    ("200 after the readiness URL failed once: a new process", True, True),
]


@pytest.mark.parametrize(
    ("seen_down", "ready"), [r[1:] for r in NO_STATUS], ids=[r[0] for r in NO_STATUS]
)
def test_ready_without_a_status_document(seen_down: bool, ready: bool) -> None:
    got = staticpodupgrading.ready(
        200, None, WRITTEN, check_start=True, no_status=True, seen_down=seen_down
    )
    assert got is ready
    # A status document that answers (the old edgehub) is never overruled by a failure seen.
    old = staticpodupgrading.ready(
        200, WRITTEN - 60, WRITTEN, check_start=True, no_status=False, seen_down=True
    )
    assert old is False


def test_started_at_reads_the_hubs_status() -> None:
    assert staticpodupgrading.started_at({"startedAt": "2026-01-01T00:00:00Z"}) == 1767225600.0
    assert staticpodupgrading.started_at({"startedAt": "yesterday"}) is None
    assert staticpodupgrading.started_at(["not", "a", "document"]) is None
