"""``edgehub hub``'s flags made into ``yurthub.settings.HubSettings`` (``build_settings``), and
the checks each flag's value gets on the way: a bad value is a ``click.BadParameter`` or a
``settings.ConfigError`` naming the flag (``hub`` turns either into one clear line and
``cli.EXIT_STARTUP_FAILURE``).
"""

from __future__ import annotations

import pathlib
import re
import socket
from typing import Any

import click

from yurthub import pacing, requestinfo, settings
from yurthub.cache import keysealing
from yurthub.certs import jws, layout, modes
from yurthub.filters import registry
from yurthub.pool import gvrs

AGENT_COMPONENT = "edgehub-agent"


def duration(value: str) -> float:
    """A positive Go duration; a bare number is seconds. Zero or negative would make no hub
    (a kubelet gate that never opens, offline watches that end at once: a re-watch storm)."""
    try:
        seconds = requestinfo.parse_go_duration(value if not value.isdigit() else f"{value}s")
    except ValueError as e:
        raise click.BadParameter(f"{value!r} is not a duration like 40s or 2m") from e
    if seconds <= 0:
        raise click.BadParameter(f"{value!r}: the duration must be positive")
    return seconds


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
    certs = cert_settings(opts, kubeconfig)
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
            http2_watches=bool(opts["upstream_http2_watches"]),
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
            kubelet_health_grace_period=duration(s("kubelet_health_grace_period")),
        ),
        proxy=settings.ProxySettings(
            min_request_timeout=duration(s("min_request_timeout")),
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
        outage_save_interval=f("outage_save_interval_seconds"),
        outage_flap_window=f("outage_flap_window_seconds"),
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
            leader_relist_spread=f("leader_relist_spread_seconds"),
            heal_spread=f("heal_spread_seconds"),
            max_retry_after=f("max_retry_after_seconds"),
        ),
        migration=settings.MigrationSettings(
            mode=settings.MigrationMode(s("migrate_from_yurthub")),
            yurthub_cache_dir=pathlib.Path(s("yurthub_cache_dir")),
            yurthub_root_dir=pathlib.Path(s("yurthub_root_dir")),
            port_wait_timeout=duration(s("port_wait_timeout")),
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


def local_address(server_addr: str) -> str:
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


def cert_settings(opts: dict[str, Any], kubeconfig: pathlib.Path | None) -> settings.CertSettings:
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
        node_ip=str(opts.get("node_ip") or "") or local_address(str(opts.get("server_addr", ""))),
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
