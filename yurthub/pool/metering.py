"""The multiplexer's metrics on the hub's ``/metrics`` (prefix ``node_yurthub_``).

YurtHub's own (reference §8.4, §9): ``aggregated_in_flight_requests_collector`` /
``_total`` (clients the multiplexer is answering) and
``target_for_multiplexer_requests_collector`` (the multiplexer's upstream requests in flight,
by server). Ours:

- ``multiplexer_upstream_watches{resource,source}``: upstream watches held (source ``cloud``
  through the hub's proxy, or ``leader``);
- ``multiplexer_upstream_bytes_total{resource,source}``: payload bytes read upstream;
- ``multiplexer_served_total{resource,verb}`` and ``multiplexer_served_bytes_total{resource}``:
  client lists and watches answered from memory and the bytes written to them;
- ``multiplexer_saved_bytes{resource}``: served minus read from the cloud: what did not cross
  the cloud link because of the multiplexer (negative only while a resource is being read);
- ``multiplexer_clients{resource}``: watch clients now; ``multiplexer_store_objects``,
  ``multiplexer_store_bytes`` (objects and history) and ``multiplexer_store_limit_bytes``,
  ``multiplexer_synced``, all per resource;
- ``pool_leader_healthy{leader}``, ``pool_source{source}`` (1 for the current one),
  ``pool_is_leader``.

Labels are resources of the pool-scoped set, sources, verbs and leader node names: bounded by
the configuration, whatever clients send; YurtHub's two families take ``metrics``' bounded
request labels. Read from the scrape thread: the collector copies the resource map (one C
call) and reads plain numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import Counter, Gauge, core

from yurthub import metrics, requestinfo
from yurthub.pool import gvrs, leaderconfigs, multiplexer

_NS, _SUB = "node", "yurthub"


class PoolMeter:
    """``multiplexer.Meter`` on the hub's registry."""

    def __init__(self, hub_metrics: metrics.Metrics, own_component: str) -> None:
        self.hub = hub_metrics
        self._own = own_component
        r = hub_metrics.registry
        self.upstream_watches = Gauge(
            "multiplexer_upstream_watches",
            "Upstream watches the pool multiplexer holds, by resource and source",
            ["resource", "source"],
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.upstream_bytes_total = Counter(
            "multiplexer_upstream_bytes",
            "Payload bytes the pool multiplexer read upstream, by resource and source",
            ["resource", "source"],
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.served_total = Counter(
            "multiplexer_served",
            "Lists and watches the pool multiplexer answered from memory",
            ["resource", "verb"],
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.served_bytes_total = Counter(
            "multiplexer_served_bytes",
            "Bytes the pool multiplexer wrote to its clients",
            ["resource"],
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self._served: dict[str, float] = {}
        self._cloud: dict[str, float] = {}

    def upstream_watch(self, gvr: gvrs.Gvr, source: str, delta: int) -> None:
        self.hub.child(self.upstream_watches, str(gvr), source).inc(delta)

    def upstream_bytes(self, gvr: gvrs.Gvr, source: str, count: int) -> None:
        if count:
            self.hub.child(self.upstream_bytes_total, str(gvr), source).inc(count)
            if source == "cloud":
                self._cloud[str(gvr)] = self._cloud.get(str(gvr), 0) + count

    def target(self, gvr: gvrs.Gvr, verb: str, server: str, delta: int) -> None:
        hub = self.hub
        b = hub.bounds
        hub.child(
            hub.target_for_multiplexer_requests,
            b.verb(verb),
            b.resource(gvr.resource),
            "",
            b.component(self._own),
            server,
        ).inc(delta)

    def served(self, gvr: gvrs.Gvr, verb: str, client: str) -> None:
        self.hub.child(self.served_total, str(gvr), verb).inc()

    def served_bytes(self, gvr: gvrs.Gvr, nbytes: int) -> None:
        key = str(gvr)
        self.hub.child(self.served_bytes_total, key).inc(nbytes)
        self._served[key] = self._served.get(key, 0) + nbytes

    def in_flight(self, info: requestinfo.RequestInfo, delta: int) -> None:
        hub = self.hub
        hub.child(hub.aggregated_in_flight_requests, *hub.request_labels(info)).inc(delta)
        hub.aggregated_in_flight_requests_total.inc(delta)

    def saved(self, key: str) -> float:
        return self._served.get(key, 0) - self._cloud.get(key, 0)


class PoolCollector:
    """Read at scrape time: the stores, the leaders, the source."""

    def __init__(
        self,
        meter: PoolMeter,
        mux: multiplexer.Multiplexer,
        leader_health: Callable[[], dict[leaderconfigs.Leader, bool]],
        source: Callable[[], leaderconfigs.Source],
        is_leader: Callable[[], bool],
    ) -> None:
        self.meter = meter
        self.mux = mux
        self.leader_health = leader_health
        self.source = source
        self.is_leader = is_leader

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[core.Metric]:
        def family(name: str, doc: str, labels: list[str]) -> core.GaugeMetricFamily:
            return core.GaugeMetricFamily(f"{_NS}_{_SUB}_{name}", doc, labels=labels)

        clients = family("multiplexer_clients", "Watch clients served now", ["resource"])
        objects = family("multiplexer_store_objects", "Objects in memory", ["resource"])
        size = family(
            "multiplexer_store_bytes", "Bytes in memory (objects and history)", ["resource"]
        )
        limit = family("multiplexer_store_limit_bytes", "Memory budget of a resource", ["resource"])
        synced = family("multiplexer_synced", "1 once the resource is listed", ["resource"])
        saved = family(
            "multiplexer_saved_bytes",
            "Bytes served from memory minus bytes read from the cloud",
            ["resource"],
        )
        for gvr, resource in sorted(dict(self.mux.resources).items()):
            key = str(gvr)
            store = resource.store
            clients.add_metric([key], store.watchers)
            objects.add_metric([key], store.objects)
            size.add_metric([key], store.bytes)
            limit.add_metric([key], store.limits.max_bytes)
            synced.add_metric([key], 1 if store.synced else 0)
            saved.add_metric([key], self.meter.saved(key))
        yield from (clients, objects, size, limit, synced, saved)
        healthy = family(
            "pool_leader_healthy",
            "Leader hubs usable: reachable (TCP check) and not failing",
            ["leader"],
        )
        for leader, ok in sorted(self.leader_health().items()):
            healthy.add_metric([leader.node], 1 if ok else 0)
        yield healthy
        source = family("pool_source", "Where pool-scoped data comes from (1: current)", ["source"])
        current = self.source()
        for value in leaderconfigs.Source:
            source.add_metric([value.value], 1 if value is current else 0)
        yield source
        leading = family("pool_is_leader", "1 while this hub is a leader of its pool", [])
        leading.add_metric([], 1 if self.is_leader() else 0)
        yield leading
