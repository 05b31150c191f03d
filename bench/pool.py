"""Benchmark: the cloud's side of pool-scoped traffic with and without pool scope, side by side.

    .venv/bin/python bench/pool.py [--quick]

For 1, 3 and 10 hubs of one node pool (in-process hubs, ``assembly.running`` as ``edgehub
hub`` runs them, in front of the simulated apiserver; each hub behind its own link, which
counts the bytes the cloud sends it), every hub gets what a node's components ask for: a
kubelet services watch, a kube-proxy services watch and a kube-proxy endpointslices watch
(streaming lists). Three modes:

- ``off``: ``--pool-scope-resources ''`` (every client watches the cloud, as without edgehub);
- ``node``: the multiplexer per hub, no leader (one watch per resource per hub);
- ``pool``: the multiplexer and one leader hub (one watch per resource for the pool).

Measured: watches open at the apiserver on services and endpointslices, and bytes sent over the
hubs' cloud links, at start (the hubs' own start and every client's initial state) and during
churn (``--services`` Services with an EndpointSlice each, then ``--rounds`` rounds updating
every one), as ratios ``off / pool`` and ``off / node`` with the absolute numbers. The
response filters are off (they do not change what crosses the cloud link). All traffic stays on
127.0.0.x.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import pathlib
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from yurthub import assembly, settings
from yurthub.pool import gvrs, leaderconfigs
from yurthub.testing import partition, ports, simapiserver

POOL = "bench"
KUBELET = "kubelet/v1.37.2 (linux/amd64) kubernetes/bench"
KUBE_PROXY = "kube-proxy/v1.37.2 (linux/amd64) kubernetes/bench"
CLIENTS = (
    (KUBELET, "/api/v1/services"),
    (KUBE_PROXY, "/api/v1/services"),
    (KUBE_PROXY, "/apis/discovery.k8s.io/v1/endpointslices"),
)


@dataclasses.dataclass
class Result:
    hubs: int
    mode: str
    watches: dict[str, int]
    start_bytes: int
    churn_bytes: int
    seconds: float


def address(i: int) -> str:
    return f"127.0.0.{31 + i}"


def hub_settings(
    workdir: pathlib.Path, i: int, server: str, port: int, mode: str
) -> settings.HubSettings:
    return settings.HubSettings(
        node_name=f"bench-{i}",
        nodepool_name=POOL if mode == "pool" else "",
        upstream=settings.UpstreamSettings(servers=(server,)),
        listen=settings.ListenSettings(serve_port=0, proxy_port=0),
        heartbeat=settings.HeartbeatSettings(interval=5.0),
        proxy=settings.ProxySettings(shutdown_grace=0.5),
        cache=settings.CacheSettings(disk_cache_path=workdir / f"hub-{i}"),
        filters=settings.FilterSettings(enabled=False),
        pool=settings.PoolSettings(
            resources=() if mode == "off" else gvrs.DEFAULTS,
            node_ip=address(i),
            multiplexer_port=port,
            leader_tls=False,
        ),
    )


def service(i: int, round_: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"svc-{i}", "namespace": "default", "labels": {"round": str(round_)}},
        "spec": {"ports": [{"port": 80, "protocol": "TCP"}], "selector": {"app": f"a{i}"}},
    }


def endpoint_slice(i: int, round_: int) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"svc-{i}-abcde",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": f"svc-{i}", "round": str(round_)},
        },
        "addressType": "IPv4",
        "ports": [{"name": "", "port": 8080, "protocol": "TCP"}],
        "endpoints": [
            {
                "addresses": [f"10.{i % 250}.{j}.{round_ % 250}"],
                "conditions": {"ready": True},
                "nodeName": f"bench-{j % 10}",
            }
            for j in range(10)
        ],
    }


@contextlib.asynccontextmanager
async def client_watches(
    session: aiohttp.ClientSession, url: str
) -> AsyncIterator[list[aiohttp.ClientResponse]]:
    streams = []
    try:
        for ua, path in CLIENTS:
            resp = await session.get(
                url + path,
                params={
                    "watch": "true",
                    "sendInitialEvents": "true",
                    "resourceVersionMatch": "NotOlderThan",
                    "allowWatchBookmarks": "true",
                    "timeoutSeconds": "600",
                },
                headers={"User-Agent": ua, "Accept": "application/json"},
                timeout=aiohttp.ClientTimeout(total=None),
            )
            if resp.status != 200:
                raise RuntimeError(f"{ua} {path}: HTTP {resp.status} {await resp.text()}")
            streams.append(resp)
        yield streams
    finally:
        for resp in streams:
            resp.close()


async def drain(resp: aiohttp.ClientResponse, seen: dict[str, int]) -> None:
    """Read a client watch, counting event lines (the client must keep up)."""
    key = str(resp.url.path)
    with contextlib.suppress(aiohttp.ClientError, asyncio.CancelledError):
        async for line in resp.content:
            if line.strip():
                seen[key] = seen.get(key, 0) + 1


async def scenario(
    workdir: pathlib.Path, hubs: int, mode: str, services: int, rounds: int
) -> Result:
    async with contextlib.AsyncExitStack() as stack:
        sim = await stack.enter_async_context(
            simapiserver.SimApiserver(
                workdir=workdir / "sim", seed="none", insecure_port=0, history_size=100_000
            )
        )
        assert sim.insecure_url is not None
        sim_port = int(sim.insecure_url.rsplit(":", 1)[1])
        for i in range(services):
            sim.state.create(service(i, 0))
            sim.state.create(endpoint_slice(i, 0))
        if mode == "pool":
            name = leaderconfigs.name_for(POOL)
            sim.state.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": "kube-system"},
                    "data": {
                        "leaders": f"bench-0/{address(0)}",
                        "enable-leader-election": "true",
                        "interconnectivity": "true",
                    },
                }
            )
        port = ports.free_port(address(0))
        links: list[partition.Partition] = []
        nodes = []
        session = await stack.enter_async_context(aiohttp.ClientSession())
        for _ in range(hubs):
            links.append(
                await stack.enter_async_context(partition.Partition("127.0.0.1", sim_port))
            )
        for i, link in enumerate(links):
            running = assembly.running(hub_settings(workdir / mode, i, link.url, port, mode))
            nodes.append(await stack.enter_async_context(running))
        if mode == "pool":  # followers read from the leader before the clients come
            for node in nodes[1:]:
                assert node.pool is not None
                while node.pool.sources.mode is not leaderconfigs.Source.POOL or not all(
                    r.feeder is not None
                    and r.feeder.watching
                    and r.feeder.source is not None
                    and r.feeder.source.leader is not None
                    for r in node.pool.mux.resources.values()
                ):
                    await asyncio.sleep(0.05)
        seen: dict[str, int] = {}
        async with contextlib.AsyncExitStack() as clients, asyncio.TaskGroup() as tg:
            for node in nodes:
                streams = await clients.enter_async_context(
                    client_watches(session, node.hub.proxy_url)
                )
                for resp in streams:
                    tg.create_task(drain(resp, seen), name="bench-client")
            expected = hubs * (2 * services + services)  # initial ADDED events
            await until(lambda: sum(seen.values()) >= expected, 60)
            watches = {r: sim.open_watches().get(r, 0) for r in ("services", "endpointslices")}
            started = sum(link.bytes_down for link in links)
            t0 = time.perf_counter()
            for round_ in range(1, rounds + 1):
                for i in range(services):
                    sim.state.apply(service(i, round_))
                    sim.state.apply(endpoint_slice(i, round_))
                    if i % 50 == 0:
                        await asyncio.sleep(0)
            expected += hubs * 3 * services * rounds
            await until(lambda: sum(seen.values()) >= expected, 120)
            seconds = time.perf_counter() - t0
            churn = sum(link.bytes_down for link in links) - started
            await clients.aclose()
        return Result(hubs, mode, watches, started, churn, seconds)


async def until(check: Any, within: float) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("the clients did not see every event in time")
        await asyncio.sleep(0.05)


def kib(n: int) -> str:
    return f"{n / 1024:,.0f} KiB"


async def run(quick: bool, services: int, rounds: int) -> None:
    sizes = (1, 3) if quick else (1, 3, 10)
    print(f"== machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(
        f"== {services} Services with an EndpointSlice of 10 endpoints each, {rounds} rounds "
        "of updates; per hub: kubelet services, kube-proxy services + endpointslices watches"
    )
    results: dict[tuple[int, str], Result] = {}
    with tempfile.TemporaryDirectory(prefix="bench-pool-") as tmp:
        for hubs in sizes:
            for mode in ("off", "node", "pool"):
                result = await scenario(
                    pathlib.Path(tmp) / f"{hubs}-{mode}", hubs, mode, services, rounds
                )
                results[hubs, mode] = result
                print(
                    f"  {hubs:2d} hubs, {mode:4s}: apiserver watches "
                    f"services={result.watches['services']:3d} "
                    f"endpointslices={result.watches['endpointslices']:3d}; cloud bytes: start "
                    f"{kib(result.start_bytes):>10s}, churn {kib(result.churn_bytes):>10s} "
                    f"({result.seconds:.1f} s)"
                )
    print("== ratios (without pool scope / with), same run:")
    for hubs in sizes:
        off, node, pool = (results[hubs, m] for m in ("off", "node", "pool"))

        def ratio(a: float, b: float) -> str:
            return f"{a / b:5.1f}x" if b else "  inf"

        w_off = sum(off.watches.values())
        print(
            f"  {hubs:2d} hubs: watches off/pool {ratio(w_off, sum(pool.watches.values()))} "
            f"off/node {ratio(w_off, sum(node.watches.values()))}; churn bytes off/pool "
            f"{ratio(off.churn_bytes, pool.churn_bytes)} off/node "
            f"{ratio(off.churn_bytes, node.churn_bytes)}; start bytes off/pool "
            f"{ratio(off.start_bytes, pool.start_bytes)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 and 3 hubs only")
    parser.add_argument("--services", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(run(args.quick, args.services, args.rounds))


if __name__ == "__main__":
    main()
