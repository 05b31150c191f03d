"""One upstream list + watch per pool-scoped resource, into its ``watchcache.Store``.

Where the data comes from (``feedsources.Sources.choose``, reference §8.3):

- a follower (``leaderconfigs.source`` says ``pool``) reads from a usable leader hub, directly,
  over HTTPS with the hub's client certificate (``https://<leader>:<--multiplexer-port>``); what
  it reads is offered to the disk cache's tee as the hub's own proxy would (component
  ``multiplexer-proxy-<node>``), so it is there offline;
- otherwise, or when no leader is usable, through the hub's own proxy (over its own socket,
  ``Sources.route``: exempt from the in-flight limits, none of the proxy port's connections)
  with User-Agent ``multiplexer-proxy-<node>``: the router sends that to a healthy apiserver
  (load balancing, health, the tee into the cache) or, offline, to the cache (a list from disk,
  a watch held). Leaders are read with a session of their own (TCP, TLS).

The list asks for ``resourceVersion=0`` (any state: the apiserver's watch cache or the
leader's store answers it) or, once synced, for a state not older than the store's; the watch
resumes from the store's resourceVersion with bookmarks. A watch that ends is resumed from the
store's version at once; 410 lists again (the store turns the new list into differences for
its watchers, see ``watchcache``).

Switching: every attempt runs beside a waiter on ``Sources``; when the choice changes (the
ConfigMap names other leaders, a leader's check flips, a leader is penalised or its penalty
ends) the attempt is cancelled and the next one resumes from the store's version with the new
source: a switch never lists again (only a source that said 410 is listed from), so a follower
that read the cloud more recently than its leader resumes there instead of asking it for a
state it does not have yet. A leader that is starting (429, 503), behind (504 "Too large
resource version") or whose own read of the resource failed (503) is tried again with a
back-off and left only after repeated failures, by this feeder alone (``retrying``). One that
answers anything else but a good 200 (refused, 5xx, garbage, an event that does not parse, a
list older than the store) or stays silent longer than ``leader_idle_timeout`` (a leader sends
a BOOKMARK to followers every ``follower_bookmark_interval``) is penalised for every feeder and
the next attempt starts at once elsewhere.
Failures of the hub's own proxy are retried with a capped back-off (0.5 s doubling to 30 s),
logged once per distinct cause, and only at debug while no apiserver is healthy (the health
checker has said why; through the hub the offline cache then answers 404 or holds the watch).
The cloud's pushback (429, APF's answer when a priority level's queues are full, with its
``Retry-After``) is waited out as ``pacing`` says (bounded, jittered), and a relist after the
cloud's 410 is spread over ``pacing``'s ``relist_spread`` while the store serves what it holds:
a fleet's feeders that meet the same compaction or apiserver restart do not list in the same
second. Any wait ends early when a leader becomes usable.

While the store is not synced, a definitive answer of the proxy (403, 404, 5xx: what a client
would get without the multiplexer) is kept as ``failure``: the multiplexer then lets clients
take the ordinary path instead of answering 429 forever.

Wire format: the cloud is asked for protobuf first (as kube-proxy asks: the edge link carries
what a direct kube-proxy's would), JSON second; a protobuf list or watch frame is converted to
the apiserver's JSON (``kubeproto.converting``) in a worker thread, a chunk at a time, and
the store keeps and serves JSON as before. Leaders are asked for JSON (what their stores hold).

Dangers: the list body and each event are bounded (``max_item``; a protobuf list, held whole
because its length comes first, also by the store's memory budget); a feeder never raises out
of ``run`` but for cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import ssl
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any, Protocol

import aiohttp
from multidict import CIMultiDict

from yurthub import jsonlists, pacing, requestinfo, statuses
from yurthub.cache import framing
from yurthub.kubeproto import converting, wire
from yurthub.pool import (
    encoding,
    feedanswers,
    feedsources,
    gvrs,
    leaderconfigs,
    retrying,
    watchcache,
)
from yurthub.proxy import seams

log = logging.getLogger(__name__)

READ_SIZE = 1 << 16
CONFIG_WAIT = 5.0
"""Seconds a feeder waits for the pool's ConfigMap before its first list."""
CLOUD_LIST_IDLE = 60.0
"""Seconds the hub's own proxy may stay silent during a list."""
CLOUD_ACCEPT = f"{converting.CONTENT_TYPE},application/json"
"""What the cloud is asked for: protobuf (fewer bytes on the edge link), else JSON."""


