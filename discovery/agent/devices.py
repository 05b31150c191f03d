"""What the agent knows about one discovered device, independent of gRPC types.

``Device`` is the agent's frozen view of a handler's ``v0.Device`` plus the
registering handler's ``shared`` flag. Everything downstream (naming, Instance
content, CDI edits, Allocate answers) works on this type, so the discovery
registry's representation can change without touching the agent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from discovery.agent import naming


@dataclasses.dataclass(frozen=True, slots=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceSpec:
    container_path: str
    host_path: str
    permissions: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Device:
    id: str
    properties: Mapping[str, str]
    mounts: tuple[Mount, ...] = ()
    device_specs: tuple[DeviceSpec, ...] = ()
    shared: bool = False

    def digest(self, node_name: str) -> str:
        return naming.device_hash(self.id, None if self.shared else node_name)


@dataclasses.dataclass(frozen=True, slots=True)
class NamedDevice:
    """A device as one Configuration on one node sees it: with its Instance name and hash."""

    configuration: str
    digest: str
    device: Device

    @property
    def instance(self) -> str:
        return naming.instance_name(self.configuration, self.digest)

    @property
    def cdi_name(self) -> str:
        return naming.cdi_name(self.configuration, self.digest)


def name_devices(
    configuration: str, devices: list[Device] | tuple[Device, ...], node_name: str
) -> dict[str, NamedDevice]:
    """Instance name -> device; de-duplicated by Instance name (first endpoint wins, as Akri)."""
    named: dict[str, NamedDevice] = {}
    for device in devices:
        entry = NamedDevice(configuration, device.digest(node_name), device)
        named.setdefault(entry.instance, entry)
    return named
