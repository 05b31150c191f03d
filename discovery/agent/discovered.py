"""Discovered devices as one Configuration on one node sees them: named and hashed.

A handler reports ``discovery.devices.Device`` values; whether a device is
shared comes from the registering handler's ``shared`` flag. ``NamedDevice``
binds the two to a Configuration and carries the Instance name and CDI name
derived from them (``naming``), which is everything the reconcile loop, the
CDI writer and the device plugins need.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from discovery import devices
from discovery.agent import naming


@dataclasses.dataclass(frozen=True, slots=True)
class NamedDevice:
    configuration: str
    digest: str
    device: devices.Device
    shared: bool

    @property
    def instance(self) -> str:
        return naming.instance_name(self.configuration, self.digest)

    @property
    def cdi_name(self) -> str:
        return naming.cdi_name(self.configuration, self.digest)


def name_devices(
    configuration: str, found: Iterable[tuple[devices.Device, bool]], node_name: str
) -> dict[str, NamedDevice]:
    """Instance name -> device, from (device, shared) pairs.

    De-duplicated by Instance name, first one wins (as Akri de-duplicates by CDI
    name when several endpoints of one handler report the same device).
    """
    named: dict[str, NamedDevice] = {}
    for device, shared in found:
        digest = naming.device_hash(device.id, None if shared else node_name)
        entry = NamedDevice(configuration, digest, device, shared)
        named.setdefault(entry.instance, entry)
    return named