@dataclasses.dataclass(frozen=True, slots=True)
class FeedSettings:
    user_agent: str
    leader_idle_timeout: float = 6.0
    """Seconds a leader may stay silent: before its answer starts, within a list, and on a
    watch (it sends followers a BOOKMARK every ``follower_bookmark_interval``)."""
    max_item: int = 16 << 20
    watch_timeout: tuple[int, int] = (300, 600)
    """Random server-side timeout of one upstream watch (seconds, YurtHub's)."""
    watch_overrun: float = pacing.WATCH_OVERRUN
    """Seconds a watch may outlive its ``timeoutSeconds`` before the feeder ends it."""
    pace: pacing.Settings = dataclasses.field(default_factory=pacing.Settings)
    """Relist spread after 410 and the Retry-After bound, for reads from the cloud."""


class Meter(Protocol):
    """What a feeder reports (``metering`` implements it)."""

    def upstream_watch(self, gvr: gvrs.Gvr, source: str, delta: int) -> None: ...
    def upstream_bytes(self, gvr: gvrs.Gvr, source: str, count: int) -> None: ...
    def target(self, gvr: gvrs.Gvr, verb: str, server: str, delta: int) -> None: ...


class Feeder:
    def __init__(
        self,
        gvr: gvrs.Gvr,
        store: watchcache.Store,
        sources: feedsources.Sources,
        *,
        session: aiohttp.ClientSession,
        own_session: aiohttp.ClientSession | None = None,
        leader_ssl: Callable[[], ssl.SSLContext | bool],
        tee: seams.Tee | None,
        feed: FeedSettings,
        meter: Meter,
        on_advance: Callable[[], None] = lambda: None,
        converter: converting.Converter | None = None,
    ) -> None:
        self.gvr = gvr
        self._converter = converter or converting.Converter()
        self.store = store
        self.sources = sources
        self._session = session
        """For leaders."""
        self._own_session = own_session or session
        """For the cloud, through the hub's own proxy (``feedsources.Sources.route``)."""
        self._leader_ssl = leader_ssl
        self._tee = tee
        self._feed = feed
        self._meter = meter
        self._on_advance = on_advance
        self.failure: statuses.Status | None = None
        """A definitive answer while not synced (clients take the ordinary path)."""
        self.source: feedsources.Source | None = None
        self._gone_from: str | None = None
        """The source that said the store's version is too old (410): list from it."""
        self._strikes: dict[str, int] = {}
        """Consecutive failed answers per leader (``retrying``)."""
        self._avoid: dict[str, float] = {}
        """Leaders (node names) this feeder does not read from until then (loop time)."""
        self._avoid_timer: asyncio.TimerHandle | None = None
        self._said = ""
        """The failure last logged above debug (one line per distinct cause)."""
        self.watching = False
        self._streaming = True
        """Sync with streaming lists (``sendInitialEvents``) while the upstream takes them."""

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            if self._avoid_timer is not None:
                self._avoid_timer.cancel()

    async def _run(self) -> None:
        pacer = pacing.Pacer(self._feed.pace)
        await self.sources.wait_configured(CONFIG_WAIT)
        while True:
            if self.sources.mode is leaderconfigs.Source.POOL:
                await self.sources.leaders.settled()
            source = self.sources.choose(self._skipped())
            self.source = source
            try:
                await self._attempt(source)
                pacer.succeeded()
                self._said = ""
                continue
            except feedanswers.Switch:
                log.info("%s: switching from %s", self.gvr, source.name)
                continue
            except feedanswers.Gone:
                self._gone_from = source.name
                # From the cloud, a relist every hub of a fleet may need at once (a compaction,
                # an apiserver restart): spread (``pacing``; a pool leader's over the shorter
                # leader spread, its followers wait for it); the store serves what it has
                # meanwhile. A leader's memory is listed at once.
                wait = 0.0
                if source.leader is None and self.store.synced:
                    leading = self.sources.leading
                    wait = pacer.next_delay(pacing.Cause.GONE, random.random(), leading=leading)
                log.info(
                    "%s: %s says our version is too old; listing again in %.1fs",
                    self.gvr,
                    source.name,
                    wait,
                )
                if wait:
                    await self._wait_unless_switched(wait)
                continue
            except feedanswers.SourceFailed as e:
                if source.leader is not None:
                    delay = self._leader_failed(source, source.leader, e)
                    if delay:
                        await asyncio.sleep(delay * (1 + random.random() / 4))
                    continue
                if not self.store.synced and e.status is not None:
                    self.failure = e.status
                    self._on_advance()  # wakes requests waiting for the first list
                cause = pacing.Cause.BUSY if e.busy else pacing.Cause.FAILURE
                wait = pacer.next_delay(cause, random.random(), e.retry_after)
                log.log(
                    self._level(str(e)),
                    "%s: reading through the hub failed (%s); retrying in %.1fs",
                    self.gvr,
                    e,
                    wait,
                )
                await self._wait_unless_switched(wait)

    async def _wait_unless_switched(self, seconds: float) -> None:
        """Wait ``seconds``, or less if the source should change meanwhile (a leader became
        usable: it is read from at once, the cloud's pushback does not concern it)."""
        generation = self.sources.generation
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._until_switch(self.source or self.sources.cloud(), generation)

    def _leader_failed(
        self, source: feedsources.Source, leader: leaderconfigs.Leader, e: feedanswers.SourceFailed
    ) -> float:
        """Carries out ``retrying``'s decision; the seconds to wait before choosing again."""
        current = {x.node for x in self.sources.leaders.leaders}
        self._strikes = {k: v for k, v in self._strikes.items() if k in current}  # bounded
        strikes = self._strikes[leader.node] = self._strikes.get(leader.node, 0) + 1
        if isinstance(e, feedanswers.TooLarge) and self.store.synced:
            self._gone_from = None  # resume from our version there: the leader is behind us
        decision = retrying.after_failure(
            strikes, soft=e.busy, penalty=self.sources.leaders.penalty
        )
        if isinstance(decision, retrying.Retry):
            log.info(
                "%s: %s failed (%s); trying it again in %.1fs",
                self.gvr,
                source.name,
                e,
                decision.delay,
            )
            self.sources.leaders.recheck()  # a leader that has gone is left at once
            return decision.delay
        if not e.busy:
            self.sources.leaders.penalize(leader, str(e), decision.seconds)
            return 0.0
        # Soft: the leader works but not for this resource now (starting, behind, or its own
        # read of it failed): only this feeder leaves it, the others stay.
        log.warning(
            "%s: %s failed %d times (%s); reading it from elsewhere for %.0fs",
            self.gvr,
            source.name,
            strikes,
            e,
            decision.seconds,
        )
        loop = asyncio.get_running_loop()
        self._avoid[leader.node] = loop.time() + decision.seconds
        if self._avoid_timer is not None:
            self._avoid_timer.cancel()
        # Back to the leader when it ends: wakes the switch watcher (``still_good``).
        self._avoid_timer = loop.call_later(decision.seconds + 0.01, self.sources.bump)
        return 0.0

    def _leader_good(self, source: feedsources.Source) -> None:
        if self._strikes and source.leader is not None:
            self._strikes.pop(source.leader.node, None)

    def _level(self, cause: str) -> int:
        """How loud a failure of the hub's own proxy is: debug while no apiserver is healthy
        (the cloud's absence is the cause, logged once by the health checker; the offline
        cache's 404 or a held watch follows from it) or for a cause already said; else a
        warning before the first sync, info after (the store still serves)."""
        if not self.sources.route().cloud_healthy() or cause == self._said:
            return logging.DEBUG
        self._said = cause
        return logging.INFO if self.store.synced else logging.WARNING

    async def _attempt(self, source: feedsources.Source) -> None:
        """List (when needed) and watch ``source`` until the watch ends, or the source should
        change."""
        generation = self.sources.generation
        failed: list[Exception] = []
        switched = False
        async with asyncio.TaskGroup() as tg:

            async def work() -> None:
                try:
                    await self._list_and_watch(source)
                except (feedanswers.Gone, feedanswers.SourceFailed) as e:
                    failed.append(e)
                except feedanswers.OverBudget as e:
                    log.error("%s: %s", self.gvr, e)
                    self.store.over_budget = True
                    self._on_advance()  # the multiplexer drops the resource (and this feeder)
                    failed.append(feedanswers.SourceFailed(str(e)))
                except Exception as e:  # a bug must not end the feeder
                    log.exception("%s: reading from %s failed", self.gvr, source.name)
                    failed.append(feedanswers.SourceFailed(f"internal error: {type(e).__name__}"))
                finally:
                    switch.cancel()

            async def until_switch() -> None:
                nonlocal switched
                await self._until_switch(source, generation)
                switched = True
                working.cancel()

            working = tg.create_task(work(), name=f"pool-feed-{self.gvr}-{source.name}")
            switch = tg.create_task(until_switch(), name=f"pool-switch-{self.gvr}")
        if failed:
            raise failed[0]
        if switched:
            raise feedanswers.Switch

    async def _until_switch(self, source: feedsources.Source, generation: int) -> None:
        while True:
            await self.sources.wait_change(generation)
            generation = self.sources.generation
            if not self.sources.still_good(source, self._skipped()):
                return

    def _skipped(self) -> frozenset[str]:
        """The leaders this feeder leaves for now (``retrying.Leave`` of a soft failure)."""
        if not self._avoid:
            return frozenset()
        now = asyncio.get_running_loop().time()
        self._avoid = {node: until for node, until in self._avoid.items() if until > now}
        return frozenset(self._avoid)

    async def _list_and_watch(self, source: feedsources.Source) -> None:
        # A synced store resumes from its version on any source but one that said it is too
        # old: a source switch never lists again (a leader behind this hub could not answer a
        # list not older than the store, and a follower would bounce off it to the cloud).
        if not self.store.synced or self._gone_from == source.name:
            if self._streaming:
                try:
                    await self._watch(source, initial=True)
                    return
                except feedanswers.NoStreaming as e:
                    log.info(
                        "%s: %s cannot stream lists (%s); listing instead", self.gvr, source.name, e
                    )
                    self._streaming = False
            await self._list(source)
        await self._watch(source, initial=False)

    # --- requests ----------------------------------------------------------------------------

    def _request_args(self, source: feedsources.Source, *, watch: bool) -> dict[str, Any]:
        accept = CLOUD_ACCEPT if source.leader is None else "application/json"
        headers = {"User-Agent": self._feed.user_agent, "Accept": accept}
        if source.leader is None:
            idle = None if watch else CLOUD_LIST_IDLE
            return {
                # kube-apiserver compresses lists and streaming lists (per flush) on request.
                "headers": {**headers, "Accept-Encoding": "gzip"},
                "timeout": aiohttp.ClientTimeout(total=None, sock_connect=5.0, sock_read=idle),
            }
        idle = self._feed.leader_idle_timeout
        return {
            "headers": {**headers, "Accept-Encoding": "identity"},
            "timeout": aiohttp.ClientTimeout(
                total=None, sock_connect=self.sources.leaders.timeout, sock_read=idle
            ),
            "ssl": self._leader_ssl() if source.base.startswith("https://") else False,
        }

    @contextlib.asynccontextmanager
    async def _get(self, source: feedsources.Source, query: dict[str, str], *, watch: bool) -> Any:
        url = source.base + self.gvr.path()
        verb = "watch" if watch else "list"
        server = source.base.split("://", 1)[-1]
        self._meter.target(self.gvr, verb, server, 1)
        try:
            session = self._own_session if source.leader is None else self._session
            async with session.get(
                url, params=query, **self._request_args(source, watch=watch)
            ) as resp:
                yield resp
        except (aiohttp.ClientError, TimeoutError) as e:
            raise feedanswers.SourceFailed(
                f"{verb} from {source.name}: {type(e).__name__}: {e}"
            ) from e
        finally:
            self._meter.target(self.gvr, verb, server, -1)

    def _sink(
        self, source: feedsources.Source, query: Mapping[str, str], resp: aiohttp.ClientResponse
    ) -> seams.TeeSink | None:
        """The cache's sink for what a leader answered (the proxy tees the cloud's itself)."""
        if source.leader is None or self._tee is None:
            return None
        headers: CIMultiDict[str] = CIMultiDict(
            {"User-Agent": self._feed.user_agent, "Accept": "application/json"}
        )
        info = requestinfo.classify("GET", self.gvr.path(), list(query.items()), headers)
        try:
            return self._tee.open(info, resp.status, resp.headers)
        except Exception:
            log.exception("the cache could not take %s from %s", info.describe(), source.name)
            return None

    # --- list --------------------------------------------------------------------------------

    async def _list(self, source: feedsources.Source) -> None:
        query = {"resourceVersion": "0"}
        if self.store.synced:
            query = {"resourceVersion": str(self.store.rv), "resourceVersionMatch": "NotOlderThan"}
        async with self._get(source, query, watch=False) as resp:
            if resp.status == 504 and source.leader is not None and self.store.synced:
                raise feedanswers.TooLarge(f"list from {source.name}: HTTP 504 (behind this hub)")
            if resp.status != 200:
                raise await feedanswers.refusal(f"list from {source.name}", resp)
            sink = self._sink(source, query, resp)
            read = self._read_protobuf_list if feedanswers.is_protobuf(resp) else self._read_list
            try:
                entries, rv, kinds = await read(source, resp, sink)
            except BaseException as e:
                if sink is not None:
                    sink.abort(f"list failed: {type(e).__name__}")
                raise
            if sink is not None:
                await sink.finish()
        kind, list_kind, api_version = kinds
        try:
            self.store.replace(entries, rv, kind=kind, list_kind=list_kind, api_version=api_version)
        except watchcache.Behind as e:
            raise feedanswers.SourceFailed(f"list from {source.name} is behind: {e}") from e
        self.failure = None
        self._gone_from = None
        self._leader_good(source)
        self._on_advance()
        log.info("%s: %d objects at %d from %s", self.gvr, len(entries), rv, source.name)

    async def _list_body(
        self, source: feedsources.Source, resp: aiohttp.ClientResponse, sink: seams.TeeSink | None
    ) -> AsyncGenerator[bytes, None]:
        """A list's body decoded as it comes (each chunk fed to ``sink`` as received, and
        counted)."""
        inflate = feedanswers.inflater(source, resp)
        count = 0
        try:
            async for chunk in resp.content.iter_chunked(READ_SIZE):
                count += len(chunk)
                if sink is not None:
                    sink.feed(chunk)
                for plain in feedanswers.plain(source, inflate, chunk):
                    yield plain
            for plain in feedanswers.plain(source, inflate, None):
                yield plain
        finally:
            self._meter.upstream_bytes(self.gvr, feedanswers.kind_of(source), count)

    async def _read_list(
        self, source: feedsources.Source, resp: aiohttp.ClientResponse, sink: seams.TeeSink | None
    ) -> tuple[list[watchcache.Entry], int, tuple[str, str, str]]:
        reader = jsonlists.ListReader(self._feed.max_item)
        entries = feedanswers.Collected(self.store)
        async with contextlib.aclosing(self._list_body(source, resp, sink)) as plains:
            async for plain in plains:
                for piece in reader.feed(plain):
                    entries.extend(self._items(piece, reader.head))
        for piece in reader.finish():
            entries.extend(self._items(piece, reader.head))
        if reader.broken:
            raise feedanswers.SourceFailed(f"list from {source.name}: {reader.broken}")
        meta = reader.head.get("metadata")
        rv_text = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
        try:
            rv = int(rv_text)
        except ValueError as e:
            raise feedanswers.SourceFailed(f"list from {source.name}: no resourceVersion") from e
        return entries.entries, rv, self._kinds(reader.head)

    async def _read_protobuf_list(
        self, source: feedsources.Source, resp: aiohttp.ClientResponse, sink: seams.TeeSink | None
    ) -> tuple[list[watchcache.Entry], int, tuple[str, str, str]]:
        """A protobuf list: held whole (within the store's budget), then converted item by
        item in a worker thread."""
        body = bytearray()
        budget = self.store.limits.max_bytes
        async with contextlib.aclosing(self._list_body(source, resp, sink)) as plains:
            async for plain in plains:
                body += plain
                if len(body) > budget:
                    raise feedanswers.OverBudget(f"a list of more than {budget} bytes")
        loop = asyncio.get_running_loop()
        # The buffer as it is (never changed after this): bytes() of it would be a second copy.
        return await loop.run_in_executor(None, self._protobuf_entries, source, body)

    def _protobuf_entries(
        self, source: feedsources.Source, body: wire.Buffer
    ) -> tuple[list[watchcache.Entry], int, tuple[str, str, str]]:
        """(entries, resourceVersion, kinds) of a protobuf list (worker thread)."""
        try:
            split = self._converter.split_list(body)
            if split is None:
                raise feedanswers.SourceFailed(
                    f"list from {source.name}: not a list of the built-in API"
                )
            kinds = self._kinds(split.head)
            meta = split.head.get("metadata") or {}
            entries = feedanswers.Collected(self.store)
            for span in split.items:
                entries.extend(self._items_of(split.item(span), kinds))
        except converting.Undecodable as e:
            raise feedanswers.SourceFailed(f"list from {source.name}: {e}") from e
        try:
            rv = int(str(meta.get("resourceVersion") or ""))
        except ValueError as e:
            raise feedanswers.SourceFailed(f"list from {source.name}: no resourceVersion") from e
        return entries.entries, rv, kinds

    def _kinds(self, head: Mapping[str, Any]) -> tuple[str, str, str]:
        list_kind = str(head.get("kind") or "")
        api_version = str(head.get("apiVersion") or self.gvr.api_version)
        if not list_kind.endswith("List") or list_kind == "List":
            raise feedanswers.SourceFailed(f"a list of kind {list_kind[:64]!r}")
        return list_kind.removesuffix("List"), list_kind, api_version

    def _items(self, piece: jsonlists.Piece, head: Mapping[str, Any]) -> list[watchcache.Entry]:
        if isinstance(piece, jsonlists.Raw):
            return []
        if not isinstance(piece, jsonlists.Item):
            return []
        if not isinstance(piece.value, dict):
            raise feedanswers.SourceFailed("a list item is not an object")
        return self._items_of(piece.value, self._kinds(head))

    def _items_of(
        self, item: Mapping[str, Any], kinds: tuple[str, str, str]
    ) -> list[watchcache.Entry]:
        kind, _, api_version = kinds
        try:
            return [watchcache.entry_of(self.gvr.resource, item, kind, api_version)]
        except ValueError as e:
            raise feedanswers.SourceFailed(f"a list item: {e}") from e

    # --- watch -------------------------------------------------------------------------------

    async def _watch(self, source: feedsources.Source, *, initial: bool) -> None:
        """A watch from the store's version, or (``initial``) a streaming list: the whole state
        as ADDED events up to the ``k8s.io/initial-events-end`` BOOKMARK, then changes."""
        low, high = self._feed.watch_timeout
        timeout_seconds = random.randint(low, high)
        query = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        if initial:
            query["sendInitialEvents"] = "true"
            query["resourceVersionMatch"] = "NotOlderThan"
            if self.store.synced:
                query["resourceVersion"] = str(self.store.rv)
        else:
            query["resourceVersion"] = str(self.store.rv)
        # The cloud's watch has no idle bound (a quiet resource sends nothing for minutes):
        # a watch that outlives its own timeoutSeconds lost its end on the way, and is ended.
        bound = pacing.watch_bound(timeout_seconds, self._feed.watch_overrun)
        try:
            async with asyncio.timeout(bound) as scope:
                await self._watch_until_end(source, query, initial)
        except TimeoutError as e:
            if not scope.expired():
                raise
            raise feedanswers.SourceFailed(
                f"watch from {source.name}: asked to end after {timeout_seconds}s, "
                f"still open {self._feed.watch_overrun:.0f}s later"
            ) from e

    async def _watch_until_end(
        self, source: feedsources.Source, query: dict[str, str], initial: bool
    ) -> None:
        async with self._get(source, query, watch=True) as resp:
            if resp.status == 410:
                raise feedanswers.Gone
            if initial and resp.status in (400, 422):
                raise feedanswers.NoStreaming(f"HTTP {resp.status}")
            if resp.status != 200:
                raise await feedanswers.refusal(f"watch from {source.name}", resp)
            sink = self._sink(source, query, resp)
            self.watching = True
            self._meter.upstream_watch(self.gvr, feedanswers.kind_of(source), 1)
            stream = feedanswers.Stream(initial, self.store)
            read = self._read_frames if feedanswers.is_protobuf(resp) else self._read_events
            try:
                await read(source, resp, sink, stream)
            except BaseException as e:
                if sink is not None:
                    sink.abort(f"watch ended: {type(e).__name__}")
                    sink = None
                raise
            finally:
                self.watching = False
                self._meter.upstream_watch(self.gvr, feedanswers.kind_of(source), -1)
            if sink is not None:
                await sink.finish()
            if stream.collecting is not None:
                raise feedanswers.SourceFailed(
                    f"{source.name} ended a streaming list before its end"
                )

    async def _watch_body(
        self, source: feedsources.Source, resp: aiohttp.ClientResponse, sink: seams.TeeSink | None
    ) -> AsyncGenerator[list[bytes], None]:
        """A watch's body decoded: the pieces of each chunk as it comes (each chunk fed to
        ``sink`` as received, and counted), then what the decoder held at the end."""
        inflate = feedanswers.inflater(source, resp)
        async for chunk in resp.content.iter_any():
            self._meter.upstream_bytes(self.gvr, feedanswers.kind_of(source), len(chunk))
            if sink is not None:
                sink.feed(chunk)
            yield list(feedanswers.plain(source, inflate, chunk))
        yield list(feedanswers.plain(source, inflate, None))

    async def _read_events(
        self,
        source: feedsources.Source,
        resp: aiohttp.ClientResponse,
        sink: seams.TeeSink | None,
        stream: feedanswers.Stream,
    ) -> None:
        splitter = framing.LineSplitter(self._feed.max_item)
        async with contextlib.aclosing(self._watch_body(source, resp, sink)) as chunks:
            async for plains in chunks:
                for plain in plains:
                    try:
                        lines = splitter.feed(plain)
                    except framing.FrameTooLarge as e:
                        raise feedanswers.SourceFailed(f"watch from {source.name}: {e}") from e
                    for line in lines:
                        self._event(source, line, stream)
        rest = splitter.rest()
        if rest:
            self._event(source, rest, stream)

    async def _read_frames(
        self,
        source: feedsources.Source,
        resp: aiohttp.ClientResponse,
        sink: seams.TeeSink | None,
        stream: feedanswers.Stream,
    ) -> None:
        """A protobuf watch stream: frames cut at their length prefixes, each chunk's frames
        converted in a worker thread (in order: one chunk at a time)."""
        splitter = framing.FrameSplitter(self._feed.max_item)
        loop = asyncio.get_running_loop()
        async with contextlib.aclosing(self._watch_body(source, resp, sink)) as chunks:
            async for plains in chunks:
                frames: list[bytes] = []
                try:
                    for plain in plains:
                        frames.extend(splitter.feed(plain))
                except framing.FrameTooLarge as e:
                    raise feedanswers.SourceFailed(f"watch from {source.name}: {e}") from e
                if not frames:
                    continue
                events = await loop.run_in_executor(None, self._decode_frames, source, frames)
                for event in events:
                    self._apply(source, event, stream)

    def _decode_frames(
        self, source: feedsources.Source, frames: list[bytes]
    ) -> list[framing.WatchEvent]:
        """Protobuf watch frames as the JSON events the apiserver would send (worker thread)."""
        try:
            return [
                framing.WatchEvent(str(e["type"]), e["object"], b"")
                for e in map(self._converter.event, frames)
            ]
        except converting.Undecodable as e:
            raise feedanswers.SourceFailed(f"watch from {source.name}: {e}") from e

    def _event(self, source: feedsources.Source, line: bytes, stream: feedanswers.Stream) -> None:
        try:
            event = framing.parse_event(line)
        except framing.BadBody as e:
            raise feedanswers.SourceFailed(f"watch from {source.name}: {e}") from e
        self._apply(source, event, stream)

    def _apply(
        self, source: feedsources.Source, event: framing.WatchEvent, stream: feedanswers.Stream
    ) -> None:
        obj = event.object
        if event.type == "ERROR":
            if obj.get("code") == 410:
                raise feedanswers.Gone
            message = str(obj.get("message") or "")[:200]
            if obj.get("code") == 504 and source.leader is not None and self.store.synced:
                raise feedanswers.TooLarge(f"watch from {source.name}: {message}")
            raise feedanswers.SourceFailed(f"watch from {source.name}: error event: {message}")
        kind, api_version = stream.kinds(obj, self.store, self.gvr)
        self._leader_good(source)
        if event.type == "BOOKMARK":
            meta = obj.get("metadata")
            rv_text = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
            if not rv_text.isdigit():
                raise feedanswers.SourceFailed(
                    f"watch from {source.name}: a BOOKMARK without a version"
                )
            annotations = meta.get("annotations") if isinstance(meta, dict) else None
            ended = (
                isinstance(annotations, dict)
                and annotations.get(encoding.INITIAL_EVENTS_END) == "true"
            )
            if stream.collecting is not None and ended:
                self._replace(source, stream.collecting.entries, int(rv_text), kind, api_version)
                stream.collecting = None
            elif stream.collecting is None:
                self.store.advance(int(rv_text))
                self._on_advance()
            return
        if event.type not in (watchcache.ADDED, watchcache.MODIFIED, watchcache.DELETED):
            raise feedanswers.SourceFailed(
                f"watch from {source.name}: event type {event.type[:32]!r}"
            )
        try:
            entry = watchcache.entry_of(self.gvr.resource, obj, kind, api_version)
        except ValueError as e:
            raise feedanswers.SourceFailed(f"watch from {source.name}: {e}") from e
        if stream.collecting is not None:
            if event.type != watchcache.ADDED:
                raise feedanswers.SourceFailed(
                    f"{source.name}: a {event.type} among the initial events"
                )
            stream.collecting.extend([entry])
        elif self.store.apply(event.type, entry):
            self._on_advance()

    def _replace(
        self,
        source: feedsources.Source,
        entries: list[watchcache.Entry],
        rv: int,
        kind: str,
        api_version: str,
    ) -> None:
        try:
            self.store.replace(
                entries, rv, kind=kind, list_kind=f"{kind}List", api_version=api_version
            )
        except watchcache.Behind as e:
            raise feedanswers.SourceFailed(f"the state from {source.name} is behind: {e}") from e
        self.failure = None
        self._gone_from = None
        self._leader_good(source)
        self._on_advance()
        log.info("%s: %d objects at %d from %s", self.gvr, len(entries), rv, source.name)
