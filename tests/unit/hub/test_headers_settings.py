"""Hop-by-hop and identity header rules, the wire-format rewrite, --server-addr parsing."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from yurthub import requestinfo, settings
from yurthub.proxy import headers


def names(items: list[tuple[str, str]]) -> list[str]:
    return [n.lower() for n, _ in items]


def test_request_hop_by_hop_dropped() -> None:
    incoming = [
        ("Host", "hub"),
        ("Connection", "keep-alive, X-Private"),
        ("Keep-Alive", "timeout=5"),
        ("X-Private", "secret"),
        ("TE", "trailers"),
        ("Transfer-Encoding", "chunked"),
        ("Proxy-Authorization", "Basic x"),
        ("Content-Length", "3"),
        ("Accept", "application/json"),
        ("User-Agent", "kubelet/v1"),
    ]
    out = headers.request_headers(incoming, upgrade=False, own_identity=False)
    assert names(out) == ["accept", "user-agent"]


def test_upgrade_keeps_upgrade_headers() -> None:
    incoming = [
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Protocol", "v5.channel.k8s.io"),
    ]
    out = headers.request_headers(incoming, upgrade=True, own_identity=True)
    assert ("Upgrade", "websocket") in out and ("Connection", "Upgrade") in out
    assert ("Sec-WebSocket-Protocol", "v5.channel.k8s.io") in out


def test_own_identity_drops_client_credentials_and_impersonation() -> None:
    incoming = [("Authorization", "Basic abc"), ("Impersonate-User", "admin"), ("Accept", "*/*")]
    assert names(headers.request_headers(incoming, upgrade=False, own_identity=True)) == ["accept"]
    kept = headers.request_headers(incoming, upgrade=False, own_identity=False)
    assert names(kept) == ["authorization", "impersonate-user", "accept"]


@pytest.mark.parametrize(
    ("value", "token"),
    [("Bearer token-content", "token-content"), ("bearer abc", "abc"), ("Basic x", ""), ("", "")],
)
def test_bearer_token(value: str, token: str) -> None:
    assert headers.bearer_token(value) == token


def test_response_hop_by_hop_dropped() -> None:
    out = headers.response_headers(
        [
            ("Transfer-Encoding", "chunked"),
            ("Connection", "close"),
            ("Content-Type", "application/json"),
            ("Content-Length", "10"),
            ("Audit-Id", "x"),
        ]
    )
    assert names(out) == ["content-type", "content-length", "audit-id"]


def info(method: str, path: str, accept: str) -> requestinfo.RequestInfo:
    return requestinfo.classify(method, path, [], CIMultiDict({"Accept": accept}))


PB = "application/vnd.kubernetes.protobuf"


@pytest.mark.parametrize(
    ("method", "path", "accept", "want"),
    [
        # kubelet, kube-proxy: protobuf passes (the cache converts its copy)
        ("GET", "/api/v1/pods", f"{PB},application/json", None),
        ("GET", "/api/v1/nodes/n", f"{PB}, */*", None),
        ("GET", "/api/v1/pods", PB, None),  # protobuf only: untouched
        ("GET", "/api/v1/pods", "application/json", None),  # JSON only: untouched
        ("POST", "/api/v1/namespaces/d/pods", f"{PB},application/json", None),  # not cacheable
        ("GET", "/version", f"{PB},application/json", None),  # non-resource
        (
            "GET",
            "/api/v1/nodes",
            f"{PB};as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json",
        ),  # a protobuf view: views are cached from JSON only
        (
            "GET",
            "/api/v1/nodes",
            f"{PB};as=Table;g=meta.k8s.io;v=v1, */*",
            "application/json, */*",
        ),
    ],
)
def test_upstream_accept(method: str, path: str, accept: str, want: str | None) -> None:
    assert headers.upstream_accept(info(method, path, accept)) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("1.2.3.4", ("https://1.2.3.4:443",)),
        (
            "https://a.example:6443, https://b.example:6443",
            ("https://a.example:6443", "https://b.example:6443"),
        ),
        ("http://127.0.0.1:8080", ("http://127.0.0.1:8080",)),
        ("http://[::1]:8080", ("http://[::1]:8080",)),
        ("http://localhost:1", ("http://localhost:1",)),
    ],
)
def test_server_addrs(text: str, want: tuple[str, ...]) -> None:
    assert settings.parse_server_addrs(text) == want


@pytest.mark.parametrize(
    "text",
    [
        "",
        " , ",
        "ftp://a",
        "http://10.0.0.1:8080",  # plain http only for loopback
        "https://u:p@a:1",
        "https://a:1/path",
        "https://a:1,https://a:1",
        "https://a:99999",
    ],
)
def test_bad_server_addrs(text: str) -> None:
    with pytest.raises(settings.ConfigError):
        settings.parse_server_addrs(text)


def test_settings_require_node_and_servers() -> None:
    with pytest.raises(settings.ConfigError):
        settings.HubSettings(node_name="", upstream=settings.UpstreamSettings(servers=("x",)))
    with pytest.raises(settings.ConfigError):
        settings.HubSettings(node_name="n")


# 700 short + 300 long-running requests, 2 servers, 16 connections for kubelet's heartbeat.
@pytest.mark.parametrize(
    ("pool", "per_host", "ok"),
    [(1024, 0, True), (1018, 0, True), (1017, 0, False), (1000, 0, False), (0, 0, True),
     (1024, 1017, True), (1024, 1016, False)],
)  # fmt: skip
def test_the_pool_leaves_the_heartbeat_room(pool: int, per_host: int, ok: bool) -> None:
    def build() -> settings.HubSettings:
        return settings.HubSettings(
            node_name="n",
            upstream=settings.UpstreamSettings(
                servers=("https://a:1", "https://b:1"),
                pool_limit=pool,
                pool_limit_per_host=per_host,
            ),
            proxy=settings.ProxySettings(max_in_flight=700, max_long_running=300),
        )

    if ok:
        build()
    else:
        with pytest.raises(settings.ConfigError, match="heartbeat"):
            build()


@pytest.mark.parametrize(
    "limit",
    ["max_in_flight", "max_long_running", "max_in_flight_per_client",
     "max_long_running_per_client"],
)  # fmt: skip
def test_request_limits_are_positive(limit: str) -> None:
    with pytest.raises(settings.ConfigError, match="at least 1"):
        settings.HubSettings(
            node_name="n",
            upstream=settings.UpstreamSettings(servers=("https://a:1",)),
            proxy=settings.ProxySettings(**{limit: 0}),  # type: ignore[arg-type]
        )


def test_cache_agents() -> None:
    assert settings.parse_cache_agents(" Foo, bar,foo,, * ") == ("foo", "bar", "*")


# §10.3 util_test (:236): lb modes
@pytest.mark.parametrize("mode", ["rr", "priority"])
def test_lb_modes_valid(mode: str) -> None:
    assert settings.LbMode(mode).value == mode


@pytest.mark.parametrize("mode", ["", "illegal", "consistent-hashing"])
def test_lb_modes_invalid(mode: str) -> None:
    with pytest.raises(ValueError):
        settings.LbMode(mode)


def test_pods_reach_the_hub_on_the_dummy_ip_when_it_is_enabled() -> None:
    base = settings.UpstreamSettings(servers=("https://127.0.0.1:6443",))
    plain = settings.HubSettings(node_name="n", upstream=base)
    assert plain.hub_address == ("127.0.0.1", 10268)
    dummy = settings.HubSettings(
        node_name="n", upstream=base, listen=settings.ListenSettings(enable_dummy_if=True)
    )
    assert dummy.hub_address == ("169.254.2.1", 10268)
