"""The multiplexer: one store and one feeder per pool-scoped resource, shared by every local
list/watch client of the hub (and, on a leader, by the followers' multiplexers).

``answer(request, info)`` is the router's entry point. It answers a list/watch of a
multiplexed resource from memory, or returns None for the ordinary proxy path:

- requests this hub's own feeders send (User-Agent ``multiplexer-proxy-<node>``);
- requests with ``Authorization: Bearer`` (a pod's ServiceAccount: it is answered with its own
  rights upstream, never with the hub's; YurtHub multiplexes them with the hub's identity);
- views the store does not hold (Tables, PartialObjectMetadata, a protobuf-only Accept),
  subresources, ``continue`` tokens, an ``Exact`` resourceVersion the store is not at;
- a resource whose first list failed definitively (403, 404, no cloud and nothing cached:
  the client gets what it would without the multiplexer), or whose objects exceed the memory
  budget (``max_bytes``; logged once, tried again after ``RETRY_OVER_BUDGET``).

Every resource of the set is fed from the start (YurtHub starts a cacher at the first request
and answers 429 meanwhile; every node's kubelet and kube-proxy ask for services and
endpointslices at once anyway). A request that comes before the first list waits for it up to
3 s, then gets 429 with ``Retry-After: 1``. ``set_resources`` replaces the set live (the
``pool-scoped-metadata`` key of ``leader-hub-<pool>``): removed resources stop their feeder
and end their watchers (clients re-watch through the ordinary path).

Every task (feeders) is owned by ``run``'s TaskGroup; ``close`` (hub shutdown) ends every watch
cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import ssl
import time
from collections.abc import Callable, Iterable
from typing import Protocol

import aiohttp
from aiohttp import web

from yurthub import requestinfo, statuses
from yurthub.kubeproto import converting
from yurthub.pool import feeding, feedsources, gvrs, rvrules, selection, serving, watchcache
from yurthub.proxy import headers, seams

log = logging.getLogger(__name__)

RETRY_OVER_BUDGET = 600.0
FOLLOWER_PREFIX = "multiplexer-proxy-"


class Meter(feeding.Meter, Protocol):
    """What the multiplexer reports beyond its feeders (``metering`` implements it)."""

    def served(self, gvr: gvrs.Gvr, verb: str, client: str) -> None: ...
    def served_bytes(self, gvr: gvrs.Gvr, nbytes: int) -> None: ...
    def in_flight(self, info: requestinfo.RequestInfo, delta: int) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    node_name: str
    limits: watchcache.Limits = dataclasses.field(default_factory=watchcache.Limits)
    min_request_timeout: float = 1800.0
    bookmark_interval: float = 60.0
    follower_bookmark_interval: float = 2.0
    feed: feeding.FeedSettings | None = None


class Resource:
    """One multiplexed resource: its store, its feeder and a way to wait for progress."""

    def __init__(self, gvr: gvrs.Gvr, store: watchcache.Store) -> None:
        self.gvr = gvr
        self.store = store
        self.feeder: feeding.Feeder | None = None
        self.task: asyncio.Task[None] | None = None
        self._advanced = asyncio.Event()

    def advanced(self) -> None:
        wake, self._advanced = self._advanced, asyncio.Event()
        wake.set()

    async def wait_synced(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while not self.store.synced and (
                    self.feeder is None or self.feeder.failure is None
                ):
                    await self._advanced.wait()

    async def wait_fresh(self, rv: int, seconds: float) -> bool:
        """Until the store is at ``rv`` or later (False after ``seconds``)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while self.store.rv < rv:
                    await self._advanced.wait()
        return self.store.rv >= rv


