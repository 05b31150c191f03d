"""Every manifest goes through the real kubectl into the simulated apiserver and comes back.

kubectl runs with ``--validate=strict`` (server-side field validation where the server offers
it). The simulator accepts the parameter without validating, so each object is also checked
strictly on our side: built-in kinds round-trip through the official client models, custom
resources are walked against their CRD schema (``manifests_support``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import pytest
import yaml
from manifests_support import (
    KUSTOMIZATION,
    MANIFESTS,
    NOT_IN_KUSTOMIZATION,
    NOT_OBJECTS,
    SAMPLES,
    Manifest,
    all_manifests,
    crd_schema,
    load,
    lost_fields,
    manifest_files,
    unknown_fields,
)

from yurthub.testing.fixtures import Kubectl


def _subset(local: Any, remote: Any, path: str = "") -> list[str]:
    """Where ``remote`` (read back) lacks or changed something ``local`` (applied) says."""
    if isinstance(local, Mapping):
        if not isinstance(remote, Mapping):
            return [path or "."]
        return [
            p
            for key, value in local.items()
            for p in (
                _subset(value, remote[key], f"{path}.{key}") if key in remote else [f"{path}.{key}"]
            )
        ]
    if isinstance(local, list):
        if not isinstance(remote, list) or len(remote) != len(local):
            return [path]
        return [
            p
            for n, (a, b) in enumerate(zip(local, remote, strict=True))
            for p in _subset(a, b, f"{path}[{n}]")
        ]
    return [] if local == remote else [f"{path}: {local!r} != {remote!r}"]


def _wait_for_crds(kubectl: Kubectl) -> None:
    deadline = time.monotonic() + 10
    while kubectl("get", "configurations.akri.sh", "-A", check=False).returncode != 0:
        assert time.monotonic() < deadline, "the Akri CRDs were not served in time"
        time.sleep(0.1)


def test_layout_kubectl_can_apply_recursively() -> None:
    # kubectl -R would trip over kustomization.yaml (not a cluster object); it lives only at
    # the top, next to directories that hold nothing else.
    top = sorted(p.name for p in MANIFESTS.iterdir())
    assert [n for n in top if not (MANIFESTS / n).is_dir()] == ["kustomization.yaml"]
    assert not [p for p in MANIFESTS.rglob("kustomization.yaml") if p != KUSTOMIZATION]
    names = [m.key for m in all_manifests()]
    assert len(names) == len(set(names)), "two manifests define the same object"


@pytest.mark.parametrize("manifest", all_manifests(), ids=lambda m: f"{m.path.name}:{m.name}")
def test_manifest_is_strictly_valid(manifest: Manifest) -> None:
    if manifest.doc["apiVersion"].startswith("akri.sh/"):
        assert list(unknown_fields(manifest.doc, crd_schema(manifest.kind))) == []
    else:
        assert lost_fields(manifest.doc) == []


def test_every_manifest_applies_and_reads_back(kubectl: Kubectl) -> None:
    kubectl("apply", "--validate=strict", "-R", "-f", str(MANIFESTS / "crds"))
    _wait_for_crds(kubectl)
    directories = sorted(p for p in MANIFESTS.iterdir() if p.is_dir() and p not in NOT_OBJECTS)
    args = [a for d in directories for a in ("-R", "-f", str(d))]
    applied = kubectl("apply", "--validate=strict", *args)
    expected = all_manifests()
    assert applied.stdout.count("\n") == len(expected), applied.stdout

    problems: list[str] = []
    for path in manifest_files():
        listed = json.loads(kubectl("get", "-f", str(path), "-o", "json").stdout)
        items = listed["items"] if listed.get("kind") == "List" else [listed]
        back = {
            (i["kind"], i["metadata"]["name"], i["metadata"].get("namespace")): i for i in items
        }
        for m in load(path):
            # Samples name no namespace: kubectl puts them in the context's ("default").
            namespace = m.namespace or ("default" if m.kind == "Configuration" else None)
            remote = back.get((m.kind, m.name, namespace))
            if remote is None:
                problems.append(f"{path.name}: {m.kind}/{m.name} not read back")
                continue
            where = f"{path.name} {m.kind}/{m.name}"
            problems += [where + p for p in _subset(m.doc, remote)]
    assert problems == [], "\n".join(problems)

    # The same objects through kustomize (CRDs and all): nothing changes.
    again = kubectl("apply", "-k", str(MANIFESTS))
    assert "created" not in again.stdout and "configured" not in again.stdout, again.stdout


def test_kustomization_lists_every_cluster_manifest(kubectl: Kubectl) -> None:
    built = yaml.safe_load_all(kubectl("kustomize", str(MANIFESTS)).stdout)
    got = {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) for d in built}
    wanted = {
        m.key
        for m in all_manifests()
        if m.path not in NOT_IN_KUSTOMIZATION and SAMPLES not in m.path.parents
    }
    assert got == wanted
