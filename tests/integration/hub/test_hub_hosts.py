"""The Host a request names: loopback names and the configured bind addresses only.

Before: any ``Host`` and any absolute-form target were proxied with the node's identity, so a
web page on the node could rebind its own DNS name to 127.0.0.1 and read the cluster's Secrets
through the hub (the browser sends the page's name as ``Host``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hubfakes
import orjson
import pytest
from hubfakes import FakeApiserver

from yurthub import settings
from yurthub.proxy import hosts

MakeHub = Callable[..., Any]


async def raw(url: str, head: bytes) -> tuple[int, Any]:
    status, body = await hubfakes.raw(url, head)
    return status, orjson.loads(body) if body else None


@pytest.mark.parametrize(
    ("head", "code"),
    [
        (b"GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1:10261\r\n", 200),
        (b"GET /api/v1/pods HTTP/1.1\r\nHost: localhost\r\n", 200),
        (b"GET /api/v1/pods HTTP/1.1\r\nHost: LOCALHOST:80\r\n", 200),
        (b"GET /api/v1/pods HTTP/1.1\r\nHost: [::1]:10261\r\n", 200),
        (b"GET /api/v1/pods HTTP/1.0\r\n", 200),  # no Host at all (HTTP/1.0)
        (b"GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.5\r\n", 200),
        (b"GET /api/v1/pods HTTP/1.1\r\nHost: hub.example\r\n", 200),  # --proxy-accept-hosts
        (b"GET /api/v1/secrets HTTP/1.1\r\nHost: evil.example:10261\r\n", 403),
        (b"GET /api/v1/secrets HTTP/1.1\r\nHost: localhost.evil.example\r\n", 403),
        (b"GET /api/v1/secrets HTTP/1.1\r\nHost: 10.0.0.7\r\n", 403),
        (b"GET http://evil.example/api/v1/secrets HTTP/1.1\r\nHost: 127.0.0.1\r\n", 403),
        (b"GET http://127.0.0.1:10261/api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1\r\n", 200),
    ],
)
async def test_only_known_hosts_are_served(
    apiserver: FakeApiserver, make_hub: MakeHub, head: bytes, code: int
) -> None:
    async with make_hub([apiserver.url], listen={"accept_hosts": ("hub.example",)}) as hub:
        status, body = await raw(hub.proxy_url, head)
        assert status == code, body
        if code == 403:
            assert body["kind"] == "Status" and "not accepted" in body["message"]
            status, _ = await raw(hub.server_url, head.replace(b"/api/v1/secrets", b"/metrics"))
            assert status == 403  # the hub server too (it shows what runs on the node)


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1", True),
        ("127.0.0.1:1", True),
        ("[::1]", True),
        ("::1", True),
        ("localhost.", True),
        ("192.0.2.10:10261", True),  # the configured bind address
        ("192.0.2.11", False),
        ("evil.example", False),
        ("", True),
        ("[::1", False),
        ("127.0.0.1:99999999999", False),
    ],
)
def test_accepted_hosts(host: str, allowed: bool) -> None:
    accepted = hosts.AcceptedHosts(("192.0.2.10", "127.0.0.1"))
    assert accepted.allows(host) is allowed


def test_a_wildcard_bind_accepts_ip_literals_only() -> None:
    accepted = hosts.AcceptedHosts(("0.0.0.0",))
    assert accepted.allows("10.1.2.3:10261") and accepted.allows("[fd00::1]")
    assert not accepted.allows("node.example")


@pytest.mark.parametrize(
    ("proxy", "server_host", "warned"),
    [
        ("127.0.0.1", "127.0.0.1", []),
        ("::1", "localhost", []),
        ("0.0.0.0", "127.0.0.1", ["proxy"]),
        ("192.0.2.10", "0.0.0.0", ["proxy", "hub server"]),
    ],
)
def test_binding_beyond_loopback_is_a_warning(
    proxy: str, server_host: str, warned: list[str]
) -> None:
    listen = settings.ListenSettings(bind_proxy_address=proxy, bind_address=server_host)
    warnings = hosts.exposure_warnings(listen)
    assert [w.split(" on ", 1)[0].removeprefix("the ") for w in warnings] == warned
    if warned:
        assert "authenticates nobody" in warnings[0]
