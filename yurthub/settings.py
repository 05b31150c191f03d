"""The hub's one settings tree: frozen dataclasses, built once by the CLI, passed explicitly.

Nothing here reads the environment or files: ``cmd/edgehub/hub.py`` maps flags (and their
``EDGEHUB_*`` variables) onto this tree and calls ``parse_server_addrs`` for the spec strings,
which fail fast with one ``ConfigError``. Tests build the tree directly.

Defaults are YurtHub's (reference ``yurthub-behaviour.md`` §1.2) unless a docstring says why not.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import pathlib
import urllib.parse

from yurthub import pacing
from yurthub.cache import sealing
from yurthub.certs import modes
from yurthub.filters import registry
from yurthub.pool import gvrs


class ConfigError(ValueError):
    """A setting is invalid; the CLI prints it and exits with the startup-failure code."""


EXEMPT_MARGIN = 16
"""Upstream connections kept beyond the proxy's limits for requests never refused (kubelet's
Node and lease, the hub's own)."""


class LbMode(enum.StrEnum):
    """``--lb-mode``: how a healthy backend is picked for each request."""

    RR = "rr"
    """Round robin over healthy backends."""
    PRIORITY = "priority"
    """Always the first healthy backend in ``--server-addr`` order."""


@dataclasses.dataclass(frozen=True, slots=True)
class ListenSettings:
    bind_address: str = "127.0.0.1"
    """Hub server host (``/v1/healthz``, ``/v1/readyz``, ``/metrics``)."""
    serve_port: int = 10267
    """Hub server port; 0 picks a free one (logged and printed)."""
    metrics_bind_address: str = ""
    """``--metrics-bind-address``: also serve ``/metrics`` alone (no probes, status, token or
    OTA) on this host, for a scraper off the node; "" serves none (``/metrics`` stays on the
    hub server only)."""
    metrics_port: int = 10266
    """Port of the metrics-only listener; 0 picks a free one (logged)."""
    bind_proxy_address: str = "127.0.0.1"
    """HTTP proxy host. Loopback by default: the proxy authenticates nobody."""
    proxy_port: int = 10261
    """HTTP proxy port; 0 picks a free one."""
    proxy_secure_port: int = 10268
    """HTTPS proxy port, served on the dummy IP (``--enable-dummy-if``) or
    ``bind_proxy_address`` once the hub has its serving certificate; 0 picks a free one."""
    enable_dummy_if: bool = False
    """``--enable-dummy-if``: create a dummy interface holding ``dummy_if_ip`` (needs
    NET_ADMIN) and serve both proxy ports there too. YurtHub's default is on; ours is off: it
    changes the host's network, which a user should ask for."""
    dummy_if_ip: str = "169.254.2.1"
    dummy_if_name: str = "hub-dummy0"
    dummy_if_recheck: float = 60.0
    """Seconds between checks that the interface and its address are still there."""
    accept_hosts: tuple[str, ...] = ()
    """``--proxy-accept-hosts``: DNS names a request's ``Host`` may name beyond ``localhost``,
    loopback and bind-address IPs (``proxy.hosts``: DNS rebinding is refused)."""


