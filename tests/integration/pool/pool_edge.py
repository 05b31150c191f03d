"""A node pool on loopback for the pool-scope tests: the simulated apiserver, and hubs
``edge-node-1``, ``edge-node-2``, ``cloud-node-1`` (the demo seed's nodes), each behind its own
cuttable link, each with its multiplexer port on its own address ``127.0.0.1x`` (one shared
port number, as in a real pool), run the way ``edgehub hub`` runs them (``assembly.running``).

The ``leader-hub-hz`` ConfigMap is written by the tests (``set_leaders``), as edgehub manager's
hubleaderconfig controller would. Plain HTTP between hubs (``leader_tls=False``): the TLS path
is covered on the real cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import aiohttp
import orjson

from yurthub import assembly, settings
from yurthub.pool import gvrs, leaderconfigs
from yurthub.testing import partition, ports, simapiserver
from yurthub.testing.watchevents import Events

POOL = "hz"
NAMES = ("edge-node-1", "edge-node-2", "cloud-node-1")
KUBELET = "kubelet/v1.37.2 (linux/amd64) kubernetes/abcdef0"
KUBE_PROXY = "kube-proxy/v1.37.2 (linux/amd64) kubernetes/abcdef0"
SERVICES = "/api/v1/services"
SLICES = "/apis/discovery.k8s.io/v1/endpointslices"
PROTOBUF_OR_JSON = "application/vnd.kubernetes.protobuf, */*"


class NullMeter:
    """A feeder's ``feeding.Meter`` that records nothing (tests of one feeder)."""

    def upstream_watch(self, gvr: gvrs.Gvr, source: str, delta: int) -> None:
        pass

    def upstream_bytes(self, gvr: gvrs.Gvr, source: str, count: int) -> None:
        pass

    def target(self, gvr: gvrs.Gvr, verb: str, server: str, delta: int) -> None:
        pass


def address_of(index: int) -> str:
    return f"127.0.0.{11 + index}"


@dataclasses.dataclass
class Hub:
    name: str
    address: str
    link: partition.Partition
    settings: settings.HubSettings
    session: aiohttp.ClientSession
    node: assembly.Node | None = None
    _running: contextlib.AbstractAsyncContextManager[assembly.Node] | None = None

    async def start(self) -> None:
        self._running = assembly.running(self.settings)
        self.node = await self._running.__aenter__()

    async def stop(self) -> None:
        running, self._running = self._running, None
        if running is not None:
            await running.__aexit__(None, None, None)
        self.node = None

    @property
    def url(self) -> str:
        assert self.node is not None
        return self.node.hub.proxy_url

    @property
    def pool(self) -> Any:
        assert self.node is not None and self.node.pool is not None
        return self.node.pool

    def source(self, resource: str = "services") -> str:
        """Where this hub's multiplexer reads ``resource`` from now (cloud or a node name)."""
        for gvr, res in self.pool.mux.resources.items():
            if gvr.resource == resource and res.feeder is not None and res.feeder.source:
                return str(res.feeder.source.name)
        return ""

    def watching(self, resource: str = "services") -> bool:
        for gvr, res in self.pool.mux.resources.items():
            if gvr.resource == resource and res.feeder is not None:
                return bool(res.feeder.watching)
        return False

    async def request(
        self,
        path: str,
        *,
        ua: str = KUBE_PROXY,
        accept: str = "application/json",
        headers: dict[str, str] | None = None,
        **params: str,
    ) -> tuple[int, Any, aiohttp.typedefs.LooseHeaders]:
        sent = {"User-Agent": ua, "Accept": accept, **(headers or {})}
        async with self.session.get(self.url + path, params=params, headers=sent) as resp:
            raw = await resp.read()
            try:
                body = orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                body = raw
            return resp.status, body, resp.headers

    async def get(self, path: str, *, ua: str = KUBE_PROXY, **params: str) -> Any:
        status, body, _ = await self.request(path, ua=ua, **params)
        assert status == 200, (status, body)
        return body

    @contextlib.asynccontextmanager
    async def watch(
        self, path: str, *, ua: str = KUBE_PROXY, accept: str = "application/json", **params: str
    ) -> AsyncIterator[Events]:
        query = {"watch": "true", "timeoutSeconds": "60", **params}
        async with self.session.get(
            self.url + path, params=query, headers={"User-Agent": ua, "Accept": accept}
        ) as resp:
            assert resp.status == 200, await resp.text()
            yield Events(resp)

    async def metrics(self) -> str:
        assert self.node is not None
        async with self.session.get(self.node.hub.server_url + "/metrics") as resp:
            return await resp.text()

    async def status(self) -> Any:
        """The hub's ``GET /v1/status`` (what ``edgehub status`` shows)."""
        assert self.node is not None
        async with self.session.get(self.node.hub.server_url + "/v1/status") as resp:
            assert resp.status == 200
            return orjson.loads(await resp.read())


