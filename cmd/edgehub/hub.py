"""``edgehub hub``: the node-local apiserver proxy (YurtHub's flags and defaults).

Thin: flags -> ``yurthub.settings.HubSettings`` (``hubsettings``) -> ``yurthub.lifecycle.run``.
Every flag also reads ``EDGEHUB_<FLAG>`` (``cli.COMMAND_CONTEXT``) and accepts YurtHub's Go
pflag spelling (``pflags``: ``--enable-dummy-if=false``, ``--v=2``, YurtHub flags not built
here are dropped with one warning naming them). Bad flags or an unreadable kubeconfig exit with
``cli.EXIT_STARTUP_FAILURE`` and one clear line.
"""

from __future__ import annotations

import logging
import pathlib
import sys

import click

from edgehub import cli, helpgroups, hubdiscovery, hubsettings, pflags
from yurthub import dummyif, kubeconfigs, lifecycle, server, settings
from yurthub.certs import jws, modes
from yurthub.filters import registry

GIL_SWITCH_INTERVAL = 0.0005
"""Seconds a thread holding the GIL may run while the event loop waits for it."""

log = logging.getLogger("edgehub.hub")


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


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"edgehub hub {_version()} (YurtHub-compatible)")
        ctx.exit(0)


QUIET_LIBRARIES = ("h2", "hpack")
"""Loggers held at INFO whatever ``--v`` says."""


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
    "--upstream-http2-watches/--no-upstream-http2-watches",
    default=True,
    help="Watches share HTTP/2 connections to an apiserver that speaks it (else one each).",
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
    help="Lease updates tried per health check before an apiserver in use is given up (a "
    "late answer, a reset, a conflict or a 5xx is tried again; a refusal is not).",
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
    "--outage-save-interval-seconds",
    default=30.0,
    type=click.FloatRange(min=0.1, max=3600),
    help="During an outage the record of what the hub did is written at most this often while "
    "it changes (and at once when the outage begins or ends, and at shutdown): a kill -9 or a "
    "power cut loses at most this many seconds of its counts; each write wears flash.",
)
@click.option(
    "--outage-flap-window-seconds",
    default=30.0,
    type=click.FloatRange(min=0, max=3600),
    help="The link must stay up this long after an outage before it is over: dropping again "
    "within it goes on with the same outage (one record, one Event on the Node, its flaps "
    "counted), and the outage's Event is posted once it has passed (0: every drop is a new "
    "outage, its Event posted at the heal).",
)
@click.option(
    "--relist-spread-seconds",
    default=10.0,
    type=click.FloatRange(min=0, max=600),
    help="The hub's own lists after a 410 (a compaction, an apiserver restart) start at a random "
    "moment within this many seconds, so a fleet's hubs do not relist in the same second.",
)
@click.option(
    "--leader-relist-spread-seconds",
    default=2.0,
    type=click.FloatRange(min=0, max=600),
    help="The same for a pool leader hub's lists of the pool-scoped resources (Services, "
    "EndpointSlices): one or a few leaders a pool relist, not every hub, and the pool's "
    "followers wait for them.",
)
@click.option(
    "--heal-spread-seconds",
    default=5.0,
    type=click.FloatRange(min=0, max=600),
    help="After the cloud is back, each client watch the hub held open offline ends at a random "
    "moment within this many seconds (the client then watches the apiserver again), so a "
    "fleet's clients do not come back in the same second; kubelet's watch of its own Node and "
    "the hub's own pool watches end at once.",
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
    help="On SIGTERM, seconds the requests being answered get to finish (open watches end "
    "at once and are not waited for).",
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
    # The HTTP/2 library logs every frame and header field at DEBUG (headers carry tokens):
    # never into the hub's log, whatever the verbosity.
    for chatty in QUIET_LIBRARIES:
        logging.getLogger(chatty).setLevel(logging.INFO)
    try:
        hub_settings = hubsettings.build_settings(opts)
        companions: list[lifecycle.Companion] = []
        if opts["enable_discovery"]:
            companions.append(
                hubdiscovery.companion(
                    opts, hub_settings, user_agent=f"{hubsettings.AGENT_COMPONENT}/{_version()}"
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
