"""Slow clients: a header-read timeout and a connection cap, as Go servers have.

Before: 300 half-open connections (headers never finished) were held for as long as aiohttp's
keep-alive timeout (75 s), and nothing bounded how many a local process could open.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
from hubfakes import FakeApiserver

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
