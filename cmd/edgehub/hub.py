"""``edgehub hub``: the node-local apiserver proxy (YurtHub's flags and defaults).

Thin: flags -> ``yurthub.settings.HubSettings`` -> ``yurthub.lifecycle.run``. Every flag also
reads ``EDGEHUB_<FLAG>`` (``cli.COMMAND_CONTEXT``) and accepts YurtHub's Go pflag spelling
(``pflags``: ``--enable-dummy-if=false``, ``--v=2``, YurtHub flags not built here are dropped
with one warning naming them). Bad flags or an unreadable kubeconfig exit with
``cli.EXIT_STARTUP_FAILURE`` and one clear line.
"""

from __future__ import annotations

import logging
import pathlib
import re
import socket
import sys
from typing import Any

import click

from edgehub import cli, helpgroups, hubdiscovery, pflags
from yurthub import dummyif, kubeconfigs, lifecycle, pacing, requestinfo, server, settings
from yurthub.cache import keysealing
from yurthub.certs import jws, layout, modes
from yurthub.filters import registry
from yurthub.pool import gvrs

GIL_SWITCH_INTERVAL = 0.0005
"""Seconds a thread holding the GIL may run while the event loop waits for it."""

log = logging.getLogger("edgehub.hub")

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


class PflagCommand(helpgroups.Command):
    """A click command that first translates YurtHub's pflag spellings (``pflags``); its options
    are grouped by ``helpgroups.TOPICS["hub"]``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        bools, values, plain = [], [], []
        for param in self.params:
            if not isinstance(param, click.Option):
                continue
            names = [n[2:] for n in param.opts if n.startswith("--")]
            if param.is_flag and param.secondary_opts:
                bools.extend(names)
            elif param.is_flag:
                plain.extend(names)
            else:
                values.extend(names)
        plain.extend(n[2:] for n in ctx.help_option_names if n.startswith("--"))
        try:
            args, dropped = pflags.translate(
                args, bool_flags=bools, value_flags=values, plain_flags=plain
            )
        except pflags.PflagError as e:
            raise click.UsageError(str(e), ctx) from e
        if dropped:
            log.warning(
                "ignoring YurtHub flags this hub does not implement: %s",
                ", ".join(f"--{n}" for n in dropped),
            )
        return super().parse_args(ctx, args)


def _key_source(opts: dict[str, Any]) -> keysealing.Source:
    try:
        return keysealing.parse_source(
            str(opts.get("cache_key_source") or "auto"), str(opts.get("cache_key_file") or "")
        )
    except keysealing.KeySourceError as e:
        raise click.BadParameter(str(e), param_hint="--cache-key-source") from e


def _namespace(value: str) -> str:
    """A namespace name (a DNS label): it goes into the URL the hub follows yurt-hub-cfg at."""
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", value):
        raise click.BadParameter(f"{value!r} is not a namespace name", param_hint="--namespace")
    return value


def _master_service_address(value: str) -> tuple[str, int]:
    """Hidden ``--master-service-address HOST[:PORT]`` (``[v6]:PORT``): where pods reach the
    hub's secure port when it is not the dummy IP or ``--bind-proxy-address`` (tests, a
    forwarder). ("", 0): unset. Port 0 or none: ``--proxy-secure-port``."""
    if not value:
        return "", 0
    host, port = value, "0"
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise click.BadParameter(
                f"{value!r} is not HOST[:PORT]", param_hint="--master-service-address"
            )
        port = rest[1:] or "0"
    elif value.count(":") == 1:
        host, port = value.split(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise click.BadParameter(
            f"{value!r} is not HOST[:PORT]", param_hint="--master-service-address"
        )
    return host, int(port)


def _comma_list(values: tuple[str, ...]) -> tuple[str, ...]:
    """A pflag StringSlice: repeated and/or comma separated."""
    out: list[str] = []
    for value in values:
        out.extend(v.strip() for v in value.split(",") if v.strip())
    return tuple(dict.fromkeys(out))


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"edgehub hub {_version()} (YurtHub-compatible)")
        ctx.exit(0)


@click.command(cls=PflagCommand, topics="hub", context_settings=cli.COMMAND_CONTEXT)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Print the version and exit (YurtHub's --version).",
)
@click.option("--server-addr", required=True, help="Apiserver URLs, comma separated (https).")
@click.option("--node-name", required=True, help="This node's name (its lease is renewed).")
@click.option("--nodepool-name", default="", help="This node's pool.")
@click.option(
    "--namespace",
    default="kube-system",
    help="Where the hub reads ConfigMaps yurt-hub-cfg and leader-hub-<pool> "
    "(YurtHub's --namespace).",
)
@click.option("--bind-address", default="127.0.0.1", help="Hub server host.")
@click.option("--serve-port", default=10267, type=click.IntRange(0, 65535), help="Hub server port.")
@click.option(
    "--metrics-bind-address",
    default="",
    help="Also serve /metrics alone (no probes, status, token or OTA API) on this host, for a "
    "scraper off the node (0.0.0.0: every address); empty: none.",
)
@click.option(
    "--metrics-port",
    default=10266,
    type=click.IntRange(0, 65535),
    help="Port of the --metrics-bind-address listener.",
)
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
    "--proxy-idle-timeout-seconds",
    default=60.0,
    type=click.FloatRange(min=0.1),
    help="An idle proxy connection (between two requests) is closed after this (Go's IdleTimeout).",
)
@click.option(
    "--proxy-max-connections",
    default=2048,
    type=click.IntRange(min=1),
    help="Open proxy connections; past it a new one closes the longest idle one, else it is "
    "answered 503 and closed.",
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
@click.option(
    "--lb-mode",
    default="rr",
    type=click.Choice(["rr", "priority"]),
    help="Healthy apiservers in turn (rr), or the first healthy one in --server-addr order.",
)
@click.option(
    "--heartbeat-interval-seconds",
    default=10,
    type=click.IntRange(min=1),
    help="Seconds between health checks: the node's Lease renewed through each apiserver.",
)
@click.option(
    "--heartbeat-timeout-seconds",
    default=2,
    type=click.IntRange(min=1),
    help="Seconds each call of a health check may take.",
)
@click.option(
    "--heartbeat-healthy-threshold",
    default=2,
    type=click.IntRange(min=1),
    help="Successful checks in a row that make an unhealthy apiserver healthy again.",
)
@click.option(
    "--heartbeat-failed-retry",
    default=3,
    type=click.IntRange(min=1),
    help="Lease updates tried per health check (a conflict retries).",
)
@click.option(
    "--kubelet-health-grace-period",
    default="40s",
    help="Go duration: kubelet's silence after which health checks fail, so the node goes "
    "NotReady in the cloud when kubelet dies.",
)
@click.option(
    "--min-request-timeout",
    default="1800s",
    help="Go duration: how long an offline watch is held open (randomised up to 2x) unless "
    "it asks for its own timeoutSeconds.",
)
@click.option(
    "--disk-cache-path",
    default="/etc/kubernetes/cache/",
    type=click.Path(),
    help="The disk cache's directory (YurtHub's).",
)
@click.option("--cache-agents", default="", help="Extra components to cache; '*' caches all.")
@click.option(
    "--static-pod-path",
    default="/etc/kubernetes/manifests",
    type=click.Path(file_okay=False),
    help="kubelet's staticPodPath: where an OTA upgrade of a YurtStaticSet's static pod "
    "installs the new manifest (the old one kept as .<name>.yaml.bak).",
)
@click.option(
    "--offline-event-qps",
    default=5.0,
    type=click.FloatRange(min=0),
    help="Events recorded offline posted per second after the cloud is back (0: unpaced).",
)
@click.option(
    "--relist-spread-seconds",
    default=10.0,
    type=click.FloatRange(min=0, max=600),
    help="The hub's own lists after a 410 (a compaction, an apiserver restart) start at a random "
    "moment within this many seconds, so a fleet's hubs do not relist in the same second.",
)
@click.option(
    "--max-retry-after-seconds",
    default=60.0,
    type=click.FloatRange(min=1, max=3600),
    help="The most seconds the hub's own loops honour an apiserver's Retry-After (429, API "
    "Priority and Fairness) for.",
)
@click.option(
    "--cache-key-source",
    default="auto",
    help="What seals the node's data key (it encrypts the disk cache and the hub's private "
    "keys): auto (the TPM at /dev/tpmrm0 or $TPM2TOOLS_TCTI, else a systemd credential "
    "edgehub-cache-key, else --cache-key-file, else none), tpm[:<tcti>], keyfile:<path>, "
    "systemd-creds:<name> or none (plaintext, with a warning).",
)
@click.option(
    "--cache-key-file",
    default="",
    help="A 32-byte key file (mode 0600, on another medium) that seals the cache's data key.",
)
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
@click.option(
    "--shutdown-grace-seconds",
    default=10.0,
    type=click.FloatRange(min=0),
    help="On SIGTERM, seconds in-flight requests get to finish (open watches end at once).",
)
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
    help="Rewrite what kubelet, kube-proxy, coredns... read (docs/filters.md).",
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
    "--root-dir",
    type=click.Path(file_okay=False, path_type=pathlib.Path),
    default=pathlib.Path("/var/lib/yurthub"),
    help="The hub's identity: yurthub.conf, bootstrap-hub.conf, pki/ (YurtHub's layout).",
)
@click.option(
    "--migrate-from-yurthub",
    type=click.Choice([m.value for m in settings.MigrationMode]),
    default=settings.MigrationMode.AUTO.value,
    help="auto: on the first start import YurtHub's cache from --yurthub-cache-dir, copy its "
    "certificates from --yurthub-root-dir when --root-dir has none, and wait for the listen "
    "ports to be free; YurtHub's files are only read. off: none of it.",
)
@click.option(
    "--yurthub-cache-dir",
    type=click.Path(file_okay=False, path_type=pathlib.Path),
    default=pathlib.Path("/etc/kubernetes/cache"),
    help="YurtHub's --disk-cache-path, imported once (only read).",
)
@click.option(
    "--yurthub-root-dir",
    type=click.Path(file_okay=False, path_type=pathlib.Path),
    default=pathlib.Path("/var/lib/yurthub"),
    help="YurtHub's --root-dir, whose certificates are copied when --root-dir has none.",
)
@click.option(
    "--port-wait-timeout",
    default="60s",
    help="Go duration: how long to wait for the listen ports to be free (YurtHub stopping) "
    "before exiting 3.",
)
@click.option(
    "--bootstrap-mode",
    type=click.Choice(["token", modes.Source.KUBELET.value]),
    default="token",
    help="token: own certificates from --join-token/--bootstrap-file; kubeletcertificate: "
    "reuse kubelet's kubeconfig and rotating client certificate.",
)
@click.option("--join-token", default="", help="Bootstrap token <id>.<secret> (kubeadm token).")
@click.option(
    "--join-token-file",
    type=click.Path(dir_okay=False, path_type=pathlib.Path),
    default=None,
    help="File holding the bootstrap token, read when one is needed (edgehub's; keeps the "
    "token out of the Pod spec). May appear after the hub starts.",
)
@click.option(
    "--bootstrap-file",
    type=click.Path(dir_okay=False, path_type=pathlib.Path),
    default=None,
    help="Bootstrap kubeconfig for the first CSR (preferred over --join-token).",
)
@click.option(
    "--discovery-token-ca-cert-hash",
    multiple=True,
    help="sha256:<hex> pin of the cluster CA's public key (repeatable, comma separated).",
)
@click.option(
    "--discovery-token-unsafe-skip-ca-verification/--no-discovery-token-unsafe-skip-ca-verification",
    default=False,
    help="Trust the CA in cluster-info on the token's signature alone (no pin).",
)
@click.option(
    "--hub-cert-organizations",
    multiple=True,
    help="Extra O= of the hub's client certificate (repeatable, comma separated).",
)
@click.option(
    "--pool-scope-resources",
    default="/v1/services,discovery.k8s.io/v1/endpointslices",
    help="group/version/resource list served from the pool multiplexer (one upstream "
    "list/watch per resource, shared by every client); '' turns it off. ConfigMap "
    "leader-hub-<pool> (pool-scoped-metadata) replaces it live.",
)
@click.option(
    "--multiplexer-port",
    default=10269,
    type=click.IntRange(0, 65535),
    help="HTTPS port on --node-ip where a leader hub serves its pool (and where followers "
    "reach their leaders).",
)
@click.option(
    "--node-ip",
    default="",
    help="This node's IP, a SAN of the serving certificate and where a leader hub's "
    "multiplexer port listens (default: the address this node reaches the first --server-addr "
    "from).",
)
@click.option(
    "--kubelet-kubeconfig",
    type=click.Path(dir_okay=False, path_type=pathlib.Path),
    default=pathlib.Path("/etc/kubernetes/kubelet.conf"),
    help="kubeletcertificate mode: kubelet's kubeconfig.",
)
@click.option(
    "--enable-dummy-if/--no-enable-dummy-if",
    default=False,
    help="Create a dummy interface holding --dummy-if-ip and serve the proxies there too "
    "(needs NET_ADMIN).",
)
@click.option("--dummy-if-ip", default="169.254.2.1", help="The dummy interface's address.")
@click.option("--dummy-if-name", default="hub-dummy0", help="The dummy interface's name.")
@click.option(
    "--api-audiences",
    default="",
    help="Audiences a ServiceAccount token needs to read its cache partition offline (comma "
    "separated); default: the issuer.",
)
@click.option("--v", "verbosity", type=int, default=None, help="klog verbosity: 4+ logs debug.")
@click.option("--cert-expiration-seconds", type=click.IntRange(min=0), default=0, hidden=True)
@click.option("--cert-renew-before", type=click.FloatRange(min=0), default=0.0, hidden=True)
@click.option("--csr-wait-timeout", type=click.FloatRange(min=1), default=900.0, hidden=True)
@click.option(
    "--multiplexer-max-memory-mib",
    default=256,
    type=click.IntRange(min=1),
    help="Memory budget of one multiplexed resource (objects and history); over it the "
    "resource is proxied as usual.",
)
@click.option("--multiplexer-insecure", is_flag=True, default=False, hidden=True)
@click.option("--master-service-address", default="", hidden=True)
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
@click.option(
    "--protected-mount-paths",
    default="",
    help="With --enable-discovery: comma-separated host paths no discovered device may mount, "
    "besides the built-in ones and the hub's --root-dir and --disk-cache-path.",
)
def command(**opts: object) -> None:
    """Run the hub: an offline-capable proxy in front of kube-apiserver."""
    verbosity = opts.get("verbosity")
    if isinstance(verbosity, int):
        logging.getLogger().setLevel(logging.DEBUG if verbosity >= 4 else logging.INFO)
    try:
        hub_settings = build_settings(opts)
        companions: list[lifecycle.Companion] = []
        if opts["enable_discovery"]:
            companions.append(
                hubdiscovery.companion(
                    opts, hub_settings, user_agent=f"{AGENT_COMPONENT}/{_version()}"
                )
            )
        # Fail fast, with a clear message (also for a trust the flags do not allow) on a
        # kubeconfig the hub must read at start.
        policy = server.trust_policy(hub_settings.upstream)
        certs = hub_settings.certs
        if hub_settings.upstream.kubeconfig is not None:
            kubeconfigs.load(hub_settings.upstream.kubeconfig, policy)
        elif not certs.source.manages_certificates:
            kubeconfigs.anonymous(hub_settings.upstream.servers, policy)
        if certs.source is modes.Source.KUBELET:
            kubeconfigs.load(certs.kubelet_kubeconfig, policy)
        if certs.source is modes.Source.BOOTSTRAP_FILE and certs.bootstrap_file is not None:
            kubeconfigs.load(certs.bootstrap_file, policy)
    except (
        settings.ConfigError,
        kubeconfigs.KubeconfigError,
        click.BadParameter,
        modes.ModeError,
        jws.DiscoveryError,
    ) as e:
        click.echo(f"edgehub hub: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e
    # The cache writer's thread converts protobuf (Python, ~0.3 ms a pod) while the event loop
    # proxies: with CPython's 5 ms GIL switch interval every answer and watch event waited for
    # the converter up to 5 ms at each socket call (bench/conversion_stall.py, 10,000 pods:
    # loopback round trip p99 10.5 -> 1.5 ms at 0.5 ms, the conversion 1.0-1.14x as long).
    previous = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL)
    try:
        cli.run(lifecycle.run(hub_settings, companions))
    except (OSError, dummyif.DummyIfError) as e:  # port in use, no NET_ADMIN for the dummy
        click.echo(f"edgehub hub: cannot start: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e
    except BaseException as e:
        failure = hubdiscovery.startup_failure(e) if opts["enable_discovery"] else None
        if failure is None:
            raise
        click.echo(f"edgehub hub: cannot start discovery: {failure}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e
    finally:
        sys.setswitchinterval(previous)  # the process's, when the command runs inside another


def _version() -> str:
    import importlib.metadata  # here: the hub itself never needs it (0.8 MB)

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
    certs = _cert_settings(opts, kubeconfig)
    root_given = _given("root_dir")
    master_host, master_port = _master_service_address(
        str(opts.get("master_service_address") or "")
    )
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
            metrics_bind_address=s("metrics_bind_address").strip(),
            metrics_port=i("metrics_port"),
            bind_proxy_address=s("bind_proxy_address"),
            proxy_port=i("proxy_port"),
            proxy_secure_port=i("proxy_secure_port"),
            accept_hosts=tuple(
                h.strip().lower() for h in s("proxy_accept_hosts").split(",") if h.strip()
            ),
            enable_dummy_if=bool(opts.get("enable_dummy_if")),
            dummy_if_ip=s("dummy_if_ip") if "dummy_if_ip" in opts else "169.254.2.1",
            dummy_if_name=s("dummy_if_name") if "dummy_if_name" in opts else "hub-dummy0",
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
            idle_timeout=f("proxy_idle_timeout_seconds"),
            max_connections=i("proxy_max_connections"),
            max_in_flight=i("max_requests_in_flight"),
            max_long_running=i("max_long_running_requests"),
            max_in_flight_per_client=i("max_requests_in_flight_per_client"),
            max_long_running_per_client=i("max_long_running_requests_per_client"),
        ),
        cache=settings.CacheSettings(
            disk_cache_path=pathlib.Path(s("disk_cache_path")),
            key_source=_key_source(opts),
            config_namespace=_namespace(s("namespace")),
            cache_agents=settings.parse_cache_agents(s("cache_agents"))
            # The embedded agent must keep working offline: its answers are cached.
            + ((AGENT_COMPONENT,) if opts.get("enable_discovery") else ()),
            offline_event_qps=f("offline_event_qps"),
        ),
        working_mode=settings.WorkingMode(s("working_mode")),
        static_pod_path=pathlib.Path(
            str(opts.get("static_pod_path") or "/etc/kubernetes/manifests")
        ),
        filters=settings.FilterSettings(
            enabled=bool(opts["enable_resource_filter"]),
            disabled=disabled,
            enable_node_pool=bool(opts["enable_node_pool"]),
            enable_pool_service_topology=bool(opts["enable_pool_service_topology"]),
            hub_host=master_host,
            hub_port=master_port,
        ),
        pool=settings.PoolSettings(
            resources=_pool_scope(s("pool_scope_resources")),
            multiplexer_port=i("multiplexer_port"),
            node_ip=certs.node_ip,
            leader_tls=not opts["multiplexer_insecure"],
            max_bytes=i("multiplexer_max_memory_mib") << 20,
        ),
        certs=certs,
        pace=pacing.Settings(
            relist_spread=f("relist_spread_seconds"),
            max_retry_after=f("max_retry_after_seconds"),
        ),
        migration=settings.MigrationSettings(
            mode=settings.MigrationMode(s("migrate_from_yurthub")),
            yurthub_cache_dir=pathlib.Path(s("yurthub_cache_dir")),
            yurthub_root_dir=pathlib.Path(s("yurthub_root_dir")),
            port_wait_timeout=_duration(s("port_wait_timeout")),
        ),
        authn=settings.AuthnSettings(
            api_audiences=_comma_list((str(opts.get("api_audiences") or ""),)),
            # Kept under --root-dir when the hub uses it (or it was asked for explicitly):
            # a --kubeconfig test hub must not write to /var/lib/yurthub.
            issuer_keys_file=layout.Layout(certs.root_dir).issuer_keys
            if certs.source.manages_certificates or root_given
            else None,
        ),
    )


def _given(name: str) -> bool:
    """Whether a flag was given on the command line or in the environment."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return False
    source = ctx.get_parameter_source(name)
    return source in (
        click.core.ParameterSource.COMMANDLINE,
        click.core.ParameterSource.ENVIRONMENT,
    )


