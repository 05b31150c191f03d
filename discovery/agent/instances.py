"""Instance writes: resourceVersion-guarded read-modify-write with bounded retries.

Several agents (one per node) write the same shared Instance. Instead of
relying on server-side-apply merging of ``nodes``/``deviceUsage`` (which only
works on an apiserver that honours the CRD's list/map types, and which a
caching proxy cannot reproduce offline), every write here is: GET the object,
compute the new object with a pure function (``join``, ``leave``,
``set_usage``), then PUT it with the read ``resourceVersion`` (or POST it, or
DELETE it with a resourceVersion precondition). A 409 means another node
wrote in between: re-read and recompute, up to ``attempts`` times with a
small random delay. The pure functions are the whole policy:

* ``join``: create the Instance with ``nodes: [me]``, or add me to ``nodes``
  and refresh the content fields (configurationName, cdiName, capacity,
  brokerProperties, shared) and the owner reference.
* ``leave``: remove me from ``nodes`` and free my slots; the last node
  deletes the Instance.
* ``set_usage``: replace ``deviceUsage`` (slot claims; see ``slots``).

Finalizers, as Akri's agent keeps them (reference §5.3): a node that serves an
Instance holds a finalizer named after itself, and drops it once it no longer
serves it (left ``nodes``, or the Instance is being deleted). ``join`` adds it;
``leave`` removes it together with the node, and the last node drops it before
its DELETE, so an Instance never waits on a node that has gone; an Instance
found Terminating with this node's finalizer (left so by Akri's agent, or by a
crash between two steps) only loses the finalizer, and the reconcile after its
DELETED event creates it afresh. Other nodes' finalizers are never touched.

Danger: never write an object that was not just read — a PUT without the
read resourceVersion would silently drop another node's membership.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import random
from collections.abc import Callable, Mapping
from typing import Any

from discovery.agent import naming, resources, slots
from kubecontrol import kubeapi

logger = logging.getLogger(__name__)

JSONObject = dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Create:
    body: JSONObject


@dataclasses.dataclass(frozen=True, slots=True)
class Replace:
    body: JSONObject
    decide_again: bool = False
    """A first step: decide again on the object as written (drop a finalizer, then delete)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Delete:
    resource_version: str


class NoChange:
    pass


NO_CHANGE = NoChange()
Decision = Create | Replace | Delete | NoChange
Mutation = Callable[[JSONObject | None], Decision]


_STEPS = 3


class WriteFailed(Exception):
    """Gave up after repeated conflicts, or the mutation refused (e.g. slot taken)."""


@dataclasses.dataclass(frozen=True, slots=True)
class DesiredInstance:
    """What this node wants an Instance to contain."""

    name: str
    namespace: str
    configuration: str
    cdi_name: str
    capacity: int
    broker_properties: Mapping[str, str]
    shared: bool
    owner: Mapping[str, Any]  # ownerReference to the Configuration


def owner_reference(configuration: Mapping[str, Any]) -> dict[str, Any]:
    meta = configuration.get("metadata") or {}
    return {
        "apiVersion": naming.API_GROUP_VERSION,
        "kind": "Configuration",
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "controller": True,
    }


def spec_of(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, dict) else {}


def nodes_of(obj: Mapping[str, Any] | None) -> list[str]:
    nodes = spec_of(obj).get("nodes")
    return [n for n in nodes if isinstance(n, str)] if isinstance(nodes, list) else []


def finalizers_of(obj: Mapping[str, Any] | None) -> list[str]:
    value = ((obj or {}).get("metadata") or {}).get("finalizers")
    return [f for f in value if isinstance(f, str)] if isinstance(value, list) else []


def terminating(obj: Mapping[str, Any] | None) -> bool:
    return bool(((obj or {}).get("metadata") or {}).get("deletionTimestamp"))


def stale_finalizer(obj: Mapping[str, Any] | None, node: str) -> bool:
    """PURE: ``node``'s finalizer is on an Instance it does not serve (being deleted, or
    ``node`` not in ``nodes``): Akri's agent would drop it, and so does ``leave``."""
    return node in finalizers_of(obj) and (terminating(obj) or node not in nodes_of(obj))


def _without_finalizer(current: JSONObject, node: str) -> JSONObject:
    updated = copy.deepcopy(current)
    updated.setdefault("metadata", {})["finalizers"] = [
        f for f in finalizers_of(current) if f != node
    ]
    return updated


def usage_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    usage = spec_of(obj).get("deviceUsage")
    if not isinstance(usage, dict):
        return {}
    return {str(k): str(v) for k, v in usage.items() if isinstance(v, str)}


def within_capacity(usage: Mapping[str, str], capacity: int) -> dict[str, str]:
    """Drop slots a shrunk capacity no longer has (Akri left them behind, §5.3 [quirk])."""
    kept = {}
    for key, value in usage.items():
        try:
            index = naming.slot_index(key)
        except naming.NamingError:
            kept[key] = value
            continue
        if index < capacity:
            kept[key] = value
    return kept


def _owners_with(owners: list[Any], owner: Mapping[str, Any]) -> list[Any]:
    """Our Configuration's reference replaces one to an older Configuration of the same name."""
    kept = [
        o
        for o in owners
        if not (
            isinstance(o, dict)
            and o.get("kind") == "Configuration"
            and o.get("name") == owner["name"]
        )
    ]
    return [dict(owner), *kept]


