"""The decisions of ``edgehub static-pod-upgrade`` (the YurtStaticSet worker on a node).

PURE: texts, numbers and clocks in, decisions out; nothing here touches a file or a socket.

Files in kubelet's staticPodPath (``yurthub.otadecisions.manifest_paths`` names them, for the
hub's OTA upgrade too): kubelet reads every file there except those whose name starts with
``.``, so everything that is not the live manifest is a dot file:

* ``<name>.yaml``             the live manifest kubelet runs;
* ``.<name>.yaml.upgrading``  the new manifest while it is written (then renamed over the live
  one, so kubelet sees the old file or the new one, never a half-written one);
* ``.<name>.yaml.bak``        the manifest that ran before the last upgrade (kept after a
  success; put back when the new static Pod is not ready in time).

OpenYurt's node-servant keeps its backup inside the worker container (``/tmp/manifests``): it is
gone with the worker. [quirk] Here it stays on the node beside the manifest, hidden from kubelet.

Readiness of the new static Pod: its readiness URL answers 200, and (when a status URL is
given, the hub's ``/v1/status`` by default) the process answering started after the new
manifest was written, so the old hub, still running for a moment, is never taken for the new.
A new static Pod with no status document (its status URL answers 404: YurtHub, when a pool is
rolled back to it) is ready once its readiness URL failed (or nothing answered) at least once
after the write and then answered 200: the old process went away and a new one is ready.
[quirk] node-servant does not wait at all; a careful user wants the rollback covered too.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import yaml

from kubecontrol import timestamps
from yurthub import otadecisions

HASH_ANNOTATION = "openyurt.io/static-pod-hash"
MODES = {"auto": "auto", "advancedrollingupdate": "auto", "ota": "ota"}
"""``--mode`` spellings: ours and the strategy names node-servant gets."""

_DURATION = re.compile(r"(?:([0-9.]+)h)?(?:([0-9.]+)m(?!s))?(?:([0-9.]+)s)?")


def manifest_problem(manifest: str) -> str:
    """Why ``manifest`` cannot name a file in staticPodPath ("" when it can): the hub's OTA
    rule for static Pod manifest names, one rule for both writers of that directory."""
    problem = otadecisions.file_name_problem(manifest)
    return f"--manifest: {problem}" if problem else ""


def parse_duration(text: str) -> float | None:
    """Seconds of ``120``, ``120s``, ``2m``, ``2m0s``, ``1h30m`` (Go's spellings); None when
    ``text`` is none of them or not positive."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        match = _DURATION.fullmatch(text)
        if not text or match is None or not any(match.groups()):
            return None
        hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
        value = hours * 3600 + minutes * 60 + seconds
    return value if value > 0 else None


def manifest_hash(text: str | None) -> str | None:
    """The hash annotation of a manifest's text; None when absent or not a Pod manifest."""
    if text is None:
        return None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(doc, Mapping):
        return None
    annotations = (doc.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(HASH_ANNOTATION) if isinstance(annotations, Mapping) else None
    return value if isinstance(value, str) else None


INSTALL = "install"
ALREADY = "already"
REFUSE = "refuse"


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    action: str
    reason: str = ""


def decide(live: str | None, new: str, want: str) -> Decision:
    """What to do with the live manifest (None: absent) given the new one for hash ``want``."""
    new_hash = manifest_hash(new)
    if new_hash is None:
        return Decision(REFUSE, "the new manifest is not a Pod manifest with a hash annotation")
    if new_hash != want:
        return Decision(
            REFUSE,
            f"the ConfigMap holds hash {new_hash[:32]}, not {want[:32]}: the template changed "
            "again (the controller starts a worker for the newer one)",
        )
    if manifest_hash(live) == want:
        return Decision(ALREADY, f"the live manifest already has hash {want}")
    return Decision(INSTALL)


def started_at(status: Any) -> float | None:
    """``startedAt`` of the hub's ``/v1/status`` document, as epoch seconds."""
    if not isinstance(status, Mapping):
        return None
    return timestamps.epoch(status.get("startedAt"))


def ready(
    readyz: int | None,
    started: float | None,
    written_at: float,
    *,
    check_start: bool,
    no_status: bool = False,
    seen_down: bool = False,
) -> bool:
    """The new static Pod is ready: 200 from its readiness URL and, when ``check_start``, it
    started no earlier than the second the manifest was written (``startedAt`` has whole
    seconds), or, when it has no status document (``no_status``), the readiness URL failed
    since the write (``seen_down``)."""
    if readyz != 200:
        return False
    if not check_start:
        return True
    if started is not None:
        return started >= int(written_at)
    return no_status and seen_down
