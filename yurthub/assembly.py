"""The hub assembled with its disk cache: what ``edgehub hub`` and the demo run.

``server.Hub`` knows nothing of the cache beyond the seams (``proxy/seams.py``); the cache
runtime knows nothing of listeners. This module plugs one into the other, in the one order
that is safe:

1. open the cache (index loaded off the loop) — offline answers work from the first request;
2. start the hub with the cache's tee and local answerer; the heartbeat's Lease is stored as
   kubelet's lease; the hub's ``offline-events`` task posts the Events journaled offline after
   each heal (``cache.eventposting``);
3. tell the local answerer (and the filters) how to see cloud health (held offline watches end
   when it returns);
4. wait for the first health probe (bounded by the heartbeat timeout and retries): asked
   before it, the followers below would all meet the empty cache's 404 first;
5. follow the ``yurt-hub-cfg`` ConfigMap through the hub's own proxy (so it is cached too; one
   watch feeds the cache agents and the response filters' additions), and the filters'
   inputs (services, the node, its pool); keep the node's ``Autonomy`` condition current
   (``autonomy.reporting``: from the cached node and the cache's failed writes; without a
   cache it says so); read kubectl's discovery documents through it (``discoverydocs``) so a
   kubectl run for the first time offline finds them;
6. wait for the filters' inputs (bounded by ``inputs_sync_timeout``, not at all offline):
   whatever runs beside the hub talks to it at once, and would otherwise meet the readiness
   gate's 503.

Teardown: the hub's phased stop (``Hub.stop``), which stops the followers as the hub's own
loops once nothing new is accepted (before it waits for the requests being answered), then
close the cache (queued writes flushed, bounded).

A damaged database is moved aside by the store and a new one started (``/v1/readyz`` shows a
warning, ``node_yurthub_cache_resets_total`` counts it); so do cache writes that fail (a disk
that fills up later: still 200, ``node_yurthub_cache_write_failures_total`` counts every lost
write, the offline 404 of a list read but not stored says why). A cache that cannot be opened
at all (permissions, a full disk at start) does not keep the node from working online: the hub
then runs as a plain proxy, logs it as an error, reports
``node_yurthub_error_keys_persistency_status 0`` and ``/v1/readyz`` answers 500 naming
``disk-cache`` (the proxy itself is not gated on it). ``edgehub cache verify`` tells the operator
what is wrong. ``--working-mode=cloud`` runs without the cache on purpose (a node next to the
apiservers has nothing to answer offline).

The response filters (``yurthub.filters``) run with or without the cache: online answers
through the proxy, offline ones through the cache's local answerer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import ssl
from collections.abc import AsyncIterator, Callable

from yurthub import discoverydocs, health, server, settings
from yurthub.autonomy import conditions, reporting
from yurthub.cache import runtime, store
from yurthub.certs import sealedkeys
from yurthub.filters import runtime as filtering
from yurthub.pool import gvrs
from yurthub.pool import runtime as pooling

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class Node:
    """A running hub and the cache behind it (None when the cache could not be opened, or in
    cloud mode)."""

    hub: server.Hub
    cache: runtime.CacheRuntime | None
    filters: filtering.Filters | None = None
    """The response filters (None: ``--enable-resource-filter=false``)."""
    pool: pooling.Pool | None = None
    """Pool scope: the multiplexer and the leader hub (None: no pool-scoped resources)."""


def _reached_or_cached(
    checker: health.HealthChecker,
    cache: runtime.CacheRuntime | None,
    hub_settings: settings.HubSettings,
) -> Callable[[], str]:
    """Not ready while no apiserver is healthy and nothing is cached: the hub can answer nothing
    at all (a wrong ``--server-addr``, a firewall, a new node started offline, a server that
    answered once but has not passed ``--heartbeat-healthy-threshold`` probes yet). Reported by
    ``/v1/readyz`` only: the proxy stays open (its 502/404 answers say the same)."""

    def check() -> str:
        if not checker.initial_probe_done.is_set() or checker.any_healthy():
            return ""  # "initial-health-probe" reports the first case
        # A list (what answers offline), not just objects: the heartbeat's own Lease is one.
        cached = cache is not None and cache.store.list_count() > 0
        if cached:
            return ""
        why = checker.unreachable_summary()
        if not why and checker.reached_any():
            why = "answered, not healthy yet: --heartbeat-healthy-threshold probes to go"
        what = f"no healthy apiserver ({why or 'no answer yet'})"
        if cache is None:
            return what
        return (
            f"{what} and the disk cache {hub_settings.cache.disk_cache_path} holds no list: "
            "nothing can be answered offline"
        )

    return check


@dataclasses.dataclass(frozen=True, slots=True)
class NodeKeys:
    """The node's data keys for this start (``open_node_keys``): they seal the disk cache and
    the hub's private keys."""

    keys: store.Keys | None
    """None: the key source gives no key now (``problem`` says why)."""
    problem: str = ""

    def seal(self) -> sealedkeys.Seal:
        """How the hub's private keys are kept (``certs.sealedkeys``)."""
        if self.keys is None:
            return sealedkeys.unavailable(self.problem)
        sealer = self.keys.sealer
        return sealedkeys.from_data_keys(sealer.keys, sealer.current, reset=self.keys.reset)


