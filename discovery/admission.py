"""What the agent admits from discovery handlers: registrations and the devices they report.

Pure decisions over plain values (no sockets, no file system: the registry checks that a UDS
endpoint really is a socket). Whoever can connect to ``agent-registration.sock`` can register
a handler, and a registered handler decides what host paths reach containers; these rules
bound what such a process can make the agent do (THREAT_MODEL.md, "Discovery").

Registrations (:func:`endpoint`), each refusal a :class:`Refused` naming the field:
  * ``name``: 1..253 characters, no ``/``, no control character (NUL included);
  * ``endpoint`` of a UDS handler: an absolute, normalized path of a socket directly in the
    handlers directory (not the registration socket itself), at most 107 bytes;
  * ``endpoint`` of a NETWORK handler: ``http://<IP literal>:<port>`` with the address in one
    of the networks the operator allowed (none by default): a registration must not make the
    agent dial arbitrary hosts, and a name could resolve elsewhere later;
  * ``endpoint_type``: UDS or NETWORK.

Devices (:func:`device`), each refusal a :class:`Refused` naming the device and field:
  * mounts: absolute, normalized host and container paths; the host path is neither ``/``
    nor an ancestor, equal or descendant of a protected directory (the agent's own: handlers,
    kubelet device plugins, CDI specs); the container path is not ``/``. A writable mount
    becomes read-only unless the operator allowed writable mounts for that handler name;
  * device specs: host path a device node under ``/dev/``, container path absolute,
    permissions a combination of ``r``, ``w``, ``m``;
  * id non-empty without NUL; property names non-empty without ``=`` or NUL (they become
    ``NAME=value`` environment entries), values without NUL.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import posixpath
import unicodedata
from collections.abc import Iterable
from urllib.parse import urlsplit

from discovery import devices

MAX_NAME = 253
MAX_SOCKET_PATH = 107
"""Bytes of a Unix socket path (``sun_path`` is 108 with its NUL)."""
MAX_ID = 4096
PERMISSION_LETTERS = frozenset("rwm")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Refused(ValueError):
    """A registration or device the agent does not accept; ``field`` names what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


