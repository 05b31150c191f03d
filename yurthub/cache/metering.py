"""The cache's Prometheus metrics, collected on scrape from ``store.Stats``.

Registered on the hub's own registry (``yurthub.metrics.Metrics.registry``) by
``runtime.CacheRuntime.attach_metrics``; nothing is registered globally. Names follow the hub's
``node_yurthub_`` prefix; ``node_yurthub_error_keys_count`` is YurtHub's gauge (keys whose last
write failed), fed by the same numbers. Each counter is the number ``/v1/status`` shows under the
same name (``write_failures`` is ``cache.writeFailures``, the error keys ``cache.errorKeys``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from yurthub.cache import store

PREFIX = "node_yurthub_cache_"


class CacheCollector:
    """A custom collector: reads the counters when scraped, holds no state of its own.

    Scrapes run in a thread beside the event loop: only plain counters and ``len`` of the index
    are read here, never an iteration of a dict the loop may be changing."""

    def __init__(self, cache: store.Store, lists: Callable[[], int]) -> None:
        self._store = cache
        self._lists = lists

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        stats = self._store.stats
        yield GaugeMetricFamily(
            f"{PREFIX}objects", "Objects in the disk cache.", value=len(self._store)
        )
        yield GaugeMetricFamily(
            f"{PREFIX}lists",
            "Lists (component, resource, namespace, selector) cached.",
            value=self._lists(),
        )
        yield CounterMetricFamily(
            f"{PREFIX}write_failures",
            "Cache writes lost to disk errors (full disk, I/O): every job of a failed transaction, "
            "as /v1/status's cache.writeFailures; online traffic is unaffected.",
            value=stats.write_failures,
        )
        yield CounterMetricFamily(
            f"{PREFIX}dropped_responses",
            "Responses whose caching was given up (over a size bound or the write queue full).",
            value=stats.dropped_responses + stats.refused_jobs,
        )
        yield CounterMetricFamily(
            f"{PREFIX}bad_bodies",
            "Response bodies the cache could not interpret (not JSON, unexpected shape).",
            value=stats.bad_bodies,
        )
        yield CounterMetricFamily(
            f"{PREFIX}superseded_lists",
            "Queued lists skipped because a newer whole list of the same key arrived.",
            value=stats.superseded_lists,
        )
        yield CounterMetricFamily(
            f"{PREFIX}corrupt_entries",
            "Stored entries dropped because they failed their checksum or were not written by "
            "this hub (treated as cache misses).",
            value=stats.corrupt_entries,
        )
        yield CounterMetricFamily(
            f"{PREFIX}resets",
            "Times the cache database was found damaged at open, moved aside and started empty.",
            value=1 if self._store.reset else 0,
        )
        yield CounterMetricFamily(
            f"{PREFIX}refused_objects",
            "Objects not stored because the body named another object than the request's URL.",
            value=stats.refused_objects,
        )
        yield CounterMetricFamily(
            f"{PREFIX}write_batches",
            "Transactions committed by the cache writer.",
            value=stats.batches,
        )
