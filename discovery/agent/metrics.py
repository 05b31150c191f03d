"""Prometheus metrics of the agent, on its own CollectorRegistry (never the global one).

Akri's agent's families, by Akri's names, types and label names (docs/metrics.md):

* ``akri_instance_count{configuration,is_shared}`` (gauge): Instances this node serves.
* ``akri_discovery_response_result{discovery_handler_name,result}`` (counter, no ``_total``, as
  Akri's Rust client names it): device-list updates from discovery requests, ``Success`` or
  ``Fail`` (Akri's values).
* ``akri_discovery_response_time{configuration}`` (histogram, Akri's buckets): from starting a
  request to its first device list.

``configuration`` is ``<namespace>/<name>`` (Akri: the name). Like Akri's, the process's
``process_*``. edgehub's own:

* ``akri_slot_usage{instance}`` / ``akri_slot_capacity{instance}`` (not Akri's, though named
  so): held and total capacity slots of each Instance plugin on this node.
* ``edgehub_agent_discovery_handler_endpoints{handler}`` (not Akri's): endpoints registered per
  discovery handler name; a name once registered, or wanted by a Configuration, stays at 0 when
  none is left (the "discovery handler gone" alert, ``manifests/dashboards/``).

``render`` writes the text format as Akri's client does: no ``_created`` series, nothing
global switched (the hub's ``yurthub.metrics.render`` does the same for YurtHub's names; the
import contracts keep the two packages apart).

``serve`` exposes ``GET /metrics`` with aiohttp (``METRICS_PORT``, default 8080 as Akri), plus
the probes of the DaemonSet: ``GET /healthz`` (200 while the event loop answers: liveness) and
``GET /readyz`` (200 once the agent's caches are synced, else 503: readiness). Liveness does
not depend on the apiserver on purpose: an agent waiting for an unreachable cloud is not
helped by being restarted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import prometheus_client
from aiohttp import web
from prometheus_client import utils
from prometheus_client.core import GaugeMetricFamily, Metric

from discovery import registry

logger = logging.getLogger(__name__)

Key = tuple[str, str]

BARE_COUNTERS = frozenset({"akri_discovery_response_result"})
"""Akri's counters: named without ``_total`` (Rust's prometheus crate adds no suffix)."""
RESPONSE_TIME_BUCKETS = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 60.0)
"""Akri's ``DISCOVERY_RESPONSE_TIME_BUCKETS`` (seconds)."""


def _escape(value: str, quote: bool) -> str:
    value = value.replace("\\", "\\\\").replace("\n", "\\n")
    return value.replace('"', '\\"') if quote else value


def render(families: Iterable[Metric], bare_counters: frozenset[str] = BARE_COUNTERS) -> bytes:
    """PURE: the Prometheus text format of ``families`` without ``_created`` series; a counter
    is ``<name>_total`` unless ``bare_counters`` names it."""
    out: list[str] = []
    for family in families:
        name, kind = family.name, family.type
        exported = f"{name}_total" if kind == "counter" and name not in bare_counters else name
        out.append(f"# HELP {exported} {_escape(family.documentation, False)}\n")
        out.append(f"# TYPE {exported} {'untyped' if kind == 'unknown' else kind}\n")
        for sample in family.samples:
            if sample.name == f"{name}_created":
                continue
            labels = ",".join(f'{k}="{_escape(v, True)}"' for k, v in sorted(sample.labels.items()))
            value: str = utils.floatToGoString(sample.value)  # type: ignore[no-untyped-call]
            sample_name = exported if kind == "counter" else sample.name
            out.append(
                f"{sample_name}{{{labels}}} {value}\n" if labels else f"{sample_name} {value}\n"
            )
    return "".join(out).encode()