@dataclasses.dataclass(frozen=True, slots=True)
class UpstreamSettings:
    servers: tuple[str, ...] = ()
    """Apiserver base URLs (``scheme://host:port``) in ``--server-addr`` order."""
    lb_mode: LbMode = LbMode.RR
    kubeconfig: pathlib.Path | None = None
    """Kubeconfig holding the hub's own identity (client cert or token) and the cluster CA.
    Its ``server`` is ignored: backends come from ``servers``."""
    allow_insecure_tls: bool = False
    """``--allow-insecure-skip-tls-verify``: accept a kubeconfig that sets
    ``insecure-skip-tls-verify`` (logged as a warning). Off: such a kubeconfig is refused."""
    allow_system_trust_store: bool = False
    """``--allow-system-trust-store``: accept a kubeconfig without a CA (or no kubeconfig over
    https), trusting the system store. Off: refused; the kubeconfig's CA is the only root."""
    connect_timeout: float = 3.0
    """Seconds to establish a TCP+TLS connection to an apiserver. YurtHub waits 10 s + 10 s; a
    handshake takes well under a second even over a WAN, and every second spent here is a second
    before a request fails over to another apiserver (connect failures are retried at once).
    kubelet's heartbeat requests, every watch and the hub's own requests wait longer (10 s,
    ``proxy/remote.py``): after a fleet-wide heal or an apiserver restart the apiserver shakes
    hands with thousands at once."""
    pool_limit: int = 1024
    """Upstream connections in total. Each open watch holds one, so this bounds watches too.
    Must exceed ``ProxySettings.max_in_flight`` + ``max_long_running`` by one per server and
    ``EXEMPT_MARGIN`` (checked): the heartbeat and kubelet's own (never refused) requests share
    the pool, and a proxy full of watches must not starve them (the hub would declare the cloud
    gone); the proxy answers 429 before its requests could wait for a connection."""
    pool_limit_per_host: int = 0
    """Per-apiserver connection cap (0 = only ``pool_limit``); like ``pool_limit``, more than
    ``max_in_flight`` when set."""
    keepalive_timeout: float = 30.0
    """Seconds an idle upstream connection is kept (YurtHub: 30 s keepalive)."""
    header_deadline: float = 1.0
    """Seconds a proxied request may wait for its response headers before its apiserver is
    probed at once (the request itself keeps waiting). An apiserver answers a watch or a get
    in milliseconds; a silent link is then noticed in this plus one probe
    (``--heartbeat-timeout-seconds``), not in up to two heartbeat intervals. A slow but live
    apiserver costs one extra lease renewal."""
    idle_timeout: float = 60.0
    """Seconds an upstream answer to a request that is not long-running (not a watch, logs,
    exec or proxy) may stay silent, before its headers or between two body reads. Past it a
    get/list is answered from the cache (or 504), anything else 504; a body cut short is cut
    for the client too. The backstop for a connection that died without the server doing so."""
    http2_watches: bool = True
    """``--upstream-http2-watches``: watches go to an https apiserver over HTTP/2, many streams
    to a connection (``proxy/h2upstream.py``), when it selects h2; off: a connection each, as
    everything else over HTTP/1.1."""
    identity_check_interval: float = 10.0
    """Seconds between checks of the kubeconfig's files (client certificate, key, token) for a
    rotated identity, as YurtHub's transport manager does; a 401 or a refused handshake also
    triggers a check at once."""


@dataclasses.dataclass(frozen=True, slots=True)
class CertSettings:
    """The hub's own certificates (``yurthub.certs``, reference §7)."""

    source: modes.Source = modes.Source.NONE
    """Decided once by the CLI (``modes.resolve``) from the flags and ``root_dir``."""
    root_dir: pathlib.Path = pathlib.Path("/var/lib/yurthub")
    """``--root-dir``: ``yurthub.conf``, ``bootstrap-hub.conf``, ``pki/``."""
    join_token: str = ""
    join_token_file: pathlib.Path | None = None
    """``--join-token-file``: read at each bootstrap when ``join_token`` is empty (a token
    written onto the node after the hub started, or removed once it joined)."""
    bootstrap_file: pathlib.Path | None = None
    ca_cert_hashes: tuple[str, ...] = ()
    """``--discovery-token-ca-cert-hash``: ``sha256:<hex>`` pins of the cluster CA."""
    unsafe_skip_ca_verification: bool = False
    organizations: tuple[str, ...] = ()
    """``--hub-cert-organizations``: extra O= of the client certificate."""
    node_ip: str = ""
    """``--node-ip``: a SAN of the serving certificate."""
    kubelet_kubeconfig: pathlib.Path = pathlib.Path("/etc/kubernetes/kubelet.conf")
    """``kubeletcertificate`` mode: kubelet's kubeconfig (naming its rotating client pair)."""
    expiration_seconds: int = 0
    """``spec.expirationSeconds`` of the hub's CSRs; 0 leaves it to the signer (the
    controller-manager's ``--cluster-signing-duration``). The real apiserver refuses < 600."""
    renewal_low: float = 0.7
    renewal_high: float = 0.9
    """Renewal at a random point between these fractions of the certificate's validity."""
    renew_before: float = 0.0
    """Test knob: renew at the latest this many seconds before expiry (0: off)."""
    csr_wait_timeout: float = 900.0
    """Seconds to wait for a CSR to be approved and signed before making a new one."""
    retry_base: float = 2.0
    retry_cap: float = 120.0
    """Capped back-off between failed attempts (bootstrap, CSR)."""