def _local_address(server_addr: str) -> str:
    """The source address towards the first apiserver (a UDP "connect" sends nothing): the
    node's IP on the network the cloud is reached through, as YurtHub's default. "" when it
    cannot be told (no route, a name that does not resolve)."""
    try:
        first = settings.parse_server_addrs(server_addr)[0]
    except settings.ConfigError:
        return ""
    host, _, port = first.split("://", 1)[1].rpartition(":")
    host = host.strip("[]")
    try:
        family, _, _, _, address = socket.getaddrinfo(host, int(port), type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            return str(probe.getsockname()[0])
    except OSError:
        return ""


def _check_token_file(path: pathlib.Path) -> None:
    """A token file that is there must hold a token (a clear error now); one that is not
    there yet is read again at each bootstrap (the hub says so in its status)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    except (OSError, UnicodeDecodeError) as e:
        raise settings.ConfigError(f"--join-token-file {path}: {e}") from e
    try:
        jws.parse_token(text.strip())
    except jws.DiscoveryError as e:
        raise settings.ConfigError(f"--join-token-file {path}: {e}") from e


def _cert_settings(opts: dict[str, Any], kubeconfig: pathlib.Path | None) -> settings.CertSettings:
    root = opts.get("root_dir") or pathlib.Path("/var/lib/yurthub")
    assert isinstance(root, pathlib.Path)
    token = str(opts.get("join_token") or "")
    token_file = opts.get("join_token_file")
    assert token_file is None or isinstance(token_file, pathlib.Path)
    if token and token_file is not None:
        raise settings.ConfigError(
            "--join-token and --join-token-file both give the join token: use one"
        )
    if token:
        jws.parse_token(token)  # a clear error now, not at the first bootstrap
    if token_file is not None:
        _check_token_file(token_file)
    pins = jws.parse_pins(_comma_list(tuple(opts.get("discovery_token_ca_cert_hash") or ())))
    skip = bool(opts.get("discovery_token_unsafe_skip_ca_verification"))
    bootstrap_file = opts.get("bootstrap_file")
    assert bootstrap_file is None or isinstance(bootstrap_file, pathlib.Path)
    kubelet_mode = opts.get("bootstrap_mode") == modes.Source.KUBELET.value
    source = modes.resolve(
        kubeconfig=kubeconfig is not None,
        kubelet_mode=kubelet_mode,
        bootstrap_file=bootstrap_file is not None,
        join_token=bool(token) or token_file is not None,
        hub_kubeconfig_exists=layout.Layout(root).hub_kubeconfig.exists(),
    )
    if source is modes.Source.JOIN_TOKEN and not pins and not skip:
        raise settings.ConfigError(
            "--join-token needs --discovery-token-ca-cert-hash sha256:<hex> (the cluster CA's "
            "public key hash) or --discovery-token-unsafe-skip-ca-verification"
        )
    kubelet_kubeconfig = opts.get("kubelet_kubeconfig") or pathlib.Path(
        "/etc/kubernetes/kubelet.conf"
    )
    assert isinstance(kubelet_kubeconfig, pathlib.Path)
    return settings.CertSettings(
        source=source,
        root_dir=root,
        join_token=token,
        join_token_file=token_file,
        bootstrap_file=bootstrap_file,
        ca_cert_hashes=pins,
        unsafe_skip_ca_verification=skip,
        organizations=_comma_list(tuple(opts.get("hub_cert_organizations") or ())),
        node_ip=str(opts.get("node_ip") or "") or _local_address(str(opts.get("server_addr", ""))),
        kubelet_kubeconfig=kubelet_kubeconfig,
        expiration_seconds=int(opts.get("cert_expiration_seconds") or 0),
        renew_before=float(opts.get("cert_renew_before") or 0.0),
        csr_wait_timeout=float(opts.get("csr_wait_timeout") or 900.0),
    )


def _pool_scope(text: str) -> tuple[gvrs.Gvr, ...]:
    try:
        return gvrs.parse_list(text)
    except gvrs.GvrError as e:
        raise click.BadParameter(str(e), param_hint="--pool-scope-resources") from e
