"""Which NoExecute tolerations a pod on an autonomous node should carry (pure).

The cloud evicts the pods of an unreachable node through two NoExecute taints,
``node.kubernetes.io/unreachable`` (lease expired) and ``node.kubernetes.io/not-ready``; a pod
stays as long as a matching toleration's ``tolerationSeconds`` allows (the smallest of the
matching ones; none = forever). The DefaultTolerationSeconds admission plugin gives every pod
that tolerates neither key ``{key, operator: Exists, effect: NoExecute, tolerationSeconds:
<default>}`` (300 s unless the apiserver says otherwise). For a pod bound to an autonomous node,
``decide`` sets those two tolerations' seconds to the node's autonomy duration (none: forever);
when the node stops being autonomous it sets them back to the cluster default.

What the apiserver allows decides the shape (pod update validation, checked on the real one):
an existing toleration may only change its ``tolerationSeconds`` (also to and from "none"),
tolerations may be added, never removed or otherwise changed. So a default toleration is
extended **in place** (a second, longer toleration would not help: the shortest one wins);
a pod without one gets one added, and restoring sets the cluster default (it cannot be removed).

Per key, a pod's toleration is the manager's to change only when it is the default's exact
shape and either still carries the default seconds or is recorded as managed in the pod's
annotation ``MANAGED_ANNOTATION`` (the keys the manager changed, so a later reconcile, another
replica or a restarted manager knows them from the pod alone). Anything else the pod says about
a key (its own seconds, an ``operator: Exists`` toleration of every taint, two tolerations for
the key) is the pod's own and left as it is, as are DaemonSet pods (their controller tolerates
both keys forever), mirror pods (their kubelet owns them), terminating and finished pods.

Danger: the default seconds given here must equal the apiserver's
``--default-{not-ready,unreachable}-toleration-seconds``; otherwise default tolerations look
like the pods' own and are left alone (pods unprotected), never the other way round.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from nodeautonomy import marking

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
KEYS = (NOT_READY, UNREACHABLE)
NO_EXECUTE = "NoExecute"
MANAGED_ANNOTATION = "autonomy.edgehub.io/tolerations"
"""Comma list of the taint keys whose toleration the manager set (sorted)."""
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
DEFAULT_SECONDS = 300
"""The DefaultTolerationSeconds plugin's own default for both keys."""


@dataclasses.dataclass(frozen=True, slots=True)
class Defaults:
    """The cluster's default toleration seconds (the apiserver's flags of the same names)."""

    not_ready: int = DEFAULT_SECONDS
    unreachable: int = DEFAULT_SECONDS

    def __post_init__(self) -> None:
        if self.not_ready < 0 or self.unreachable < 0:
            raise ValueError("default toleration seconds must not be negative")

    def of(self, key: str) -> int:
        return self.not_ready if key == NOT_READY else self.unreachable


@dataclasses.dataclass(frozen=True, slots=True)
class Leave:
    """Nothing to write; ``reason`` says why (for logs and tests)."""

    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class Update:
    tolerations: list[dict[str, Any]]
    """The pod's whole new ``spec.tolerations``."""
    managed: frozenset[str]
    """Keys recorded in ``MANAGED_ANNOTATION`` afterwards (empty: the annotation goes)."""
    changes: Mapping[str, int | None]
    """Key -> its new tolerationSeconds (None: forever), for the ones that change."""


Decision = Leave | Update

UP_TO_DATE = Leave("up to date")


def covers(toleration: Mapping[str, Any], key: str) -> bool:
    """Whether ``toleration`` tolerates ``key``'s NoExecute taint as DefaultTolerationSeconds
    counts it (then the plugin adds no default toleration for that key)."""
    tkey = toleration.get("key") or ""
    effect = toleration.get("effect") or ""
    return tkey in (key, "") and effect in (NO_EXECUTE, "")


def default_shaped(toleration: Mapping[str, Any], key: str) -> bool:
    """``{key, operator: Exists, effect: NoExecute[, tolerationSeconds]}`` and nothing else."""
    return (
        toleration.get("key") == key
        and toleration.get("operator") == "Exists"
        and toleration.get("effect") == NO_EXECUTE
        and not toleration.get("value")
        and set(toleration) <= {"key", "operator", "effect", "value", "tolerationSeconds"}
    )


def managed_keys(annotations: Mapping[str, Any] | None) -> frozenset[str]:
    """The keys ``MANAGED_ANNOTATION`` records; anything else in it is ignored."""
    value = (annotations or {}).get(MANAGED_ANNOTATION)
    if not isinstance(value, str):
        return frozenset()
    return frozenset(k.strip() for k in value.split(",")) & frozenset(KEYS)


def format_managed(keys: frozenset[str]) -> str:
    return ",".join(sorted(keys))