async def open_node_keys(hub_settings: settings.HubSettings) -> NodeKeys:
    """Open the node's data keys once (``store.open_keys``: a TPM answers in ~100 ms), before
    anything they seal. Nothing is looked for without a key source (tests, tools) or when
    neither the cache nor the hub's own keys are in use. A key source that gives no key is one
    error line here; the cache is then not opened and no private key is written."""
    source = hub_settings.cache.key_source
    wanted = (
        hub_settings.working_mode is settings.WorkingMode.EDGE
        or hub_settings.certs.source.manages_certificates
    )
    if source is None or not wanted:
        return NodeKeys(store.PLAIN_KEYS)
    path = hub_settings.cache.disk_cache_path
    try:
        return NodeKeys(await store.open_keys(path, source))
    except store.StoreError as e:
        log.error(
            "the node's data key in %s cannot be had: the disk cache is not opened (no offline"
            " answers) and the hub's private keys are neither read nor written: %s",
            path,
            e,
        )
        return NodeKeys(None, str(e))


@contextlib.asynccontextmanager
async def running(
    hub_settings: settings.HubSettings,
    *,
    force: asyncio.Event | None = None,
    keys: NodeKeys | None = None,
) -> AsyncIterator[Node]:
    """Run the hub with its cache for the duration of the ``async with`` body.

    Enter and exit from the same task (the hub's TaskGroup belongs to it). ``force``, when set
    during teardown, cuts the graceful phase short (a second signal). ``keys``: the node's
    data keys, when the caller opened them already (``open_node_keys``).
    """
    if keys is None:
        keys = await open_node_keys(hub_settings)
    cache: runtime.CacheRuntime | None = None
    cache_problem = ""
    if hub_settings.working_mode is settings.WorkingMode.EDGE:
        try:
            if keys.keys is None:
                cache_problem = f"{keys.problem}; running without offline answers"
            else:
                cache = await runtime.open(hub_settings, keys.keys)
        except store.StoreError as e:
            log.error(
                "disk cache %s cannot be opened, running WITHOUT offline answers: %s",
                hub_settings.cache.disk_cache_path,
                e,
            )
            cache_problem = f"{e}; running without offline answers"
    filters = filtering.Filters(hub_settings) if hub_settings.filters.enabled else None
    # The filters' NodePools are the same for the whole pool: multiplexed like the pool-scoped
    # resources, a follower reads them from its leader (one upstream watch per pool, not per
    # hub). Without a pool they come from the cloud either way; with the multiplexer off
    # (``--pool-scope-resources ''``) the filters read them themselves.
    shared = (
        (gvrs.NODEPOOLS,)
        if filters is not None
        and filters.reads_node_pools()
        and hub_settings.nodepool_name
        and hub_settings.pool.resources
        else ()
    )
    pool = (
        pooling.Pool(
            hub_settings,
            tee=cache.tee if cache else None,
            filters=filters,
            converter=cache.store.transcoder.converter if cache else None,
            shared=shared,
        )
        if hub_settings.pool.resources or hub_settings.nodepool_name
        else None
    )
    try:
        seal = keys.seal()
        if cache is None:
            hub = server.Hub(hub_settings, filters=filters, pool=pool, identity_seal=seal)
            hub.metrics.error_keys_persistency_status.set(0)
            if hub_settings.working_mode is settings.WorkingMode.EDGE:
                # Online traffic needs no cache: only the probe says the node is not autonomous.
                hub.readiness.add("disk-cache", lambda: cache_problem, gates_proxy=False)
        else:
            hub = server.Hub(
                hub_settings,
                tee=cache.tee,
                local=cache.local,
                filters=filters,
                pool=pool,
                offline_writes=cache,
                outage_history=cache.outages,
                identity_seal=seal,
            )
            hub.on_lease = cache.on_lease
            hub.cached_pods = cache.kubelet_pods
            # Tokens the cache issues offline are ones the hub's verifier recognises.
            cache.local.tokens = hub.verifier.offline
            cache.attach_metrics(hub.metrics)
            cache.local.filters = filters
            if cache.store.reset:
                hub.readiness.warn("disk-cache", cache.store.reset)
            if not cache.store.sealer.sealing:
                hub.readiness.warn("disk-cache-sealing", runtime.unsealed_warning(hub_settings))
            # Writes that fail (a full disk): still ready, the warning says what is not stored.
            hub.readiness.add_warning("disk-cache", cache.write_warning)
            hub.status_sections["cache"] = cache.status
        if filters is not None:
            filters.attach_metrics(hub.metrics)
            hub.status_sections["filters"] = filters.status
        else:
            hub.status_sections["filters"] = _filters_off
        if pool is not None:
            pool.attach_metrics(hub.metrics)
            hub.status_sections["pool"] = pool.status
        await hub.start()
        if cache is not None:
            await _retire_old_keys(hub, cache)
        checker = hub.health
        assert checker is not None  # set by start()
        hub.readiness.add(
            "cloud-or-cache", _reached_or_cached(checker, cache, hub_settings), gates_proxy=False
        )
        try:
            async with asyncio.TaskGroup() as tg:
                if cache is not None:
                    cache.cloud_healthy = checker.any_healthy
                if filters is not None:
                    filters.cloud_healthy = checker.any_healthy
                if pool is not None:
                    pool.cloud_healthy = checker.any_healthy
                    pool.cloud_last_seen = checker.last_success
                # The followers start once the first probe has told the proxy where to go: asked
                # before, they would all meet an empty cache's 404 first.
                await checker.initial_probe_done.wait()
                followers = []
                # yurt-hub-cfg's follower (the cache's, else the filters') follows the pool's
                # ConfigMap in the same watch: one ConfigMap watch per hub upstream.
                pool_configs = pool.config_targets() if pool is not None else {}
                shared_config = cache is not None or filters is not None
                if pool is not None:
                    client = hub.upstream
                    certs = hub.certs
                    assert client is not None

                    async def serving() -> ssl.SSLContext | None:
                        # The hub's serving certificate (also the secure proxy's), once the
                        # certificate manager has one; live: rotations reach new handshakes.
                        if certs is None:
                            return None
                        await certs.serving_ready.wait()
                        return certs.serving_context

                    followers.append(
                        tg.create_task(
                            pool.run(
                                hub.own_route,
                                leader_ssl=lambda: client.identity.with_identity,
                                serving_ssl=serving,
                                ready=hub.readiness.not_ready,
                                follow_config=not shared_config,
                            ),
                            name="pool",
                        )
                    )
                    # The filters follow services through the hub: the multiplexer answers.
                    await pool.wait_started()
                also = [filters] if filters is not None else []
                if cache is not None:
                    followers.append(
                        tg.create_task(
                            cache.follow_config(hub.own_route, also=also, others=pool_configs),
                            name="cache-agents-config",
                        )
                    )
                    # kubectl's discovery documents, cached whoever reads them online.
                    followers.append(
                        tg.create_task(
                            discoverydocs.keep_cached(hub.own_route, checker.any_healthy),
                            name="discovery-documents",
                        )
                    )
                followers.append(
                    tg.create_task(
                        _reporter(hub_settings, hub, cache).run(), name="autonomy-condition"
                    )
                )
                if filters is not None:
                    if cache is None:
                        followers.append(
                            tg.create_task(
                                filters.follow_config(hub.own_route, others=pool_configs),
                                name="filter-config",
                            )
                        )
                    followers.append(
                        tg.create_task(filters.follow(hub.own_route), name="filter-inputs")
                    )
                    # Whatever runs beside the hub talks to it at once: do not hand it a hub
                    # whose gate still waits for the filters' inputs (bounded: ``ready`` gives
                    # up waiting after inputs_sync_timeout, and never waits offline).
                    await filters.wait_ready()
                try:
                    yield Node(hub=hub, cache=cache, filters=filters, pool=pool)
                finally:
                    # The followers are the hub's own loops: its stop ends them once nothing
                    # new is accepted, before it waits for the requests in flight.
                    await hub.stop(force=force, own_loops=followers)
        finally:
            await hub.stop(force=force)  # a start that failed above (else stopped already)
    finally:
        if cache is not None:
            await cache.close()