@dataclasses.dataclass(frozen=True, slots=True)
class AuthnSettings:
    """Who may read which cache partition (``yurthub.authn``)."""

    api_audiences: tuple[str, ...] = ()
    """``--api-audiences``: audiences a ServiceAccount token must carry to be accepted offline;
    empty: the issuer (the apiserver's own default)."""
    issuer_keys_file: pathlib.Path | None = None
    """Where the issuer's public keys are kept for offline use (None: memory only)."""
    issuer_keys_refresh: float = 3600.0


@dataclasses.dataclass(frozen=True, slots=True)
class HeartbeatSettings:
    interval: float = 10.0
    """``--heartbeat-interval-seconds``: probe tick."""
    timeout: float = 2.0
    """``--heartbeat-timeout-seconds``: per-HTTP-call timeout of a probe."""
    healthy_threshold: int = 2
    """``--heartbeat-healthy-threshold``: consecutive successes to go unhealthy -> healthy."""
    failed_retry: int = 3
    """``--heartbeat-failed-retry``: lease update attempts per probe."""
    kubelet_health_grace_period: float = 40.0
    """``--kubelet-health-grace-period`` (s): kubelet lease silence after which probes fail
    without contacting the server; also the lease's ``leaseDurationSeconds``."""


@dataclasses.dataclass(frozen=True, slots=True)
class ProxySettings:
    min_request_timeout: float = 1800.0
    """``--min-request-timeout`` (s): offline watch hold time base (randomised up to 2x)."""
    max_field_size: int = 16384
    """Bytes allowed in the request line and in one header line (aiohttp's own limit is 8190);
    more is 431 as a Status. With aiohttp's cap of 128 header lines this also bounds the head."""
    chunk_size: int = 65536
    """Read size of upstream bodies; each read is written (and flushed) to the client at once."""
    shutdown_grace: float = 10.0
    """Seconds the requests being answered get on SIGTERM before they are cancelled; open
    watches are ended cleanly at once (clients re-watch elsewhere) and are not waited for
    (``server.Hub.stop``)."""
    read_header_timeout: float = 10.0
    """``--proxy-read-header-timeout``: seconds a proxy connection has to send a whole request
    head, from accept and from the first byte of each later request (Go's ``ReadHeaderTimeout``);
    past it the hub answers 408 and closes. Bodies are not bounded by it."""
    idle_timeout: float = 60.0
    """``--proxy-idle-timeout-seconds``: seconds a proxy connection may stay idle between two
    requests (Go's ``IdleTimeout``) before the hub closes it; aiohttp's own default is 3,630 s.
    Clients' pools open a new connection when they need one (client-go's own idle bound is
    90 s)."""
    max_connections: int = 2048
    """``--proxy-max-connections``: open proxy connections, per listener; a new one past it
    first closes the connection idle the longest, and is answered 503 and closed only when none
    is idle (clients retry). Kubelet keeps a few dozen. The hub's own clients have a listener
    of their own and take none of them."""
    max_in_flight: int = 400
    """``--max-requests-in-flight``: short proxied requests in flight (not watches, logs, exec
    or proxies: those count against ``max_long_running``); over it new ones get 429. YurtHub
    has the flag (default 250) but never used it."""
    max_long_running: int = 600
    """``--max-long-running-requests``: watches, logs, exec, port-forwards and proxies in flight
    (each holds an upstream connection while it lasts)."""
    max_in_flight_per_client: int = 200
    """``--max-requests-in-flight-per-client``: one client's share of ``max_in_flight`` (a client
    is a component, and a Bearer token when it sends one: ``fairness``)."""
    max_long_running_per_client: int = 500
    """``--max-long-running-requests-per-client``: one client's share of ``max_long_running``
    (kubelet watches every Secret and ConfigMap its pods mount: hundreds on a full node)."""


