"""A listener closed while clients connect leaks nothing.

Before: a hub's probe that connected in the very loop turn a test's fake apiserver (or a
partition refusing) closed its listener left a server-side socket unclosed (Python 3.11's
``asyncio.Server.close`` drops a connection accepted but not yet given a transport); its
``ResourceWarning`` surfaced, unraisable, in whichever test ran when it was collected (CI
failed twice on it). ``listening.close_server`` and ``close_runner`` take no new connection,
let the accepted ones get their transports, and only then close.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import warnings
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web

from yurthub import listening

CLIENTS = 3


async def _closed_right_after_accepting(port: int, close: Callable[[], Awaitable[None]]) -> None:
    """Connect clients (the kernel completes them at once), let the loop accept them but not
    yet make their transports (two turns: the accept callback runs after this coroutine in the
    first), then ``close``; every client then reads the end of its connection."""
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(CLIENTS)]
    try:
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        await close()
        for client in clients:
            client.settimeout(5)
            try:
                assert await asyncio.to_thread(client.recv, 1) == b""
            except ConnectionResetError:
                pass
    finally:
        for client in clients:
            client.close()


def _leaked_sockets() -> list[str]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        gc.collect()
    return [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]


@pytest.fixture(autouse=True)
def _nothing_pending() -> None:
    assert _leaked_sockets() == []


async def test_a_server_closed_as_it_accepts_closes_every_connection() -> None:
    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    await _closed_right_after_accepting(port, lambda: listening.close_server(server))
    await asyncio.sleep(0.05)  # the handlers' writers closed
    assert _leaked_sockets() == []


async def test_a_runner_cleaned_up_as_it_accepts_closes_every_connection() -> None:
    async def hello(_request: web.Request) -> web.Response:
        return web.Response(text="hello")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    await _closed_right_after_accepting(port, lambda: listening.close_runner(runner))
    assert _leaked_sockets() == []
