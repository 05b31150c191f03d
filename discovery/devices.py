"""Plain device values: what a discovery handler reports.

These mirror the ``v0.Device``/``Mount``/``DeviceSpec`` messages field for field but carry no
protobuf types, so handlers, the registry and the agent can compare, sort and print them
without touching the wire layer (``discovery.wire`` converts).

Invariant: values are immutable. ``properties`` is a mapping that callers must not mutate;
equality compares every field, which is what "the device list changed" means.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TypedDict


@dataclasses.dataclass(frozen=True, slots=True)
class Mount:
    """A host path mounted into containers that use the device."""

    container_path: str
    host_path: str
    read_only: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceSpec:
    """A host device node exposed to containers (cgroup permissions from ``r``/``w``/``m``)."""

    container_path: str
    host_path: str
    permissions: str


@dataclasses.dataclass(frozen=True, slots=True)
class Device:
    """One discovered device. ``id`` is unique within one handler's list."""

    id: str
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    device_specs: tuple[DeviceSpec, ...] = ()


class MountJSON(TypedDict):
    containerPath: str
    hostPath: str
    readOnly: bool


class DeviceSpecJSON(TypedDict):
    containerPath: str
    hostPath: str
    permissions: str


class DeviceJSON(TypedDict):
    id: str
    properties: dict[str, str]
    mounts: list[MountJSON]
    deviceSpecs: list[DeviceSpecJSON]


def to_json(device: Device) -> DeviceJSON:
    """The JSON shape ``edgehub discover -o json`` prints (camelCase like the CRDs)."""
    return {
        "id": device.id,
        "properties": dict(sorted(device.properties.items())),
        "mounts": [
            {"containerPath": m.container_path, "hostPath": m.host_path, "readOnly": m.read_only}
            for m in device.mounts
        ],
        "deviceSpecs": [
            {
                "containerPath": s.container_path,
                "hostPath": s.host_path,
                "permissions": s.permissions,
            }
            for s in device.device_specs
        ],
    }
