"""The agent's settings tree: frozen dataclasses built once (by the CLI or an embedder).

Every interval is configurable so tests can run the whole agent in seconds;
the defaults are Akri's where Akri has one (reference §11) and say why
otherwise.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from discovery import admission
from kubecontrol import credentials

EMBEDDED_HANDLERS = ("debugEcho", "udev", "opcua", "onvif")
# Where a Pod's credentials come from: shared with the managers (``kubecontrol.credentials``).
SERVICE_ACCOUNT_DIR = credentials.SERVICE_ACCOUNT_DIR
ServiceAccount = credentials.ServiceAccount


@dataclasses.dataclass(frozen=True, slots=True)
class KubeSettings:
    url: str | None = None
    """Apiserver URL. Set to the hub's proxy URL (``http://127.0.0.1:10261``) so API traffic
    keeps working offline from the hub's cache; ``None`` takes the credentials' server."""
    kubeconfig: Path | None = None
    """Credentials (and the server, unless ``url`` is set)."""
    service_account: ServiceAccount | None = None
    """Credentials when there is no kubeconfig (the agent runs in a Pod)."""
    user_agent: str = "edgehub-agent/0.0.0"
    """Sent on every request; the hub classifies and caches per component by it."""
    request_timeout: float = 30.0
    """Seconds for one non-watch request."""
    watch_timeout: int = 300
    """Server-side timeout of one watch request (seconds); the watch is then resumed."""


@dataclasses.dataclass(frozen=True, slots=True)
class Timings:
    requeue: float = 600.0
    """Reconcile every Configuration at least this often (Akri: 600 s)."""
    backoff_initial: float = 0.5
    """Error back-off seed: the first retry comes after twice this (Akri: 1 s)."""
    backoff_cap: float = 300.0
    """Back-off never exceeds this (Akri's is uncapped: a handler absent for minutes pushed
    retries to hours)."""
    watch_backoff_initial: float = 0.5
    watch_backoff_cap: float = 30.0
    """Reconnect back-off of the Configuration/Instance watches."""
    settle: float = 30.0
    """An attached handler endpoint that has sent no device list for this long counts as
    reporting an empty one. Only a fallback: an endpoint that reports (even an empty list) is
    believed at once. Needed because Akri's own handlers send nothing when their first pass
    finds nothing; long, because until then a slow first pass (OPC UA: 3 s per unreachable
    URL) must not pass for "no devices" and delete Instances after an agent restart."""
    registration_window: float = 20.0
    """After the agent starts, no Instance is removed for this long: a second endpoint of a
    handler name may not have re-registered yet (Akri handlers notice a restarted agent on
    their next 10 s tick and retry every 10 s; ours within 0.25 s). Not applied when no
    registration socket is served."""
    degraded_grace: float = 30.0
    """While a request is degraded (a stream failed, no endpoint), vanished devices keep
    their Instances this long, so a handler restart does not restart brokers."""
    reclaim_interval: float = 10.0
    """How often the slot reclaimer asks kubelet which devices are in use (Akri: 10 s)."""
    reclaim_grace: float = 20.0
    """A held slot kubelet does not report is freed after this long (Akri: 20 s)."""
    kubelet_poll: float = 1.0
    """How often the kubelet socket is checked for re-creation (kubelet restarted)."""
    write_attempts: int = 8
    """Read-modify-write attempts on 409 before giving up to the back-off."""
    node_check_initial: float = 1.0
    node_check_cap: float = 300.0
    """The agent GETs its Node at start; while it does not exist (said once), again after
    ``node_check_initial`` seconds, doubling up to ``node_check_cap``."""


@dataclasses.dataclass(frozen=True, slots=True)
class AgentSettings:
    node_name: str
    kube: KubeSettings = KubeSettings()
    discovery_handlers_dir: Path | None = Path("/var/lib/akri")
    """Where ``agent-registration.sock`` is served; ``None`` accepts embedded handlers only."""
    embedded_handlers: tuple[str, ...] = ()
    """Handlers run inside the agent (debugEcho, udev, opcua, onvif)."""
    handler_environ: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Environment handed to embedded handlers (their Akri variables, e.g.
    ``DEBUG_ECHO_INSTANCES_SHARED``, ``DEBUG_ECHO_AVAILABILITY_FILE``)."""
    device_plugins_dir: Path = Path("/var/lib/kubelet/device-plugins")
    pod_resources_socket: Path | None = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    """``None`` disables the slot reclaimer."""
    cdi_dir: Path | None = Path("/var/run/cdi")
    """``None`` writes no CDI spec files."""
    metrics_address: str = "0.0.0.0"
    metrics_port: int | None = 8080
    """``None`` serves no /metrics; 0 picks a free port."""
    max_capacity: int = 1024
    """Largest Configuration (and Instance) capacity accepted (slot tables are per capacity)."""
    handler_networks: tuple[admission.Network, ...] = ()
    """Where handlers may register NETWORK endpoints (``--handler-networks``); none by default:
    only sockets in ``discovery_handlers_dir`` are accepted."""
    writable_mount_handlers: frozenset[str] = frozenset()
    """Handler names whose device mounts stay writable (``--writable-mount-handlers``); the
    mounts of every other handler are made read-only."""
    protected_mount_paths: tuple[Path, ...] = ()
    """Host paths no device mount may expose, besides the built-in ones
    (``discovery.admission.TREES``) and the agent's own (``--protected-mount-paths``)."""
    hub_paths: tuple[Path, ...] = ()
    """The embedding hub's ``--root-dir`` and ``--disk-cache-path``, protected like the
    defaults of those (which always are)."""
    workers: int = 4
    """Configurations reconciled concurrently."""
    timings: Timings = Timings()


