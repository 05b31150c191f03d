"""``edgehub hub``: the node-local apiserver proxy (YurtHub's flags and defaults).

Thin: flags -> ``yurthub.settings.HubSettings`` -> ``yurthub.lifecycle.run``. Every flag also
reads ``EDGEHUB_<FLAG>`` (``cli.COMMAND_CONTEXT``). Bad flags or an unreadable kubeconfig exit
with ``cli.EXIT_STARTUP_FAILURE`` and one clear line.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import os
import pathlib

import click

from edgehub import cli
from yurthub import assembly, kubeconfigs, lifecycle, requestinfo, server, settings
from yurthub.filters import registry

AGENT_COMPONENT = "edgehub-agent"


def _duration(value: str) -> float:
    """A positive Go duration; a bare number is seconds. Zero or negative would make no hub
    (a kubelet gate that never opens, offline watches that end at once: a re-watch storm)."""
    try:
        seconds = requestinfo.parse_go_duration(value if not value.isdigit() else f"{value}s")
    except ValueError as e:
        raise click.BadParameter(f"{value!r} is not a duration like 40s or 2m") from e
    if seconds <= 0:
        raise click.BadParameter(f"{value!r}: the duration must be positive")
    return seconds


@click.command(context_settings=cli.COMMAND_CONTEXT)
@click.option("--server-addr", required=True, help="Apiserver URLs, comma separated (https).")
@click.option("--node-name", required=True, help="This node's name (its lease is renewed).")
@click.option("--nodepool-name", default="", help="This node's pool.")
@click.option("--bind-address", default="127.0.0.1", help="Hub server host.")
@click.option("--serve-port", default=10267, type=click.IntRange(0, 65535), help="Hub server port.")
@click.option("--bind-proxy-address", default="127.0.0.1", help="HTTP proxy host.")
@click.option("--proxy-port", default=10261, type=click.IntRange(0, 65535), help="HTTP proxy port.")
@click.option(
    "--proxy-secure-port",
    default=10268,
    type=click.IntRange(0, 65535),
    help="HTTPS proxy port (served once certificates exist).",
)
@click.option(
    "--proxy-accept-hosts",
    default="",
    help="Comma-separated DNS names a request's Host may name beyond localhost and loopback or "
    "bind-address IPs (anything else is refused: DNS rebinding).",
)
@click.option(
    "--proxy-read-header-timeout-seconds",
    default=10.0,
    type=click.FloatRange(min=0.1),
    help="A proxy connection must send a whole request head within this (Go's "
    "ReadHeaderTimeout); else 408 and closed.",
)
@click.option(
    "--proxy-max-connections",
    default=2048,
    type=click.IntRange(min=1),
    help="Open proxy connections; a new one past it is answered 503 and closed.",
)
@click.option(
    "--max-requests-in-flight",
    default=400,
    type=click.IntRange(min=1),
    help="Short requests in flight (429 beyond); watches, logs, exec count apart.",
)
@click.option(
    "--max-long-running-requests",
    default=600,
    type=click.IntRange(min=1),
    help="Watches, logs, exec, port-forwards and proxies in flight (429 beyond).",
)
@click.option(
    "--max-requests-in-flight-per-client",
    default=200,
    type=click.IntRange(min=1),
    help="One client's share of --max-requests-in-flight (a client: a component, plus its "
    "Bearer token).",
)
@click.option(
    "--max-long-running-requests-per-client",
    default=500,
    type=click.IntRange(min=1),
    help="One client's share of --max-long-running-requests.",
)
@click.option(
    "--upstream-header-deadline-seconds",
    default=1.0,
    type=click.FloatRange(min=0.05),
    help="A request without response headers after this gets its apiserver probed at once.",
)
@click.option(
    "--upstream-idle-timeout-seconds",
    default=60.0,
    type=click.FloatRange(min=1),
    help="How long an apiserver may stay silent on a request that is not long-running.",
)
@click.option("--lb-mode", default="rr", type=click.Choice(["rr", "priority"]))
@click.option("--heartbeat-interval-seconds", default=10, type=click.IntRange(min=1))
@click.option("--heartbeat-timeout-seconds", default=2, type=click.IntRange(min=1))
@click.option("--heartbeat-healthy-threshold", default=2, type=click.IntRange(min=1))
@click.option("--heartbeat-failed-retry", default=3, type=click.IntRange(min=1))
@click.option("--kubelet-health-grace-period", default="40s", help="Go duration.")
@click.option("--min-request-timeout", default="1800s", help="Go duration.")
@click.option("--disk-cache-path", default="/etc/kubernetes/cache/", type=click.Path())
@click.option("--cache-agents", default="", help="Extra components to cache; '*' caches all.")
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, path_type=pathlib.Path),
    default=None,
    help="Kubeconfig with the hub's identity (client certificate or token) and cluster CA.",
)
@click.option(
    "--allow-insecure-skip-tls-verify",
    is_flag=True,
    default=False,
    help="Accept a kubeconfig that sets insecure-skip-tls-verify (any server is trusted; "
    "logged as a warning). Without it such a kubeconfig is refused.",
)
@click.option(
    "--allow-system-trust-store",
    is_flag=True,
    default=False,
    help="Accept a kubeconfig without a certificate-authority (or none over https), trusting "
    "the system's CAs (logged as a warning). Without it only the kubeconfig's CA is trusted.",
)
@click.option("--shutdown-grace-seconds", default=10.0, type=click.FloatRange(min=0))
@click.option(
    "--working-mode",
    default="edge",
    type=click.Choice([m.value for m in settings.WorkingMode]),
    help="edge: cache and every filter; cloud: no cache, and discardcloudservice, "
    "forwardkubesvctraffic, serviceenvupdater off.",
)
@click.option(
    "--enable-resource-filter/--no-enable-resource-filter",
    default=True,
    help="Rewrite what kubelet, kube-proxy, coredns... read (README: Response filters).",
)
@click.option(
    "--disabled-resource-filters",
    default="",
    help="Filters to turn off, comma separated ('*': all): " + ", ".join(registry.NAMES) + ".",
)
@click.option(
    "--enable-node-pool/--no-enable-node-pool",
    default=True,
    help="servicetopology pool topology from NodePools (apps.openyurt.io/v1beta2).",
)
@click.option(
    "--enable-pool-service-topology/--no-enable-pool-service-topology",
    default=False,
    help="servicetopology pool topology from NodeBuckets (wins over --enable-node-pool).",
)
@click.option(
    "--enable-discovery/--no-enable-discovery",
    default=False,
    help="Also run the device-discovery agent in this process; its API traffic goes through "
    "this hub (and so keeps working from the cache while the cloud is away).",
)
@click.option(
    "--discovery-handlers-directory",
    type=click.Path(file_okay=False, path_type=pathlib.Path),
    default=pathlib.Path("/var/lib/akri"),
    envvar=["DISCOVERY_HANDLERS_DIRECTORY", "EDGEHUB_DISCOVERY_HANDLERS_DIRECTORY"],
    help="With --enable-discovery: where agent-registration.sock is served.",
)
@click.option(
    "--embedded-handlers",
    default="",
    help="With --enable-discovery: handlers run in-process (debugEcho,udev,opcua,onvif).",
)
@click.option(
    "--device-plugins-dir",
    type=click.Path(file_okay=False, path_type=pathlib.Path),
    default=pathlib.Path("/var/lib/kubelet/device-plugins"),
    help="With --enable-discovery: kubelet's device-plugin directory.",
)
@click.option(
    "--pod-resources-socket",
    type=click.Path(dir_okay=False, path_type=pathlib.Path),
    default=pathlib.Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
    help="With --enable-discovery: kubelet's pod-resources socket (slot reclaimer).",
)
@click.option(
    "--cdi-dir",
    type=click.Path(file_okay=False, path_type=pathlib.Path),
    default=pathlib.Path("/var/run/cdi"),
    help="With --enable-discovery: where CDI spec files are written.",
)
@click.option(
    "--handler-networks",
    default="",
    help="With --enable-discovery: comma-separated CIDRs where discovery handlers may serve "
    "NETWORK endpoints. Empty: only sockets in the handlers directory.",
)
@click.option(
    "--writable-mount-handlers",
    default="",
    help="With --enable-discovery: handler names whose device mounts may be writable.",
)
def command(**opts: object) -> None:
    """Run the hub: an offline-capable proxy in front of kube-apiserver."""
    try:
        hub_settings = build_settings(opts)
        companions: list[lifecycle.Companion] = []
        if opts["enable_discovery"]:
            companions.append(_discovery_companion(opts, hub_settings.node_name))
        # Fail fast, with a clear message (also for a trust the flags do not allow).
        policy = server.trust_policy(hub_settings.upstream)
        if hub_settings.upstream.kubeconfig is not None:
            kubeconfigs.load(hub_settings.upstream.kubeconfig, policy)
        else:
            kubeconfigs.anonymous(hub_settings.upstream.servers, policy)
    except (settings.ConfigError, kubeconfigs.KubeconfigError, click.BadParameter) as e:
        click.echo(f"edgehub hub: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e
    try:
        asyncio.run(lifecycle.run(hub_settings, companions))
    except OSError as e:  # port in use, address not available
        click.echo(f"edgehub hub: cannot start: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e
    except BaseException as e:
        failure = _startup_failure(e) if opts["enable_discovery"] else None
        if failure is None:
            raise
        click.echo(f"edgehub hub: cannot start discovery: {failure}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e


def _startup_failure(error: BaseException) -> BaseException | None:
    """The discovery agent's StartupError in ``error`` (the hub's TaskGroup may wrap it)."""
    from discovery.agent import running as agent_running

    if isinstance(error, agent_running.StartupError):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _startup_failure(inner)
            if found is not None:
                return found
    return None


def _discovery_companion(opts: dict[str, object], node_name: str) -> lifecycle.Companion:
    """The discovery agent, run beside the hub and talking to the cloud through it."""
    # Imported here: a hub without discovery does not pay for grpc and the handlers.
    from discovery.agent import running as agent_running
    from discovery.agent import settings as agent_settings

    handlers = tuple(h.strip() for h in str(opts["embedded_handlers"]).split(",") if h.strip())
    unknown = sorted(set(handlers) - set(agent_settings.EMBEDDED_HANDLERS))
    if unknown:
        raise click.BadParameter(f"unknown embedded handlers: {', '.join(unknown)}")
    try:
        networks = agent_settings.parse_handler_networks(str(opts["handler_networks"]))
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--handler-networks") from e
    try:
        writable = agent_settings.parse_handler_names(str(opts["writable_mount_handlers"]))
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--writable-mount-handlers") from e

    def companion(node: assembly.Node) -> contextlib.AbstractAsyncContextManager[object]:
        def path(key: str) -> pathlib.Path:
            value = opts[key]
            assert isinstance(value, pathlib.Path)
            return value

        return agent_running.running(
            agent_settings.AgentSettings(
                node_name=node_name,
                kube=agent_settings.KubeSettings(
                    url=node.hub.proxy_url, user_agent=f"{AGENT_COMPONENT}/{_version()}"
                ),
                discovery_handlers_dir=path("discovery_handlers_directory"),
                embedded_handlers=handlers,
                handler_environ=dict(os.environ),
                device_plugins_dir=path("device_plugins_dir"),
                pod_resources_socket=path("pod_resources_socket"),
                cdi_dir=path("cdi_dir"),
                handler_networks=networks,
                writable_mount_handlers=writable,
                metrics_port=None,
            )
        )

    return companion


def _version() -> str:
    try:
        return importlib.metadata.version("edgehub")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


def build_settings(opts: dict[str, object]) -> settings.HubSettings:
    def s(key: str) -> str:
        return str(opts[key])

    def i(key: str) -> int:
        value = opts[key]
        assert isinstance(value, int)
        return value

    def f(key: str) -> float:
        value = opts[key]
        assert isinstance(value, float)
        return value

    kubeconfig = opts["kubeconfig"]
    assert kubeconfig is None or isinstance(kubeconfig, pathlib.Path)
    grace = opts["shutdown_grace_seconds"]
    assert isinstance(grace, float)
    try:
        disabled = registry.parse_names(s("disabled_resource_filters"))
    except registry.UnknownFilter as e:
        raise click.BadParameter(str(e)) from e
    return settings.HubSettings(
        node_name=s("node_name"),
        nodepool_name=s("nodepool_name"),
        upstream=settings.UpstreamSettings(
            servers=settings.parse_server_addrs(s("server_addr")),
            lb_mode=settings.LbMode(s("lb_mode")),
            kubeconfig=kubeconfig,
            allow_insecure_tls=bool(opts["allow_insecure_skip_tls_verify"]),
            allow_system_trust_store=bool(opts["allow_system_trust_store"]),
            header_deadline=f("upstream_header_deadline_seconds"),
            idle_timeout=f("upstream_idle_timeout_seconds"),
        ),
        listen=settings.ListenSettings(
            bind_address=s("bind_address"),
            serve_port=i("serve_port"),
            bind_proxy_address=s("bind_proxy_address"),
            proxy_port=i("proxy_port"),
            proxy_secure_port=i("proxy_secure_port"),
            accept_hosts=tuple(
                h.strip().lower() for h in s("proxy_accept_hosts").split(",") if h.strip()
            ),
        ),
        heartbeat=settings.HeartbeatSettings(
            interval=float(i("heartbeat_interval_seconds")),
            timeout=float(i("heartbeat_timeout_seconds")),
            healthy_threshold=i("heartbeat_healthy_threshold"),
            failed_retry=i("heartbeat_failed_retry"),
            kubelet_health_grace_period=_duration(s("kubelet_health_grace_period")),
        ),
        proxy=settings.ProxySettings(
            min_request_timeout=_duration(s("min_request_timeout")),
            shutdown_grace=grace,
            read_header_timeout=f("proxy_read_header_timeout_seconds"),
            max_connections=i("proxy_max_connections"),
            max_in_flight=i("max_requests_in_flight"),
            max_long_running=i("max_long_running_requests"),
            max_in_flight_per_client=i("max_requests_in_flight_per_client"),
            max_long_running_per_client=i("max_long_running_requests_per_client"),
        ),
        cache=settings.CacheSettings(
            disk_cache_path=pathlib.Path(s("disk_cache_path")),
            cache_agents=settings.parse_cache_agents(s("cache_agents"))
            # The embedded agent must keep working offline: its answers are cached.
            + ((AGENT_COMPONENT,) if opts.get("enable_discovery") else ()),
        ),
        working_mode=settings.WorkingMode(s("working_mode")),
        filters=settings.FilterSettings(
            enabled=bool(opts["enable_resource_filter"]),
            disabled=disabled,
            enable_node_pool=bool(opts["enable_node_pool"]),
            enable_pool_service_topology=bool(opts["enable_pool_service_topology"]),
        ),
    )
