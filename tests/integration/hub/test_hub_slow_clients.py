"""Slow clients: a header-read timeout, an idle timeout and a connection cap, as Go servers have.

Before: 300 half-open connections (headers never finished) were held for as long as aiohttp's
keep-alive timeout, and nothing bounded how many a local process could open. Then: idle
keep-alive connections were kept for aiohttp's default (3,630 s), so a handful of them filled
the cap and kubelet's next lease renewal got 503; and the hub's own followers held connections
of the same cap.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
from hubfakes import LEASE_PATH, FakeApiserver

MakeHub = Callable[..., Any]
LIMITS = {"read_header_timeout": 0.5, "max_connections": 20}


@contextlib.asynccontextmanager
async def connections(url: str, count: int) -> AsyncIterator[list[Any]]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    opened = [await asyncio.open_connection(host, int(port)) for _ in range(count)]
    try:
        yield opened
    finally:
        for _, writer in opened:
            writer.close()


async def answer_of(reader: asyncio.StreamReader, within: float) -> bytes:
    async with asyncio.timeout(within):
        return await reader.read()


async def one_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    """A keep-alive GET on a raw connection, its answer read to the end: its status; the
    connection is then idle (answered, nothing more sent)."""
    writer.write(b"GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: idle/1\r\n\r\n")
    async with asyncio.timeout(5):
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
        if "transfer-encoding: chunked" in head:
            while size := int((await reader.readline()).strip(), 16):
                await reader.readexactly(size + 2)
            await reader.readline()
        else:
            length = head.split("content-length:", 1)[1].split("\r\n", 1)[0]
            await reader.readexactly(int(length))
    return int(head.split(" ", 2)[1])


async def metric(hub: Any, name: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(hub.server_url + "/metrics") as r:
        text = await r.text()
    return next(line for line in text.splitlines() if line.startswith(name + " "))


async def test_unfinished_headers_are_cut_after_the_timeout(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    async with make_hub([apiserver.url], proxy=LIMITS) as hub:
        async with connections(hub.proxy_url, 10) as opened:
            for i, (_, writer) in enumerate(opened):
                if i % 2:  # half send part of a request, half nothing at all
                    writer.write(b"GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            # Each is answered 408 (the header timeout's answer, below) rather than held open.
            answers = [await answer_of(reader, 30) for reader, _ in opened]
        for answer in answers:
            assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
            status = orjson.loads(answer.partition(b"\r\n\r\n")[2])
            assert status["kind"] == "Status" and status["code"] == 408
        # A slow body is not a slow header: a request that started in time is served.
        async with (
            aiohttp.ClientSession() as s,
            s.get(hub.proxy_url + "/api/v1/namespaces/d/configmaps/slow?sleep=1") as r,
        ):
            assert r.status == 200


async def test_connections_are_capped(apiserver: FakeApiserver, make_hub: MakeHub) -> None:
    limits = LIMITS | {"read_header_timeout": 30.0}
    async with make_hub([apiserver.url], proxy=limits) as hub:
        async with connections(hub.proxy_url, 20) as held:
            await asyncio.sleep(0.1)
            async with connections(hub.proxy_url, 1) as [(reader, _)]:
                answer = await answer_of(reader, 3)
            assert answer.startswith(b"HTTP/1.1 503"), answer[:80]
            assert b"too many connections" in answer
            # The connections already open still work.
            reader, writer = held[0]
            writer.write(
                b"GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            )
            assert (await answer_of(reader, 3)).startswith(b"HTTP/1.1 200")
        # Room again once they are gone.
        await asyncio.sleep(0.1)
        async with aiohttp.ClientSession() as s, s.get(hub.proxy_url + "/api/v1/pods") as r:
            assert r.status == 200
        async with aiohttp.ClientSession() as s, s.get(hub.server_url + "/metrics") as r:
            text = await r.text()
        assert "node_yurthub_refused_connections_total 1.0" in text


async def test_idle_connections_are_closed_after_the_idle_timeout(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    async with (
        make_hub([apiserver.url], proxy=LIMITS | {"idle_timeout": 0.2}) as hub,
        connections(hub.proxy_url, 1) as [(reader, writer)],
    ):
        assert await one_request(reader, writer) == 200
        # The hub closes it (EOF, nothing sent): the client's pool just opens a new one.
        assert await answer_of(reader, 10) == b""


async def test_idle_connections_make_room_for_kubelets_lease(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    limits = LIMITS | {"read_header_timeout": 30.0, "max_connections": 5}
    async with make_hub([apiserver.url], proxy=limits) as hub:
        async with connections(hub.proxy_url, 5) as idle:
            for reader, writer in idle:
                assert await one_request(reader, writer) == 200
            # The cap is full of idle keep-alive connections: kubelet's renewal still goes in.
            body = orjson.dumps({"metadata": {"name": "n1"}})
            async with (
                aiohttp.ClientSession(headers={"User-Agent": "kubelet/v1.32.4"}) as s,
                s.put(hub.proxy_url + LEASE_PATH + "/n1", data=body) as r,
            ):
                assert r.status == 200
            # ... because the connection idle the longest was closed for it.
            assert await answer_of(idle[0][0], 5) == b""
            assert (await metric(hub, "node_yurthub_idle_connections_closed_total")).endswith(
                " 1.0"
            )
        assert (await metric(hub, "node_yurthub_refused_connections_total")).endswith(" 0.0")


async def test_the_hubs_own_clients_use_none_of_the_cap(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    async with make_hub([apiserver.url], proxy=LIMITS | {"max_connections": 2}) as hub:
        route = hub.own_route
        async with route.session() as own:
            watches = [
                await own.get(
                    route.url + "/api/v1/pods?watch=1", headers={"User-Agent": "yurthub/e"}
                )
                for _ in range(4)
            ]
            try:
                assert [w.status for w in watches] == [200] * 4
                async with connections(hub.proxy_url, 2) as others:
                    for reader, writer in others:
                        assert await one_request(reader, writer) == 200
            finally:
                for w in watches:
                    w.close()