class Multiplexer:
    def __init__(
        self,
        settings: Settings,
        sources: feedsources.Sources,
        *,
        leader_ssl: Callable[[], ssl.SSLContext | bool],
        tee: seams.Tee | None,
        filters: seams.ResponseFilter | None,
        meter: Meter,
        resources: Iterable[gvrs.Gvr] = gvrs.DEFAULTS,
        clock: Callable[[], float] = time.monotonic,
        converter: converting.Converter | None = None,
    ) -> None:
        self.settings = settings
        self._converter = converter or converting.Converter()
        self.sources = sources
        self.filters = filters
        self._leader_ssl = leader_ssl
        self._tee = tee
        self._meter = meter
        self._clock = clock
        self._own_agent = f"{FOLLOWER_PREFIX}{settings.node_name}"
        self._feed = settings.feed or feeding.FeedSettings(user_agent=self._own_agent)
        self.wanted: frozenset[gvrs.Gvr] = frozenset(resources)
        self._keys = gvrs.keys(self.wanted)
        self.resources: dict[gvrs.Gvr, Resource] = {}
        self._disabled: dict[gvrs.Gvr, float] = {}
        """Resources given up on (over budget) until then."""
        self._session: aiohttp.ClientSession | None = None
        """Leaders' (TCP); ``_own_session``: the hub's own socket (the cloud's)."""
        self._own_session: aiohttp.ClientSession | None = None
        self._tg: asyncio.TaskGroup | None = None
        self._closing = False
        self.started = asyncio.Event()
        """Set once ``run`` can feed resources."""

    # --- configuration -----------------------------------------------------------------------

    def set_resources(self, wanted: Iterable[gvrs.Gvr]) -> None:
        new = frozenset(wanted)
        if new == self.wanted:
            return
        log.info("pool-scoped resources: %s", gvrs.render_list(new) or "none")
        self.wanted = new
        self._keys = gvrs.keys(new)
        for gvr in [g for g in self.resources if g not in new]:
            self._drop(gvr, "the resource is no longer pool-scoped")
        for gvr in sorted(new):
            self._resource(gvr)

    def _drop(self, gvr: gvrs.Gvr, why: str) -> None:
        resource = self.resources.pop(gvr)
        if resource.task is not None:
            resource.task.cancel()
        resource.store.reset(why)

    # --- running -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Feed the resources clients ask for, until cancelled."""
        # Bodies are inflated by the feeders (a streaming list is many gzip members).
        async with (
            aiohttp.ClientSession(auto_decompress=False) as session,
            self.sources.route().session(auto_decompress=False) as own_session,
            asyncio.TaskGroup() as tg,
        ):
            self._session = session
            self._own_session = own_session
            self._tg = tg
            self.started.set()
            for gvr in sorted(self.wanted):
                self._resource(gvr)
            try:
                await asyncio.Event().wait()
            finally:
                self.started.clear()
                self._session = self._own_session = self._tg = None
                for gvr in list(self.resources):
                    self._drop(gvr, "the hub is stopping")

    def close(self) -> None:
        """Hub shutdown: end every watch cleanly; new requests take the ordinary path."""
        self._closing = True
        for resource in self.resources.values():
            resource.store.close_watchers("the hub is stopping")

    def _resource(self, gvr: gvrs.Gvr) -> Resource | None:
        resource = self.resources.get(gvr)
        if resource is not None:
            return resource
        if self._session is None or self._tg is None:
            return None  # not running (starting or stopping)
        store = watchcache.Store(gvr.resource, self.settings.limits)
        resource = Resource(gvr, store)
        resource.feeder = feeding.Feeder(
            gvr,
            store,
            self.sources,
            session=self._session,
            own_session=self._own_session,
            leader_ssl=self._leader_ssl,
            tee=self._tee,
            feed=self._feed,
            meter=self._meter,
            on_advance=lambda: self._advanced(resource),
            converter=self._converter,
        )
        resource.task = self._tg.create_task(resource.feeder.run(), name=f"pool-feeder-{gvr}")
        self.resources[gvr] = resource
        return resource

    def _advanced(self, resource: Resource) -> None:
        resource.advanced()
        store = resource.store
        if store.over_budget:
            self._disabled[resource.gvr] = self._clock() + RETRY_OVER_BUDGET
            log.error(
                "%s: %d objects take %d bytes, over the multiplexer's budget of %d; clients take "
                "the ordinary path, tried again in %.0fs",
                resource.gvr,
                store.objects,
                store.bytes,
                store.limits.max_bytes,
                RETRY_OVER_BUDGET,
            )
            self._drop(resource.gvr, "over the memory budget")

    # --- answering ---------------------------------------------------------------------------

    def handles(self, info: requestinfo.RequestInfo) -> bool:
        scoped, own = requestinfo.pool_scope(info, self._keys, self.settings.node_name)
        return scoped and not own

    async def answer(
        self, request: web.BaseRequest, info: requestinfo.RequestInfo
    ) -> web.StreamResponse | None:
        if self._closing or not self.handles(info):
            return None
        why = bypass(request, info)
        if why:
            log.debug("%s: ordinary path (%s)", info.describe(), why)
            return None
        gvr = gvrs.Gvr(info.group, info.version, info.resource)
        until = self._disabled.get(gvr)
        if until is not None:
            if self._clock() < until:
                return None
            del self._disabled[gvr]
        resource = self._resource(gvr)
        if resource is None:
            return None
        plan = rvrules.plan(options(request, info))
        if isinstance(plan, rvrules.Refuse):
            return serving.status_response(plan.status)
        if isinstance(plan, rvrules.Bypass):
            log.debug("%s: ordinary path (%s)", info.describe(), plan.why)
            return None
        sel = selection.build(
            info.resource, info.namespace, info.name, info.label_selector, info.field_selector
        )
        if not isinstance(sel, selection.Selection):
            return serving.status_response(sel)
        store = resource.store
        if not store.synced:
            await resource.wait_synced(rvrules.FRESHNESS_WAIT)
        if not store.synced:
            feeder = resource.feeder
            if feeder is not None and feeder.failure is not None:
                return None
            return serving.status_response(
                statuses.failure(
                    429,
                    f"the pool multiplexer is still reading {gvr.resource}; retry shortly",
                    details={"retryAfterSeconds": 1},
                ),
                retry_after=1,
            )
        flt = self.filters.stored(info) if self.filters is not None else None
        self._meter.in_flight(info, 1)
        try:
            if isinstance(plan, rvrules.ListPlan):
                return await self._list(request, info, resource, plan, sel, flt)
            return await self._watch(request, info, resource, plan, sel, flt)
        finally:
            self._meter.in_flight(info, -1)

    async def _list(
        self,
        request: web.BaseRequest,
        info: requestinfo.RequestInfo,
        resource: Resource,
        plan: rvrules.ListPlan,
        sel: selection.Selection,
        flt: seams.StoredObjects | None,
    ) -> web.StreamResponse | None:
        store = resource.store
        if plan.exact is not None and plan.exact != store.rv:
            return None  # an older state: only the apiserver has it
        if plan.min_rv > store.rv and not await resource.wait_fresh(
            plan.min_rv, rvrules.FRESHNESS_WAIT
        ):
            return serving.status_response(rvrules.too_large(plan.min_rv, store.rv), retry_after=1)
        self._meter.served(resource.gvr, "list", info.user_agent)
        gvr = resource.gvr
        return await serving.answer_list(
            request, store, sel, flt, lambda n: self._meter.served_bytes(gvr, n)
        )

    async def _watch(
        self,
        request: web.BaseRequest,
        info: requestinfo.RequestInfo,
        resource: Resource,
        plan: rvrules.WatchPlan,
        sel: selection.Selection,
        flt: seams.StoredObjects | None,
    ) -> web.StreamResponse:
        s = self.settings
        follower = info.user_agent.startswith(FOLLOWER_PREFIX)
        answer = serving.WatchAnswer(
            resource.store,
            plan,
            sel,
            flt,
            timeout=serving.watch_timeout(info.timeout_seconds, s.min_request_timeout),
            bookmarks=info.allow_watch_bookmarks,
            bookmark_interval=s.follower_bookmark_interval if follower else s.bookmark_interval,
            wait_fresh=resource.wait_fresh,
            on_bytes=lambda n: self._meter.served_bytes(resource.gvr, n),
        )
        self._meter.served(resource.gvr, "watch", info.user_agent)
        return await answer.run(request)


def bypass(request: web.BaseRequest, info: requestinfo.RequestInfo) -> str:
    """Why this request takes the ordinary path ("" when the multiplexer answers it)."""
    if headers.bearer_token(request.headers.get("Authorization", "")):
        return "a Bearer token: the caller's own rights"
    if info.subresource:
        return "a subresource"
    if info.partial_object_metadata is not None:
        return "a PartialObjectMetadata view"
    ranges = requestinfo.media_ranges(info.accept)
    if ranges and ranges[0][1].get("as"):
        return f"a {ranges[0][1]['as']} view"
    if info.accept and not requestinfo.accepts_json(info.accept):
        return "no JSON in Accept"
    return ""


def options(request: web.BaseRequest, info: requestinfo.RequestInfo) -> rvrules.Options:
    query = request.query
    send = query.get("sendInitialEvents")
    return rvrules.Options(
        watch=info.is_watch,
        resource_version=query.get("resourceVersion", ""),
        resource_version_match=query.get("resourceVersionMatch", ""),
        send_initial_events=None if send is None else send != "0" and send.lower() != "false",
        allow_watch_bookmarks=info.allow_watch_bookmarks,
        continue_token=query.get("continue", ""),
    )
