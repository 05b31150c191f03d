"""``edgehub hub``: the node-local apiserver proxy (YurtHub's flags and defaults).

Thin: flags -> ``yurthub.settings.HubSettings`` -> ``yurthub.lifecycle.run``. Every flag also
reads ``EDGEHUB_<FLAG>`` (``cli.COMMAND_CONTEXT``). Bad flags or an unreadable kubeconfig exit
with ``cli.EXIT_STARTUP_FAILURE`` and one clear line.
"""

from __future__ import annotations

import asyncio
import pathlib

import click

from edgehub import cli
from yurthub import kubeconfigs, lifecycle, requestinfo, settings


def _duration(value: str) -> float:
    try:
        return requestinfo.parse_go_duration(value if not value.isdigit() else f"{value}s")
    except ValueError as e:
        raise click.BadParameter(f"{value!r} is not a duration like 40s or 2m") from e


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
@click.option("--shutdown-grace-seconds", default=10.0, type=click.FloatRange(min=0))
def command(**opts: object) -> None:
    """Run the hub: an offline-capable proxy in front of kube-apiserver."""
    try:
        hub_settings = build_settings(opts)
        if hub_settings.upstream.kubeconfig is not None:
            kubeconfigs.load(hub_settings.upstream.kubeconfig)  # fail fast, clear message
    except (settings.ConfigError, kubeconfigs.KubeconfigError, click.BadParameter) as e:
        click.echo(f"edgehub hub: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e
    try:
        asyncio.run(lifecycle.run(hub_settings))
    except OSError as e:  # port in use, address not available
        click.echo(f"edgehub hub: cannot start: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e


def build_settings(opts: dict[str, object]) -> settings.HubSettings:
    def s(key: str) -> str:
        return str(opts[key])

    def i(key: str) -> int:
        value = opts[key]
        assert isinstance(value, int)
        return value

    kubeconfig = opts["kubeconfig"]
    assert kubeconfig is None or isinstance(kubeconfig, pathlib.Path)
    grace = opts["shutdown_grace_seconds"]
    assert isinstance(grace, float)
    return settings.HubSettings(
        node_name=s("node_name"),
        nodepool_name=s("nodepool_name"),
        upstream=settings.UpstreamSettings(
            servers=settings.parse_server_addrs(s("server_addr")),
            lb_mode=settings.LbMode(s("lb_mode")),
            kubeconfig=kubeconfig,
        ),
        listen=settings.ListenSettings(
            bind_address=s("bind_address"),
            serve_port=i("serve_port"),
            bind_proxy_address=s("bind_proxy_address"),
            proxy_port=i("proxy_port"),
            proxy_secure_port=i("proxy_secure_port"),
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
        ),
        cache=settings.CacheSettings(
            disk_cache_path=pathlib.Path(s("disk_cache_path")),
            cache_agents=settings.parse_cache_agents(s("cache_agents")),
        ),
    )