def _seconds(toleration: Mapping[str, Any]) -> int | None:
    value = toleration.get("tolerationSeconds")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _owned_by_daemonset(meta: Mapping[str, Any]) -> bool:
    owners = meta.get("ownerReferences")
    return isinstance(owners, list) and any(
        isinstance(o, dict) and o.get("kind") == "DaemonSet" and o.get("controller") is True
        for o in owners
    )


def _exempt(pod: Mapping[str, Any]) -> str:
    """Why the pod is none of the manager's business ("" when it is)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if not spec.get("nodeName"):
        return "not bound"
    if meta.get("deletionTimestamp"):
        return "terminating"
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return "finished"
    if _owned_by_daemonset(meta):
        return "DaemonSet pod"
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return "mirror pod"
    return ""


def decide(pod: Mapping[str, Any], node: marking.Marking | None, defaults: Defaults) -> Decision:
    """What to change on ``pod`` given its node's marking (None: the node is not known)."""
    if node is None:
        # A deleted node's pods go the usual way (the pod GC deletes them); nothing to keep.
        return Leave("node not found")
    exempt = _exempt(pod)
    if exempt:
        return Leave(exempt)
    autonomous = isinstance(node, marking.Autonomous)
    meta = pod.get("metadata") or {}
    before = managed_keys(meta.get("annotations"))
    current = [t for t in ((pod.get("spec") or {}).get("tolerations") or []) if isinstance(t, dict)]
    tolerations = [dict(t) for t in current]
    managed = set(before)
    changes: dict[str, int | None] = {}
    for key in KEYS:
        want = node.seconds if isinstance(node, marking.Autonomous) else defaults.of(key)
        matching = [i for i, t in enumerate(tolerations) if covers(t, key)]
        if not matching:
            managed.discard(key)
            if autonomous:
                added: dict[str, Any] = {"key": key, "operator": "Exists", "effect": NO_EXECUTE}
                if want is not None:
                    added["tolerationSeconds"] = want
                tolerations.append(added)
                managed.add(key)
                changes[key] = want
            continue
        toleration = tolerations[matching[0]]
        ours = len(matching) == 1 and default_shaped(toleration, key)
        if ours and key not in before:
            ours = _seconds(toleration) == defaults.of(key) and "tolerationSeconds" in toleration
        if not ours:
            managed.discard(key)  # the pod's own now: never the manager's to touch again
            continue
        if autonomous:
            managed.add(key)
        else:
            managed.discard(key)
        if _seconds(toleration) != want or ("tolerationSeconds" in toleration) != (
            want is not None
        ):
            if want is None:
                toleration.pop("tolerationSeconds", None)
            else:
                toleration["tolerationSeconds"] = want
            changes[key] = want
    if not changes and managed == before:
        return UP_TO_DATE
    return Update(tolerations, frozenset(managed), changes)


def apply(pod: Mapping[str, Any], update: Update) -> dict[str, Any]:
    """A copy of ``pod`` with ``update`` carried out (resourceVersion kept: a conditional PUT)."""
    body = copy.deepcopy(dict(pod))
    body.setdefault("spec", {})["tolerations"] = copy.deepcopy(update.tolerations)
    meta = body.setdefault("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    if update.managed:
        annotations[MANAGED_ANNOTATION] = format_managed(update.managed)
    else:
        annotations.pop(MANAGED_ANNOTATION, None)
    meta["annotations"] = annotations
    return body


def patch(pod: Mapping[str, Any], update: Update) -> dict[str, Any]:
    """The JSON merge patch that carries out ``update`` on ``pod``: the whole new
    ``spec.tolerations`` (a merge patch replaces a list whole), ``MANAGED_ANNOTATION`` set or
    removed (null), and the pod's resourceVersion as last seen, which makes the patch
    conditional (409 when the pod changed since). Nothing else of the pod is needed: the
    manager keeps only what it reads of pods."""
    meta = pod.get("metadata") or {}
    managed = format_managed(update.managed) if update.managed else None
    if managed is None and MANAGED_ANNOTATION not in (meta.get("annotations") or {}):
        annotations: dict[str, Any] = {}
    else:
        annotations = {MANAGED_ANNOTATION: managed}
    metadata: dict[str, Any] = {}
    if meta.get("resourceVersion"):
        metadata["resourceVersion"] = meta["resourceVersion"]
    if annotations:
        metadata["annotations"] = annotations
    return {
        "metadata": metadata,
        "spec": {"tolerations": copy.deepcopy(update.tolerations)},
    }


def describe(update: Update) -> str:
    """``node.kubernetes.io/unreachable=forever, ...`` for a log line."""
    return (
        ", ".join(
            f"{key}={'forever' if seconds is None else f'{seconds}s'}"
            for key, seconds in sorted(update.changes.items())
        )
        or f"{MANAGED_ANNOTATION} updated"
    )
