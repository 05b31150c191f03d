"""The cache assembled for one hub: the single entry point the hub wiring uses.

Usage (``edgehub hub``, tests, the demo)::

    rt = await cache.runtime.open(settings)          # opens the disk cache, loads the index
    hub = server.Hub(settings, tee=rt.tee, local=rt.local)
    hub.on_lease = rt.on_lease                         # the prober's Lease becomes kubelet's
    rt.attach_metrics(hub.metrics)                     # error keys + node_yurthub_cache_*
    await hub.start()
    rt.cloud_healthy = hub.health.any_healthy          # held watches end when the cloud is back
    tg.create_task(rt.follow_config(hub.own_route), name="cache-agents")   # yurt-hub-cfg
    ...
    await hub.stop(); await rt.close()

Importing this module has no side effects; ``open`` does the disk work off the event loop.
The runtime starts no task of its own: the store's writer is a chain of executor futures, held
watches run in their request handlers, and ``follow_config`` is a coroutine the caller owns.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import sqlite3
import time
from collections.abc import Mapping, Sequence
from typing import Any

from yurthub import following, metrics, settings
from yurthub.cache import (
    agents,
    eventfolding,
    eventjournal,
    eventposting,
    failures,
    keys,
    keysealing,
    metering,
    store,
    teeing,
)
from yurthub.outages import history
from yurthub.proxy import local, seams, upstream

logger = logging.getLogger(__name__)

LEASE_SCOPE = keys.Scope("kubelet", "leases", "v1", "coordination.k8s.io")
NODE_SCOPE = keys.Scope("kubelet", "nodes", "v1", "")
POD_SCOPE = keys.Scope("kubelet", "pods", "v1", "")
LEASE_NAMESPACE = "kube-node-lease"


class CacheRuntime:
    def __init__(
        self,
        hub_settings: settings.HubSettings,
        cache: store.Store,
        journal: eventjournal.Journal | None = None,
        outages: history.History | None = None,
    ) -> None:
        """``journal``: offline Events kept for the cloud (None: answered, not kept);
        ``outages``: the outage history in the cache directory (None: it could not be opened;
        the hub keeps one in memory)."""
        cfg = hub_settings.cache
        self.settings = hub_settings
        self.store = cache
        self.journal = journal
        self.outages = outages
        self.poster: eventposting.Poster | None = None
        """Set while ``replay`` runs."""
        self.agents = agents.AgentSet(
            node_name=hub_settings.node_name, flag_agents=cfg.cache_agents
        )
        self.tee = teeing.Tee(
            cache,
            self.agents,
            max_body_bytes=cfg.max_body_bytes,
            max_event_bytes=cfg.max_event_bytes,
        )
        self.local = local.Answerer(
            cache,
            self.agents,
            node_name=hub_settings.node_name,
            min_request_timeout=hub_settings.proxy.min_request_timeout,
            bookmark_interval=cfg.bookmark_interval,
            heal_spread=hub_settings.pace.heal_spread,
            journal=journal,
        )

    @property
    def cloud_healthy(self) -> local.HealthView:
        return self.local.cloud_healthy

    @cloud_healthy.setter
    def cloud_healthy(self, view: local.HealthView) -> None:
        """Held offline watches close as soon as this says a backend is healthy again."""
        self.local.cloud_healthy = view

    def store_kubelet_lease(self, raw: bytes) -> None:
        """Store a Lease the hub renewed in the cloud as kubelet's own (reference §5.1)."""
        self.store.submit(store.PutObject(LEASE_SCOPE, raw, LEASE_NAMESPACE))

    async def on_lease(self, server: str, lease: Mapping[str, object], raw: bytes) -> None:
        """``seams.LeaseCallback`` for ``Hub.on_lease``."""
        self.store_kubelet_lease(raw)

    async def kubelet_node(self) -> bytes | None:
        """The hub's node as kubelet last read it through the hub (its cached JSON), or None."""
        key = keys.object_key(NODE_SCOPE, "", self.settings.node_name)
        if self.store.entry(key) is None:
            return None
        return await self.store.body(key)

    async def kubelet_pods(self) -> list[bytes]:
        """Every Pod kubelet read through the hub, as stored JSON (YurtHub's ``GET /pods``:
        a node's Pods, bounded by kubelet's max-pods)."""
        within = keys.object_key(POD_SCOPE, "", "")
        if self.store.count(POD_SCOPE) == 0:
            return []
        try:
            return await self.store.all_bodies(within)
        except store.CorruptRead as e:
            # The damaged entry is dropped as it is met: read again without it.
            logger.warning("GET /pods: a cached pod is damaged and dropped: %s", e)
        return await self.store.all_bodies(within)

    def failed_keys(self) -> int:
        """Objects whose last cache write failed (YurtHub's error keys)."""
        return len(self.store.stats.error_keys)

    def write_warning(self) -> str:
        """The readiness warning while cache writes fail ("" when they do not): a
        ``readiness.Readiness.add_warning`` check (the hub stays ready: online traffic needs no
        cache, but the operator must know the node is not autonomous for what it reads now)."""
        return self.store.failures.warning(time.time())

    async def follow_config(
        self,
        route: following.ProxyRoute,
        also: Sequence[agents.ConfigTarget] = (),
        others: Mapping[str, following.Target] | None = None,
    ) -> None:
        """Follow ``yurt-hub-cfg`` through the hub (``route``: ``hub.own_route``) until
        cancelled; ``also`` get its data too (the response filters' additions); ``others``:
        ConfigMaps followed in the same watch (the pool's ``leader-hub-<pool>``)."""
        async with route.session() as session:
            await agents.follow_configmap(
                self.agents,
                session,
                route.url,
                namespace=self.settings.cache.config_namespace,
                also=also,
                others=others,
                cloud_healthy=route.cloud_healthy,
                pace=route.pace,
            )

    def attach_metrics(self, hub_metrics: metrics.Metrics) -> None:
        """Expose the cache on the hub's ``/metrics``: YurtHub's ``error_keys_count`` gauge and
        the ``node_yurthub_cache_*`` families (``metering``), read at scrape time."""
        stats = self.store.stats
        hub_metrics.error_keys_count.set_function(lambda: len(stats.error_keys))
        hub_metrics.error_keys_persistency_status.set(1)
        hub_metrics.registry.register(metering.CacheCollector(self.store, self.store.list_count))

    async def status(self) -> dict[str, Any]:
        """The ``cache`` section of ``/v1/status``: size, and per component its objects, lists
        and the age of its newest list (how fresh what it would answer offline is)."""
        cache = self.store
        loop = asyncio.get_running_loop()
        size = await loop.run_in_executor(None, cache.disk_bytes)
        times = await cache.list_store_times()
        now = time.time()
        components: dict[str, dict[str, Any]] = {}

        def of(component: str) -> dict[str, Any]:
            return components.setdefault(
                component, {"component": component, "objects": 0, "lists": 0, "newestList": None}
            )

        for scope in cache.scopes():
            of(scope.component)["objects"] += cache.count(scope)
        newest: dict[str, float] = {}
        for list_key, _record in cache.list_records():
            component = list_key.scope.component
            of(component)["lists"] += 1
            when = times.get(list_key)
            if when is not None and when > newest.get(component, 0.0):
                newest[component] = when
        for component, when in newest.items():
            components[component]["newestList"] = {
                "time": _iso(when),
                "ageSeconds": max(0, round(now - when)),
            }
        return {
            "path": str(self.settings.cache.disk_cache_path),
            "sizeBytes": size,
            "objects": len(cache),
            "lists": cache.list_count(),
            "documents": len(cache.documents()),
            # Failed writes (every job of a failed batch), as node_yurthub_cache_write_failures_
            # total counts them; errorKeys: the objects among them not stored since, as
            # node_yurthub_error_keys_count.
            "writeFailures": cache.stats.write_failures,
            "errorKeys": len(cache.stats.error_keys),
            "writeError": _write_error(cache.failures, now),
            "reset": cache.reset or None,
            # Events recorded offline, waiting for the cloud (None: no journal).
            "offlineEvents": self._journal_status(),
            "sealedBy": cache.sealed_by or None,
            "components": sorted(components.values(), key=lambda c: str(c["component"])),
        }

    def dropped(self) -> int:
        """``seams.OfflineWrites``: offline Events dropped over the journal's bounds, not told
        yet."""
        return self.journal.dropped if self.journal is not None else 0

    def _journal_status(self) -> dict[str, int] | None:
        if self.journal is None:
            return None
        poster = self.poster
        return {
            "pending": self.journal.pending,
            "dropped": self.journal.dropped,
            "posted": poster.posted if poster is not None else 0,
            "refused": poster.refused if poster is not None else 0,
        }

    async def replay(self, client: upstream.Upstream, healthy_server: seams.HealthyServer) -> None:
        """``seams.OfflineWrites``: post the offline Event journal after each heal."""
        if self.journal is None:
            return
        hub = self.settings
        self.poster = eventposting.Poster(
            self.journal,
            client,
            healthy_server,
            node_name=hub.node_name,
            qps=hub.cache.offline_event_qps,
            spread=hub.cache.offline_event_spread,
            timeout=max(hub.heartbeat.timeout, 5.0),
            poll=hub.heartbeat.interval,
        )
        await self.poster.run()

    async def close(self) -> None:
        """End held watches, write what is queued (bounded), close the databases."""
        self.local.close()
        await self.store.close()
        if self.journal is not None:
            await self.journal.close()
        if self.outages is not None:
            await self.outages.close()


