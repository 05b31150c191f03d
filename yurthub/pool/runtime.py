"""Pool scope assembled for one hub: the router's ``seams.PoolServer``.

Usage (``yurthub.assembly``)::

    pool = runtime.Pool(settings, tee=cache.tee, filters=filters)
    hub = server.Hub(settings, ..., pool=pool)            # the router asks pool.answer first
    pool.attach_metrics(hub.metrics)
    tg.create_task(pool.run(hub.own_route, leader_ssl=..., serving_ssl=..., ready=...))

``run`` owns, in one TaskGroup: the multiplexer's feeders, the leaders' health checks, the
follower of ConfigMap ``<--namespace>/leader-hub-<--nodepool-name>`` (through the hub's own
proxy, so it is cached and known again after a restart offline), and, on a hub with a node IP,
the multiplexer port ``<--node-ip>:<--multiplexer-port>`` that serves the pool's followers.

The ConfigMap is read whole (``leaderconfigs.parse``): a malformed one leaves the last good
configuration in place and is logged once as a warning (again only when it changes); a
missing one means no leaders and the ``--pool-scope-resources`` set.

The multiplexer port answers nothing but pool-scoped list/watch from the multiplexer (403
otherwise; YurtHub serves its whole proxy there, which lends the leader's identity to any
caller); over TLS it wants a client certificate of a node (``system:node:<name>``, signed by
the cluster CA), as followers present. Without the hub's serving certificate it is not served
(followers then read from the cloud); ``leader_tls=False`` (tests on loopback only) serves
plain HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import logging
import ssl
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from aiohttp import web

from yurthub import following, listening, metrics, requestinfo, settings
from yurthub.kubeproto import converting
from yurthub.pool import (
    feeding,
    feedsources,
    gvrs,
    leaderconfigs,
    leaders,
    metering,
    multiplexer,
    watchcache,
)
from yurthub.proxy import identifying, responses, seams

log = logging.getLogger(__name__)

NODE_PREFIX = "system:node:"
MAX_CONFIGMAP_BYTES = 4 << 20
MAX_PORT_REQUESTS = 1024
"""Requests (mostly followers' watches: two per follower) the multiplexer port serves at
once; more get 429. Bounds what a hostile node on the pool's network can hold open."""


class Pool:
    def __init__(
        self,
        hub: settings.HubSettings,
        *,
        tee: seams.Tee | None = None,
        filters: seams.ResponseFilter | None = None,
        converter: converting.Converter | None = None,
        shared: Iterable[gvrs.Gvr] = (),
    ) -> None:
        """``converter``: the hub's protobuf converter (shared with its cache: one set of
        descriptors in memory); ``shared``: resources multiplexed beside the pool-scoped set
        whatever the ConfigMap says (the filters' NodePools: the same for every hub of the
        pool, so followers read them from their leader)."""
        self.settings = hub
        p = hub.pool
        self.shared = frozenset(shared)
        self.config = leaderconfigs.PoolConfig()
        self.is_leader = False
        self.route = following.ProxyRoute("")
        """The hub's own proxy (``hub.own_route``), given to ``run``."""
        self.multiplexer_url = ""
        """``http(s)://host:port`` of the multiplexer port once served."""
        self.leaders = leaders.Leaders(
            p.multiplexer_port,
            interval=p.leader_check_interval,
            timeout=p.leader_check_timeout,
            penalty=p.leader_penalty,
        )
        self.sources = feedsources.Sources(
            lambda: self.route, self.leaders, leader_tls=p.leader_tls
        )
        self._leader_ssl: Callable[[], ssl.SSLContext | bool] = lambda: True
        self.meter: metering.PoolMeter | None = None
        self._meter_proxy = _LateMeter(self)
        self.mux = multiplexer.Multiplexer(
            multiplexer.Settings(
                node_name=hub.node_name,
                limits=watchcache.Limits(
                    max_bytes=p.max_bytes,
                    history_events=p.history_events,
                    watcher_events=p.watcher_events,
                    watcher_bytes=p.watcher_bytes,
                ),
                min_request_timeout=hub.proxy.min_request_timeout,
                bookmark_interval=p.bookmark_interval,
                follower_bookmark_interval=p.follower_bookmark_interval,
                feed=feeding.FeedSettings(
                    user_agent=f"{multiplexer.FOLLOWER_PREFIX}{hub.node_name}",
                    leader_idle_timeout=p.leader_idle_timeout,
                    max_item=hub.cache.max_event_bytes,
                    pace=hub.pace,
                ),
            ),
            self.sources,
            leader_ssl=lambda: self._leader_ssl(),
            tee=tee,
            filters=filters,
            meter=self._meter_proxy,
            resources=self.shared.union(p.resources),
            converter=converter,
        )
        self.cloud_healthy: Callable[[], bool] = lambda: True
        """Whether some apiserver is healthy (``health.HealthChecker.any_healthy``): without
        one, what is read through the hub's own proxy comes from its disk cache."""
        self.cloud_last_seen: Callable[[], float | None] = lambda: None
        """Wall-clock time some apiserver last answered (``HealthChecker.last_success``)."""
        self._last_problem = ""
        self._runner: web.BaseRunner | None = None
        self._port_requests = 0

    # --- seams.PoolServer ------------------------------------------------------------------

    async def answer(
        self, request: web.BaseRequest, info: requestinfo.RequestInfo
    ) -> web.StreamResponse | None:
        return await self.mux.answer(request, info)

    def close(self) -> None:
        self.mux.close()

    async def wait_started(self) -> None:
        await self.mux.started.wait()

    async def status(self) -> dict[str, Any]:
        """The ``pool`` section of ``GET /v1/status``: this hub's role, the leaders and what
        each pool-scoped resource is read from."""
        source = self.sources.mode
        if self.is_leader:
            role = "leader"
        elif source is leaderconfigs.Source.POOL:
            role = "follower"
        else:
            role = "cloud"
        usable = self.leaders.healthy()
        cloud_healthy = self.cloud_healthy()
        last_seen = self.cloud_last_seen()
        resources = []
        for gvr, resource in sorted(self.mux.resources.items()):
            store = resource.store
            feeder = resource.feeder
            read_from = feeder.source if feeder else None
            resources.append(
                {
                    "resource": str(gvr),
                    **freshness(store.synced, read_from, cloud_healthy, last_seen),
                    "objects": store.objects,
                    "bytes": store.bytes,
                    "clients": store.watchers,
                    "lastError": feeder.failure["message"] if feeder and feeder.failure else "",
                }
            )
        return {
            "nodePool": self.settings.nodepool_name or None,
            "role": role,
            "leaders": [
                {"node": x.node, "address": x.address, "usable": usable.get(x, False)}
                for x in self.config.leaders
            ],
            "multiplexerUrl": self.multiplexer_url or None,
            "resources": resources,
        }

    # --- wiring ------------------------------------------------------------------------------

    def attach_metrics(self, hub_metrics: metrics.Metrics) -> None:
        self.meter = metering.PoolMeter(
            hub_metrics, f"{multiplexer.FOLLOWER_PREFIX}{self.settings.node_name}"
        )
        hub_metrics.registry.register(
            metering.PoolCollector(
                self.meter,
                self.mux,
                self.leaders.healthy,
                lambda: self.sources.mode,
                lambda: self.is_leader,
            )
        )

    async def run(
        self,
        route: following.ProxyRoute,
        *,
        leader_ssl: Callable[[], ssl.SSLContext | bool],
        serving_ssl: Callable[[], Awaitable[ssl.SSLContext | None]] | None = None,
        ready: Callable[[], list[str]] = list,
        follow_config: bool = True,
    ) -> None:
        """Until cancelled. ``route``: the hub's own proxy (``hub.own_route``); ``leader_ssl``:
        the TLS context (the hub's client certificate and
        the cluster CA) for leaders; ``serving_ssl``: waits for the multiplexer port's (the
        hub's serving certificate; None: the hub will have none); ``ready``: what is not ready
        (the readiness gate); ``follow_config``: False when the hub's ``yurt-hub-cfg`` follower
        also follows the pool's ConfigMap (``config_targets``: one ConfigMap watch per hub)."""
        self.route = route
        self._leader_ssl = leader_ssl
        p = self.settings.pool
        async with contextlib.AsyncExitStack() as stack:
            tg = await stack.enter_async_context(asyncio.TaskGroup())
            tg.create_task(self.mux.run(), name="pool-multiplexer")
            tg.create_task(self.leaders.run(), name="pool-leader-checks")
            if not self.settings.nodepool_name:
                self.sources.configured.set()
                log.info("no --nodepool-name: pool-scoped resources come from the cloud")
            elif follow_config:
                tg.create_task(self._follow_config(), name="pool-leader-configmap")
            if p.node_ip and p.multiplexer_port:
                stack.push_async_callback(self._stop_serving)
                if not p.leader_tls:
                    await self._serve(None, ready)
                else:
                    tg.create_task(self._serve_with_tls(serving_ssl, ready), name="pool-port")
            await asyncio.Event().wait()  # until cancelled

    # --- the leader-hub ConfigMap -----------------------------------------------------------

    def config_targets(self) -> dict[str, following.Target]:
        """The pool's ConfigMap (by name) for a follower of the hub's other ConfigMaps (none
        without ``--nodepool-name``)."""
        if not self.settings.nodepool_name:
            return {}
        return {leaderconfigs.name_for(self.settings.nodepool_name): _ConfigMapTarget(self)}

    async def _follow_config(self) -> None:
        namespace = self.settings.cache.config_namespace
        name = leaderconfigs.name_for(self.settings.nodepool_name)
        async with self.route.session() as session:
            await following.follow(
                _ConfigMapTarget(self),
                session,
                self.route.url,
                f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/configmaps",
                what=f"ConfigMap {namespace}/{name}",
                field_selector=f"metadata.name={name}",
                max_item=MAX_CONFIGMAP_BYTES,
                cloud_healthy=self.route.cloud_healthy,
                pace=self.route.pace,
            )

    def apply_configmap(self, data: Mapping[str, Any] | None) -> None:
        """The ConfigMap's data (None: there is none)."""
        self.sources.configured.set()
        try:
            config = leaderconfigs.parse(data) if data is not None else leaderconfigs.PoolConfig()
        except leaderconfigs.ConfigMapError as e:
            problem = str(e)
            if problem != self._last_problem:
                log.warning(
                    "ConfigMap %s is malformed, keeping the last good pool configuration: %s",
                    leaderconfigs.name_for(self.settings.nodepool_name),
                    problem,
                )
                self._last_problem = problem
            return
        self._last_problem = ""
        self.apply(config)

    def apply(self, config: leaderconfigs.PoolConfig) -> None:
        node = self.settings.node_name
        old_source = self.sources.mode
        self.config = config
        self.is_leader = self.sources.leading = leaderconfigs.is_leader(config, node)
        usable = config.leaders
        if not self.settings.pool.leader_tls:
            # Plain HTTP between hubs exists for tests on loopback: never to another address.
            usable = tuple(x for x in usable if ipaddress.ip_address(x.address).is_loopback)
        self.leaders.update(
            usable if not self.is_leader else (),
            keep_while_reachable=leaderconfigs.leaderless(config),
        )
        resources = (
            config.resources if config.resources is not None else self.settings.pool.resources
        )
        self.mux.set_resources(self.shared.union(resources))
        source = leaderconfigs.source(config, node)
        if self.leaders.lingering:
            source = leaderconfigs.Source.POOL
        self.sources.set_mode(source)
        if source is not old_source or config.leaders != self.leaders.leaders:
            log.info(
                "pool %s: leaders %s; this hub %s",
                self.settings.nodepool_name,
                ", ".join(f"{x.node}/{x.address}" for x in config.leaders) or "none",
                "leads"
                if self.is_leader
                else ("follows" if source is leaderconfigs.Source.POOL else "reads from the cloud"),
            )

    # --- the multiplexer port ---------------------------------------------------------------

    async def _serve_with_tls(
        self,
        serving_ssl: Callable[[], Awaitable[ssl.SSLContext | None]] | None,
        ready: Callable[[], list[str]],
    ) -> None:
        p = self.settings.pool
        context = await serving_ssl() if serving_ssl is not None else None
        if context is None:
            log.info(
                "the multiplexer port %s:%d is not served: the hub has no serving certificate "
                "(--kubeconfig gives it none; followers read from the cloud)",
                p.node_ip,
                p.multiplexer_port,
            )
            return
        await self._serve(context, ready)

    async def _serve(self, context: ssl.SSLContext | None, ready: Callable[[], list[str]]) -> None:
        p = self.settings.pool

        async def handler(request: web.BaseRequest) -> web.StreamResponse:
            return await self._handle(request, secure=context is not None, ready=ready)

        server = web.Server(
            handler,
            handler_cancellation=True,
            access_log=None,
            keepalive_timeout=self.settings.proxy.idle_timeout,
        )
        runner = web.ServerRunner(server, shutdown_timeout=0.5)
        await runner.setup()
        try:
            await web.TCPSite(runner, p.node_ip, p.multiplexer_port, ssl_context=context).start()
        except OSError as e:
            await runner.cleanup()
            log.error(
                "cannot serve the multiplexer port %s:%d: %s", p.node_ip, p.multiplexer_port, e
            )
            return
        self._runner = runner
        scheme = "https" if context is not None else "http"
        host = f"[{p.node_ip}]" if ":" in p.node_ip else p.node_ip
        port = runner.addresses[0][1] if runner.addresses else p.multiplexer_port
        self.multiplexer_url = f"{scheme}://{host}:{port}"
        log.info("multiplexer port: %s", self.multiplexer_url)

    async def _stop_serving(self) -> None:
        if self._runner is not None:
            await listening.close_runner(self._runner)
            self._runner = None

    async def _handle(
        self, request: web.BaseRequest, *, secure: bool, ready: Callable[[], list[str]]
    ) -> web.StreamResponse:
        try:
            info = requestinfo.classify(
                request.method, request.path, request.query.items(), request.headers
            )
        except requestinfo.BadRequestError as e:
            return responses.status(400, str(e))
        if secure:
            who = identifying.peer_common_name(request)
            if who is None:
                return responses.status(401, "a node's client certificate is required on this port")
            if not who.startswith(NODE_PREFIX):
                return responses.status(
                    403, f"{who!r} is not a node; this port serves only the pool's hubs"
                )
        if request.method != "GET" or not self.mux.handles(info):
            return responses.status(
                403,
                "this port serves list and watch of the pool-scoped resources "
                f"({gvrs.render_list(self.mux.wanted) or 'none'}) only",
            )
        missing = ready()
        if missing:
            return responses.status(503, f"hub is not ready: {', '.join(missing)}")
        if self._port_requests >= MAX_PORT_REQUESTS:
            busy = responses.status(429, "too many requests on the multiplexer port, retry later")
            busy.headers["Retry-After"] = "1"
            return busy
        self._port_requests += 1
        try:
            answer = await self.mux.answer(request, info)
        finally:
            self._port_requests -= 1
        if answer is None:
            return responses.status(
                503, f"{info.resource} is not served from this hub's memory now"
            )
        return answer


def freshness(
    synced: bool, source: feedsources.Source | None, cloud_healthy: bool, last_seen: float | None
) -> dict[str, Any]:
    """``synced``, ``readFrom`` and ``staleSince`` of one pool-scoped resource for
    ``/v1/status``. PURE.

    Read through the hub's own proxy (``cloud``) while no apiserver is healthy, the feeder's
    watch is held by the disk cache: nothing new arrives, so the store is not synced with the
    cloud but stale since the cloud last answered, and it is read from the cache. (A follower
    reading a leader trusts the leader's word: the leader's own status says whether it is cut.)
    """
    offline = source is not None and source.leader is None and not cloud_healthy
    if not offline:
        return {
            "synced": synced,
            "readFrom": source.name if source is not None else None,
            "staleSince": None,
        }
    stale = None
    if synced and last_seen is not None:
        stale = datetime.datetime.fromtimestamp(last_seen, datetime.UTC)
    return {
        "synced": False,
        "readFrom": "cache",
        "staleSince": stale.strftime("%Y-%m-%dT%H:%M:%SZ") if stale is not None else None,
    }


class _ConfigMapTarget:
    """``following.Target`` for the one ConfigMap."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._listed: Mapping[str, Any] | None = None

    def begin(self) -> None:
        self._listed = None

    def add(self, obj: Mapping[str, Any]) -> None:
        self._listed = obj

    def commit(self) -> None:
        self._pool.apply_configmap(_data(self._listed))

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        self._pool.apply_configmap(None if event_type == "DELETED" else _data(obj))

    def mark_absent(self) -> None:
        self._pool.apply_configmap(None)


def _data(obj: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if obj is None:
        return None
    data = obj.get("data")
    return data if isinstance(data, Mapping) else {}


class _LateMeter:
    """The multiplexer's meter before ``attach_metrics`` (counts nothing) and after it."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def upstream_watch(self, gvr: gvrs.Gvr, source: str, delta: int) -> None:
        if self._pool.meter is not None:
            self._pool.meter.upstream_watch(gvr, source, delta)

    def upstream_bytes(self, gvr: gvrs.Gvr, source: str, count: int) -> None:
        if self._pool.meter is not None:
            self._pool.meter.upstream_bytes(gvr, source, count)

    def target(self, gvr: gvrs.Gvr, verb: str, server: str, delta: int) -> None:
        if self._pool.meter is not None:
            self._pool.meter.target(gvr, verb, server, delta)

    def served(self, gvr: gvrs.Gvr, verb: str, client: str) -> None:
        if self._pool.meter is not None:
            self._pool.meter.served(gvr, verb, client)

    def served_bytes(self, gvr: gvrs.Gvr, nbytes: int) -> None:
        if self._pool.meter is not None:
            self._pool.meter.served_bytes(gvr, nbytes)

    def in_flight(self, info: requestinfo.RequestInfo, delta: int) -> None:
        if self._pool.meter is not None:
            self._pool.meter.in_flight(info, delta)
