"""Loopback fixtures for the hub: a small scriptable apiserver and a hub runner.

``FakeApiserver`` is a real aiohttp server on 127.0.0.1:0 that speaks just enough of the
apiserver for the proxy paths the simulated apiserver cannot script (mid-body closes, stalled
events, header echo); the kubectl/kubernetes-client tests use ``yurthub.testing``'s simulator.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
from aiohttp import web

from yurthub import listening, server, settings
from yurthub.proxy import seams
from yurthub.testing import partition, ports, simapiserver

LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


class FakeApiserver:
    def __init__(self) -> None:
        self.events: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.seen_headers: list[dict[str, str]] = []
        self.lease_puts = 0
        self.lease_delay = 0.0
        self.lease_in_pieces = False
        """Send lease answers in two writes a moment apart (a reader must not stop at one)."""
        self.requests = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        """Slow gets (``configmaps/slow``) being answered at once, and the most seen."""
        self.lease: dict[str, Any] | None = None
        self.watch_headers: asyncio.Event | None = None
        """When given, a pods watch waits for it before its headers (a slow apiserver);
        ``watches_held`` counts the ones that came."""
        self.watches_held = 0
        self.release_held = asyncio.Event()
        """Secret ``held`` (any method) is answered once this is set; ``held`` counts the
        requests for it that came."""
        self.held = 0
        self._runner: web.AppRunner | None = None
        self._hold: ports.PortHold | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def app(self) -> web.Application:
        app = web.Application()
        r = app.router
        r.add_get(LEASE_PATH + "/{name}", self._lease_get)
        r.add_put(LEASE_PATH + "/{name}", self._lease_put)
        r.add_post(LEASE_PATH, self._lease_post)
        r.add_get(LEASE_PATH, self._pods)  # a lease list or watch: held like a pods watch
        r.add_get("/api/v1/nodes/{name}", self._node)
        r.add_get("/api/v1/pods", self._pods)
        r.add_get("/api/v1/namespaces/{ns}/pods", self._pods)
        r.add_post("/api/v1/namespaces/{ns}/pods", self._echo_body)
        r.add_get("/api/v1/namespaces/{ns}/pods/{name}/exec", self._exec_ws)
        r.add_get("/api/v1/namespaces/{ns}/configmaps/broken", self._broken)
        r.add_get("/api/v1/namespaces/{ns}/configmaps/slow", self._slow)
        r.add_get("/api/v1/namespaces/{ns}/configmaps/stall", self._stall)
        r.add_get("/api/v1/namespaces/{ns}/configmaps", self._slow_list)
        r.add_get("/version", self._version)
        r.add_route("*", "/api/v1/namespaces/{ns}/secrets/{name}", self._secret)
        return app

    async def start(self) -> None:
        """Serve; again on the same port after ``stop(keep_port=True)``."""
        if self._hold is None:
            self._hold = ports.PortHold("127.0.0.1", self.port)
            self.port = self._hold.port
        self._runner = web.AppRunner(
            self.app(), access_log=None, shutdown_timeout=0.1, handler_cancellation=True
        )
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, "127.0.0.1", self.port, reuse_address=True, reuse_port=True
        )
        await site.start()

    async def stop(self, *, keep_port: bool = False) -> None:
        """Stop serving (new connections are refused); ``keep_port`` holds the port for a
        ``start`` to come, so that no outgoing connection takes it meanwhile."""
        if self._runner is not None:
            await listening.close_runner(self._runner)
            self._runner = None
        if not keep_port and self._hold is not None:
            self._hold.close()
            self._hold = None

    def _record(self, request: web.Request) -> None:
        self.requests += 1
        self.seen_headers.append(dict(request.headers))

    async def _lease_answer(
        self, request: web.Request, lease: dict[str, Any], status: int = 200
    ) -> web.StreamResponse:
        if not self.lease_in_pieces:
            return web.json_response(lease, status=status)
        body = orjson.dumps(lease)
        resp = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        await resp.write(body[:10])
        await asyncio.sleep(0.05)
        await resp.write(body[10:])
        await resp.write_eof()
        return resp

    async def _lease_get(self, request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(self.lease_delay)
        if self.lease is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        return await self._lease_answer(request, self.lease)

    async def _lease_post(self, request: web.Request) -> web.StreamResponse:
        self.lease = await request.json()
        self.lease["metadata"]["resourceVersion"] = "1"
        return await self._lease_answer(request, self.lease, status=201)

    async def _lease_put(self, request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(self.lease_delay)
        self.lease_puts += 1
        self.lease = await request.json()
        return await self._lease_answer(request, self.lease)

    async def _node(self, request: web.Request) -> web.Response:
        self._record(request)
        return web.json_response({"kind": "Node", "metadata": {"name": "n1", "uid": "u1"}})

    async def _version(self, request: web.Request) -> web.Response:
        self._record(request)
        return web.json_response({"gitVersion": "v1.32.0"})

    async def _pods(self, request: web.Request) -> web.StreamResponse:
        self._record(request)
        if request.query.get("watch") in ("1", "true"):
            if self.watch_headers is not None:
                self.watches_held += 1
                await self.watch_headers.wait()
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            while True:
                event = await self.events.get()
                if event is None:  # scripted mid-stream close
                    if request.transport is not None:
                        request.transport.close()
                    return resp
                await resp.write(event)
        return web.Response(
            body=orjson.dumps(
                {"kind": "PodList", "metadata": {"resourceVersion": "5"}, "items": []}
            ),
            content_type="application/json",
        )

    async def _echo_body(self, request: web.Request) -> web.StreamResponse:
        self._record(request)
        resp = web.StreamResponse(status=201, headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        async for chunk in request.content.iter_any():
            await resp.write(chunk)
        await resp.write_eof()
        return resp

    async def _broken(self, request: web.Request) -> web.StreamResponse:
        self._record(request)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.content_length = 1000
        await resp.prepare(request)
        await resp.write(b'{"kind":"ConfigMap",')
        await asyncio.sleep(0.05)
        if request.transport is not None:
            request.transport.close()
        return resp

    async def _slow(self, request: web.Request) -> web.Response:
        self._record(request)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            await asyncio.sleep(float(request.query.get("sleep", "0.5")))
        finally:
            self.in_flight -= 1
        return web.json_response({"kind": "ConfigMap", "metadata": {"name": "slow"}})

    async def _slow_list(self, request: web.Request) -> web.Response:
        self._record(request)
        await asyncio.sleep(float(request.query.get("sleep", "0")))
        body = {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {}, "items": []}
        return web.json_response(body)

    async def _stall(self, request: web.Request) -> web.StreamResponse:
        """Headers and half a body, then silence (a link that died mid-answer)."""
        self._record(request)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.content_length = 1000
        await resp.prepare(request)
        await resp.write(b'{"kind":"ConfigMap",')
        await asyncio.sleep(3600)
        return resp

    async def _secret(self, request: web.Request) -> web.StreamResponse:
        self._record(request)
        name = request.match_info["name"]
        if name == "forbidden":
            body = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "no"}
            return web.json_response(body, status=403)
        if name == "gone" and request.method == "DELETE":
            return web.Response(status=204)
        if name == "held":
            await request.read()
            self.held += 1
            await self.release_held.wait()
            return web.json_response({"kind": "Secret", "metadata": {"name": "held"}})
        # hop-by-hop headers the hub must not pass on
        headers = {
            "Connection": "X-Hop",
            "X-Hop": "1",
            "Keep-Alive": "timeout=5",
            "Audit-Id": "abc",
            "Content-Type": "application/json",
        }
        return web.Response(body=b'{"kind":"Secret"}', headers=headers)

    async def _exec_ws(self, request: web.Request) -> web.WebSocketResponse:
        self._record(request)
        ws = web.WebSocketResponse(protocols=("v5.channel.k8s.io",))
        await ws.prepare(request)
        async for msg in ws:
            await ws.send_bytes(b"echo:" + msg.data)
        return ws


@dataclasses.dataclass
class RecordingSink:
    chunks: list[bytes] = dataclasses.field(default_factory=list)
    finished: bool = False
    aborted: str = ""

    def feed(self, chunk: bytes) -> None:
        self.chunks.append(chunk)

    async def finish(self) -> None:
        self.finished = True

    def abort(self, reason: str) -> None:
        self.aborted = reason


class RecordingTee:
    def __init__(self) -> None:
        self.sinks: list[tuple[str, RecordingSink]] = []

    def open(self, info: Any, status: int, headers: Any) -> seams.TeeSink | None:
        sink = RecordingSink()
        self.sinks.append((info.path, sink))
        return sink


class ScriptedLocal:
    """A LocalAnswerer answering 200 ``{"local": reason}`` for the reasons it is told to."""

    def __init__(self, reasons: set[str]) -> None:
        self.reasons = reasons
        self.calls: list[tuple[str, str]] = []

    async def answer(
        self, request: web.Request, info: Any, *, reason: str
    ) -> web.StreamResponse | None:
        self.calls.append((info.path, reason))
        if reason not in self.reasons:
            return None
        return web.json_response({"local": reason})

    def close(self) -> None:
        pass


def hub_settings(
    servers: list[str],
    *,
    upstream: dict[str, Any] | None = None,
    proxy: dict[str, Any] | None = None,
    listen: dict[str, Any] | None = None,
    **heartbeat: Any,
) -> settings.HubSettings:
    hb = {"interval": 0.3, "timeout": 1.0, "healthy_threshold": 1} | heartbeat
    up = {"servers": tuple(servers), "connect_timeout": 1.0} | (upstream or {})
    return settings.HubSettings(
        node_name="n1",
        upstream=settings.UpstreamSettings(**up),
        listen=settings.ListenSettings(**({"serve_port": 0, "proxy_port": 0} | (listen or {}))),
        heartbeat=settings.HeartbeatSettings(**hb),
        proxy=settings.ProxySettings(**({"shutdown_grace": 2.0} | (proxy or {}))),
    )


@contextlib.asynccontextmanager
async def running_hub(
    servers: list[str],
    *,
    tee: seams.Tee | None = None,
    local: seams.LocalAnswerer | None = None,
    wait_ready: bool = True,
    upstream: dict[str, Any] | None = None,
    proxy: dict[str, Any] | None = None,
    listen: dict[str, Any] | None = None,
    **heartbeat: Any,
) -> AsyncIterator[server.Hub]:
    built = hub_settings(servers, upstream=upstream, proxy=proxy, listen=listen, **heartbeat)
    hub = server.Hub(built, tee=tee, local=local)
    await hub.start()
    try:
        if wait_ready:
            assert hub.health is not None
            async with asyncio.timeout(5):
                await hub.health.initial_probe_done.wait()
        yield hub
    finally:
        await hub.stop()


@contextlib.asynccontextmanager
async def hub_behind_a_link(
    tmp_path: pathlib.Path, *, interval: float, timeout: float = 0.5
) -> AsyncIterator[tuple[simapiserver.SimApiserver, partition.Partition, server.Hub]]:
    """A simulated apiserver behind a link the test can cut or blackhole, and a hub (node n1,
    a client certificate) that probes it every ``interval`` s (``timeout`` s each, two good
    probes to trust it again); yielded once the hub trusts it."""
    sim = simapiserver.SimApiserver(workdir=tmp_path / "sim")
    await sim.start()
    identity = tmp_path / "hub.kubeconfig"
    sim.write_kubeconfig(identity, user="system:node:n1", groups=["system:nodes"], auth="cert")
    try:
        async with (
            partition.Partition("127.0.0.1", sim.port) as link,
            running_hub(
                [link.url.replace("http://", "https://")],
                upstream={"kubeconfig": identity},
                interval=interval,
                timeout=timeout,
                healthy_threshold=2,
            ) as hub,
        ):
            assert hub.health is not None
            async with asyncio.timeout(10):
                while not hub.health.any_healthy():
                    await asyncio.sleep(0.05)
            yield sim, link, hub
    finally:
        await sim.stop()


def lease_requests(sim: simapiserver.SimApiserver, verb: str) -> list[int]:
    """The codes ``sim`` answered the Lease requests of ``verb`` with, in order."""
    return [r.code for r in sim.audit_log() if r.resource == "leases" and r.verb == verb]


async def raw(url: str, head: bytes) -> tuple[int, bytes]:
    """One HTTP/1.1 request written by hand (``head``: request line and headers, without the
    blank line) to ``url`` (``http://host:port``), for what a client library would refuse to
    send; the status code and the body of the answer."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host.strip("[]"), int(port))
    try:
        writer.write(head + b"Connection: close\r\n\r\n")
        await writer.drain()
        async with asyncio.timeout(3):
            answer = await reader.read()
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]
