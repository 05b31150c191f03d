"""Prometheus collectors of one hub (reference §9 names, prefix ``node_yurthub_``).

One ``CollectorRegistry`` per ``Metrics`` instance, never the module-level default registry:
two hubs in one process (tests, the demo) must not share or clash on collectors. The process
and platform collectors are registered on each registry so ``/metrics`` still shows them.

Label values come from the request, bounded by ``labels.Bounds`` (``request_labels``,
``duration_labels``): any local process can send any User-Agent, method or URL, and a label
value per distinct string would grow ``/metrics`` without end. ``client`` is the request's
component, not YurtHub's whole User-Agent **[quirk]**.

``/metrics`` is written as YurtHub's Go client writes it (``render``): YurtHub's counter
``proxy_traffic_collector`` under its own name (prometheus_client would add ``_total``), and no
``_created`` series (Go has none), per registry: nothing global is switched. The families
edgehub adds to YurtHub's are listed in docs/metrics.md (a test diffs both hubs' scrapes).

``exposition`` may run in another thread (the hub scrapes off its event loop): every collector
registered here must be readable from there (prometheus_client's own are; custom ones read
plain counters only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, utils
from prometheus_client.core import GaugeMetricFamily, Metric

from yurthub import labels, requestinfo

_NS = "node"
_SUB = "yurthub"

SOURCES = ("cloud", "cache", "pool", "hub")
"""Where an answer came from (``answers_total{source}``): an apiserver, the disk cache, the
pool multiplexer's memory (fed by the cloud or the pool's leader hub), or the hub itself (not
ready, limits, no backend)."""
_REQ_LABELS = ("verb", "resource", "subresources", "client")

# Outages span a lost probe or two and a week on a ship.
_OUTAGE_BUCKETS = (
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    1800.0,
    3600.0,
    3 * 3600.0,
    6 * 3600.0,
    12 * 3600.0,
    86400.0,
    3 * 86400.0,
    7 * 86400.0,
)

# Proxied requests span sub-millisecond gets and 30-minute watches.
_DURATION_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    1800.0,
    3600.0,
)


BARE_COUNTERS = frozenset({f"{_NS}_{_SUB}_proxy_traffic_collector"})
"""Counters YurtHub names without ``_total``: exported under the family's own name."""

_TYPES = {"unknown": "untyped", "info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram"}


def _escape(value: str, quote: bool) -> str:
    value = value.replace("\\", "\\\\").replace("\n", "\\n")
    return value.replace('"', '\\"') if quote else value


def render(families: Iterable[Metric], bare_counters: frozenset[str] = BARE_COUNTERS) -> bytes:
    """PURE: the Prometheus text format (0.0.4) of ``families`` as Go's client writes it: no
    ``<name>_created`` series; a counter is ``<name>_total`` (prometheus_client's naming, which
    Go's matches for names ending in ``_total``) unless ``bare_counters`` names it, then
    ``<name>``. Label values escaped as the format says; samples in the collectors' order."""
    out: list[str] = []
    for family in families:
        name, kind = family.name, family.type
        exported = name
        if kind == "counter" and name not in bare_counters:
            exported = f"{name}_total"
        elif kind == "info":
            exported = f"{name}_info"
        out.append(f"# HELP {exported} {_escape(family.documentation, False)}\n")
        out.append(f"# TYPE {exported} {_TYPES.get(kind, kind)}\n")
        dropped = {f"{name}_created", f"{name}_gsum", f"{name}_gcount"}
        for sample in family.samples:
            if sample.name in dropped:
                continue
            sample_name = sample.name
            if kind == "counter":
                sample_name = exported
            labels = ",".join(f'{k}="{_escape(v, True)}"' for k, v in sorted(sample.labels.items()))
            braces = f"{{{labels}}}" if labels else ""
            value: str = utils.floatToGoString(sample.value)  # type: ignore[no-untyped-call]
            out.append(f"{sample_name}{braces} {value}\n")
    return "".join(out).encode()