@dataclasses.dataclass(frozen=True, slots=True)
class CacheSettings:
    """Owned by the cache; the proxy only passes it along."""

    disk_cache_path: pathlib.Path = pathlib.Path("/etc/kubernetes/cache")
    """``--disk-cache-path``: one cache directory per hub."""
    key_source: sealing.Source | None = None
    """``--cache-key-source``/``--cache-key-file``. None: plaintext, no key looked for (tools
    and tests; the CLI's default is ``auto``)."""
    cache_agents: tuple[str, ...] = ()
    """``--cache-agents``: components cached beyond the defaults; ``*`` caches every component."""
    max_body_bytes: int = 128 << 20
    """Largest response body (in practice a list) the tee collects for the cache. A bigger one
    streams to the client as usual but is not cached (counted, logged once). 10,000 pods are
    about 30 MB of JSON."""
    max_event_bytes: int = 16 << 20
    """Largest single watch event the tee buffers (objects are at most ~1.5 MB in etcd)."""
    max_pending_bytes: int = 128 << 20
    """Bytes of responses waiting for the disk writer. Past it the tee drops caching of the
    response at hand rather than slow the client or grow memory (a slow or stuck disk)."""
    bookmark_interval: float = 30.0
    """Seconds between BOOKMARK events on a watch held open offline (clients that allow them)."""
    config_namespace: str = "kube-system"
    """Namespace of the ``yurt-hub-cfg`` ConfigMap (YurtHub's ``--namespace``)."""
    offline_events: int = 1000
    """Events the offline journal keeps per outage (oldest first out past it)."""
    offline_event_bytes: int = 1 << 20
    """Bytes of Events (JSON) the offline journal keeps per outage."""
    offline_event_qps: float = 5.0
    """``--offline-event-qps``: Events posted per second after a heal (jittered; 0: unpaced)."""
    offline_event_spread: float = 5.0
    """Seconds within which a drain starts after the heal (random: a fleet healing at once
    does not post at once)."""


class WorkingMode(enum.StrEnum):
    """``--working-mode``."""

    EDGE = "edge"
    """An edge node: cache, offline answers, every filter."""
    CLOUD = "cloud"
    """A node in the cloud, next to the apiservers: no disk cache (nothing to answer offline
    for), and the filters that only make sense on the edge (``discardcloudservice``,
    ``forwardkubesvctraffic``, ``serviceenvupdater``) are off."""


@dataclasses.dataclass(frozen=True, slots=True)
class FilterSettings:
    """Response filters (``yurthub.filters``)."""

    enabled: bool = True
    """``--enable-resource-filter``."""
    disabled: tuple[str, ...] = ()
    """``--disabled-resource-filters``: filter names, or ``*`` for all (names checked)."""
    enable_node_pool: bool = True
    """``--enable-node-pool``: pool topology from NodePools (``status.nodes``)."""
    enable_pool_service_topology: bool = False
    """``--enable-pool-service-topology``: pool topology from NodeBuckets (wins)."""
    hub_host: str = ""
    """The address pods reach the hub's secure port at, written into the ``kubernetes``
    Service and EndpointSlice and into pods' ``KUBERNETES_SERVICE_HOST`` (hidden flag
    ``--master-service-address``, for tests and forwarders); empty: the dummy IP with
    ``--enable-dummy-if``, else ``--bind-proxy-address``. Set, it is taken as reaching the
    hub's secure port (the hub does not check it serves one); unset, the filters that point
    pods at the hub run only when the hub has a serving certificate. A loopback or
    unspecified address never counts (``filters.inputs.pods_cannot_reach``)."""
    hub_port: int = 0
    """Its port; 0: ``--proxy-secure-port``."""
    inputs_sync_timeout: float = 60.0
    """Seconds the readiness gate waits for the filters' inputs (services, the node, its pool)
    while the cloud is reachable; after that the hub serves anyway and an input still missing
    leaves objects unchanged. Offline the gate never waits for them."""


