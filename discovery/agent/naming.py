"""Names the agent writes to the wire: Instance names, CDI names, slot ids, deviceUsage values.

Pure and byte-compatible with Akri (reference §2.3, §3, §5.2): an Akri agent
and an edgehub agent on two nodes must compute the same Instance name for the
same shared device, and a broker written for Akri must find the same
environment variables. Change nothing here without a table test that proves
the old Akri vectors still hold.

Danger: Kubernetes does not validate an extended-resource name against these
rules; a very long Configuration name yields resource names kubelet rejects.
That is the same as Akri and is surfaced by the registration error.

Plugin socket names are Akri's too unless the path would not fit a Unix socket
(``plugin_socket_name``): then they are shortened, never to nothing readable
unless the directory leaves no room for it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping

AKRI_PREFIX = "akri.sh"
API_GROUP = "akri.sh"
API_VERSION = "v0"
API_GROUP_VERSION = f"{API_GROUP}/{API_VERSION}"

# Configuration-level usage marker: "C:<vdev>:<node>".
_CONFIGURATION_USAGE_TAG = "C"


class NamingError(ValueError):
    """A slot id or deviceUsage value that does not follow the Akri format."""


def device_hash(device_id: str, node_name: str | None) -> str:
    """The 6-hex-digit BLAKE2b (3-byte digest) that names a device's Instance.

    ``node_name`` is ``None`` for shared devices (every node computes the same
    hash) and the node's name for local ones (plain concatenation, no separator,
    exactly as Akri does).
    """
    data = device_id if node_name is None else device_id + node_name
    return hashlib.blake2b(data.encode(), digest_size=3).hexdigest()


def instance_name(configuration: str, digest: str) -> str:
    return f"{configuration}-{digest}"


def cdi_kind(configuration: str) -> str:
    return f"{AKRI_PREFIX}/{configuration}"


def cdi_name(configuration: str, digest: str) -> str:
    """Fully qualified CDI device name, also stored as ``Instance.spec.cdiName``."""
    return f"{AKRI_PREFIX}/{configuration}={digest}"


def split_cdi_name(name: str) -> tuple[str, str]:
    """``akri.sh/<config>=<hash>`` -> (config, hash)."""
    kind, sep, digest = name.partition("=")
    prefix, slash, configuration = kind.partition("/")
    if not sep or not slash or prefix != AKRI_PREFIX or not configuration or not digest:
        raise NamingError(f"not an Akri CDI device name: {name!r}")
    return configuration, digest


SOCKET_PATH_MAX = 107
"""Bytes of a Unix socket path: ``sun_path`` is 108 bytes on Linux, one is the final NUL."""
_SOCKET_SUFFIX = ".sock"
_SOCKET_DIGEST_BYTES = 5
SOCKET_NAME_MIN = 2 * _SOCKET_DIGEST_BYTES + len(_SOCKET_SUFFIX)
"""Shortest plugin socket name (``<digest>.sock``): a directory must leave this much room."""


def plugin_socket_name(plugin_name: str, seconds: int, room: int) -> str | None:
    """The socket file name of a device plugin started at ``seconds``, in at most ``room`` bytes.

    Akri's ``<plugin>-<unix seconds>.sock`` when it fits. Otherwise ``<prefix>-<digest>.sock``:
    the digest (BLAKE2b of Akri's name, 5 bytes) keeps names unique per plugin and per start,
    the prefix is as much of the plugin name as fits so ``ls`` still tells sockets apart. With
    no room for a prefix, ``<digest>.sock``; with less than ``SOCKET_NAME_MIN`` bytes, ``None``.
    """
    full = f"{plugin_name}-{seconds}{_SOCKET_SUFFIX}"
    if len(full.encode()) <= room:
        return full
    if room < SOCKET_NAME_MIN:
        return None
    digest = hashlib.blake2b(full.encode(), digest_size=_SOCKET_DIGEST_BYTES).hexdigest()
    # "-" between prefix and digest; a cut name never ends in a separator ("cfg--1a2b...").
    space = room - SOCKET_NAME_MIN - 1
    prefix = plugin_name.encode()[: max(space, 0)].decode("utf-8", "ignore").rstrip("-.")
    if not prefix:
        return f"{digest}{_SOCKET_SUFFIX}"
    return f"{prefix}-{digest}{_SOCKET_SUFFIX}"


def resource_name(plugin_name: str) -> str:
    """Extended resource of an Instance (``akri.sh/<instance>``) or Configuration plugin."""
    return f"{AKRI_PREFIX}/{plugin_name}"


def slot_id(instance: str, index: int) -> str:
    return f"{instance}-{index}"


def vdev_id(configuration: str, number: int) -> str:
    """A Configuration plugin's virtual device id."""
    return f"{configuration}-{number}"


_MAX_INDEX_DIGITS = 9


def slot_index(slot: str) -> int:
    """The index after the last ``-`` of a slot (or vdev) id.

    Only canonical ASCII decimals: ``str.isdigit`` also takes superscripts (on which ``int``
    raises ``ValueError``) and ``int`` takes every script's digits, so a key such as
    ``inst-\u0663`` would alias slot 3; ``inst-01`` would alias ``inst-1``.
    """
    _, sep, tail = slot.rpartition("-")
    if (
        not sep
        or not 0 < len(tail) <= _MAX_INDEX_DIGITS
        or not (tail.isascii() and tail.isdigit())
        or (tail[0] == "0" and tail != "0")
    ):
        raise NamingError(f"not a slot id: {slot!r}")
    return int(tail)


def env_suffix(digest: str) -> str:
    """Suffix of the per-device broker environment variables (``K_<HASH>``)."""
    return digest.upper()


def instance_digest(instance: str) -> str:
    """The hash part of an Instance name (after the last ``-``)."""
    return instance.rpartition("-")[2]


@dataclasses.dataclass(frozen=True, slots=True)
class NodeUsage:
    """A slot held through the Instance resource by a pod on ``node``."""

    node: str


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigurationUsage:
    """A slot held through the Configuration resource (virtual device ``vdev``) on ``node``."""

    vdev: str
    node: str


# ``None`` is a free slot.
SlotUsage = NodeUsage | ConfigurationUsage | None


def parse_usage(value: str) -> SlotUsage:
    if value == "":
        return None
    parts = value.split(":")
    if len(parts) == 1:
        return NodeUsage(value)
    if len(parts) == 3 and parts[0] == _CONFIGURATION_USAGE_TAG and parts[1] and parts[2]:
        return ConfigurationUsage(parts[1], parts[2])
    raise NamingError(f"not a deviceUsage value: {value!r}")


def format_usage(usage: SlotUsage) -> str:
    if usage is None:
        return ""
    if isinstance(usage, NodeUsage):
        return usage.node
    return f"{_CONFIGURATION_USAGE_TAG}:{usage.vdev}:{usage.node}"


def usage_node(usage: SlotUsage) -> str | None:
    return None if usage is None else usage.node


def parse_device_usage(
    device_usage: Mapping[str, str],
    capacity: int,
    *,
    strict: bool = True,
    instance: str | None = None,
) -> tuple[SlotUsage, ...]:
    """``Instance.spec.deviceUsage`` -> one usage per slot index ``0..capacity-1``.

    Keys absent from the map are free. ``strict`` (Akri's rule) rejects an index
    outside the capacity; the agent parses leniently after a capacity change so a
    shrunk Instance does not wedge its plugin (the dropped slots simply vanish).
    With ``instance``, every key must be one of its slot ids (``<instance>-<i>``).
    """
    slots: list[SlotUsage] = [None] * capacity
    for key, value in device_usage.items():
        index = slot_index(key)
        if instance is not None and key != slot_id(instance, index):
            raise NamingError(f"{key!r} is not a slot of {instance}")
        usage = parse_usage(value)
        if index >= capacity:
            if strict:
                raise NamingError(f"slot {key!r} is outside capacity {capacity}")
            continue
        slots[index] = usage
    return tuple(slots)