class Metrics:
    def __init__(self, bounds: labels.Bounds | None = None) -> None:
        self.bounds = bounds or labels.Bounds()
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        prometheus_client.ProcessCollector(registry=self.registry)
        prometheus_client.PlatformCollector(registry=self.registry)
        self.registry.register(VersionInfo())
        r = self.registry
        self.server_healthy_status = Gauge(
            "server_healthy_status",
            "Healthy status of remote servers. 1: healthy, 0: unhealthy",
            ["server"],
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.in_flight_requests = Gauge(
            "in_flight_requests_collector",
            "Collector of in-flight requests handled by the hub",
            list(_REQ_LABELS),
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.in_flight_requests_total = Gauge(
            "in_flight_requests_total",
            "Number of in-flight requests handled by the hub",
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.aggregated_in_flight_requests = Gauge(
            "aggregated_in_flight_requests_collector",
            "Collector of in-flight requests served by the pool multiplexer",
            list(_REQ_LABELS),
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.aggregated_in_flight_requests_total = Gauge(
            "aggregated_in_flight_requests_total",
            "Number of in-flight requests served by the pool multiplexer",
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.target_for_multiplexer_requests = Gauge(
            "target_for_multiplexer_requests_collector",
            "Collector of multiplexer requests forwarded to a server",
            [*_REQ_LABELS, "server"],
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.closable_conns = Gauge(
            "closable_conns_collector",
            "Number of upstream connections the hub can close, by server (host:port)",
            ["server"],
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.proxy_traffic = Counter(
            "proxy_traffic_collector",
            "Bytes of upstream response bodies proxied to clients",
            ["client", "verb", "resource", "subresources"],
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.error_keys_persistency_status = Gauge(
            "error_keys_persistency_status",
            "Error keys persistency status 1: ready, 0: notReady",
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.error_keys_count = Gauge(
            "error_keys_count",
            "Number of cache keys whose last write failed",
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.rejected_requests = Counter(
            "rejected_requests",
            "Requests answered 429 by the hub's in-flight limits, by limit and client",
            ["reason", "client"],
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.refused_connections = Counter(
            "refused_connections",
            "Connections to the proxy answered 503 and closed: --proxy-max-connections were open",
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.idle_connections_closed = Counter(
            "idle_connections_closed",
            "Idle proxy connections closed to make room for a new one at --proxy-max-connections",
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.header_timeouts = Counter(
            "header_timeouts",
            "Proxy connections closed (408) without a whole request head in time",
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.request_duration = Histogram(
            "request_duration_seconds",
            "Proxied request duration until the last body byte, by component/verb/resource/code",
            ["component", "verb", "resource", "code"],
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
            buckets=_DURATION_BUCKETS,
        )

        self.answers = Counter(
            "answers",
            "Proxied requests answered, by where the answer came from (cloud: an apiserver; "
            "cache: the hub's disk cache; pool: the pool multiplexer's memory; hub: the hub "
            "itself, e.g. not ready, over a limit, no backend), component and verb",
            ["source", "component", "verb"],
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )
        self.outage_seconds = Histogram(
            "outage_seconds",
            "Ended outages (no apiserver usable, the hub answering locally) by how long they "
            "lasted, as the hub saw them (a hub restarted during one observes it whole), observed "
            "once final: when the link stayed up for the flap window after it",
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
            buckets=_OUTAGE_BUCKETS,
        )
        self.outage_flaps = Counter(
            "outage_flaps",
            "Times the link came back and dropped again within the flap window "
            "(--outage-flap-window-seconds) after an outage ended: each went on with that outage "
            "(one record, one Event) instead of beginning a new one",
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )

        self.cloud_lists = Counter(
            "cloud_lists",
            "Lists (and streaming lists: watches with sendInitialEvents) the hub sent to an "
            "apiserver, not answered from its cache or its pool, by component (yurthub: the "
            "hub's own loops; multiplexer-proxy-<node>: its pool feeders) and resource. After an "
            "outage the apiserver can still resume, none should show here",
            ["component", "resource"],
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )

        self.heartbeat_pushbacks = Counter(
            "heartbeat_pushbacks",
            "Heartbeats (node lease renewals) an apiserver answered 429 Too Many Requests. A "
            "healthy apiserver that pushes back stays healthy: the node's lease is not renewed "
            "meanwhile, and only this counter (and one log line) says so",
            ["server"],
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )

        self.heartbeat_slow_alive = Counter(
            "heartbeat_slow_alive",
            "Heartbeats that got no answer within --heartbeat-timeout-seconds while the "
            "server's answers to the proxy kept arriving: the server was kept in use (slow, "
            "not gone)",
            ["server"],
            namespace=_NS,
            subsystem=_SUB,
            registry=r,
        )

    def child(self, collector: Any, *values: str) -> Any:
        """``collector.labels(*values)`` (values in the collector's label order), memoised:
        ``labels()`` takes a lock and builds its key on every call, too slow for the
        per-request path. The memo holds what the collector holds anyway, one per label set."""
        key = (id(collector), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = collector.labels(*values)
        return child

    def request_labels(self, info: requestinfo.RequestInfo) -> tuple[str, str, str, str]:
        """(verb, resource, subresources, client) of ``in_flight_requests``/``proxy_traffic``."""
        b = self.bounds
        return (
            b.verb(info.verb),
            b.resource(info.resource),
            b.subresource(info.subresource),
            b.component(info.component),
        )

    def duration_labels(self, info: requestinfo.RequestInfo, code: int) -> tuple[str, ...]:
        """(component, verb, resource, code) of ``request_duration``."""
        b = self.bounds
        return (b.component(info.component), b.verb(info.verb), b.resource(info.resource),
                b.code(code))  # fmt: skip

    def exposition(self) -> bytes:
        return render(self.registry.collect())


_GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386"}
POOL_LABEL_KEY = "apps.openyurt.io/nodepool"


class VersionInfo:
    """YurtHub's ``openyurt_version_info`` (constant 1), labelled as OpenYurt's projectinfo
    labels it: ``component_name`` is ``yurthub`` (what dashboards of YurtHub select on),
    ``git_version`` edgehub's version, ``go_version``/``compiler`` the Python that runs it. The
    labels are worked out at the first scrape (``importlib.metadata`` is loaded then, never at
    start-up: ``tests/unit/hub/test_hub_imports.py``)."""

    def __init__(self) -> None:
        self._labels: dict[str, str] | None = None

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())

    def _values(self) -> dict[str, str]:
        if self._labels is None:
            import importlib.metadata
            import os
            import platform

            try:
                version = importlib.metadata.version("edgehub")
            except importlib.metadata.PackageNotFoundError:
                version = "0.0.0"
            machine = os.uname().machine
            self._labels = {
                "component_name": "yurthub",
                "git_version": f"v{version}",
                "git_commit": "",
                "build_date": "",
                "go_version": f"python{platform.python_version()}",
                "compiler": platform.python_implementation().lower(),
                "platform": f"{os.uname().sysname.lower()}/{_GO_ARCH.get(machine, machine)}",
                "nodepoollabelkey": POOL_LABEL_KEY,
            }
        return self._labels

    def collect(self) -> Iterator[GaugeMetricFamily]:
        values = self._values()
        family = GaugeMetricFamily(
            "openyurt_version_info",
            "A metric with a constant '1' value labeled by the version, the runtime and the "
            "platform of the hub (edgehub, as component yurthub)",
            labels=list(values),
        )
        family.add_metric(list(values.values()), 1)
        yield family


class OngoingOutage:
    """``node_yurthub_outage_ongoing_seconds``: how long the outage going on has lasted (0:
    the cloud is reachable), read at scrape time (from the scrape thread: ``seconds`` must only
    read attributes)."""

    def __init__(self, seconds: Callable[[], float]) -> None:
        self._seconds = seconds

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield self._family()

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            f"{_NS}_{_SUB}_outage_ongoing_seconds",
            "How long the outage going on has lasted (0 while an apiserver is usable)",
        )

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        family.add_metric([], self._seconds())
        yield family


class CertificateExpiry:
    """``node_yurthub_certificate_expiration_timestamp_seconds{certificate}``: when each of the
    hub's certificates (``client``, ``serving``) expires, read at scrape time (from the scrape
    thread: ``expiry`` must only read attributes)."""

    def __init__(self, expiry: Callable[[], dict[str, float]]) -> None:
        self._expiry = expiry

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield self._family()

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            f"{_NS}_{_SUB}_certificate_expiration_timestamp_seconds",
            "When the hub's certificate expires (Unix time), by certificate: client, serving",
            labels=["certificate"],
        )

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        for name, when in sorted(self._expiry().items()):
            family.add_metric([name], when)
        yield family