@dataclasses.dataclass(frozen=True, slots=True)
class PoolSettings:
    """Pool scope: the multiplexer and the leader hub (``yurthub.pool``, docs/pool.md)."""

    resources: tuple[gvrs.Gvr, ...] = gvrs.DEFAULTS
    """``--pool-scope-resources``; the ``leader-hub-<pool>`` ConfigMap replaces them live."""
    multiplexer_port: int = 10269
    """``--multiplexer-port``: a leader serves its pool here (on ``node_ip``); followers dial
    their leaders on the same port."""
    node_ip: str = ""
    """``--node-ip``: where the multiplexer port listens (the node's InternalIP, which the
    pool's ConfigMap names). Empty: not served."""
    leader_tls: bool = True
    """False only in tests on loopback: the multiplexer port and the followers speak plain
    HTTP (no certificates)."""
    leader_check_interval: float = 20.0
    leader_check_timeout: float = 2.0
    leader_penalty: float = 30.0
    """Seconds a leader that answered badly (refused, hung, garbage) is not used."""
    leader_idle_timeout: float = 6.0
    """Seconds of silence on a leader's watch after which it counts as hung."""
    follower_bookmark_interval: float = 2.0
    """A leader's BOOKMARK interval on its followers' watches (their liveness signal)."""
    bookmark_interval: float = 60.0
    """BOOKMARK interval on local clients' watches (the apiserver's)."""
    max_bytes: int = 256 << 20
    """``--multiplexer-max-memory-mib``: memory budget per resource (objects + history)."""
    history_events: int = 10_000
    watcher_events: int = 4_096
    watcher_bytes: int = 32 << 20


class MigrationMode(enum.StrEnum):
    """``--migrate-from-yurthub``."""

    AUTO = "auto"
    """At start: import YurtHub's cache on the first start, adopt its certificates when this
    hub has none, wait for YurtHub's ports to be free (``yurthub.migrating``)."""
    OFF = "off"


@dataclasses.dataclass(frozen=True, slots=True)
class MigrationSettings:
    """Taking over from YurtHub on a node (``yurthub.migrating``). Off unless asked for: the
    CLI asks (``edgehub hub`` defaults to ``auto``); an in-process hub reads nothing of the host's
    unless told to."""

    mode: MigrationMode = MigrationMode.OFF
    yurthub_cache_dir: pathlib.Path = pathlib.Path("/etc/kubernetes/cache")
    """``--yurthub-cache-dir``: YurtHub's ``--disk-cache-path``; only ever read."""
    yurthub_root_dir: pathlib.Path = pathlib.Path("/var/lib/yurthub")
    """``--yurthub-root-dir``: YurtHub's ``--root-dir``; only ever read."""
    port_wait_timeout: float = 60.0
    """``--port-wait-timeout``: seconds to wait for the listen ports to be free (YurtHub, or a
    previous hub, still stopping) before giving up with one line."""