def parse_handler_networks(text: str) -> tuple[admission.Network, ...]:
    """``--handler-networks``: comma-separated CIDRs or addresses; ValueError names a bad one."""
    networks: list[admission.Network] = []
    for item in text.split(","):
        if item.strip():
            try:
                networks.extend(admission.parse_networks([item]))
            except ValueError as e:
                raise ValueError(f"{item.strip()!r} is not a network (CIDR): {e}") from None
    return tuple(networks)


def parse_handler_names(text: str) -> frozenset[str]:
    """A comma-separated list of handler names (``--writable-mount-handlers``)."""
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    for name in names:
        admission.check_name(name)
    return names


def parse_protected_paths(text: str) -> tuple[Path, ...]:
    """``--protected-mount-paths``: comma-separated absolute paths; ValueError names a bad one."""
    paths: list[Path] = []
    for item in (i.strip() for i in text.split(",")):
        if item and not os.path.isabs(item):
            raise ValueError(f"{item!r} is not an absolute path")
        if item:
            paths.append(Path(os.path.normpath(item)))
    return tuple(dict.fromkeys(paths))


def protected_trees(agent_settings: AgentSettings) -> tuple[admission.Tree, ...]:
    """The hub's and the operator's paths, as ``discovery.admission`` trees."""
    hub = "the hub's --root-dir or --disk-cache-path"
    return (
        *(admission.Tree(os.fspath(p), hub) for p in agent_settings.hub_paths),
        *(
            admission.Tree(os.fspath(p), "--protected-mount-paths")
            for p in agent_settings.protected_mount_paths
        ),
    )


def protected_paths(agent_settings: AgentSettings) -> tuple[Path, ...]:
    """Host directories no discovered device may mount: kubelet's (the parent of its
    device-plugin directory: pods' volumes and secrets live there too), the pod-resources
    socket's and the CDI spec directory (the handlers directory is added by the registry)."""
    paths = [agent_settings.device_plugins_dir, agent_settings.device_plugins_dir.parent]
    if agent_settings.pod_resources_socket is not None:
        paths.append(agent_settings.pod_resources_socket.parent)
    if agent_settings.cdi_dir is not None:
        paths.append(agent_settings.cdi_dir)
    return tuple(dict.fromkeys(p.absolute() for p in paths))