def named(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e["type"] in ("ADDED", "MODIFIED") and e["object"]["metadata"]["name"] == name


def hub_settings(
    workdir: pathlib.Path, name: str, address: str, server: str, port: int, **pool: Any
) -> settings.HubSettings:
    return settings.HubSettings(
        node_name=name,
        nodepool_name=POOL,
        upstream=settings.UpstreamSettings(servers=(server,), connect_timeout=1.0),
        listen=settings.ListenSettings(serve_port=0, proxy_port=0),
        # Probed often; each probe may take the product's 2 s (0.5 s made a loaded machine's
        # hubs declare the cloud gone mid-test: a CPU hog beside the suite did it once).
        heartbeat=settings.HeartbeatSettings(
            interval=0.5, timeout=2.0, healthy_threshold=1, failed_retry=1
        ),
        proxy=settings.ProxySettings(min_request_timeout=30.0, shutdown_grace=1.0),
        cache=settings.CacheSettings(
            disk_cache_path=workdir / name / "cache", bookmark_interval=0.5
        ),
        # hub_host: where pods reach the hub (the dummy IP's stand-in; nothing dials it), so
        # that masterservice runs (with the loopback default it stays off).
        filters=settings.FilterSettings(inputs_sync_timeout=20.0, hub_host="169.254.2.1"),
        pool=settings.PoolSettings(
            node_ip=address, multiplexer_port=port, leader_tls=False, **pool
        ),
    )


@dataclasses.dataclass
class Pool:
    sim: simapiserver.SimApiserver
    hubs: list[Hub]

    def hub(self, name: str) -> Hub:
        return next(h for h in self.hubs if h.name == name)

    def set_leaders(self, *names: str, enabled: bool = True, **extra: str) -> None:
        leaders = ",".join(f"{n}/{address_of(NAMES.index(n))}" for n in sorted(names))
        set_configmap(
            self.sim,
            {
                "leaders": leaders,
                "pool-scoped-metadata": "/v1/services,discovery.k8s.io/v1/endpointslices",
                "interconnectivity": "true",
                "enable-leader-election": "true" if enabled else "false",
                **extra,
            },
        )

    def upstream_watches(self) -> dict[str, int]:
        watches = self.sim.open_watches()
        return {r: watches.get(r, 0) for r in ("services", "endpointslices")}


def set_configmap(sim: simapiserver.SimApiserver, data: dict[str, str]) -> None:
    name = leaderconfigs.name_for(POOL)
    sim.state.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": "kube-system",
                "labels": {leaderconfigs.LABEL: name},
            },
            "data": data,
        }
    )


def service(name: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"ports": [{"port": 80, "protocol": "TCP"}]},
    }


async def eventually(check: Callable[[], Any], within: float = 45.0, what: str = "") -> Any:
    """``check()`` until truthy. ``within`` is a deadline, never a measure: a pool's first
    convergence (the leader's feed synced, then each follower's switch) took over 10 s in full
    runs on a loaded 2-core machine."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {within}s: {what}"
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def pool_of(
    workdir: pathlib.Path,
    *,
    names: Sequence[str] = NAMES,
    leaders: Sequence[str] = ("edge-node-1",),
    start: bool = True,
    **pool: Any,
) -> AsyncIterator[Pool]:
    async with contextlib.AsyncExitStack() as stack:
        sim = await stack.enter_async_context(
            simapiserver.SimApiserver(
                workdir=workdir / "sim", seed="demo", insecure_port=0, bookmark_interval=1.0
            )
        )
        assert sim.insecure_url is not None
        sim_port = int(sim.insecure_url.rsplit(":", 1)[1])
        session = await stack.enter_async_context(aiohttp.ClientSession())
        port = ports.free_port(address_of(0))
        hubs = []
        for name in names:
            link = await stack.enter_async_context(partition.Partition("127.0.0.1", sim_port))
            address = address_of(NAMES.index(name))
            hubs.append(
                Hub(
                    name,
                    address,
                    link,
                    hub_settings(workdir, name, address, link.url, port, **pool),
                    session,
                )
            )
        cluster = Pool(sim, hubs)
        if leaders:
            cluster.set_leaders(*leaders)
        for hub in hubs:
            stack.push_async_callback(hub.stop)
        if start:
            await asyncio.gather(*(hub.start() for hub in hubs))
        yield cluster