@dataclasses.dataclass(frozen=True, slots=True)
class HubSettings:
    """The whole tree."""

    node_name: str
    """``--node-name``: the lease the prober renews is ``kube-node-lease/<node_name>``."""
    nodepool_name: str = ""
    """``--nodepool-name`` (pool-scoped serving comes in a later issue)."""
    upstream: UpstreamSettings = UpstreamSettings()
    listen: ListenSettings = ListenSettings()
    heartbeat: HeartbeatSettings = HeartbeatSettings()
    proxy: ProxySettings = ProxySettings()
    cache: CacheSettings = CacheSettings()
    working_mode: WorkingMode = WorkingMode.EDGE
    filters: FilterSettings = FilterSettings()
    certs: CertSettings = CertSettings()
    authn: AuthnSettings = AuthnSettings()
    pool: PoolSettings = PoolSettings()
    migration: MigrationSettings = MigrationSettings()
    pace: pacing.Settings = dataclasses.field(default_factory=pacing.Settings)
    """How the hub's own list/watch loops pace themselves in a storm (``yurthub.pacing``):
    ``--relist-spread-seconds``, ``--leader-relist-spread-seconds``, ``--heal-spread-seconds``,
    ``--max-retry-after-seconds``."""
    static_pod_path: pathlib.Path = pathlib.Path("/etc/kubernetes/manifests")
    """``--static-pod-path``: kubelet's staticPodPath, where an OTA upgrade of a YurtStaticSet's
    static Pod installs its new manifest (``yurthub.ota``)."""
    outage_save_interval: float = 30.0
    """``--outage-save-interval-seconds``: a changing outage record is written at most this
    often (and at once when an outage begins or ends, and at shutdown): what a kill -9 or a
    power cut may lose of its counts, against the writes a flash card takes."""
    outage_flap_window: float = 30.0
    """``--outage-flap-window-seconds``: the link must stay up this long after an outage
    before it is over for good (``outages.flapping``): a drop within it goes on with the same
    outage (one record, one Event), and its Event waits that long; 0: every drop a new one."""

    @property
    def hub_address(self) -> tuple[str, int]:
        """(host, port) pods reach the apiserver through the hub at (the filters' "master
        service"): YurtHub's dummy-interface IP or bind-proxy address, and its secure port."""
        return (
            self.filters.hub_host
            or (self.listen.dummy_if_ip if self.listen.enable_dummy_if else "")
            or self.listen.bind_proxy_address,
            self.filters.hub_port or self.listen.proxy_secure_port,
        )

    def __post_init__(self) -> None:
        if not self.node_name:
            raise ConfigError("--node-name is required")
        if not self.upstream.servers:
            raise ConfigError("--server-addr is required (a comma list of apiserver URLs)")
        if self.heartbeat.healthy_threshold < 1 or self.heartbeat.failed_retry < 1:
            raise ConfigError("heartbeat thresholds and retries must be at least 1")
        if self.heartbeat.interval <= 0 or self.heartbeat.timeout <= 0:
            raise ConfigError("heartbeat interval and timeout must be positive")
        if not self.outage_save_interval > 0:
            raise ConfigError("--outage-save-interval-seconds must be positive")
        if not 0 <= self.outage_flap_window <= 3600:
            raise ConfigError("--outage-flap-window-seconds must be within 0 and 3600")
        scope = self.pool
        if scope.follower_bookmark_interval * 2 > scope.leader_idle_timeout:
            raise ConfigError(
                "a leader's bookmark interval must be at most half the followers' idle timeout"
            )
        if not scope.leader_tls and scope.node_ip and not _is_loopback(scope.node_ip):
            raise ConfigError("a multiplexer port without TLS may listen on loopback only")
        if scope.node_ip:
            try:
                ipaddress.ip_address(scope.node_ip)
            except ValueError as e:
                raise ConfigError(f"--node-ip {scope.node_ip!r} is not an IP address") from e
        unknown = set(self.filters.disabled) - {*registry.NAMES, registry.WILDCARD}
        if unknown:
            raise ConfigError(
                f"unknown filters in --disabled-resource-filters: {', '.join(sorted(unknown))} "
                f"(known: {', '.join(registry.NAMES)}, or * for all)"
            )
        if self.listen.enable_dummy_if:
            check_dummy_if(self.listen.dummy_if_ip, self.listen.dummy_if_name)
        certs = self.certs
        if not 0.0 < certs.renewal_low <= certs.renewal_high < 1.0:
            raise ConfigError("renewal fractions must satisfy 0 < low <= high < 1")
        if self.upstream.header_deadline <= 0 or self.upstream.idle_timeout <= 0:
            raise ConfigError("the upstream header deadline and idle timeout must be positive")
        proxy, pool = self.proxy, self.upstream
        limits: tuple[int, ...] = (proxy.max_in_flight, proxy.max_long_running)
        limits += (proxy.max_in_flight_per_client, proxy.max_long_running_per_client)
        if min(limits) < 1 or proxy.max_connections < 1:
            raise ConfigError("request and connection limits must be at least 1")
        if proxy.read_header_timeout <= 0 or proxy.idle_timeout <= 0:
            raise ConfigError("the proxy's header-read and idle timeouts must be positive")
        in_flight = proxy.max_in_flight + proxy.max_long_running
        if pool.pool_limit and pool.pool_limit < in_flight + len(pool.servers) + EXEMPT_MARGIN:
            raise ConfigError(
                f"the upstream pool ({pool.pool_limit}) must leave the heartbeat and kubelet's "
                f"heartbeat {len(pool.servers) + EXEMPT_MARGIN} connections beyond the "
                f"{in_flight} proxied requests in flight"
            )
        if pool.pool_limit_per_host and pool.pool_limit_per_host <= in_flight + EXEMPT_MARGIN:
            raise ConfigError(
                f"the per-server pool ({pool.pool_limit_per_host}) must exceed the {in_flight} "
                "proxied requests in flight and kubelet's heartbeat, or the heartbeat can starve"
            )