def join(desired: DesiredInstance, node: str) -> Mutation:
    def mutate(current: JSONObject | None) -> Decision:
        content = {
            "configurationName": desired.configuration,
            "cdiName": desired.cdi_name,
            "capacity": desired.capacity,
            "brokerProperties": dict(desired.broker_properties),
            "shared": desired.shared,
        }
        if current is None:
            return Create(
                {
                    "apiVersion": naming.API_GROUP_VERSION,
                    "kind": "Instance",
                    "metadata": {
                        "name": desired.name,
                        "namespace": desired.namespace,
                        "ownerReferences": [dict(desired.owner)],
                        "finalizers": [node],
                    },
                    "spec": {**content, "nodes": [node], "deviceUsage": {}},
                }
            )
        if terminating(current):
            # Being deleted: joining would resurrect nothing. Let it go (drop this
            # node's finalizer); the reconcile after the DELETED event creates it afresh.
            if node in finalizers_of(current):
                return Replace(_without_finalizer(current, node))
            return NO_CHANGE
        updated = copy.deepcopy(current)
        spec = updated.setdefault("spec", {})
        spec.update(content)
        nodes = nodes_of(current)
        if node not in nodes:
            nodes.append(node)
        spec["nodes"] = nodes
        spec["deviceUsage"] = within_capacity(usage_of(current), desired.capacity)
        meta = updated.setdefault("metadata", {})
        if node not in finalizers_of(current):
            meta["finalizers"] = [*finalizers_of(current), node]
        owners = meta.get("ownerReferences") or []
        if not any(isinstance(o, dict) and o.get("uid") == desired.owner["uid"] for o in owners):
            meta["ownerReferences"] = _owners_with(owners, desired.owner)
        if updated == current:
            return NO_CHANGE
        return Replace(updated)

    return mutate


def leave(node: str) -> Mutation:
    """``node`` stops serving the Instance: out of ``nodes``, its slots freed, its
    finalizer dropped; the last node deletes it (after dropping its finalizer)."""

    def mutate(current: JSONObject | None) -> Decision:
        if current is None:
            return NO_CHANGE
        nodes = nodes_of(current)
        held = node in finalizers_of(current)
        if terminating(current) or node not in nodes:
            # Nothing to leave, or going anyway: only let go of it.
            return Replace(_without_finalizer(current, node)) if held else NO_CHANGE
        if nodes == [node]:
            if held:
                return Replace(_without_finalizer(current, node), decide_again=True)
            return Delete(kubeapi.resource_version_of(current))
        updated = _without_finalizer(current, node) if held else copy.deepcopy(current)
        updated["spec"]["nodes"] = [n for n in nodes if n != node]
        updated["spec"]["deviceUsage"] = slots.release_node(usage_of(current), node)
        return Replace(updated)

    return mutate


def set_usage(compute: Callable[[JSONObject], dict[str, str]]) -> Mutation:
    """Replace deviceUsage with ``compute(current)``; ``compute`` may raise SlotUnavailable."""

    def mutate(current: JSONObject | None) -> Decision:
        if current is None:
            raise slots.SlotUnavailable("the Instance no longer exists")
        usage = compute(current)
        if usage == usage_of(current):
            return NO_CHANGE
        updated = copy.deepcopy(current)
        updated.setdefault("spec", {})["deviceUsage"] = usage
        return Replace(updated)

    return mutate


async def write(
    api: kubeapi.KubeApi,
    namespace: str,
    name: str,
    mutate: Mutation,
    *,
    attempts: int = 8,
    max_delay: float = 0.2,
) -> JSONObject | None:
    """Run one read-modify-write to completion; returns the object as written (None if deleted).

    Retries only on 409/404 races; ``Unavailable`` and other errors propagate
    to the caller's back-off.
    """
    for attempt in range(1, attempts + 1):
        current = await api.get_or_none(resources.INSTANCES, namespace, name)
        try:
            # A step that asks to decide again does so on what it wrote, guarded by the
            # resourceVersion the write returned; at most _STEPS steps per attempt.
            for _ in range(_STEPS):
                decision = mutate(current)
                if isinstance(decision, NoChange):
                    return current
                if isinstance(decision, Create):
                    return await api.create(resources.INSTANCES, namespace, decision.body)
                if isinstance(decision, Replace):
                    written = await api.replace(resources.INSTANCES, namespace, name, decision.body)
                    if not decision.decide_again:
                        return written
                    current = written
                    continue
                await api.delete(
                    resources.INSTANCES,
                    namespace,
                    name,
                    resource_version=decision.resource_version,
                )
                return None
            raise WriteFailed(f"instance {namespace}/{name}: no decision after {_STEPS} steps")
        except (kubeapi.Conflict, kubeapi.NotFound) as e:
            logger.debug(
                "instance %s/%s: %s (attempt %d/%d)", namespace, name, e, attempt, attempts
            )
            await asyncio.sleep(random.uniform(0, max_delay))
    raise WriteFailed(f"instance {namespace}/{name}: still conflicting after {attempts} attempts")
