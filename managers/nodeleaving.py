"""When a node has left, as far as its devices are concerned: pure decisions.

Akri's node watcher (reference §7.6) remembers per node whether it was ever Ready, and when a
node that was Ready is seen not Ready, or is deleted, removes it from every Instance's
``nodes`` and frees the ``deviceUsage`` slots it held; an Instance left without nodes is
deleted. ``observe(previous, node, now, seen=...)`` is that state machine, with one addition:

* A node first seen with ``Ready=Unknown`` is treated as having left. Only the node lifecycle
  controller writes Unknown ("Kubelet stopped posting node status"), and only about a node
  whose kubelet had posted before; Akri's watcher, restarted while a node was down, forgot
  such nodes forever. A node first seen ``Ready=False`` (a kubelet starting up, still
  reporting its network not ready) is left alone until it has been Ready, as in Akri.

Only a node the watcher **saw and then lost** is acted on, as Akri (whose watcher acts on
node events only). A node it never saw (``seen`` false: no watch event ever named it) is left
alone however many Instances name it: its agent may well be running (a mistyped
``--node-name``, a node deleted before this manager started, a simulator started with
``--seed none``), and cleaning them would fight that agent for ever (it writes them back, the
broker controller recreates their Pods: 1,914 deletions in 25 s were seen). The cost: a node
deleted while no manager ran keeps its Instances (and its agent's Configuration finalizers)
until an operator removes them; a standby replica's warm caches make a fail-over no restart.

A deleted node that was seen is cleaned (``DELETED``); an agent still running there (kubelet
keeps its pods until it notices) writes its Instances back, so each further cleaning waits
twice as long as the last (``Recleaning``, capped), and the node is looked at again once the
back-off has run out (``recheck_after``): when nothing names it any more it is forgotten, so
memory is bounded by the nodes that exist or left recently.

After a node was cleaned for being NotReady it is not cleaned again until it has been Ready
once more: an agent that is still alive on a NotReady node and adds itself back is not fought.

Autonomous nodes (``nodeautonomy``: the node is only offline, its pods keep running and the
cloud keeps them) keep their devices too: a NotReady autonomous node is cleaned only once it
has been NotReady for longer than its autonomy duration (counted from the Ready condition's
``lastTransitionTime``; the decision says when to look again), and never while autonomous
"for as long as it takes". Deleted is deleted, autonomous or not. Without this, the brokers of
an edge node that lost its link for a minute were deleted when it came back, the opposite of
what autonomy promises.

``Ready`` is the *last* ``Ready`` condition with status ``"True"``; no conditions, or no
``Ready`` condition, is not ready (Akri's fixtures).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Iterable, Mapping
from typing import Any

from nodeautonomy import marking


class State(enum.Enum):
    KNOWN = "Known"
    """Seen, never Ready."""
    RUNNING = "Running"
    """Seen Ready."""
    CLEANED = "InstancesCleaned"
    """Left; its Instances were cleaned."""
    DELETED = "Deleted"
    """Seen, then deleted; its Instances were cleaned (and are again, backed off)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Memory:
    """What the watcher remembers of one node."""

    state: State
    cleanings: int = 0
    """``DELETED``: how many times its Instances were cleaned since it was deleted."""
    next_cleaning: float = 0.0
    """``DELETED``: not cleaned again before this (``now``'s clock)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Recleaning:
    """The back-off between cleanings of a deleted node whose agent writes its Instances back:
    ``initial`` after the first, doubling, at most ``cap`` seconds."""

    initial: float = 5.0
    cap: float = 300.0

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.cap < self.initial:
            raise ValueError(f"recleaning needs 0 < initial <= cap, got {self.initial}, {self.cap}")

    def after(self, cleanings: int) -> float:
        """Seconds to wait after the ``cleanings``-th cleaning (1 -> ``initial``)."""
        delay = self.initial
        for _ in range(max(0, cleanings - 1)):
            delay *= 2
            if delay >= self.cap:
                return self.cap
        return min(delay, self.cap)


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    memory: Memory | None
    """What to remember once the decision is carried out (None: forget the node)."""
    clean: bool
    """Remove the node from every Instance (and, when ``gone``, its Configuration
    finalizers)."""
    gone: bool = False
    """The node does not exist (the controller confirms with the apiserver first)."""
    why: str = ""
    recheck_after: float | None = None
    """Seconds after which to look at the node again (an autonomous node's grace runs out, a
    deleted node's back-off ends)."""

    @property
    def state(self) -> State | None:
        return None if self.memory is None else self.memory.state


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


def not_ready_since(node: Mapping[str, Any]) -> float | None:
    """When (epoch seconds) the last ``Ready`` condition last changed; None when unknown."""
    status = node.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    since: float | None = None
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            value = condition.get("lastTransitionTime")
            try:
                parsed = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
                since = parsed.timestamp() if parsed.tzinfo is not None else None
            except ValueError:
                since = None
    return since


def observe(
    previous: Memory | None,
    node: Mapping[str, Any] | None,
    now: float,
    *,
    seen: bool,
    again: Recleaning = Recleaning(),
) -> Decision:
    """``previous``: what was remembered of the node; ``node``: it now (None: it does not
    exist); ``now``: epoch seconds; ``seen``: a watch event ever named it."""
    if node is None:
        return _gone(previous, now, seen, again)
    state = None if previous is None or previous.state is State.DELETED else previous.state
    return _present(state, node, now)


def _gone(previous: Memory | None, now: float, seen: bool, again: Recleaning) -> Decision:
    if previous is None and not seen:
        return Decision(None, clean=False, why="never seen by this watcher")
    cleanings = 1
    if previous is not None and previous.state is State.DELETED:
        if now < previous.next_cleaning:
            return Decision(
                previous, clean=False, why="deleted", recheck_after=previous.next_cleaning - now
            )
        cleanings = previous.cleanings + 1
    delay = again.after(cleanings)
    return Decision(
        Memory(State.DELETED, cleanings, now + delay),
        clean=True,
        gone=True,
        why="deleted",
        recheck_after=delay,
    )


def _present(previous: State | None, node: Mapping[str, Any], now: float) -> Decision:
    condition = ready_condition(node)
    if condition == "True":
        return _remember(State.RUNNING, clean=False)
    why = f"NotReady (Ready={condition or 'missing'})"
    autonomy = marking.of_node(node)
    if isinstance(autonomy, marking.Autonomous) and previous is not State.CLEANED:
        keep = previous or State.RUNNING
        if autonomy.seconds is None:
            return _remember(keep, clean=False, why=f"{why}, autonomous")
        since = not_ready_since(node)
        if since is not None:
            left = since + autonomy.seconds - now
            if left > 0:
                return _remember(keep, clean=False, why=f"{why}, autonomous", recheck_after=left)
        why = f"{why} longer than its autonomy ({autonomy.describe()})"
        previous = keep
    if previous is State.RUNNING:
        return _remember(State.CLEANED, clean=True, why=why)
    if previous is None and condition == "Unknown":
        return _remember(State.CLEANED, clean=True, why=why)
    if previous is State.CLEANED:
        return _remember(State.CLEANED, clean=False)
    return _remember(State.KNOWN, clean=False)


def _remember(state: State, **decided: Any) -> Decision:
    return Decision(Memory(state), **decided)


_BUILTIN_FINALIZERS = frozenset({"orphan", "foregroundDeletion"})
"""The garbage collector's own finalizers: never taken for a node's (a node may be
named ``orphan``)."""


def listing(node: str, instances: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """``(namespace, name)`` of the Instances whose ``spec.nodes`` has ``node``, or that
    hold the finalizer its agent puts on the Instances it serves (the node's name, as
    Akri's): cleaning drops it too, or the Instance could never be deleted."""
    found = []
    for instance in instances:
        spec = instance.get("spec")
        nodes = spec.get("nodes") if isinstance(spec, Mapping) else None
        meta = instance.get("metadata")
        finalizers = meta.get("finalizers") if isinstance(meta, Mapping) else None
        holds = (
            node not in _BUILTIN_FINALIZERS and isinstance(finalizers, list) and node in finalizers
        )
        if (isinstance(nodes, list) and node in nodes) or holds:
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