class Metrics:
    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        # Akri's agent exports its process's process_* (the Rust client's default registry).
        prometheus_client.ProcessCollector(registry=self.registry)
        self.instance_count = prometheus_client.Gauge(
            "akri_instance_count",
            "Instances served by this node",
            ["configuration", "is_shared"],
            registry=self.registry,
        )
        self.discovery_result = prometheus_client.Counter(
            "akri_discovery_response_result",
            "Device-list updates from discovery requests, by discovery handler and result",
            ["discovery_handler_name", "result"],
            registry=self.registry,
        )
        self.discovery_time = prometheus_client.Histogram(
            "akri_discovery_response_time",
            "Seconds from starting a discovery request to its first device list",
            ["configuration"],
            buckets=RESPONSE_TIME_BUCKETS,
            registry=self.registry,
        )
        self.slot_usage = prometheus_client.Gauge(
            "akri_slot_usage", "Held capacity slots", ["instance"], registry=self.registry
        )
        self.slot_capacity = prometheus_client.Gauge(
            "akri_slot_capacity", "Capacity slots", ["instance"], registry=self.registry
        )
        self._timed: set[Key] = set()

    @staticmethod
    def _label(key: Key) -> str:
        return f"{key[0]}/{key[1]}"

    def set_instances(self, key: Key, shared: int, local: int) -> None:
        self.instance_count.labels(self._label(key), "true").set(shared)
        self.instance_count.labels(self._label(key), "false").set(local)

    def forget_configuration(self, key: Key) -> None:
        label = self._label(key)
        for shared in ("true", "false"):
            try:
                self.instance_count.remove(label, shared)
            except KeyError:
                pass
        self._timed.discard(key)

    def discovery_snapshot(
        self, key: Key, handler: str, snapshot: registry.Snapshot, elapsed: float
    ) -> None:
        failed = bool(snapshot.errors) or snapshot.invalid_details is not None
        self.discovery_result.labels(handler, "Fail" if failed else "Success").inc()
        if not failed and snapshot.devices and key not in self._timed:
            self._timed.add(key)
            self.discovery_time.labels(self._label(key)).observe(elapsed)

    def set_slots(self, instance: str, used: int, capacity: int) -> None:
        self.slot_usage.labels(instance).set(used)
        self.slot_capacity.labels(instance).set(capacity)

    def forget_instance(self, instance: str) -> None:
        for gauge in (self.slot_usage, self.slot_capacity):
            try:
                gauge.remove(instance)
            except KeyError:
                pass

    def render(self) -> bytes:
        return render(self.registry.collect())


async def serve(
    metrics: Metrics,
    host: str,
    port: int,
    ready: Callable[[], bool] = lambda: True,
    *,
    status: Callable[[], dict[str, Any]] | None = None,
) -> tuple[web.AppRunner, int]:
    """Start ``GET /metrics``, ``/healthz``, ``/readyz`` and (given ``status``) ``/status``
    (JSON for ``edgehub status``); returns the runner (the caller cleans it up) and the bound
    port."""

    async def handle(request: web.Request) -> web.Response:
        return web.Response(
            body=metrics.render(), headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST}
        )

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(request: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="not ready: caches not synced")

    async def show_status(request: web.Request) -> web.Response:
        assert status is not None
        return web.json_response(status())

    app = web.Application()
    if status is not None:
        app.router.add_get("/status", show_status)
    app.router.add_get("/metrics", handle)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    addresses = runner.addresses
    bound = addresses[0][1] if addresses else port
    logger.info("agent metrics on http://%s:%d/metrics", host, bound)
    return runner, int(bound)


class HandlerEndpoints:
    """``edgehub_agent_discovery_handler_endpoints{handler}`` from ``counts()`` (name ->
    endpoints now), keeping every name it has seen at 0 once it is gone: an absent series
    cannot fire an alert."""

    def __init__(self, counts: Callable[[], dict[str, int]]) -> None:
        self._counts = counts
        self._seen: set[str] = set()

    def describe(self) -> list[GaugeMetricFamily]:
        return [self._family()]

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "edgehub_agent_discovery_handler_endpoints",
            "Discovery handler endpoints registered with this agent, by handler name (0: a "
            "handler that was registered, or that a Configuration needs, is gone)",
            labels=["handler"],
        )

    def collect(self) -> list[GaugeMetricFamily]:
        counts = self._counts()
        if len(self._seen) < 1024:  # names come from registrations: bounded
            self._seen.update(counts)
        family = self._family()
        for name in sorted(self._seen | set(counts)):
            family.add_metric([name], counts.get(name, 0))
        return [family]
