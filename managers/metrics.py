"""Prometheus metrics of ``edgehub manager``, on its own CollectorRegistry (one per process,
never the global one). Every name starts with ``edgehub_manager_``.

* ``edgehub_manager_leader``: 1 while this replica leads (always 1 without election).
* ``edgehub_manager_leader_transitions_total``: times this replica became leader.
* ``edgehub_manager_reconciles_total{controller,outcome}``: ``success``, ``requeue``, ``error``;
  every outcome of every followed controller is written from the start (0), so ``rate()`` and
  ``increase()`` see a controller's first error (a series born at 1 has no increase).
* ``edgehub_manager_reconcile_duration_seconds{controller}``.
* ``edgehub_manager_workqueue_depth{controller}`` and ``edgehub_manager_cache_synced{controller}``,
  read from the controllers at scrape time.
* ``edgehub_manager_csr_decisions_total{kind,decision,reason}``: approvals and denials
  (``reason`` is ``AutoApproved`` or the failed check, a closed set).
* ``edgehub_manager_broker_writes_total{kind,verb,outcome}``: the broker controller's writes
  (``kind`` pods/jobs/services; ``verb`` create/update/delete; ``outcome`` ok, refused,
  name-taken, conflict, gone, error).
* ``edgehub_manager_node_cleanups_total{why}``: nodes removed from Instances (``deleted``,
  ``not-ready``).
* ``edgehub_manager_webhook_reviews_total{allowed}`` and
  ``edgehub_manager_webhook_review_duration_seconds``: Configuration admission reviews.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import prometheus_client
from prometheus_client import core

from kubecontrol import controlling

OUTCOMES = ("success", "requeue", "error")
"""``controlling.Controller``'s reconcile outcomes."""


class _ControllerCollector:
    """Queue depth and cache state, read when scraped (no bookkeeping on the hot path)."""

    def __init__(self, controllers: Sequence[controlling.Controller]) -> None:
        self.controllers = controllers

    def collect(self) -> Iterator[core.Metric]:
        depth = core.GaugeMetricFamily(
            "edgehub_manager_workqueue_depth",
            "Keys waiting to be reconciled",
            labels=["controller"],
        )
        synced = core.GaugeMetricFamily(
            "edgehub_manager_cache_synced",
            "1 once every watched resource of the controller is listed",
            labels=["controller"],
        )
        for controller in self.controllers:
            depth.add_metric([controller.name], len(controller.queue))
            synced.add_metric([controller.name], 1 if controller.synced else 0)
        yield depth
        yield synced

    def describe(self) -> list[core.Metric]:
        return []


class Metrics:
    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        self.leader = prometheus_client.Gauge(
            "edgehub_manager_leader",
            "1 while this replica holds the leader lease (always 1 without leader election)",
            registry=self.registry,
        )
        self.leader_transitions = prometheus_client.Counter(
            "edgehub_manager_leader_transitions",
            "Times this replica became leader",
            registry=self.registry,
        )
        self.reconciles = prometheus_client.Counter(
            "edgehub_manager_reconciles",
            "Reconciles by outcome (success, requeue, error)",
            ["controller", "outcome"],
            registry=self.registry,
        )
        self.reconcile_seconds = prometheus_client.Histogram(
            "edgehub_manager_reconcile_duration_seconds",
            "Time of one reconcile",
            ["controller"],
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30),
            registry=self.registry,
        )
        self.csr_decisions = prometheus_client.Counter(
            "edgehub_manager_csr_decisions",
            "Hub CSRs approved or denied (reason: AutoApproved or the failed check)",
            ["kind", "decision", "reason"],
            registry=self.registry,
        )

        self.broker_writes = prometheus_client.Counter(
            "edgehub_manager_broker_writes",
            "Broker controller writes by kind, verb and outcome",
            ["kind", "verb", "outcome"],
            registry=self.registry,
        )
        self.node_cleanups = prometheus_client.Counter(
            "edgehub_manager_node_cleanups",
            "Nodes removed from every Instance (why: deleted, not-ready)",
            ["why"],
            registry=self.registry,
        )
        self.webhook_reviews = prometheus_client.Counter(
            "edgehub_manager_webhook_reviews",
            "Configuration admission reviews answered (allowed: true, false)",
            ["allowed"],
            registry=self.registry,
        )
        self.webhook_seconds = prometheus_client.Histogram(
            "edgehub_manager_webhook_review_duration_seconds",
            "Time to answer one admission review",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
            registry=self.registry,
        )

    def follow(self, controllers: Sequence[controlling.Controller]) -> None:
        self.registry.register(_ControllerCollector(controllers))
        for controller in controllers:
            for outcome in OUTCOMES:
                self.reconciles.labels(controller.name, outcome)

    def reconciled(self, controller: str, outcome: str, seconds: float) -> None:
        """``controlling.Observer``."""
        self.reconciles.labels(controller, outcome).inc()
        self.reconcile_seconds.labels(controller).observe(seconds)

    def leading(self, leading: bool) -> None:
        self.leader.set(1 if leading else 0)
        if leading:
            self.leader_transitions.inc()

    def render(self) -> bytes:
        data: bytes = prometheus_client.generate_latest(self.registry)
        return data
