"""``--metrics-bind-address``: the hub's ``/metrics`` alone on an address a scraper off the node
can reach, without the hub server's probes, status, token or OTA endpoints.

Before: ``/metrics`` was served only by the hub server (127.0.0.1:10267 in every deployment),
so a Prometheus scraping Pods by their annotations never reached a hub.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hubfakes
from hubfakes import FakeApiserver

MakeHub = Callable[..., Any]


async def test_the_metrics_listener_serves_metrics_only(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    listen = {"metrics_bind_address": "0.0.0.0", "metrics_port": 0}
    async with make_hub([apiserver.url], listen=listen) as hub:
        assert hub.metrics_url.startswith("http://0.0.0.0:")
        url = hub.metrics_url.replace("0.0.0.0", "127.0.0.1")
        port = url.rsplit(":", 1)[1]
        status, body = await hubfakes.raw(
            url, f"GET /metrics HTTP/1.1\r\nHost: 10.1.2.3:{port}\r\n".encode()
        )
        assert status == 200
        assert b"node_yurthub_server_healthy_status" in body
        for path in ("/v1/healthz", "/v1/readyz", "/v1/status", "/pods", "/v1/token"):
            status, _ = await hubfakes.raw(
                url, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
            )
            assert status == 404, path
        status, _ = await hubfakes.raw(url, b"POST /v1/token HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        assert status in (404, 405)
        # A DNS name is refused there too (DNS rebinding), as on the hub server.
        status, _ = await hubfakes.raw(url, b"GET /metrics HTTP/1.1\r\nHost: evil.example\r\n")
        assert status == 403


async def test_no_metrics_listener_unless_asked(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    async with make_hub([apiserver.url]) as hub:
        assert hub.metrics_url == ""
