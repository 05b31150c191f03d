"""The hub assembled: listeners, health, routing; start, phased stop.

- Proxy listener ``--bind-proxy-address:--proxy-port`` (HTTP, 10261): aiohttp's low-level server
  with one handler (``routing.Router.handle``), handler cancellation on client disconnect, and
  a request handler class whose protocol-level errors (oversized or malformed headers, garbage)
  are answered with a Kubernetes ``Status`` instead of aiohttp's text page. Like a Go server's
  ``ReadHeaderTimeout``, a connection that has not sent a whole request head within
  ``read_header_timeout`` of opening (or of starting its next request) is answered 408 and
  closed; past ``max_connections`` open connections a new one is answered 503 and closed.
- Hub server ``--bind-address:--serve-port`` (10267): ``/v1/healthz``, ``/v1/readyz`` (names
  what is not ready), ``/metrics`` (this hub's own registry).
- HTTPS proxy 10268: not served until the hub has serving certificates (a later issue).

Usage (tests, the demo, the CLI)::

    hub = server.Hub(settings, tee=None, local=None)
    await hub.start()          # listeners bound; health probing started
    hub.proxy_url, hub.server_url
    await hub.stop()           # phased: stop accepting, end watches, drain, cancel, close

``start`` and ``stop`` must be awaited by the same task: it owns the hub's TaskGroup, whose tasks
are the health checker and, when the identity comes from ``--kubeconfig``, the identity follower
(``Upstream.follow_identity``: rotated certificates and token files are picked up while running).

The cache plugs in through ``tee`` / ``local`` (``proxy/seams.py``) and ``hub.on_lease``, the
response filters through ``filters``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from aiohttp import http_exceptions, web, web_protocol, web_request, web_server

from yurthub import (
    apiresources,
    balancing,
    health,
    kubeconfigs,
    labels,
    metrics,
    readiness,
    settings,
    statuses,
)
from yurthub.proxy import hosts, remote, routing, seams, upstream

log = logging.getLogger(__name__)


def _raw_status(code: int, reason: str, message: str) -> bytes:
    """A whole HTTP/1.1 Status answer that closes the connection, for when no request is being
    handled (aiohttp's writer is not in use)."""
    body = statuses.encode(statuses.failure(code, message))
    head = (
        f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
    )
    return head.encode("ascii") + body


class _StatusRequestHandler(web_protocol.RequestHandler):
    """aiohttp's connection handler, answering protocol errors with a ``Status``, bounding the
    time to send a request head, and refusing connections past the cap.

    The head timer runs while the connection waits for a request (from accept, and from the
    first byte of each later one): aiohttp itself only closes such a connection at its keep-alive
    timeout (75 s), so slowloris clients held the hub's connections (and fds) that long.
    """

    _header_handle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        server = self._manager
        assert isinstance(server, _ProxyServer) and isinstance(transport, asyncio.Transport)
        if len(server.connections) > server.max_connections:
            server.refused()
            transport.write(
                _raw_status(503, "Service Unavailable", "too many connections to the hub")
            )
            self.force_close()
            return
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        before = self._request_count
        super().data_received(data)
        if self._request_count != before:
            self._disarm_header_timer()  # a whole head arrived
        elif self._current_request is None and not self._messages:
            self._arm_header_timer()  # the first bytes of a next request

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        if self._header_handle is None:
            server = self._manager
            assert isinstance(server, _ProxyServer)
            self._header_handle = self._loop.call_later(
                server.read_header_timeout, self._header_timed_out
            )

    def _disarm_header_timer(self) -> None:
        if self._header_handle is not None:
            self._header_handle.cancel()
            self._header_handle = None

    def _header_timed_out(self) -> None:
        self._header_handle = None
        if self._current_request is not None or self._messages or self.transport is None:
            return  # a request is being handled: its time is the handler's business
        server = self._manager
        if isinstance(server, _ProxyServer):
            server.timed_out()
        log.debug("no request head from %s in time: closing", self.peername)
        self.transport.write(
            _raw_status(408, "Request Timeout", "no complete request head in time")
        )
        self.force_close()

    def handle_error(
        self,
        request: web_request.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:
            raise ConnectionError("response already started, cannot send an error")
        reason = None
        if status >= 500:
            log.error("error handling request: %r", exc, exc_info=exc)
            text = "internal error in the hub"
        elif isinstance(exc, http_exceptions.LineTooLong):
            status, reason = 431, "RequestHeaderFieldsTooLarge"
            text = "request header fields too large"
        else:
            log.info("bad request from %s: %s", request.remote, type(exc).__name__)
            text = f"malformed HTTP request ({type(exc).__name__ if exc else 'unparsable'})"
        body = statuses.encode(statuses.failure(status, text, reason=reason))
        resp = web.Response(status=status, body=body, content_type="application/json")
        resp.force_close()
        return resp


class _ProxyServer(web_server.Server):
    def __init__(
        self,
        handler: Any,
        *,
        read_header_timeout: float,
        max_connections: int,
        collectors: metrics.Metrics,
        **kwargs: Any,
    ) -> None:
        super().__init__(handler, **kwargs)
        self.read_header_timeout = read_header_timeout
        self.max_connections = max_connections
        self._metrics = collectors

    def __call__(self) -> web_protocol.RequestHandler:
        return _StatusRequestHandler(self, loop=self._loop, **self._kwargs)

    def refused(self) -> None:
        self._metrics.refused_connections.inc()

    def timed_out(self) -> None:
        self._metrics.header_timeouts.inc()

    def _make_request(
        self,
        message: Any,
        payload: Any,
        protocol: web_protocol.RequestHandler,
        writer: Any,
        task: asyncio.Task[None],
    ) -> web_request.BaseRequest:
        # web.Request (not BaseRequest) so handlers and the cache's LocalAnswerer get the type
        # they are written against; there is no URL dispatcher, so match_info stays empty.
        return web.Request(message, payload, protocol, writer, task, self._loop)


class Hub:
    def __init__(
        self,
        hub_settings: settings.HubSettings,
        *,
        tee: seams.Tee | None = None,
        local: seams.LocalAnswerer | None = None,
        identity: kubeconfigs.Identity | None = None,
        filters: seams.ResponseFilter | None = None,
    ) -> None:
        """``identity``: use this one (fixed) instead of loading ``--kubeconfig``.
        ``filters``: the response filters (``yurthub.filters.runtime``); their inputs join the
        readiness conditions (``filter-inputs``)."""
        self.settings = hub_settings
        components = (
            *hub_settings.cache.cache_agents,
            f"multiplexer-proxy-{hub_settings.node_name}",
        )
        self.metrics = metrics.Metrics(labels.Bounds(components))
        # Scrapes run here, one at a time, never on the event loop (a scrape of a large registry
        # or a slow /proc read would stall every proxied request); concurrent ones share it.
        self._scrape_pool = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="metrics-scrape"
        )
        self._scraping: asyncio.Future[bytes] | None = None
        self.readiness = readiness.Readiness()
        self._tee = tee
        self._local = local
        self._filters = filters
        self._identity = identity
        self._stack = contextlib.AsyncExitStack()
        self._health_task: asyncio.Task[None] | None = None
        self._identity_task: asyncio.Task[None] | None = None
        self._discovery_task: asyncio.Task[None] | None = None
        self._proxy_runner: web.BaseRunner | None = None
        self._server_runner: web.AppRunner | None = None
        self.proxy_url = ""
        self.server_url = ""
        self.health: health.HealthChecker | None = None
        self.router: routing.Router | None = None
        self.remote: remote.RemoteProxy | None = None
        self.upstream: upstream.Upstream | None = None
        self._stopping = False

    # --- wiring for the cache engineer's runtime ---

    @property
    def on_lease(self) -> seams.LeaseCallback | None:
        return self.health.on_lease if self.health else self._pending_on_lease

    @on_lease.setter
    def on_lease(self, callback: seams.LeaseCallback | None) -> None:
        self._pending_on_lease = callback
        if self.health is not None:
            self.health.on_lease = callback

    _pending_on_lease: seams.LeaseCallback | None = None

    # --- life cycle ---

    async def start(self) -> None:
        s = self.settings
        identity = self._identity
        followed = None
        policy = trust_policy(s.upstream)
        if identity is None:
            if s.upstream.kubeconfig is not None:
                loop = asyncio.get_running_loop()
                identity = await loop.run_in_executor(
                    None, kubeconfigs.load, s.upstream.kubeconfig, policy
                )
                followed = s.upstream.kubeconfig
            else:
                log.warning(
                    "no --kubeconfig: the hub has no identity of its own; requests without a "
                    "Bearer token and the node-lease heartbeat go out anonymous"
                )
                identity = kubeconfigs.anonymous(s.upstream.servers, policy)
        where = f"kubeconfig {followed}" if followed is not None else "the hub's identity"
        if any(server.startswith("https://") for server in s.upstream.servers):
            warning = kubeconfigs.trust_warning(identity.trust, where)
            if warning:
                log.warning("%s", warning)
        client = upstream.Upstream(s.upstream, identity, kubeconfig=followed, trust=policy)
        await client.start()
        self.upstream = client
        self._stack.push_async_callback(client.close)
        for warning in hosts.exposure_warnings(s.listen):
            log.warning("%s", warning)
        self.health = health.HealthChecker(s, client, self.metrics)
        self.health.on_lease = self._pending_on_lease
        self.remote = remote.RemoteProxy(client, s.proxy, self.metrics, self._tee, self._filters)
        checker = self.health
        # A silent link: slow answers get their server probed at once, and a server declared
        # unhealthy loses its requests in flight (reads go to the cache, watches re-watch).
        self.remote.on_slow = checker.report_slow
        checker.on_unhealthy.append(self.remote.abandon)
        self.readiness.add("settings", lambda: True)
        self.readiness.add("initial-health-probe", checker.initial_probe_done.is_set)
        self.readiness.add("not-stopping", lambda: not self._stopping)
        if self._filters is not None:
            self.readiness.add("filter-inputs", self._filters.ready)
        self.router = routing.Router(
            hub=s,
            balancer=balancing.Balancer(s.upstream.servers, s.upstream.lb_mode),
            checker=checker,
            proxy=self.remote,
            ready=self.readiness,
            collectors=self.metrics,
            local=self._local,
        )
        tg = await self._stack.enter_async_context(asyncio.TaskGroup())
        self._health_task = tg.create_task(checker.run(), name="health-checker")
        self._identity_task = tg.create_task(client.follow_identity(), name="identity-follower")
        balancer = balancing.Balancer(s.upstream.servers, settings.LbMode.PRIORITY)
        self._discovery_task = tg.create_task(
            apiresources.follow(
                client, lambda: balancer.pick(checker.is_healthy), self.metrics.bounds
            ),
            name="discovery-for-metric-labels",
        )
        try:
            await self._start_listeners()
        except BaseException:
            await self._abort_start()
            raise

    async def _abort_start(self) -> None:
        self._cancel_tasks()
        await self._cleanup_runners()
        await self._stack.aclose()
        self._scrape_pool.shutdown(wait=False, cancel_futures=True)

    async def _start_listeners(self) -> None:
        s = self.settings
        assert self.router is not None
        handle = self.router.handle

        async def handler(request: web_request.BaseRequest) -> web.StreamResponse:
            assert isinstance(request, web.Request)
            return await handle(request)

        proxy_server = _ProxyServer(
            handler,
            read_header_timeout=s.proxy.read_header_timeout,
            max_connections=s.proxy.max_connections,
            collectors=self.metrics,
            handler_cancellation=True,
            max_field_size=s.proxy.max_field_size,
            max_line_size=s.proxy.max_field_size,
            access_log=None,
        )
        self._proxy_runner = web.ServerRunner(proxy_server, shutdown_timeout=0.5)
        await self._proxy_runner.setup()
        site = web.TCPSite(
            self._proxy_runner, s.listen.bind_proxy_address, s.listen.proxy_port, backlog=1024
        )
        await site.start()
        self.proxy_url = _url_of(self._proxy_runner)

        app = web.Application(middlewares=[self._only_known_hosts])
        app.router.add_get("/v1/healthz", self._healthz)
        app.router.add_get("/v1/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._server_runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._server_runner.setup()
        await web.TCPSite(self._server_runner, s.listen.bind_address, s.listen.serve_port).start()
        self.server_url = _url_of(self._server_runner)
        log.info("hub proxy listening on %s, hub server on %s", self.proxy_url, self.server_url)

    async def stop(self, grace: float | None = None, *, force: asyncio.Event | None = None) -> None:
        """Phased stop: stop accepting, end watches, let in-flight finish (``grace`` seconds, or
        until ``force`` is set), cancel the rest, close the upstream pool."""
        if self._stopping:
            return
        self._stopping = True
        grace = self.settings.proxy.shutdown_grace if grace is None else grace
        if self._proxy_runner is not None:
            for site in list(self._proxy_runner.sites):
                await site.stop()
        if self.remote is not None:
            ended = self.remote.end_watches()
            if ended:
                log.info("ended %d open watches", ended)
        if self._local is not None:
            self._local.close()
        if self.router is not None and self.router.in_flight:
            log.info("waiting up to %ss for %d in-flight requests", grace, self.router.in_flight)
            waiters: list[Coroutine[Any, Any, Any]] = [self.router.wait_idle()]
            if force is not None:
                waiters.append(force.wait())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await _first(*waiters)
        await self._cleanup_runners()
        self._cancel_tasks()
        await self._stack.aclose()
        self._scrape_pool.shutdown(wait=False, cancel_futures=True)

    def _cancel_tasks(self) -> None:
        for task in (self._health_task, self._identity_task, self._discovery_task):
            if task is not None:
                task.cancel()

    async def _cleanup_runners(self) -> None:
        for runner in (self._proxy_runner, self._server_runner):
            if runner is not None:
                await runner.cleanup()
        self._proxy_runner = self._server_runner = None

    # --- hub server endpoints ---

    @web.middleware
    async def _only_known_hosts(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        assert self.router is not None
        refused = routing.refused_host(self.router.hosts, request)
        return refused if refused is not None else await handler(request)

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def _readyz(self, request: web.Request) -> web.Response:
        missing, warnings = self.readiness.report()
        notes = "".join(f"\nwarning: {w}" for w in warnings)
        if missing:
            return web.Response(status=500, text=f"not ready: {', '.join(missing)}{notes}")
        return web.Response(text=f"OK{notes}")

    async def _metrics(self, request: web.Request) -> web.Response:
        scraping = self._scraping
        if scraping is None or scraping.done():
            loop = asyncio.get_running_loop()
            scraping = loop.run_in_executor(self._scrape_pool, self.metrics.exposition)
            self._scraping = scraping
        # shield: a scraper going away must not cancel the scrape the others wait for.
        body = await asyncio.shield(scraping)
        return web.Response(
            body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
        )


def trust_policy(upstream_settings: settings.UpstreamSettings) -> kubeconfigs.TrustPolicy:
    """What the hub's kubeconfig may use beyond its own CA (the CLI checks with it too)."""
    return kubeconfigs.TrustPolicy(
        allow_insecure=upstream_settings.allow_insecure_tls,
        allow_system_store=upstream_settings.allow_system_trust_store,
    )


async def _first(*aws: Any) -> None:
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(aw, name="hub-stop-wait") for aw in aws]
        done = asyncio.Event()
        for task in tasks:
            task.add_done_callback(lambda _t: done.set())
        await done.wait()
        for task in tasks:
            task.cancel()


def _url_of(runner: web.BaseRunner) -> str:
    for address in runner.addresses:
        host, port = address[0], address[1]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}"
    raise RuntimeError("listener has no address")
