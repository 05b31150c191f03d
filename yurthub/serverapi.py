"""The hub server's own endpoints (``--bind-address:--serve-port``, 10267; YurtHub's OTA API
beside them is ``ota``'s).

- ``/v1/healthz``, ``/v1/readyz``, ``/metrics``: whoever reaches the port (probes, a scraper;
  nothing secret). ``/metrics`` is also all the metrics-only listener serves.
- for callers on this node only (``otadecisions.peer_refusal``: loopback, 403 for any other
  address, whatever the port is bound to; each refused address logged once, at most
  ``AFAR_LOGGED``): ``POST|PUT /v1/token`` (a new join token), ``GET /v1/status`` (the
  apiservers and their errors, certificate files and subjects, the cache's path, the
  outages: ``edgehub status``), ``GET /v1/outages`` (the outage history: it names the pods and
  ServiceAccounts the hub issued tokens to offline).

Every request's ``Host`` must be one the hub answers for (``routing.refused_host``). Scrapes run
on one thread of their own, never on the event loop (a scrape of a large registry or a slow
/proc read would stall every proxied request); concurrent ones share it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from yurthub import otadecisions
from yurthub.certs import apiclient, jws
from yurthub.proxy import routing

if TYPE_CHECKING:
    from yurthub.server import Hub

log = logging.getLogger("yurthub.server")

AFAR_LOGGED = 64
"""Distinct (endpoint, address) refusals logged as a warning; later ones are not logged."""


class ServerApi:
    """The endpoints of one hub (its settings, readiness, certificates, status, outages and
    metrics are the hub's)."""

    def __init__(self, hub: Hub) -> None:
        self._hub = hub
        self._scrape_pool = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="metrics-scrape"
        )
        self._scraping: asyncio.Future[bytes] | None = None
        self._afar_logged: set[tuple[str, str]] = set()

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/v1/healthz", self._healthz)
        router.add_get("/v1/readyz", self._readyz)
        router.add_get("/metrics", self.metrics)
        router.add_get("/v1/status", self._status)
        router.add_get("/v1/outages", self._outages)
        router.add_route("POST", "/v1/token", self._token)
        router.add_route("PUT", "/v1/token", self._token)

    def close(self) -> None:
        self._scrape_pool.shutdown(wait=False, cancel_futures=True)

    @web.middleware
    async def only_known_hosts(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        hub = self._hub
        assert hub.router is not None
        refused = routing.refused_host(hub.router.hosts, request)
        return refused if refused is not None else await handler(request)

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def _readyz(self, request: web.Request) -> web.Response:
        hub = self._hub
        missing, warnings = hub.readiness.report()
        notes = "".join(f"\nwarning: {w}" for w in warnings)
        if missing:
            return web.Response(status=500, text=f"not ready: {', '.join(missing)}{notes}")
        return web.Response(text=f"OK{notes}")

    async def _token(self, request: web.Request) -> web.Response:
        """YurtHub's ``/v1/token``: ``{"jointoken": "<id>.<secret>"}``. 400 for a bad body or
        token, 409 when the hub does not bootstrap with tokens, 500 when the cluster refuses
        it (wrong token, CA pin mismatch, unreachable), 403 for a caller not on this node (the
        port may be bound beyond loopback for health checks; a join token is this node's)."""
        hub = self._hub
        refused = self._from_afar(request, "/v1/token")
        if refused is not None:
            return refused
        try:
            body = orjson.loads(await request.read())
            text = body["jointoken"] if isinstance(body, dict) else None
        except (orjson.JSONDecodeError, KeyError):
            text = None
        if not isinstance(text, str) or not text:
            return web.Response(status=400, text='the body must be {"jointoken": "<id>.<secret>"}')
        certs = hub.certs
        if certs is None or not certs.source.requests_client_certificate:
            return web.Response(
                status=409,
                text="this hub does not bootstrap with join tokens (--kubeconfig or "
                "kubeletcertificate mode)",
            )
        try:
            message = await certs.use_join_token(text)
        except jws.DiscoveryError as e:
            status = 400 if "is not of the form" in str(e) else 500
            log.error("POST /v1/token: %s", e)
            return web.Response(status=status, text=f"join token refused: {e}")
        except (apiclient.Unreachable, apiclient.ApiError) as e:
            log.error("POST /v1/token: %s", e)
            return web.Response(status=500, text=f"cannot verify the join token: {e}")
        log.info("POST /v1/token: %s", message)
        return web.Response(text=f"update bootstrap token successfully: {message}")

    def _from_afar(self, request: web.Request, api: str) -> web.Response | None:
        """A 403 for a caller not on this node (``otadecisions.peer_refusal``), logged once per
        address (at most ``AFAR_LOGGED`` addresses); None for a loopback caller."""
        peer = request.transport.get_extra_info("peername") if request.transport else None
        host = peer[0] if isinstance(peer, tuple) and peer and isinstance(peer[0], str) else None
        problem = otadecisions.peer_refusal(host, api)
        if not problem:
            return None
        told = (api, host or "")
        if told not in self._afar_logged and len(self._afar_logged) < AFAR_LOGGED:
            self._afar_logged.add(told)
            log.warning("%s %s refused: %s", request.method, api, problem)
        return web.Response(status=403, text=problem)

    async def _status(self, request: web.Request) -> web.Response:
        """``GET /v1/status``: loopback callers only (it names the apiservers and their
        errors, certificate files and subjects, the cache's path, the outages)."""
        hub = self._hub
        refused = self._from_afar(request, "/v1/status")
        if refused is not None:
            return refused
        return web.Response(
            body=orjson.dumps(await hub.status(), option=orjson.OPT_INDENT_2),
            content_type="application/json",
        )

    async def _outages(self, request: web.Request) -> web.Response:
        """``GET /v1/outages``: loopback callers only (it names the pods and ServiceAccounts
        the hub issued tokens to offline)."""
        hub = self._hub
        refused = self._from_afar(request, "/v1/outages")
        if refused is not None:
            return refused
        document = {"node": hub.settings.node_name, **(await hub.outages.document())}
        return web.Response(
            body=orjson.dumps(document, option=orjson.OPT_INDENT_2),
            content_type="application/json",
        )

    async def metrics(self, request: web.Request) -> web.Response:
        hub = self._hub
        scraping = self._scraping
        if scraping is None or scraping.done():
            loop = asyncio.get_running_loop()
            scraping = loop.run_in_executor(self._scrape_pool, hub.metrics.exposition)
            self._scraping = scraping
        # shield: a scraper going away must not cancel the scrape the others wait for.
        body = await asyncio.shield(scraping)
        return web.Response(
            body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
        )
