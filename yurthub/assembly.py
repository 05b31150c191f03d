"""The hub assembled with its disk cache: what ``edgehub hub`` and the demo run.

``server.Hub`` knows nothing of the cache beyond the seams (``proxy/seams.py``); the cache
runtime knows nothing of listeners. This module plugs one into the other, in the one order
that is safe:

1. open the cache (index loaded off the loop) — offline answers work from the first request;
2. start the hub with the cache's tee and local answerer; the heartbeat's Lease is stored as
   kubelet's lease;
3. tell the local answerer how to see cloud health (held offline watches end when it returns);
4. follow the ``yurt-hub-cfg`` ConfigMap through the hub's own proxy (so it is cached too);
5. wait for the first health probe (bounded by the heartbeat timeout and retries): whatever
   runs beside the hub talks to it at once, and would otherwise meet the readiness gate's 503.

Teardown runs in reverse: stop following, stop the hub (phased), close the cache (queued
writes flushed, bounded).

A cache that cannot be opened (permissions, a corrupt database, a full disk at start) does not
keep the node from working online: the hub then runs as a plain proxy, logs it as an error and
reports ``node_yurthub_error_keys_persistency_status 0``. Nothing is deleted automatically;
``edgehub cache verify`` tells the operator what is wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator

from yurthub import server, settings
from yurthub.cache import runtime, store

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class Node:
    """A running hub and the cache behind it (None when the cache could not be opened)."""

    hub: server.Hub
    cache: runtime.CacheRuntime | None


@contextlib.asynccontextmanager
async def running(
    hub_settings: settings.HubSettings, *, force: asyncio.Event | None = None
) -> AsyncIterator[Node]:
    """Run the hub with its cache for the duration of the ``async with`` body.

    Enter and exit from the same task (the hub's TaskGroup belongs to it). ``force``, when set
    during teardown, cuts the graceful phase short (a second signal).
    """
    try:
        cache: runtime.CacheRuntime | None = await runtime.open(hub_settings)
    except store.StoreError as e:
        log.error(
            "disk cache %s cannot be opened, running WITHOUT offline answers: %s",
            hub_settings.cache.disk_cache_path,
            e,
        )
        cache = None
    try:
        if cache is None:
            hub = server.Hub(hub_settings)
            hub.metrics.error_keys_persistency_status.set(0)
        else:
            hub = server.Hub(hub_settings, tee=cache.tee, local=cache.local)
            hub.on_lease = cache.on_lease
            cache.attach_metrics(hub.metrics)
        await hub.start()
        checker = hub.health
        assert checker is not None  # set by start()
        try:
            async with asyncio.TaskGroup() as tg:
                follower = None
                if cache is not None:
                    cache.cloud_healthy = checker.any_healthy
                    follower = tg.create_task(
                        cache.follow_config(hub.proxy_url), name="cache-agents-config"
                    )
                await checker.initial_probe_done.wait()
                try:
                    yield Node(hub=hub, cache=cache)
                finally:
                    if follower is not None:
                        follower.cancel()
        finally:
            await hub.stop(force=force)
    finally:
        if cache is not None:
            await cache.close()
