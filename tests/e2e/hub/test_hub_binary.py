"""The installed ``edgehub hub`` binary: flags, env, ready line, SIGTERM, second signal."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import sys
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from yurthub.testing import processes

EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    async def lease(request: web.Request) -> web.Response:
        return web.json_response({"metadata": {"name": "n1"}, "spec": {}})

    async def pods(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch"):
            resp = web.StreamResponse()
            await resp.prepare(request)
            await resp.write(b'{"type":"ADDED","object":{}}\n')
            await asyncio.sleep(30)
            return resp
        return web.json_response({"kind": "PodList", "items": []})

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(30)
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/d/configmaps/slow", slow)
    app.router.add_route(
        "*", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", lease
    )
    app.router.add_get("/api/v1/pods", pods)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def start_hub(
    state: pathlib.Path, server: str, *extra: str
) -> tuple[asyncio.subprocess.Process, str, str]:
    """``state``: the hub's cache and root directories go in there (never the host's
    /etc/kubernetes/cache or /var/lib/yurthub: a YurtHub node's, and what a later test's
    first-start import would read)."""
    env = dict(os.environ, EDGEHUB_NODE_NAME="n1", EDGEHUB_SERVER_ADDR=server)
    proc = await asyncio.create_subprocess_exec(
        EDGEHUB,
        "hub",
        "--proxy-port",
        "0",
        "--serve-port",
        "0",
        f"--disk-cache-path={state / 'cache'}",
        f"--root-dir={state / 'root'}",
        *extra,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    fields = await processes.read_announcement(proc.stdout, "EDGEHUB_HUB_LISTENING", 15)
    return proc, fields["proxy"], fields["server"]


async def wait_ready(hub_server: str) -> None:
    async with aiohttp.ClientSession() as s, asyncio.timeout(10):
        while True:
            async with s.get(hub_server + "/v1/readyz") as r:
                if r.status == 200:
                    return
            await asyncio.sleep(0.05)


async def metrics(s: aiohttp.ClientSession, hub_server: str) -> str:
    async with s.get(hub_server + "/metrics") as r:
        return await r.text()


async def test_binary_serves_and_stops_on_sigterm(upstream: str, tmp_path: pathlib.Path) -> None:
    proc, proxy, hub_server = await start_hub(
        tmp_path, upstream, "--heartbeat-interval-seconds", "1"
    )
    try:
        await wait_ready(hub_server)
        async with aiohttp.ClientSession() as s:
            async with s.get(proxy + "/api/v1/pods") as r:
                assert r.status == 200
            watch = await s.get(proxy + "/api/v1/pods?watch=1")
            await watch.content.readline()
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(10):
                assert await proc.wait() == 0
                # the open watch was ended cleanly by the shutdown
                assert await watch.content.read() == b""
            watch.release()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_bad_flags_exit_with_startup_failure() -> None:
    proc = await asyncio.create_subprocess_exec(
        EDGEHUB,
        "hub",
        "--node-name",
        "n1",
        "--server-addr",
        "ftp://x",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _out, err = await proc.communicate()
    assert proc.returncode == 3
    assert b"scheme 'ftp' is not https" in err and b"Traceback" not in err


async def test_second_signal_forces(upstream: str, tmp_path: pathlib.Path) -> None:
    proc, proxy, hub_server = await start_hub(tmp_path, upstream, "--shutdown-grace-seconds", "60")
    try:
        await wait_ready(hub_server)

        async def in_flight(s: aiohttp.ClientSession) -> BaseException | None:
            try:
                async with s.get(proxy + "/api/v1/namespaces/d/configmaps/slow") as r:
                    await r.read()
            except aiohttp.ClientError as e:
                return e
            return None

        async with aiohttp.ClientSession() as s, asyncio.TaskGroup() as tg:
            pending = tg.create_task(in_flight(s), name="in-flight")
            async with asyncio.timeout(10):  # the request has reached the hub
                while "node_yurthub_in_flight_requests_total 1.0" not in await metrics(
                    s, hub_server
                ):
                    await asyncio.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.5)
            assert proc.returncode is None  # waiting for the in-flight request
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(5):
                assert await proc.wait() == 0
            # forced: the in-flight request was cut, not answered
            assert isinstance(await pending, aiohttp.ClientError)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
