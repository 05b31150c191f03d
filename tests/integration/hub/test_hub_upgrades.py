"""Upgrade passthrough with a non-WebSocket protocol (SPDY-style): raw bytes both ways, and a
refused upgrade relayed as an ordinary answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

MakeHub = Callable[..., Any]

LEASE = b'{"kind":"Lease","metadata":{"name":"n1"},"spec":{}}'


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        request_line = head.split(b"\r\n", 1)[0]
        if b"/leases/" in request_line or b"/nodes/" in request_line:
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(LEASE), LEASE)
            )
        elif b"/forbidden/" in request_line:
            body = orjson.dumps({"kind": "Status", "code": 403, "message": "exec denied"})
            writer.write(
                b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
            )
        else:
            assert b"upgrade: spdy/3.1" in head.lower()
            writer.write(
                b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
                b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n"
            )
            await writer.drain()
            while data := await reader.read(65536):
                writer.write(data.upper())
                await writer.drain()
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


@pytest.fixture
async def raw_apiserver() -> AsyncIterator[str]:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.close()
    await server.wait_closed()
    # Connection handlers end when the hub (stopped by now) closed its side; let them finish.
    for _ in range(10):
        await asyncio.sleep(0.01)


async def open_upgrade(proxy_url: str, path: bytes) -> tuple[bytes, Any, Any]:
    host, port = proxy_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
        b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n" % path
    )
    await writer.drain()
    async with asyncio.timeout(3):
        head = await reader.readuntil(b"\r\n\r\n")
    return head, reader, writer


async def test_spdy_style_upgrade_pumps_bytes(raw_apiserver: str, make_hub: MakeHub) -> None:
    async with make_hub([raw_apiserver]) as hub:
        head, reader, writer = await open_upgrade(
            hub.proxy_url, b"/api/v1/namespaces/d/pods/p/exec?command=sh&stdin=true"
        )
        try:
            assert head.startswith(b"HTTP/1.1 101")
            assert b"x-stream-protocol-version: v4.channel.k8s.io" in head.lower()
            for i in range(3):
                writer.write(b"frame-%d;" % i)
                await writer.drain()
                async with asyncio.timeout(2):
                    assert await reader.readexactly(8) == b"FRAME-%d;" % i
            big = bytes(range(97, 123)) * 40000  # 1 MB, both directions at once
            writer.write(big)
            await writer.drain()
            async with asyncio.timeout(5):
                assert await reader.readexactly(len(big)) == big.upper()
        finally:
            writer.close()
            await writer.wait_closed()


async def test_refused_upgrade_is_relayed(raw_apiserver: str, make_hub: MakeHub) -> None:
    async with make_hub([raw_apiserver]) as hub:
        head, reader, writer = await open_upgrade(
            hub.proxy_url, b"/api/v1/namespaces/forbidden/pods/p/exec?command=sh"
        )
        try:
            assert head.startswith(b"HTTP/1.1 403")
            length = int(
                next(
                    line.split(b":")[1]
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
            )
            body = orjson.loads(await reader.readexactly(length))
            assert body["message"] == "exec denied"
        finally:
            writer.close()
            await writer.wait_closed()
