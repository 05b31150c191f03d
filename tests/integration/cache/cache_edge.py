"""An edge node in a box for cache tests: simulated apiserver -> partition -> hub with the cache.

``async with edge_node(tmp_path) as edge`` gives a running hub whose only backend is the
simulated apiserver behind a partition injector, with the disk cache wired in the way the hub
command wires it. ``edge.cut()`` / ``edge.heal()`` switch the link and wait until the hub's
health agrees; ``edge.restart_hub()`` restarts the hub (and reopens its cache from disk)
while the link stays as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
import subprocess
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson

from yurthub import pacing, server, settings
from yurthub.cache import runtime, sealing
from yurthub.testing import partition, simapiserver
from yurthub.testing.fixtures import KUBECTL

NODE = "edge-node-1"
KUBELET_UA = "kubelet/v1.32.4 (linux/amd64) kubernetes/abcdef0"


@dataclasses.dataclass
class Edge:
    workdir: pathlib.Path
    sim: simapiserver.SimApiserver
    link: partition.Partition
    hub_settings: settings.HubSettings
    hub: server.Hub
    rt: runtime.CacheRuntime
    session: aiohttp.ClientSession

    @property
    def url(self) -> str:
        return self.hub.proxy_url

    async def start_hub(self) -> None:
        self.rt = await runtime.open(self.hub_settings)
        self.hub = server.Hub(
            self.hub_settings,
            tee=self.rt.tee,
            local=self.rt.local,
            offline_writes=self.rt,
            outage_history=self.rt.outages,
        )
        self.hub.on_lease = self.rt.on_lease
        self.rt.local.tokens = self.hub.verifier.offline  # as assembly.running wires it
        self.rt.attach_metrics(self.hub.metrics)
        await self.hub.start()
        assert self.hub.health is not None
        self.rt.cloud_healthy = self.hub.health.any_healthy
        async with asyncio.timeout(5):
            await self.hub.health.initial_probe_done.wait()

    async def stop_hub(self) -> None:
        await self.hub.stop(grace=1.0)
        await self.rt.close()

    async def restart_hub(self) -> None:
        await self.stop_hub()
        await self.start_hub()

    def healthy(self) -> bool:
        return self.hub.health is not None and self.hub.health.any_healthy()

    async def wait_health(self, healthy: bool, within: float = 10.0) -> float:
        started = time.monotonic()
        async with asyncio.timeout(within):
            while self.healthy() is not healthy:
                await asyncio.sleep(0.05)
        return time.monotonic() - started

    async def cut(self, mode: partition.Mode = partition.Mode.BLACKHOLE) -> float:
        await self.link.set_mode(mode)
        return await self.wait_health(False)

    async def heal(self) -> float:
        await self.link.set_mode(partition.Mode.PASS)
        return await self.wait_health(True)

    async def flush(self) -> None:
        assert await self.rt.store.flush(5)

    async def request(
        self,
        method: str,
        path: str,
        *,
        ua: str = KUBELET_UA,
        accept: str = "application/json",
        params: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        token: str = "",
    ) -> tuple[int, Any, dict[str, str]]:
        headers = {"User-Agent": ua, "Accept": accept}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else orjson.dumps(body)
            headers["Content-Type"] = content_type
        async with self.session.request(
            method, self.url + path, params=params, data=data, headers=headers
        ) as resp:
            raw = await resp.read()
            try:
                decoded = orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                decoded = raw
            return resp.status, decoded, dict(resp.headers)

    async def get(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        status, body, _ = await self.request("GET", path, **kwargs)
        return status, body

    def kubeconfig(self) -> pathlib.Path:
        path = self.workdir / "hub.kubeconfig"
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: hub, cluster: {{server: '{self.url}'}}}}]\n"
            "contexts: [{name: hub, context: {cluster: hub, user: u}}]\n"
            "current-context: hub\nusers: [{name: u, user: {}}]\n"
        )
        return path

    async def kubectl(
        self, *args: str, check: bool = True, request_timeout: str | None = "10s"
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against the hub; ``request_timeout=None`` sends no ``timeout`` (kubectl's
        default: it waits as long as the hub does)."""
        argv = [
            KUBECTL,
            "--kubeconfig",
            str(self.kubeconfig()),
            "--cache-dir",
            str(self.workdir / "kubectl-cache"),
            *(("--request-timeout", request_timeout) if request_timeout else ()),
            *args,
        ]
        done = await asyncio.to_thread(
            subprocess.run, argv, capture_output=True, text=True, timeout=30, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done


FAST_HEARTBEAT = settings.HeartbeatSettings(
    interval=0.5, timeout=1.0, healthy_threshold=1, failed_retry=1
)
"""Most cache tests: the hub notices a cut within about 1.5 s (a 1 s probe timeout: with 0.5 s,
one probe starved of CPU on a loaded 2-core machine flipped the hub offline before a test's
first online request). ``settings.HeartbeatSettings()`` is
what the hub runs with by default (a 10 s heartbeat)."""


def edge_settings(
    cache_path: pathlib.Path,
    server_url: str,
    *,
    agents: tuple[str, ...] = ("kubectl",),
    heartbeat: settings.HeartbeatSettings = FAST_HEARTBEAT,
    offline_event_qps: float = 50.0,
    key_source: sealing.Source | None = None,
    heal_spread: float = 0.0,
    outage_flap_window: float = 0.5,
    first_backoff: float = pacing.Settings().first_backoff,
) -> settings.HubSettings:
    """Offline Events are posted fast after a heal (50/s, no start spread), and an outage's
    Event once the link stayed up 0.5 s (not the hub's 30 s): tests wait for them. Held
    watches end at the heal (no ``heal_spread`` unless given): tests wait for that too."""
    return settings.HubSettings(
        node_name=NODE,
        upstream=settings.UpstreamSettings(servers=(server_url,), connect_timeout=1.0),
        listen=settings.ListenSettings(serve_port=0, proxy_port=0),
        heartbeat=heartbeat,
        proxy=settings.ProxySettings(min_request_timeout=30.0, shutdown_grace=1.0),
        cache=settings.CacheSettings(
            disk_cache_path=cache_path,
            cache_agents=agents,
            bookmark_interval=0.3,
            offline_event_qps=offline_event_qps,
            offline_event_spread=0.0,
            key_source=key_source,
        ),
        pace=pacing.Settings(heal_spread=heal_spread, first_backoff=first_backoff),
        outage_flap_window=outage_flap_window,
    )


@contextlib.asynccontextmanager
async def edge_node(
    workdir: pathlib.Path,
    *,
    seed: str = "demo",
    agents: tuple[str, ...] = ("kubectl",),
    heartbeat: settings.HeartbeatSettings = FAST_HEARTBEAT,
    offline_event_qps: float = 50.0,
    key_source: sealing.Source | None = None,
    heal_spread: float = 0.0,
    first_backoff: float = pacing.Settings().first_backoff,
) -> AsyncIterator[Edge]:
    async with simapiserver.SimApiserver(
        workdir=workdir / "sim", seed=seed, insecure_port=0, bookmark_interval=1.0
    ) as sim:
        assert sim.insecure_url is not None
        port = int(sim.insecure_url.rsplit(":", 1)[1])
        async with partition.Partition("127.0.0.1", port) as link:
            hub_settings = edge_settings(
                workdir / "cache",
                link.url,
                agents=agents,
                heartbeat=heartbeat,
                offline_event_qps=offline_event_qps,
                key_source=key_source,
                heal_spread=heal_spread,
                first_backoff=first_backoff,
            )
            async with aiohttp.ClientSession() as session:
                edge = Edge(workdir, sim, link, hub_settings, None, None, session)  # type: ignore[arg-type]
                await edge.start_hub()
                try:
                    await edge.wait_health(True)
                    yield edge
                finally:
                    await edge.stop_hub()