async def _retire_old_keys(hub: server.Hub, cache: runtime.CacheRuntime) -> None:
    """After a key rotation: the cache re-encrypted its entries at open and the certificate
    manager re-sealed the hub's private keys at start; the older data keys go now (never
    before: a crash in between would leave a key sealed under a data key no longer kept)."""
    if hub.certs is not None and hub.certs.holds_older_keys():
        return
    try:
        await cache.store.retire_old_keys()
    except store.StoreError as e:
        log.warning("%s", e)


async def _filters_off() -> dict[str, object]:
    return {"active": [], "inactive": {}, "note": "--enable-resource-filter=false"}


def _reporter(
    hub_settings: settings.HubSettings, hub: server.Hub, cache: runtime.CacheRuntime | None
) -> reporting.Reporter:
    assert hub.upstream is not None and hub.health is not None  # set by start()
    if cache is None:
        return reporting.Reporter(
            hub_settings,
            hub.upstream,
            reporting.first_healthy(hub.health),
            cached_node=None,
            cache_health=lambda: conditions.CacheHealth(available=False),
            last_outage=hub.outages.last_outage,
        )
    return reporting.Reporter(
        hub_settings,
        hub.upstream,
        reporting.first_healthy(hub.health),
        cached_node=cache.kubelet_node,
        cache_health=lambda: conditions.CacheHealth(True, cache.failed_keys()),
        last_outage=hub.outages.last_outage,
    )
