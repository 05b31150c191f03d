"""Slot bookkeeping: who holds which capacity slot of an Instance, as pure decisions.

An Instance with capacity N has slots ``<instance>-0 .. <instance>-(N-1)``;
``Instance.spec.deviceUsage`` says who holds each (``naming.parse_usage``). The
apiserver object is the only source of truth: every function here takes the
current ``deviceUsage`` map and returns the map to write back (the caller writes
it with a resourceVersion guard, so two nodes racing for one slot cannot both
win) or raises ``SlotUnavailable``. A map or capacity that does not follow the Akri
format raises ``InvalidUsage`` naming the field: the agent then treats that one
Instance as out of service (``plugins``), never as free slots.

The Configuration plugin advertises virtual devices ("vdevs", ``<config>-<n>``):
each attached Instance with a free slot contributes exactly one free vdev, and
each slot this node holds through the Configuration resource keeps its vdev id
while held. ``assign_vdevs`` keeps ids stable across updates so kubelet does not
see devices flap.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from discovery.agent import naming

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


class SlotUnavailable(Exception):
    """The requested slot is held by someone else (or does not exist)."""


class InvalidUsage(ValueError):
    """An Instance's ``capacity`` or ``deviceUsage`` is malformed; the message names the field."""


def capacity_of(spec: Mapping[str, object], max_capacity: int) -> int:
    capacity = spec.get("capacity", 0)
    if not isinstance(capacity, int) or isinstance(capacity, bool):
        raise InvalidUsage(f"spec.capacity {capacity!r} is not an integer")
    if not 0 <= capacity <= max_capacity:
        raise InvalidUsage(f"spec.capacity {capacity} is outside 0..{max_capacity}")
    return capacity


def _parse(
    device_usage: Mapping[str, str], capacity: int, instance: str
) -> tuple[naming.SlotUsage, ...]:
    try:
        return naming.parse_device_usage(device_usage, capacity, strict=False, instance=instance)
    except naming.NamingError as e:
        raise InvalidUsage(f"spec.deviceUsage of {instance}: {e}") from e


def slot_table(
    instance: str, spec: Mapping[str, object], max_capacity: int
) -> tuple[naming.SlotUsage, ...]:
    """The slots of an Instance as read from its ``spec`` (one usage per index), checking
    every field; slots beyond a shrunk capacity are dropped (Akri kept them, §5.3)."""
    capacity = capacity_of(spec, max_capacity)
    raw = spec.get("deviceUsage") or {}
    if not isinstance(raw, Mapping):
        raise InvalidUsage("spec.deviceUsage is not a map")
    usage: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise InvalidUsage(f"spec.deviceUsage key {key!r} is not a string")
        if not isinstance(value, str):
            raise InvalidUsage(f"spec.deviceUsage[{key!r}] is not a string: {value!r}")
        try:
            naming.slot_index(key)
        except naming.NamingError:
            raise InvalidUsage(f"spec.deviceUsage key {key!r} is not a slot id") from None
        try:
            naming.parse_usage(value)
        except naming.NamingError:
            raise InvalidUsage(
                f"spec.deviceUsage[{key!r}] = {value!r} is not a deviceUsage value "
                "(<node> or C:<vdev>:<node>)"
            ) from None
        usage[key] = value
    return _parse(usage, capacity, instance)


@dataclasses.dataclass(frozen=True, slots=True)
class FreeVdev:
    """A vdev kubelet may allocate: maps to some free slot of ``instance``."""

    instance: str


@dataclasses.dataclass(frozen=True, slots=True)
class UsedVdev:
    """A vdev this node holds: slot ``index`` of ``instance``."""

    instance: str
    index: int


Vdev = FreeVdev | UsedVdev


def instance_health(
    instance: str, slots: Sequence[naming.SlotUsage], node: str
) -> list[tuple[str, str]]:
    """ListAndWatch devices of an Instance plugin: (device id, health) per slot.

    A slot is usable by this node's kubelet when it is free or already held by
    this node through the Instance resource; a slot held by another node or
    through the Configuration resource is Unhealthy so kubelet does not hand it
    out twice.
    """
    result = []
    for index, usage in enumerate(slots):
        usable = usage is None or (isinstance(usage, naming.NodeUsage) and usage.node == node)
        result.append((naming.slot_id(instance, index), HEALTHY if usable else UNHEALTHY))
    return result


