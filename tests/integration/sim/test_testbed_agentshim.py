"""The User-Agent relay in front of YurtHub (``agentshim``): renames kubemark's components,
passes everything else byte for byte, over several requests on one connection."""

from __future__ import annotations

import asyncio

import pytest

from yurthub.testing import agentshim

RENAMES = {"hollow-kubelet": "kubelet", "hollow-proxy": "kube-proxy"}


@pytest.mark.parametrize(
    ("agent", "renamed"),
    [
        (b"hollow-kubelet", b"kubelet"),
        (b"hollow-kubelet/v1.37.2 (linux/amd64)", b"kubelet/v1.37.2 (linux/amd64)"),
        (b"hollow-proxy/v1.37.2", b"kube-proxy/v1.37.2"),
        (b"hollow-kubeletx/1", b"hollow-kubeletx/1"),  # another component
        (b"kubectl/v1.37.2", b"kubectl/v1.37.2"),
    ],
)
def test_rename(agent: bytes, renamed: bytes) -> None:
    head = b"GET /api/v1/pods HTTP/1.1\r\nHost: x\r\nuser-agent: " + agent + b"\r\n\r\n"
    found = agentshim.rename(head, RENAMES)
    assert found.split(b"\r\n")[2].split(b":", 1)[1].strip() == renamed
    assert found.endswith(b"\r\n\r\n")


@pytest.mark.parametrize(
    ("headers", "length"),
    [
        (b"", 0),
        (b"Content-Length: 12\r\n", 12),
        (b"Transfer-Encoding: chunked\r\n", None),
        (b"Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n", None),
        (b"Content-Length: x\r\n", None),
    ],
)
def test_framing(headers: bytes, length: int | None) -> None:
    head = b"PUT /x HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n"
    assert agentshim.framing(head) == length


async def test_requests_on_one_connection_are_renamed_and_relayed() -> None:
    seen: list[bytes] = []

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = agentshim.framing(head) or 0
            body = await reader.readexactly(length)
            seen.append(head + body)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
        writer.close()

    response = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    server = await asyncio.start_server(upstream, "127.0.0.1", 0)
    up_port = server.sockets[0].getsockname()[1]
    shim = await agentshim.start(("127.0.0.1", 0), ("127.0.0.1", up_port), RENAMES)
    port = shim.port
    async with server, shim:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        first = (
            b"PUT /a HTTP/1.1\r\nHost: x\r\nUser-Agent: hollow-kubelet/v1\r\n"
            b"Content-Length: 5\r\n\r\nhello"
        )
        second = b"GET /b HTTP/1.1\r\nHost: x\r\nUser-Agent: hollow-proxy/v1\r\n\r\n"
        writer.write(first)
        assert await reader.readexactly(len(response)) == response
        writer.write(second)
        assert await reader.readexactly(len(response)) == response
        writer.close()
        await writer.wait_closed()
        assert seen == [
            first.replace(b"hollow-kubelet", b"kubelet"),
            second.replace(b"hollow-proxy", b"kube-proxy"),
        ]