@dataclasses.dataclass(frozen=True, slots=True)
class Policy:
    """The operator's rules (agent flags) for what handlers may register and report."""

    handlers_directory: str | None
    """Absolute path of ``DISCOVERY_HANDLERS_DIRECTORY``; ``None``: no UDS endpoint at all."""
    registration_socket: str | None = None
    networks: tuple[Network, ...] = ()
    """Where NETWORK endpoints may be (``--handler-networks``); empty: nowhere."""
    writable_mounts: frozenset[str] = frozenset()
    """Handler names whose mounts may stay writable (``--writable-mount-handlers``)."""
    protected: tuple[str, ...] = ()
    """Absolute host directories no mount may expose (besides ``/``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Registration:
    name: str
    endpoint: str
    network: bool


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """CIDRs (or single addresses) as given to ``--handler-networks``; ValueError if bad."""
    return tuple(ipaddress.ip_network(v.strip(), strict=False) for v in values if v.strip())


def _printable(text: str) -> bool:
    return not any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in text)


def check_name(name: str) -> None:
    if not name:
        raise Refused("name", "must not be empty")
    if len(name) > MAX_NAME:
        raise Refused("name", f"is {len(name)} characters long; at most {MAX_NAME}")
    if "/" in name:
        raise Refused("name", f"{name!r} contains '/'")
    if not _printable(name):
        raise Refused("name", f"{name!r} contains a control character")


def _normalized(path: str) -> bool:
    return posixpath.isabs(path) and posixpath.normpath(path) == path and "//" not in path


def endpoint(name: str, address: str, network: bool, policy: Policy) -> Registration:
    """Check one ``RegisterDiscoveryHandlerRequest`` (``endpoint_type`` already decoded)."""
    check_name(name)
    if not address:
        raise Refused("endpoint", "must not be empty")
    if "\x00" in address or not _printable(address):
        raise Refused("endpoint", f"{address!r} contains a control character")
    if network:
        return Registration(name, _network_endpoint(address, policy), True)
    directory = policy.handlers_directory
    if directory is None:
        raise Refused("endpoint", "this agent accepts no Unix socket endpoints")
    if not _normalized(address):
        raise Refused("endpoint", f"{address!r} is not an absolute, normalized path")
    if len(address.encode()) > MAX_SOCKET_PATH:
        raise Refused("endpoint", f"{address!r} is longer than {MAX_SOCKET_PATH} bytes")
    if posixpath.dirname(address) != directory:
        raise Refused("endpoint", f"{address!r} is not a socket in {directory}")
    if address == policy.registration_socket:
        raise Refused("endpoint", f"{address!r} is the agent's registration socket")
    return Registration(name, address, False)


def _network_endpoint(address: str, policy: Policy) -> str:
    parts = urlsplit(address if "://" in address else f"http://{address}")
    try:
        port = parts.port
    except ValueError as e:
        raise Refused("endpoint", f"{address!r}: {e}") from None
    if parts.scheme != "http" or not parts.hostname or port is None:
        raise Refused("endpoint", f"NETWORK endpoint must be http://<ip>:<port>, got {address!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise Refused("endpoint", f"NETWORK endpoint must be http://<ip>:<port>, got {address!r}")
    try:
        ip = ipaddress.ip_address(parts.hostname)
    except ValueError:
        raise Refused(
            "endpoint", f"{address!r} names a host; NETWORK endpoints must be IP addresses"
        ) from None
    if not any(ip in net for net in policy.networks):
        allowed = ", ".join(str(n) for n in policy.networks) or "none (see --handler-networks)"
        raise Refused("endpoint", f"{ip} is not in an allowed handler network: {allowed}")
    return address


# --------------------------------------------------------------------------- devices


def _related(path: str, protected: str) -> bool:
    """``path`` exposes ``protected``: equal, inside it, or a directory above it."""
    return (
        path == protected
        or path.startswith(protected.rstrip("/") + "/")
        or protected.startswith(path.rstrip("/") + "/")
    )


def device(found: devices.Device, handler: str, policy: Policy) -> tuple[devices.Device, bool]:
    """The device as admitted and whether a writable mount was made read-only; ``Refused``
    (its field prefixed with the device id) when it cannot be admitted at all."""
    if not found.id or "\x00" in found.id or len(found.id) > MAX_ID:
        raise Refused("id", f"{found.id[:80]!r} is empty, too long or contains NUL")
    try:
        for key, value in found.properties.items():
            if not key or "=" in key or "\x00" in key:
                raise Refused(f"properties[{key!r}]", "a property name is non-empty, without =/NUL")
            if "\x00" in value:
                raise Refused(f"properties[{key!r}]", "contains NUL")
        mounts = []
        downgraded = False
        for i, mount in enumerate(found.mounts):
            field = f"mounts[{i}]"
            for which, path in (
                ("hostPath", mount.host_path),
                ("containerPath", mount.container_path),
            ):
                if "\x00" in path or not _normalized(path):
                    raise Refused(
                        f"{field}.{which}", f"{path!r} is not an absolute, normalized path"
                    )
                if path == "/":
                    raise Refused(f"{field}.{which}", "'/' (the whole file system) is refused")
            for protected in policy.protected:
                if _related(mount.host_path, protected):
                    raise Refused(f"{field}.hostPath", f"{mount.host_path!r} exposes {protected}")
            if not mount.read_only and handler not in policy.writable_mounts:
                mount = dataclasses.replace(mount, read_only=True)
                downgraded = True
            mounts.append(mount)
        for i, spec in enumerate(found.device_specs):
            field = f"deviceSpecs[{i}]"
            if not (_normalized(spec.host_path) and spec.host_path.startswith("/dev/")):
                raise Refused(f"{field}.hostPath", f"{spec.host_path!r} is not a node under /dev/")
            if "\x00" in spec.container_path or not _normalized(spec.container_path):
                raise Refused(
                    f"{field}.containerPath", f"{spec.container_path!r} is not an absolute path"
                )
            letters = spec.permissions
            if set(letters) - PERMISSION_LETTERS or len(set(letters)) != len(letters):
                raise Refused(
                    f"{field}.permissions", f"{letters!r} is not a combination of r, w, m"
                )
    except Refused as e:
        raise Refused(f"device {found.id!r} {e.field}", e.message) from None
    if not downgraded:
        return found, False
    return dataclasses.replace(found, mounts=tuple(mounts)), True
