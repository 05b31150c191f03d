"""The response filters assembled for one hub: the ``seams.ResponseFilter`` the proxy calls.

Usage (``yurthub.assembly``; tests build it the same way)::

    filters = runtime.Filters(settings)               # None-free: check settings.filters.enabled
    hub = server.Hub(settings, filters=filters)         # remote answers; readiness gate
    filters.attach_metrics(hub.metrics)
    cache.local.filters = filters                       # offline answers
    filters.cloud_healthy = hub.health.any_healthy
    tg.create_task(cache.follow_config(hub.own_route, also=[filters]), name="config")
    tg.create_task(filters.follow(hub.own_route), name="filter-inputs")
    await filters.wait_ready()                          # bounded

Per request: ``registry.Approver`` names the filters (none for most requests: one dict
lookup), a ``chaining.Chain`` runs them over each object, ``responding`` picks the body shape.
Every filtered request is logged at debug level with its filters and counted per filter in
``node_yurthub_filter_requests_total{filter}``; objects changed, dropped or failed in
``node_yurthub_filter_objects_total{filter,outcome}``; bodies passed unfiltered because they
could not be read in ``node_yurthub_filter_undecodable_total{format}``. Label values are filter
names and fixed words: the cardinality is bounded whatever the clients send.

Inputs (``filters.inputs``) are followed through the hub's own proxy (``yurthub.following``)
only when an active filter needs them: services (``servicetopology``), the node
(``servicetopology``/``nodeportisolation`` without ``--nodepool-name``), NodePools or NodeBuckets
(``servicetopology`` pool topology). ``ready`` holds the readiness gate until they and
``yurt-hub-cfg`` are read, but never while no apiserver is reachable (offline the cache answers
and a missing input leaves objects unchanged) and never longer than ``inputs_sync_timeout``.

The filters that point pods at the hub (``registry.POINTING_AT_THE_HUB``) are left out of the
approver when pods cannot reach the hub's secure port (``inputs.pods_cannot_reach``): logged
once at construction, listed with why in ``inactive`` and in the ``filters`` section of
``/v1/status`` (``status``), which ``edgehub status`` shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import Counter

from yurthub import following, metrics, requestinfo, settings
from yurthub.cache import agents
from yurthub.filters import chaining, inputs, jsonbodies, protobodies, registry, responding

logger = logging.getLogger(__name__)

NODEPOOLS_PATH = "/apis/apps.openyurt.io/v1beta2/nodepools"
NODEBUCKETS_PATH = "/apis/apps.openyurt.io/v1alpha1/nodebuckets"


class _Meter:
    """``chaining.Observer`` on Prometheus counters (children memoised: hot path)."""

    def __init__(self) -> None:
        ns, sub = "node", "yurthub"
        self.requests = Counter(
            "filter_requests_total",
            "Requests whose answers went through a response filter, by filter",
            ["filter"],
            namespace=ns,
            subsystem=sub,
            registry=None,
        )
        self.objects = Counter(
            "filter_objects_total",
            "Objects a response filter changed, dropped, or failed on (passed unchanged)",
            ["filter", "outcome"],
            namespace=ns,
            subsystem=sub,
            registry=None,
        )
        self.undecodable_total = Counter(
            "filter_undecodable_total",
            "Bodies, events or objects passed unfiltered because they could not be decoded",
            ["format"],
            namespace=ns,
            subsystem=sub,
            registry=None,
        )
        self._children: dict[tuple[str, ...], Counter] = {}

    def _child(self, collector: Counter, *values: str) -> Counter:
        key = (collector._name, *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = collector.labels(*values)
        return child

    def request(self, names: tuple[str, ...]) -> None:
        for name in names:
            self._child(self.requests, name).inc()

    def changed(self, name: str) -> None:
        self._child(self.objects, name, "changed").inc()

    def dropped(self, name: str) -> None:
        self._child(self.objects, name, "dropped").inc()

    def failed(self, name: str) -> None:
        self._child(self.objects, name, "failed").inc()

    def undecodable(self, fmt: str, count: int = 1) -> None:
        self._child(self.undecodable_total, fmt).inc(count)


class _Stored:
    """``seams.StoredObjects`` for one offline answer."""

    def __init__(self, chain: chaining.Chain, kind: str, meter: _Meter) -> None:
        self._chain = chain
        self._kind = kind
        self._meter = meter

    def object(self, body: bytes) -> bytes:
        counts = jsonbodies.Counts()
        out = jsonbodies.filter_object(self._chain, body, self._kind, counts)
        if counts.undecodable:
            self._meter.undecodable("json", counts.undecodable)
        return out

    def item(self, body: bytes) -> bytes | None:
        counts = jsonbodies.Counts()
        out = jsonbodies.filter_item(self._chain, body, self._kind, counts)
        if counts.undecodable:
            self._meter.undecodable("json", counts.undecodable)
        return out

    def protobuf_object(self, body: bytes) -> bytes:
        counts = jsonbodies.Counts()
        out = protobodies.filter_object(self._chain, body, counts)[0]
        if counts.undecodable:
            self._meter.undecodable("protobuf", counts.undecodable)
        return out

    def protobuf_item(self, raw: bytes) -> bytes | None:
        counts = jsonbodies.Counts()
        out = protobodies.filter_item(self._chain, self._kind, raw, counts)
        if counts.undecodable:
            self._meter.undecodable("protobuf", counts.undecodable)
        return out


def _inactive(
    hub: settings.HubSettings, address: inputs.Address, names: tuple[str, ...]
) -> dict[str, str]:
    """Of ``names``, those pointing pods at the hub when pods cannot reach it there -> why
    (logged here, once per hub). An address set in the settings (``filters.hub_host``) is the
    caller's word that the hub's secure port is reached there."""
    pointing = [n for n in names if n in registry.POINTING_AT_THE_HUB]
    if not pointing:
        return {}
    served = bool(hub.filters.hub_host) or hub.certs.source.manages_certificates
    why = inputs.pods_cannot_reach(address, secure_port_served=served)
    if not why:
        return {}
    logger.warning(
        "filters %s are off: pods cannot reach the hub's secure port at %s:%s (%s). The "
        "kubernetes Service and EndpointSlice, kube-proxy's kubeconfig and pods' "
        "KUBERNETES_SERVICE_* pass unchanged, so pods keep the apiserver (not the hub). "
        "--enable-dummy-if (YurtHub's default) with a serving certificate points them at the hub",
        ", ".join(pointing),
        address.host,
        address.port,
        why,
    )
    return dict.fromkeys(pointing, why)


class Filters:
    """``seams.ResponseFilter`` for one hub."""

    def __init__(
        self, hub: settings.HubSettings, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        f = hub.filters
        host, port = hub.hub_address
        address = inputs.Address(host, port)
        self.approver = registry.Approver(
            node_name=hub.node_name,
            enabled=f.enabled,
            disabled=f.disabled,
            cloud_mode=hub.working_mode is settings.WorkingMode.CLOUD,
        )
        self.inactive: dict[str, str] = _inactive(hub, address, self.approver.names)
        """Filters that would run but are kept off, and why (``/v1/status``, ``edgehub
        status``): those that point pods at the hub, when pods cannot reach it."""
        if self.inactive:
            self.approver = registry.Approver(
                node_name=hub.node_name,
                enabled=f.enabled,
                disabled=(*f.disabled, *self.inactive),
                cloud_mode=hub.working_mode is settings.WorkingMode.CLOUD,
            )
        if f.enable_pool_service_topology:
            topology = inputs.PoolTopology.NODEBUCKET
        elif f.enable_node_pool:
            topology = inputs.PoolTopology.NODEPOOL
        else:
            topology = inputs.PoolTopology.NONE
        self.inputs = inputs.Inputs(
            node_name=hub.node_name,
            hub_address=address,
            pool_flag=hub.nodepool_name,
            pool_topology=topology,
        )
        self.errors = chaining.ErrorLog()
        self.meter = _Meter()
        self.cloud_healthy: Callable[[], bool] = lambda: True
        """Set by the assembly to the health checker's view; offline the gate never waits."""
        self._settings = hub
        self._clock = clock
        self._since = clock()
        self._gave_up_waiting = False
        self._changed = asyncio.Event()
        for _, collection, *_ in self.needed():
            collection.on_commit = self._changed.set

    async def status(self) -> dict[str, Any]:
        """The ``filters`` section of ``GET /v1/status``."""
        host, port = self.inputs.hub_address.host, self.inputs.hub_address.port
        return {
            "active": list(self.approver.names),
            "inactive": dict(self.inactive),
            "hubAddress": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        }

    # --- per request -------------------------------------------------------------------------

    def chain(self, info: requestinfo.RequestInfo) -> chaining.Chain | None:
        """The filters for this request (None: none apply), logged and counted once."""
        if not info.is_resource_request or info.subresource not in responding.FILTERED_SUBRESOURCES:
            return None
        names = self.approver.approve(info.component, info.verb, info.resource)
        if not names:
            return None
        logger.debug(
            "filters %s for %s (client %s)", ",".join(names), info.describe(), info.user_agent
        )
        self.meter.request(names)
        return chaining.Chain(names, self.inputs, errors=self.errors, observer=self.meter)

    def open(
        self, info: requestinfo.RequestInfo, status: int, headers: Mapping[str, str]
    ) -> responding.Transform | None:
        if not responding.applies(info, status):
            return None
        if not self.approver.approve(info.component, info.verb, info.resource):
            return None  # the common case, decided before any logging or counting
        encoding = responding.encoding_of(headers)
        if encoding is None:
            self.meter.undecodable("encoding")
            logger.debug(
                "not filtering %s: Content-Encoding %s",
                info.describe(),
                headers.get("Content-Encoding"),
            )
            return None
        chain = self.chain(info)
        if chain is None:
            return None
        cache = self._settings.cache
        found = responding.open_body(
            chain,
            info,
            headers.get("Content-Type", ""),
            max_event=cache.max_event_bytes,
            max_body=cache.max_body_bytes,
        )
        if found is None:
            return None
        body, fmt = found
        return responding.Transform(
            body,
            fmt=fmt,
            encoding=encoding,
            label=info.describe(),
            on_undecodable=self.meter.undecodable,
        )

    def stored(self, info: requestinfo.RequestInfo) -> _Stored | None:
        chain = self.chain(info)
        if chain is None:
            return None
        return _Stored(chain, registry.RESOURCE_KINDS.get(info.resource, ""), self.meter)

    # --- inputs --------------------------------------------------------------------------------

    def needed(self) -> list[tuple[str, inputs.Collection, str, str, str]]:
        """(what, collection, path, labelSelector, fieldSelector) the active filters read."""
        names = set(self.approver.names)
        world = self.inputs
        out: list[tuple[str, inputs.Collection, str, str, str]] = []
        topology = registry.SERVICETOPOLOGY in names
        if topology:
            out.append(("services", world.services, "/api/v1/services", "", ""))
        if (topology or registry.NODEPORTISOLATION in names) and not world.pool_flag:
            out.append(
                (
                    f"node {world.node_name}",
                    world.node,
                    "/api/v1/nodes",
                    "",
                    f"metadata.name={world.node_name}",
                )
            )
        if topology and world.pool_topology is inputs.PoolTopology.NODEPOOL:
            out.append(("NodePools", world.node_pools, NODEPOOLS_PATH, "", ""))
        if topology and world.pool_topology is inputs.PoolTopology.NODEBUCKET:
            selector = f"{inputs.BUCKET_POOL_LABEL}={world.pool_flag}" if world.pool_flag else ""
            out.append(("NodeBuckets", world.node_buckets, NODEBUCKETS_PATH, selector, ""))
        return out

    def reads_node_pools(self) -> bool:
        """Whether the filters may follow NodePools (the same for every hub of a pool: the
        multiplexer can serve them from the pool's leader)."""
        return self.inputs.pool_topology is inputs.PoolTopology.NODEPOOL

    def synced(self) -> bool:
        return self.approver.synced and all(c.synced for _, c, *_ in self.needed())

    def not_read(self) -> str:
        """The readiness condition ``filter-inputs``: "" when ready, else what is not read yet."""
        if self.ready():
            return ""
        missing = [what for what, c, *_ in self.needed() if not c.synced]
        if not self.approver.synced:
            missing.append("yurt-hub-cfg")
        timeout = self._settings.filters.inputs_sync_timeout
        return f"reading {', '.join(missing) or 'the inputs'} (waits at most {timeout:g} s)"

    def ready(self) -> bool:
        """Whether the filters' inputs are read (or waiting for them is over)."""
        if not self.approver.active or self.synced() or not self.cloud_healthy():
            return True
        if self._gave_up_waiting:
            return True
        waited = self._clock() - self._since
        if waited < self._settings.filters.inputs_sync_timeout:
            return False
        self._gave_up_waiting = True
        missing = [what for what, c, *_ in self.needed() if not c.synced]
        if not self.approver.synced:
            missing.append("yurt-hub-cfg")
        logger.warning(
            "the filters' inputs are not read after %.0fs (%s): serving anyway; objects that "
            "need them pass unchanged until they are",
            waited,
            ", ".join(missing),
        )
        return True

    def apply_configmap(self, data: Mapping[str, Any] | None) -> bool:
        """``agents.ConfigTarget``: ``yurt-hub-cfg``'s per-filter additions (the cache's
        follower hands the data on to us)."""
        changed = self.approver.apply_configmap(data)
        self._changed.set()
        return changed

    async def wait_ready(self) -> None:
        """Until ``ready``: the inputs are read, the cloud is away, or ``inputs_sync_timeout``
        has passed since the inputs were first asked for."""
        remaining = self._since + self._settings.filters.inputs_sync_timeout - self._clock()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, remaining)):
                while True:
                    self._changed.clear()
                    if self.ready():
                        return
                    await self._changed.wait()
        self.ready()  # past the deadline: serve anyway (logged once)

    async def follow(self, route: following.ProxyRoute) -> None:
        """Follow every needed input through the hub (``route``: ``hub.own_route``) until
        cancelled."""
        needed = self.needed()
        self._since = self._clock()
        if not needed:
            await asyncio.Event().wait()  # nothing to follow; the caller cancels us
        async with route.session() as session, asyncio.TaskGroup() as tg:
            for what, collection, path, labels, fields in needed:
                tg.create_task(
                    following.follow(
                        collection,
                        session,
                        route.url,
                        path,
                        what=what,
                        label_selector=labels,
                        field_selector=fields,
                        max_item=self._settings.cache.max_event_bytes,
                        cloud_healthy=route.cloud_healthy,
                        pace=route.pace,
                    ),
                    name=f"filter-input-{what}",
                )

    async def follow_config(
        self,
        route: following.ProxyRoute,
        others: Mapping[str, following.Target] | None = None,
    ) -> None:
        """Follow ``yurt-hub-cfg`` for the filters alone (a hub running without its cache; with
        the cache, its follower feeds ``approver`` too: one watch per hub); ``others``: as
        ``agents.follow_configmap``."""
        async with route.session() as session:
            await agents.follow_configmap(
                self,
                session,
                route.url,
                namespace=self._settings.cache.config_namespace,
                others=others,
                cloud_healthy=route.cloud_healthy,
                pace=route.pace,
            )

    def attach_metrics(self, hub_metrics: metrics.Metrics) -> None:
        meter = self.meter
        for collector in (meter.requests, meter.objects, meter.undecodable_total):
            hub_metrics.registry.register(collector)