def _write_error(found: failures.Failures, now: float) -> dict[str, Any] | None:
    """The current write-failure episode for ``/v1/status``; None when there is none."""
    if not found.active(now) or found.since is None or found.last is None:
        return None
    return {
        "reason": found.reason,
        "since": _iso(found.since),
        "last": _iso(found.last),
        "failing": found.failing,
        "lostLists": len(found.lost_lists),
    }


def _iso(when: float) -> str:
    return datetime.datetime.fromtimestamp(when, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def unsealed_warning(hub_settings: settings.HubSettings) -> str:
    also = ""
    if hub_settings.certs.source.manages_certificates:
        also = f", and the hub's private keys in {hub_settings.certs.root_dir / 'pki'}"
    return keysealing.UNSEALED_WARNING.format(path=hub_settings.cache.disk_cache_path, also=also)


async def open(hub_settings: settings.HubSettings, keys: store.Keys | None = None) -> CacheRuntime:
    """Open the cache directory of ``hub_settings.cache`` (0700, created if missing), with the
    node's data keys when already opened (``store.open_keys``: the older ones are then kept
    until ``store.retire_old_keys``)."""
    cfg = hub_settings.cache
    cache = await store.Store.open(
        cfg.disk_cache_path,
        max_pending_bytes=cfg.max_pending_bytes,
        key_source=cfg.key_source,
        keys=keys,
        retire=keys is None,
    )
    if cache.sealed_by:
        logger.info(
            "disk cache %s: sealed, its data key by the %s", cfg.disk_cache_path, cache.sealed_by
        )
    else:
        logger.warning(unsealed_warning(hub_settings))
    logger.info(
        "disk cache %s: %d objects, %d lists",
        cfg.disk_cache_path,
        len(cache),
        len(cache.list_records()),
    )
    bounds = eventfolding.Bounds(cfg.offline_events, cfg.offline_event_bytes)
    journal: eventjournal.Journal | None
    try:
        journal = await eventjournal.open_journal(cfg.disk_cache_path, bounds, time.time)
    except (OSError, sqlite3.Error) as e:
        logger.error(
            "the offline Event journal cannot be opened: Events recorded offline "
            "will not reach the cloud: %s",
            e,
        )
        journal = None
    if journal is not None and journal.pending:
        logger.info("%d Events recorded offline wait for the cloud", journal.pending)
    outages: history.History | None
    try:
        outages = await history.open_history(cfg.disk_cache_path)
    except (OSError, sqlite3.Error) as e:
        logger.error(
            "the outage history cannot be opened: outages are recorded in memory only: %s", e
        )
        outages = None
    return CacheRuntime(hub_settings, cache, journal, outages)
