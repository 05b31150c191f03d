"""An edge node with response filters for the filter tests: sim -> partition -> the assembled hub.

``async with filtered_edge(tmp_path) as edge`` runs the hub the way ``edgehub hub`` does
(``yurthub.assembly.running``: cache, filters, the yurt-hub-cfg follower, the filters' input
watches) in front of the simulated apiserver (demo seed: nodes edge-node-1/2 in pool
``edge-pool``, cloud-node-1 in ``cloud-pool``; service ``default/web`` with one endpoint per
node), with OpenYurt's NodePool CRD installed and both pools' NodePools filled in.

The hub points pods at ``HUB_IP`` (``FilterSettings.hub_host``, standing in for the dummy
interface YurtHub uses; nothing dials it): with the CLI's loopback default the filters that
point pods at the hub stay off. Pass ``hub_host=""`` for that default.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
import yaml

from yurthub import assembly, settings
from yurthub.testing import partition, simapiserver
from yurthub.testing.watchevents import Events

NODE = "edge-node-1"
KUBELET = "kubelet/v1.37.2 (linux/amd64) kubernetes/abcdef0"
KUBE_PROXY = "kube-proxy/v1.37.2 (linux/amd64) kubernetes/abcdef0"
KUBECTL = "kubectl/v1.37.2 (linux/amd64) kubernetes/abcdef0"
CRDS = pathlib.Path(__file__).resolve().parents[3] / "manifests" / "crds"
POOLS = {"edge-pool": ["edge-node-1", "edge-node-2"], "cloud-pool": ["cloud-node-1"]}
DISCARD = {"svc.openyurt.io/discard": "true"}
HUB_IP = "169.254.2.1"


@dataclasses.dataclass
class FilteredEdge:
    workdir: pathlib.Path
    sim: simapiserver.SimApiserver
    link: partition.Partition
    settings: settings.HubSettings
    session: aiohttp.ClientSession
    node: assembly.Node = dataclasses.field(init=False)
    _running: contextlib.AbstractAsyncContextManager[assembly.Node] | None = None

    async def start_hub(self) -> None:
        self._running = assembly.running(self.settings)
        self.node = await self._running.__aenter__()

    async def stop_hub(self) -> None:
        running, self._running = self._running, None
        if running is not None:
            await running.__aexit__(None, None, None)

    @property
    def url(self) -> str:
        return self.node.hub.proxy_url

    async def request(
        self,
        method: str,
        path: str,
        *,
        ua: str,
        params: dict[str, str] | None = None,
        accept: str = "application/json",
    ) -> tuple[int, Any]:
        headers = {"User-Agent": ua, "Accept": accept}
        async with self.session.request(
            method, self.url + path, params=params, headers=headers
        ) as resp:
            raw = await resp.read()
            return resp.status, orjson.loads(raw) if raw else None

    async def get(self, path: str, *, ua: str, **params: str) -> Any:
        status, body = await self.request("GET", path, ua=ua, params=params)
        assert status == 200, (status, body)
        return body

    @contextlib.asynccontextmanager
    async def watch(self, path: str, *, ua: str, **params: str) -> AsyncIterator[Events]:
        query = {"watch": "true", "timeoutSeconds": "30", **params}
        async with self.session.get(
            self.url + path, params=query, headers={"User-Agent": ua}
        ) as resp:
            assert resp.status == 200, await resp.text()
            yield Events(resp)

    def healthy(self) -> bool:
        checker = self.node.hub.health
        return checker is not None and checker.any_healthy()

    async def wait_health(self, healthy: bool, within: float = 10.0) -> None:
        async with asyncio.timeout(within):
            while self.healthy() is not healthy:
                await asyncio.sleep(0.05)

    async def cut(self) -> None:
        await self.link.set_mode(partition.Mode.BLACKHOLE)
        await self.wait_health(False)

    async def heal(self) -> None:
        await self.link.set_mode(partition.Mode.PASS)
        await self.wait_health(True)

    async def metrics(self) -> str:
        async with self.session.get(self.node.hub.server_url + "/metrics") as resp:
            return await resp.text()


def hub_settings(workdir: pathlib.Path, server: str, **filters: Any) -> settings.HubSettings:
    return settings.HubSettings(
        node_name=NODE,
        upstream=settings.UpstreamSettings(servers=(server,), connect_timeout=1.0),
        listen=settings.ListenSettings(serve_port=0, proxy_port=0),
        # A 1 s probe timeout, as the cache tests' FAST_HEARTBEAT: with 0.5 s one probe starved
        # of CPU on a loaded machine flips the hub offline mid-test (``cut`` waits for the flip).
        heartbeat=settings.HeartbeatSettings(
            interval=0.5, timeout=1.0, healthy_threshold=1, failed_retry=1
        ),
        proxy=settings.ProxySettings(min_request_timeout=30.0, shutdown_grace=1.0),
        cache=settings.CacheSettings(disk_cache_path=workdir / "cache", bookmark_interval=0.3),
        filters=settings.FilterSettings(**{"hub_host": HUB_IP, **filters}),
    )


def install_node_pools(sim: simapiserver.SimApiserver, pools: dict[str, list[str]]) -> None:
    for name in ("nodepools.apps.openyurt.io.yaml", "nodebuckets.apps.openyurt.io.yaml"):
        sim.state.create(yaml.safe_load((CRDS / name).read_text()))
    for pool, nodes in pools.items():
        set_pool(sim, pool, nodes)


def set_pool(sim: simapiserver.SimApiserver, pool: str, nodes: list[str]) -> None:
    sim.state.apply(
        {
            "apiVersion": "apps.openyurt.io/v1beta2",
            "kind": "NodePool",
            "metadata": {"name": pool},
            "spec": {"type": "Edge"},
            "status": {"nodes": nodes, "readyNodeNum": len(nodes)},
        }
    )


async def wait_ready(edge: FilteredEdge, within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while True:
            async with edge.session.get(edge.node.hub.server_url + "/v1/readyz") as resp:
                if resp.status == 200:
                    return
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def filtered_edge(
    workdir: pathlib.Path,
    *,
    pools: dict[str, list[str]] | None = None,
    before_start: Callable[[simapiserver.SimApiserver], None] | None = None,
    **filters: Any,
) -> AsyncIterator[FilteredEdge]:
    async with contextlib.AsyncExitStack() as stack:
        sim = await stack.enter_async_context(
            simapiserver.SimApiserver(
                workdir=workdir / "sim", seed="demo", insecure_port=0, bookmark_interval=1.0
            )
        )
        install_node_pools(sim, POOLS if pools is None else pools)
        if before_start is not None:
            before_start(sim)
        assert sim.insecure_url is not None
        port = int(sim.insecure_url.rsplit(":", 1)[1])
        link = await stack.enter_async_context(partition.Partition("127.0.0.1", port))
        session = await stack.enter_async_context(aiohttp.ClientSession())
        edge = FilteredEdge(workdir, sim, link, hub_settings(workdir, link.url, **filters), session)
        await edge.start_hub()
        stack.push_async_callback(edge.stop_hub)
        await wait_ready(edge)
        yield edge


def annotate(sim: simapiserver.SimApiserver, name: str, annotations: dict[str, str]) -> None:
    svc = sim.state.get("services", "default", name)
    svc["metadata"].setdefault("annotations", {}).update(annotations)
    sim.state.update(svc)


def web_slice(sim: simapiserver.SimApiserver) -> dict[str, Any]:
    (found,) = sim.state.list(
        "endpointslices", "default", label_selector="kubernetes.io/service-name=web"
    )
    return dict(found)


def nodes_of(slice_obj: dict[str, Any]) -> list[str]:
    return sorted(e.get("nodeName") for e in slice_obj.get("endpoints") or [])


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {i["metadata"]["name"]: i for i in items}
