"""``edgehub agent``: the Akri-compatible discovery agent for one node.

Turns Configurations (akri.sh/v0) into Instances, serves a kubelet device
plugin per Instance and per Configuration, writes CDI specs and reclaims
unused slots. In a Pod without ``--kubeconfig`` it authenticates with its
ServiceAccount token (re-read as kubelet rotates it), against
``--server-addr`` when given (the hub's proxy, so it keeps working offline)
or ``$KUBERNETES_SERVICE_HOST``. Flags keep Akri's environment names (``AGENT_NODE_NAME``,
``DISCOVERY_HANDLERS_DIRECTORY``, ``METRICS_PORT``, ``ENABLE_DEBUG_ECHO``,
``DEBUG_ECHO_INSTANCES_SHARED``) besides the ``EDGEHUB_*`` ones.
SIGTERM/SIGINT stop it cleanly (plugins and sockets removed, exit 0); a
second signal exits at once. Bad flags or an unusable kubeconfig exit 3.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
from pathlib import Path

import click

from discovery import signalling
from discovery.agent import running, settings
from edgehub import cli, helpgroups
from kubecontrol import credentials


def _version() -> str:
    try:
        return importlib.metadata.version("edgehub")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


def _handlers(value: str, enable_debug_echo: bool) -> tuple[str, ...]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    if enable_debug_echo and "debugEcho" not in names:
        names.append("debugEcho")
    return tuple(dict.fromkeys(names))


@click.command(
    "agent", cls=helpgroups.Command, topics="agent", context_settings=cli.COMMAND_CONTEXT
)
@click.option(
    "--node-name",
    required=True,
    envvar=["AGENT_NODE_NAME", "EDGEHUB_NODE_NAME"],
    help="This node's name (Akri: AGENT_NODE_NAME); also the finalizer it owns.",
)
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    envvar=["EDGEHUB_KUBECONFIG", "KUBECONFIG"],
    help="Credentials and server of the apiserver.",
)
@click.option(
    "--server-addr",
    default=None,
    help="Apiserver (or hub proxy, http://127.0.0.1:10261) URL; overrides the server of the "
    "kubeconfig or of the Pod's ServiceAccount.",
)
@click.option(
    "--service-account-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=settings.SERVICE_ACCOUNT_DIR,
    help="In a Pod without --kubeconfig: the ServiceAccount token and ca.crt used as "
    "credentials (the server is $KUBERNETES_SERVICE_HOST unless --server-addr is given).",
)
@click.option(
    "--discovery-handlers-directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/var/lib/akri"),
    envvar=["DISCOVERY_HANDLERS_DIRECTORY", "EDGEHUB_DISCOVERY_HANDLERS_DIRECTORY"],
    help="Where agent-registration.sock is served (Akri: DISCOVERY_HANDLERS_DIRECTORY).",
)
@click.option(
    "--embedded-handlers",
    default="",
    help="Comma-separated handlers to run inside the agent: debugEcho,udev,opcua,onvif.",
)
@click.option(
    "--enable-debug-echo/--no-enable-debug-echo",
    default=False,
    envvar=["ENABLE_DEBUG_ECHO", "EDGEHUB_ENABLE_DEBUG_ECHO"],
    help="Also embed debugEcho (Akri: ENABLE_DEBUG_ECHO).",
)
@click.option(
    "--handler-networks",
    default="",
    help="Comma-separated CIDRs where discovery handlers may serve NETWORK endpoints (Akri's "
    "POD_IP mode, e.g. the pod network). Empty: only sockets in the handlers directory.",
)
@click.option(
    "--writable-mount-handlers",
    default="",
    help="Comma-separated handler names whose device mounts may be writable; the mounts of "
    "every other handler are made read-only.",
)
@click.option(
    "--protected-mount-paths",
    default="",
    help="Comma-separated host paths no discovered device may mount (nor a directory above "
    "them), besides the built-in ones: the system's, kubelet's, the container runtime's and "
    "the hub's default directories.",
)
@click.option(
    "--device-plugins-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/var/lib/kubelet/device-plugins"),
    help="kubelet's device-plugin directory (kubelet.sock and plugin sockets).",
)
@click.option(
    "--pod-resources-socket",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
    help="kubelet's pod-resources socket, asked by the slot reclaimer.",
)
@click.option(
    "--cdi-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/var/run/cdi"),
    help="Directory for CDI spec files (one per Configuration).",
)
@click.option("--metrics-address", default="0.0.0.0", help="Address of GET /metrics.")
@click.option(
    "--metrics-port",
    default=8080,
    type=click.IntRange(0, 65535),
    envvar=["METRICS_PORT", "EDGEHUB_METRICS_PORT"],
    help="Port of GET /metrics (Akri: METRICS_PORT); 0 picks a free port.",
)
@click.option(
    "--reclaim-interval",
    default=10.0,
    type=click.FloatRange(min=0.05),
    help="Seconds between slot-reclaimer passes.",
)
@click.option(
    "--reclaim-grace",
    default=20.0,
    type=click.FloatRange(min=0),
    help="Seconds a held slot may go unreported by kubelet before it is freed.",
)
@click.option(
    "--settle-seconds",
    default=30.0,
    type=click.FloatRange(min=0),
    help="Silence after which a handler endpoint that sent no device list counts as empty "
    "(a fallback for Akri handlers that send nothing when they find nothing).",
)
@click.option(
    "--registration-window-seconds",
    default=20.0,
    type=click.FloatRange(min=0),
    help="After start, keep Instances of vanished devices this long: handlers may still be "
    "re-registering with the restarted agent.",
)
@click.option(
    "--requeue-seconds",
    default=600.0,
    type=click.FloatRange(min=1),
    help="Reconcile every Configuration at least this often.",
)
def command(
    node_name: str,
    kubeconfig: Path | None,
    server_addr: str | None,
    service_account_dir: Path,
    discovery_handlers_directory: Path,
    embedded_handlers: str,
    enable_debug_echo: bool,
    handler_networks: str,
    writable_mount_handlers: str,
    protected_mount_paths: str,
    device_plugins_dir: Path,
    pod_resources_socket: Path,
    cdi_dir: Path,
    metrics_address: str,
    metrics_port: int,
    reclaim_interval: float,
    reclaim_grace: float,
    settle_seconds: float,
    registration_window_seconds: float,
    requeue_seconds: float,
) -> None:
    """Run the discovery agent: Configurations -> Instances, device plugins, CDI specs."""
    service_account = None
    if kubeconfig is None:
        service_account = credentials.in_cluster(service_account_dir, os.environ)
    if kubeconfig is None and server_addr is None and service_account is None:
        click.echo("error: give --kubeconfig or --server-addr (or run in a Pod)", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE)
    if kubeconfig is not None and not kubeconfig.is_file():
        click.echo(f"error: kubeconfig {kubeconfig} does not exist", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE)
    try:
        networks = settings.parse_handler_networks(handler_networks)
        writable = settings.parse_handler_names(writable_mount_handlers)
        protected = settings.parse_protected_paths(protected_mount_paths)
    except ValueError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e
    agent_settings = settings.AgentSettings(
        node_name=node_name,
        kube=settings.KubeSettings(
            url=server_addr,
            kubeconfig=kubeconfig,
            service_account=service_account,
            user_agent=f"edgehub-agent/{_version()}",
        ),
        discovery_handlers_dir=discovery_handlers_directory,
        embedded_handlers=_handlers(embedded_handlers, enable_debug_echo),
        handler_environ=dict(os.environ),
        device_plugins_dir=device_plugins_dir,
        pod_resources_socket=pod_resources_socket,
        cdi_dir=cdi_dir,
        handler_networks=networks,
        writable_mount_handlers=writable,
        protected_mount_paths=protected,
        metrics_address=metrics_address,
        metrics_port=metrics_port,
        timings=settings.Timings(
            reclaim_interval=reclaim_interval,
            reclaim_grace=reclaim_grace,
            settle=settle_seconds,
            registration_window=registration_window_seconds,
            requeue=requeue_seconds,
        ),
    )
    try:
        asyncio.run(signalling.run_until_signalled(running.run(agent_settings)))
    except running.StartupError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e
