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
  * mounts: absolute, normalized host and container paths; the container path is not ``/``;
    the host path, both as given and where its links lead, is not ``/`` and exposes no
    protected path: it is not that path, inside it or a directory above it (mounting ``/var``
    exposes ``/var/lib/kubelet``). Protected are the agent's own directories
    (``Policy.protected``: handlers, kubelet's device plugins, CDI specs) and
    ``Policy.trees``: :data:`TREES` (the system's, kubelet's, the container runtime's and the
    hub's default ones) plus the embedding hub's and the operator's. Some trees protect only
    themselves as a whole (``/dev``, ``/sys``, ``/run``): a device node, a ``/sys/class``
    entry or ``/run/udev`` inside them may be mounted, unless a tree within protects it
    (``/run/containerd``, ``/sys/fs``). A writable mount becomes read-only unless the
    operator allowed writable mounts for that handler name; a read-only mount of a socket
    still lets the container connect to it, hence the sockets among the trees;
  * device specs: host path a device node under ``/dev/``, also where its links lead (kept as
    given: ``/dev/serial/by-id/...`` links are how a node is named stably), container path
    absolute, permissions a combination of ``r``, ``w``, ``m``;
  * id non-empty without NUL; property names non-empty without ``=`` or NUL (they become
    ``NAME=value`` environment entries), values without NUL.

Links are resolved by the caller (I/O: ``os.path.realpath``) and handed in as a mapping
(:func:`paths_to_resolve` says which); a path missing from it counts as no link. Admitted
mounts keep the path as given: the agent resolves in its own mount namespace (in a Pod it
sees the host's links only in the host directories mounted into it, and the image's own
``/var/run`` -> ``/run``), so its resolution is a check, not a path to hand kubelet; both
spellings of the well-known links are in :data:`TREES` either way. Dangers: a link changed
after the check is not seen (kubelet resolves at container start); a handler that can write
links into host directories it may mount is trusted with what they point to.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import posixpath
import unicodedata
from collections.abc import Iterable, Mapping
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
class Tree:
    """A host path no device mount may expose, and whose it is (named in a refusal)."""

    path: str
    owner: str
    whole: bool = False
    """Only the tree as a whole is protected (it, and the directories above it): paths
    inside may be mounted (a device node in ``/dev``)."""


def _trees(owner: str, *paths: str, whole: bool = False) -> tuple[Tree, ...]:
    return tuple(Tree(path, owner, whole) for path in paths)


_RUNTIME = "the container runtime's sockets and state"
TREES: tuple[Tree, ...] = (
    *_trees("the system's configuration", "/etc"),
    *_trees("the kernel's process and sysctl files", "/proc"),
    # The host's programs and libraries, and root's home: a writable mount replaces what
    # the host runs as root.
    *_trees("the host's software", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"),
    *_trees("the host's software", "/libx32", "/boot", "/opt/cni"),
    *_trees("root's home", "/root"),
    *_trees("device nodes", "/dev", whole=True),
    *_trees("the kernel's objects", "/sys", whole=True),
    # Writable, these run code on the host (cgroup v1 release_agent, uevent_helper), or
    # power it off.
    *_trees("the kernel's settings", "/sys/fs", "/sys/kernel", "/sys/firmware", "/sys/power"),
    *_trees("runtime state and sockets", "/run", "/var/run", whole=True),
    # A socket is as open read-only as writable: connecting needs no write to the mount.
    *_trees("the init system's and system bus' sockets", "/run/systemd", "/var/run/systemd"),
    *_trees("the init system's and system bus' sockets", "/run/dbus", "/var/run/dbus"),
    *_trees("the users' sessions", "/run/user", "/var/run/user"),
    *_trees(_RUNTIME, "/run/containerd", "/var/run/containerd", "/var/lib/containerd"),
    *_trees(_RUNTIME, "/run/crio", "/var/run/crio", "/var/lib/containers", "/run/containers"),
    *_trees(_RUNTIME, "/run/docker.sock", "/var/run/docker.sock", "/run/docker"),
    *_trees(_RUNTIME, "/var/run/docker", "/var/lib/docker", "/run/cri-dockerd.sock"),
    *_trees(_RUNTIME, "/var/run/cri-dockerd.sock", "/run/k3s", "/var/lib/rancher"),
    *_trees(_RUNTIME, "/run/podman", "/run/cdi", "/var/run/cdi", "/etc/cdi"),
    *_trees("kubelet's pods, plugins and credentials", "/var/lib/kubelet", "/etc/kubernetes"),
    *_trees("the hub's --root-dir: its keys and kubeconfigs", "/var/lib/yurthub"),
    *_trees("the hub's --disk-cache-path", "/etc/kubernetes/cache"),
)
"""What no handler's mount may expose on any node; the hub's by its default paths (an
embedding hub adds its own, the operator more)."""


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
    """Absolute host directories of the agent's own that no mount may expose (besides ``/``)."""
    trees: tuple[Tree, ...] = TREES
    """The host's trees no mount may expose: :data:`TREES`, plus the embedding hub's and the
    operator's (``--protected-mount-paths``)."""


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


def _inside(path: str, tree: str) -> bool:
    return path.startswith(tree.rstrip("/") + "/")


def _related(path: str, protected: str) -> bool:
    """``path`` exposes ``protected``: equal, inside it, or a directory above it."""
    return path == protected or _inside(path, protected) or _inside(protected, path)


def _named(path: str, real: str) -> str:
    return path if real == path else f"{path} (= {real})"


def _exposed(path: str, policy: Policy, real: Mapping[str, str]) -> str | None:
    """What mounting ``path`` (a resolved or given host path) exposes, named; None: nothing.

    The agent's own directories first; then, of the trees, the innermost one holding
    ``path`` (``/etc/kubernetes`` rather than ``/etc``), else the first one below it."""
    for protected in policy.protected:
        for candidate in dict.fromkeys((protected, real.get(protected, protected))):
            if _related(path, candidate):
                return _named(protected, candidate)
    holding: tuple[int, str] | None = None
    below: str | None = None
    for tree in policy.trees:
        for candidate in dict.fromkeys((tree.path, real.get(tree.path, tree.path))):
            name = _named(tree.path, candidate)
            if path == candidate or (not tree.whole and _inside(path, candidate)):
                if holding is None or len(candidate) > holding[0]:
                    holding = (len(candidate), f"{name} ({tree.owner})")
            elif below is None and _inside(candidate, path):
                below = f"{name} ({tree.owner})"
    return holding[1] if holding is not None else below


def paths_to_resolve(found: Iterable[devices.Device], policy: Policy) -> set[str]:
    """The paths whose links :func:`device` wants resolved: the host paths of ``found``
    (only well-formed ones: nothing relative or with NUL reaches ``realpath``) and the
    protected ones."""
    wanted = set(policy.protected)
    wanted.update(tree.path for tree in policy.trees)
    for device_found in found:
        for path in (
            *(m.host_path for m in device_found.mounts),
            *(d.host_path for d in device_found.device_specs),
        ):
            if "\x00" not in path and _normalized(path):
                wanted.add(path)
    return wanted


def device(
    found: devices.Device,
    handler: str,
    policy: Policy,
    real: Mapping[str, str] | None = None,
) -> tuple[devices.Device, bool]:
    """The device as admitted and whether a writable mount was made read-only; ``Refused``
    (its field prefixed with the device id) when it cannot be admitted at all. ``real`` maps
    paths to where their links lead (:func:`paths_to_resolve`; missing: not a link)."""
    real = real or {}
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
            host = mount.host_path
            resolved = real.get(host, host)
            shown = repr(host) if resolved == host else f"{host!r} (really {resolved!r})"
            if resolved == "/":
                raise Refused(f"{field}.hostPath", f"{shown} exposes the whole file system")
            for candidate in dict.fromkeys((host, resolved)):
                exposed = _exposed(candidate, policy, real)
                if exposed is not None:
                    raise Refused(f"{field}.hostPath", f"{shown} exposes {exposed}")
            if not mount.read_only and handler not in policy.writable_mounts:
                mount = dataclasses.replace(mount, read_only=True)
                downgraded = True
            mounts.append(mount)
        for i, spec in enumerate(found.device_specs):
            field = f"deviceSpecs[{i}]"
            if not (_normalized(spec.host_path) and spec.host_path.startswith("/dev/")):
                raise Refused(f"{field}.hostPath", f"{spec.host_path!r} is not a node under /dev/")
            node = real.get(spec.host_path, spec.host_path)
            if not node.startswith("/dev/"):
                raise Refused(
                    f"{field}.hostPath",
                    f"{spec.host_path!r} (really {node!r}) is not a node under /dev/",
                )
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