def claim_instance_slots(
    device_usage: Mapping[str, str],
    instance: str,
    capacity: int,
    device_ids: Iterable[str],
    node: str,
) -> dict[str, str]:
    """Claim the named slots for ``node``; all or nothing.

    Re-claiming a slot this node already holds succeeds: kubelet re-runs
    Allocate after its own restart or a container restart, and refusing its
    own slot is what made Akri reject pods with "Unable to claim slot".
    """
    slots = _parse(device_usage, capacity, instance)
    updated = dict(device_usage)
    for device_id in device_ids:
        try:
            index = naming.slot_index(device_id)
        except naming.NamingError as e:
            raise SlotUnavailable(f"invalid device id {device_id!r}") from e
        if device_id != naming.slot_id(instance, index) or index >= capacity:
            raise SlotUnavailable(f"{device_id!r} is not a slot of {instance}")
        usage = slots[index]
        if usage is not None and usage != naming.NodeUsage(node):
            raise SlotUnavailable(f"slot {device_id} is held by {naming.format_usage(usage)!r}")
        updated[device_id] = node
    return updated


def claim_configuration_slot(
    device_usage: Mapping[str, str], instance: str, capacity: int, vdev: str, node: str
) -> tuple[dict[str, str], int]:
    """Claim a free slot of ``instance`` for vdev ``vdev`` on ``node``.

    Returns the new map and the claimed index. If this node already holds a
    slot under that vdev, that slot is returned unchanged (idempotent retry).
    """
    slots = _parse(device_usage, capacity, instance)
    mine = naming.ConfigurationUsage(vdev, node)
    for index, usage in enumerate(slots):
        if usage == mine:
            return dict(device_usage), index
    for index, usage in enumerate(slots):
        if usage is None:
            updated = dict(device_usage)
            updated[naming.slot_id(instance, index)] = naming.format_usage(mine)
            return updated, index
    raise SlotUnavailable(f"no free slot left on {instance}")


def release_slots(
    device_usage: Mapping[str, str], slot_ids: Iterable[str], node: str
) -> dict[str, str]:
    """Free the named slots, but only those ``node`` holds (another node's claim is not ours)."""
    updated = dict(device_usage)
    for key in slot_ids:
        value = updated.get(key)
        if value is None:
            continue
        try:
            usage = naming.parse_usage(value)
        except naming.NamingError:
            continue
        if naming.usage_node(usage) == node:
            del updated[key]
    return updated


def release_node(device_usage: Mapping[str, str], node: str) -> dict[str, str]:
    """Free every slot ``node`` holds (the node leaves the Instance)."""
    return release_slots(device_usage, list(device_usage), node)


def assign_vdevs(
    configuration: str,
    previous: Mapping[str, Vdev],
    instances: Mapping[str, Sequence[naming.SlotUsage]],
    node: str,
) -> dict[str, Vdev]:
    """The Configuration plugin's virtual devices after an update of its Instances."""
    result: dict[str, Vdev] = {}
    for instance, slots in sorted(instances.items()):
        for index, usage in enumerate(slots):
            if isinstance(usage, naming.ConfigurationUsage) and usage.node == node:
                result[usage.vdev] = UsedVdev(instance, index)
    needing = [name for name, slots in sorted(instances.items()) if None in slots]
    kept = {v.instance: key for key, v in previous.items() if isinstance(v, FreeVdev)}
    unassigned = []
    for instance in needing:
        key = kept.get(instance)
        if key is not None and key not in result:
            result[key] = FreeVdev(instance)
        else:
            unassigned.append(instance)
    number = 0
    for instance in unassigned:
        while naming.vdev_id(configuration, number) in result:
            number += 1
        result[naming.vdev_id(configuration, number)] = FreeVdev(instance)
    return result


def used_device_ids(
    instances: Mapping[str, Sequence[naming.SlotUsage]], node: str
) -> dict[str, tuple[str, str]]:
    """Device ids kubelet should report as in use, mapped to (instance, slot id) to free.

    The ids are the ones we advertised: ``<instance>-<i>`` for Instance-level use
    and the vdev id for Configuration-level use, never ``akri.sh/``-prefixed
    (reference §5.6: Akri compared prefixed ids and so never reclaimed an
    Instance-level slot).
    """
    result: dict[str, tuple[str, str]] = {}
    for instance, slots in instances.items():
        for index, usage in enumerate(slots):
            key = naming.slot_id(instance, index)
            if isinstance(usage, naming.NodeUsage) and usage.node == node:
                result[key] = (instance, key)
            elif isinstance(usage, naming.ConfigurationUsage) and usage.node == node:
                result[usage.vdev] = (instance, key)
    return result


def stale_slots(
    theoretical: Iterable[str],
    reported: set[str],
    unused_since: Mapping[str, float],
    now: float,
    grace: float,
) -> tuple[list[str], dict[str, float]]:
    """Which held slots to free: unused (not reported by kubelet) for at least ``grace`` seconds.

    Returns the ids to free and the new ``unused_since`` table (ids kubelet
    reports again, or that are no longer held, drop out of it).
    """
    to_free: list[str] = []
    table: dict[str, float] = {}
    for device_id in sorted(set(theoretical)):
        if device_id in reported:
            continue
        since = unused_since.get(device_id, now)
        if now - since >= grace:
            to_free.append(device_id)
        else:
            table[device_id] = since
    return to_free, table
