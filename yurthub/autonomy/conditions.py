"""The ``Autonomy`` node condition the hub reports for its node (pure; reference §4.6).

``True`` (``AutonomyEnabled``) when the node is marked autonomous (``nodeautonomy.marking``:
the same reading the cloud's autonomy controller applies to the pods' tolerations) and the
hub's disk cache has no failed writes; ``False`` otherwise, with the reason:

- ``AutonomyDisabled``: no autonomy annotation (or ``node.beta.openyurt.io/autonomy`` not
  ``"true"``);
- ``InvalidAutonomyDuration``: the duration annotation does not parse (message names it);
- ``CloudNode``: labelled ``openyurt.io/is-edge-worker=false``;
- ``CacheWriteFailures``: some objects failed to be written to the cache (a full or broken
  disk), so offline answers would be stale: what the node would run on is not what the cloud
  said;
- ``CacheUnavailable``: the hub runs without its cache (it could not be opened).

Beyond YurtHub: the message names the node's last outage (``LastOutage``: when it began, how
long it lasted, its cause; ``outages.records``) once it has ended, whatever the status, so
``kubectl describe node`` tells when the node last ran on its own. It changes once per outage:
the status, and so ``lastTransitionTime``, stays as it was.

Differences from YurtHub [quirk]: no ``Unknown`` after three failing checks (a failed write is
``False`` at once, and ``True`` again once every failed key was written since); the duration
annotation and the cloud-node label are read as the cloud reads them. Messages carry no
counters, so a condition is rewritten only when its meaning changes (or a new outage ended).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nodeautonomy import marking

TYPE = "Autonomy"


@dataclasses.dataclass(frozen=True, slots=True)
class Condition:
    status: str
    reason: str
    message: str


@dataclasses.dataclass(frozen=True, slots=True)
class CacheHealth:
    available: bool
    failed_keys: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class LastOutage:
    """The node's last ended outage, in words fixed when it ended."""

    began: str
    """RFC 3339."""
    lasted: str
    """``5m12s``."""
    cause: str


def desired(
    node_marking: marking.Marking, cache: CacheHealth, last_outage: LastOutage | None = None
) -> Condition:
    """The condition for the node's marking and the hub's cache, naming ``last_outage``."""
    want = _desired(node_marking, cache)
    if last_outage is None:
        return want
    return Condition(
        want.status,
        want.reason,
        f"{want.message}; last outage: {last_outage.began} for {last_outage.lasted} "
        f"({last_outage.cause})",
    )


def _desired(node_marking: marking.Marking, cache: CacheHealth) -> Condition:
    if isinstance(node_marking, marking.Invalid):
        return Condition("False", "InvalidAutonomyDuration", node_marking.describe())
    if node_marking == marking.CLOUD_NODE:
        return Condition(
            "False",
            "CloudNode",
            f"{marking.EDGE_WORKER_LABEL}=false: a cloud node is never autonomous",
        )
    if not isinstance(node_marking, marking.Autonomous):
        return Condition(
            "False",
            "AutonomyDisabled",
            f"the node is not marked autonomous (annotation {marking.DURATION_ANNOTATION}, "
            f'or {marking.LEGACY_ANNOTATION}="true")',
        )
    if not cache.available:
        return Condition(
            "False",
            "CacheUnavailable",
            "the hub runs without its disk cache and cannot serve the node while offline",
        )
    if cache.failed_keys:
        return Condition(
            "False",
            "CacheWriteFailures",
            "writes to the hub's disk cache failed: offline, the node would run on stale "
            "objects (node_yurthub_error_keys_count, the hub's log)",
        )
    return Condition(
        "True",
        "AutonomyEnabled",
        f"autonomous {node_marking.describe()} ({node_marking.annotation}); the hub's cache "
        "has no failed writes",
    )


def current(node: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The node's ``Autonomy`` condition, if it has one."""
    status = node.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conditions, list):
        return None
    for condition in conditions:
        if isinstance(condition, Mapping) and condition.get("type") == TYPE:
            return condition
    return None


def needs_update(node: Mapping[str, Any], want: Condition) -> bool:
    """Whether the node's condition differs from ``want`` (times ignored)."""
    have = current(node)
    return have is None or (
        have.get("status"),
        have.get("reason"),
        have.get("message"),
    ) != (want.status, want.reason, want.message)


def status_patch(node: Mapping[str, Any], want: Condition, now: str) -> dict[str, Any]:
    """A strategic merge patch of ``nodes/<name>/status`` setting only this condition
    (conditions merge by type: kubelet's are untouched). The transition time moves only when
    the status does."""
    have = current(node)
    since = now
    if have is not None and have.get("status") == want.status and have.get("lastTransitionTime"):
        since = str(have["lastTransitionTime"])
    return {
        "status": {
            "conditions": [
                {
                    "type": TYPE,
                    "status": want.status,
                    "reason": want.reason,
                    "message": want.message,
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": since,
                }
            ]
        }
    }
