"""The certificate manager's small apiserver client against real loopback servers: answers
that arrive in pieces (as kube-apiserver's do), failover to the next server, errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from yurthub.certs import apiclient
from yurthub.testing import ports


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async def pieces(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(status=201, headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        for piece in (
            b'{"metadata": {"name": ',
            b'"csr-abc"}, "spec": {"x": "',
            b"y" * 100_000 + b'"}}',
        ):
            await resp.write(piece)
            await asyncio.sleep(0.05)
        await resp.write_eof()
        return resp

    async def refused(request: web.Request) -> web.Response:
        return web.json_response({"kind": "Status", "message": "forbidden: no"}, status=403)

    app = web.Application()
    app.router.add_post("/pieces", pieces)
    app.router.add_get("/refused", refused)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def test_an_answer_in_pieces_is_read_whole(server: str) -> None:
    dead = f"http://127.0.0.1:{ports.free_port()}"
    async with apiclient.Client([dead, server], apiclient.insecure_context()) as client:
        used, body = await client.request("POST", "/pieces", {"a": 1})
    assert used == server  # the dead one was skipped
    assert body["metadata"]["name"] == "csr-abc" and len(body["spec"]["x"]) == 100_000


async def test_errors(server: str) -> None:
    async with apiclient.Client([server], apiclient.insecure_context()) as client:
        with pytest.raises(apiclient.ApiError, match="HTTP 403: forbidden: no"):
            await client.get("/refused")
    dead = f"http://127.0.0.1:{ports.free_port()}"
    async with apiclient.Client([dead], apiclient.insecure_context()) as client:
        with pytest.raises(apiclient.Unreachable, match="cannot connect"):
            await client.get("/x")
