"""When a node has left, as far as its devices are concerned: pure decisions.

Akri's node watcher (reference §7.6) remembers per node whether it was ever Ready, and when a
node that was Ready is seen not Ready, or is deleted, removes it from every Instance's
``nodes`` and frees the ``deviceUsage`` slots it held; an Instance left without nodes is
deleted. ``observe(previous, node)`` is that state machine, with two additions:

* A node first seen with ``Ready=Unknown`` is treated as having left. Only the node lifecycle
  controller writes Unknown ("Kubelet stopped posting node status"), and only about a node
  whose kubelet had posted before; Akri's watcher, restarted while a node was down, forgot
  such nodes forever. A node first seen ``Ready=False`` (a kubelet starting up, still
  reporting its network not ready) is left alone until it has been Ready, as in Akri.
* A deleted node is always cleaned (Akri skipped deleted nodes that had never been Ready).

After a node was cleaned it is not cleaned again until it has been Ready once more: an agent
that is still alive on a NotReady node and adds itself back is not fought.

``Ready`` is the *last* ``Ready`` condition with status ``"True"``; no conditions, or no
``Ready`` condition, is not ready (Akri's fixtures).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from typing import Any


class State(enum.Enum):
    KNOWN = "Known"
    """Seen, never Ready."""
    RUNNING = "Running"
    """Seen Ready."""
    CLEANED = "InstancesCleaned"
    """Left; its Instances were cleaned."""


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    state: State | None
    """What to remember once the decision is carried out (None: forget the node)."""
    clean: bool
    """Remove the node from every Instance (and, when ``gone``, its Configuration
    finalizers)."""
    gone: bool = False
    """The node does not exist (the controller confirms with the apiserver first)."""
    why: str = ""


def ready_condition(node: Mapping[str, Any]) -> str | None:
    """Status of the last ``Ready`` condition (``"True"``, ``"False"``, ``"Unknown"``)."""
    status = node.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    found: str | None = None
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            value = condition.get("status")
            found = value if isinstance(value, str) else ""
    return found


def ready(node: Mapping[str, Any]) -> bool:
    return ready_condition(node) == "True"


def observe(previous: State | None, node: Mapping[str, Any] | None) -> Decision:
    if node is None:
        return Decision(None, clean=True, gone=True, why="deleted")
    condition = ready_condition(node)
    if condition == "True":
        return Decision(State.RUNNING, clean=False)
    why = f"NotReady (Ready={condition or 'missing'})"
    if previous is State.RUNNING:
        return Decision(State.CLEANED, clean=True, why=why)
    if previous is None and condition == "Unknown":
        return Decision(State.CLEANED, clean=True, why=why)
    if previous is State.CLEANED:
        return Decision(State.CLEANED, clean=False)
    return Decision(State.KNOWN, clean=False)


def listing(node: str, instances: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """``(namespace, name)`` of the Instances whose ``spec.nodes`` has ``node``."""
    found = []
    for instance in instances:
        spec = instance.get("spec")
        nodes = spec.get("nodes") if isinstance(spec, Mapping) else None
        if isinstance(nodes, list) and node in nodes:
            meta = instance.get("metadata") or {}
            found.append((str(meta.get("namespace") or ""), str(meta.get("name") or "")))
    return sorted(found)


def holding_finalizer(
    node: str, configurations: Iterable[Mapping[str, Any]]
) -> list[tuple[str, str]]:
    """Configurations with the finalizer the agent of ``node`` puts on them (the node's name):
    once the node is deleted, no agent will ever remove it."""
    found = []
    for configuration in configurations:
        meta = configuration.get("metadata")
        if not isinstance(meta, Mapping):
            continue
        finalizers = meta.get("finalizers")
        if isinstance(finalizers, list) and node in finalizers:
            found.append((str(meta.get("namespace") or ""), str(meta.get("name") or "")))
    return sorted(found)