def parse_server_addrs(text: str) -> tuple[str, ...]:
    """``--server-addr``: a comma list -> normalised ``scheme://host:port`` URLs.

    A missing scheme means ``https`` (YurtHub). ``http`` is accepted only for loopback hosts:
    plaintext to a local apiserver (tests, the simulated cloud) is the one case where nothing can
    read or change the traffic in between. Any other scheme, a path, credentials in the URL or a
    duplicate server is a ``ConfigError``.
    """
    servers: list[str] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        parsed = urllib.parse.urlsplit(item if "://" in item else f"https://{item}")
        scheme = parsed.scheme.lower()
        try:
            host, port = parsed.hostname, parsed.port
        except ValueError as e:
            raise ConfigError(f"--server-addr {item!r}: {e}") from e
        if not host:
            raise ConfigError(f"--server-addr {item!r}: no host")
        if scheme not in ("https", "http"):
            raise ConfigError(f"--server-addr {item!r}: scheme {scheme!r} is not https")
        if scheme == "http" and not _is_loopback(host):
            raise ConfigError(f"--server-addr {item!r}: plain http is allowed only for loopback")
        if parsed.username or parsed.password:
            raise ConfigError(f"--server-addr {item!r}: credentials do not belong in the URL")
        if parsed.path not in ("", "/") or parsed.query or parsed.fragment:
            raise ConfigError(f"--server-addr {item!r}: a server URL has no path or query")
        netloc = f"[{host}]" if ":" in host else host
        url = f"{scheme}://{netloc}:{port or (443 if scheme == 'https' else 80)}"
        if url in servers:
            raise ConfigError(f"--server-addr {item!r}: listed twice")
        servers.append(url)
    if not servers:
        raise ConfigError("--server-addr is required (a comma list of apiserver URLs)")
    return tuple(servers)


def check_dummy_if(ip: str, name: str) -> None:
    """YurtHub's rules (reference §1.2): a link-local IPv4 outside 169.254.31.0/24 and not
    169.254.1.1 (both used by other node agents), or an IPv6 address; a name of 1-15
    characters (the kernel's limit) without ``/`` or spaces."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError as e:
        raise ConfigError(f"--dummy-if-ip {ip!r} is not an IP address") from e
    if address.version == 4 and (
        address not in ipaddress.ip_network("169.254.0.0/16")
        or address in ipaddress.ip_network("169.254.31.0/24")
        or address == ipaddress.ip_address("169.254.1.1")
    ):
        raise ConfigError(
            f"--dummy-if-ip {ip} must be in 169.254.0.0/16, outside 169.254.31.0/24, "
            "and not 169.254.1.1"
        )
    if not 0 < len(name) <= 15 or any(c in name for c in "/ \t\n:"):
        raise ConfigError(f"--dummy-if-name {name!r} must be 1-15 characters, no '/', ':' or space")


def parse_cache_agents(text: str) -> tuple[str, ...]:
    """``--cache-agents``: comma list, trimmed, lower-cased, de-duplicated in order."""
    agents: list[str] = []
    for raw in text.split(","):
        agent = raw.strip().lower()
        if agent and agent not in agents:
            agents.append(agent)
    return tuple(agents)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
