"""Benchmark: the hub's disk cache, side by side in one run.

    .venv/bin/python bench/cache.py [--seed scale:10000] [--runs 7]

Processes (all on 127.0.0.1): the simulated apiserver (``edgehub sim-apiserver``, plain-HTTP
port), the partition injector (``edgehub partition``) in front of it, and a hub with its cache
(this file with ``--serve-hub``: ``yurthub.assembly.running``, the hub wired to its cache as
``edgehub hub`` runs it, with the bench's heartbeat settings), each in its own process so RSS
and CPU are their own.

Measured:

- LIST of every pod (10,000 with ``scale:10000``): direct from the apiserver, online through the
  hub (the tee caches it), and offline from the cache (link blackholed): p50/p99 and ratios;
- failover: from the moment the link is blackholed to the first successful cached read
  (a client re-reading one pod with a 0.5 s timeout);
- hub RSS with every pod cached (after the offline LISTs);
- hub restart to first cached answer (new hub process while the link is still cut);
- watch-event ingest into the cache: the store alone (events of the apiserver's own pod
  shape), events/s.

Heartbeat settings are the bench's (interval 1 s, timeout 1 s, one attempt): failover and the
first answer after a restart are bounded by how fast the hub notices the cloud is gone, which is
the health checker's business; with YurtHub's defaults (10 s, 2 s, 3 attempts) add those.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import aiohttp
import orjson

HERE = pathlib.Path(__file__).resolve().parent
PYTHON = sys.executable
EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
NODE = "edge-node-1"
UA = "kubelet/v1.32.4 (linux/amd64) kubernetes/abcdef0"
READY = "EDGEHUB_HUB_READY"


# --- the hub with its cache (a separate process: --serve-hub) ----------------------------------


async def serve_hub(server: str, cache: pathlib.Path, interval: float, timeout: float) -> None:
    from yurthub import assembly, settings

    hub_settings = settings.HubSettings(
        node_name=NODE,
        upstream=settings.UpstreamSettings(servers=(server,), connect_timeout=1.0),
        listen=settings.ListenSettings(serve_port=0, proxy_port=0),
        heartbeat=settings.HeartbeatSettings(
            interval=interval, timeout=timeout, healthy_threshold=1, failed_retry=1
        ),
        cache=settings.CacheSettings(disk_cache_path=cache),
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    # The hub wired to its cache exactly as ``edgehub hub`` runs it (yurthub.assembly).
    async with assembly.running(hub_settings) as node:
        print(f"{READY} proxy={node.hub.proxy_url} server={node.hub.server_url}", flush=True)
        await stop.wait()


# --- helpers -----------------------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def read_line(proc: asyncio.subprocess.Process, prefix: str, within: float = 120) -> str:
    assert proc.stdout is not None
    async with asyncio.timeout(within):
        while True:
            line = (await proc.stdout.readline()).decode()
            if not line:
                raise RuntimeError(f"process exited before printing {prefix!r}")
            if line.startswith(prefix):
                return line.strip()


async def spawn(*argv: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )


async def stop(proc: asyncio.subprocess.Process) -> None:
    from yurthub.testing import processes  # here: the served hub never loads it

    await processes.terminate(proc)


async def start_hub(
    partition_url: str, cache: pathlib.Path
) -> tuple[asyncio.subprocess.Process, str]:
    proc = await spawn(
        PYTHON, str(HERE / "cache.py"), "--serve-hub", partition_url, "--cache", str(cache)
    )
    line = await read_line(proc, READY)
    proxy = line.split("proxy=")[1].split()[0]
    return proc, proxy


async def timed_list(
    session: aiohttp.ClientSession, url: str, params: dict[str, str]
) -> tuple[float, int]:
    started = time.perf_counter()
    async with session.get(
        url, params=params, headers={"User-Agent": UA, "Accept": "application/json"}
    ) as resp:
        body = await resp.read()
        assert resp.status == 200, (resp.status, body[:200])
    elapsed = time.perf_counter() - started
    return elapsed, body.count(b'"kind":"Pod"') or len(orjson.loads(body)["items"])


async def first_answer(session: aiohttp.ClientSession, url: str, within: float = 60.0) -> None:
    """GET ``url`` as kubelet until it answers 200: 0.5 s per try, 10 ms between failed tries,
    and ``within`` seconds in all (a hub that never answers ends the run, not a loop)."""
    async with asyncio.timeout(within):
        while True:
            try:
                async with session.get(
                    url, headers={"User-Agent": UA}, timeout=aiohttp.ClientTimeout(total=0.5)
                ) as resp:
                    if resp.status == 200:
                        await resp.read()
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.01)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def series(
    session: aiohttp.ClientSession, url: str, params: dict[str, str], runs: int
) -> tuple[list[float], int]:
    times = []
    count = 0
    for _ in range(runs):
        elapsed, count = await timed_list(session, url, params)
        times.append(elapsed)
    return times, count


async def cached_objects(cache: pathlib.Path) -> int:
    done = await asyncio.to_thread(
        subprocess.run,
        [EDGEHUB, "cache", "stats", "--disk-cache-path", str(cache)],
        capture_output=True,
        text=True,
    )
    for line in done.stdout.splitlines():
        if line.startswith("objects:"):
            return int(line.split()[1])
    return 0


async def ingest_rate(sample_pod: dict[str, Any], events: int) -> float:
    from yurthub.cache import keys, store

    scope = keys.Scope("kubelet", "pods", "v1")
    list_key = keys.list_key(scope, "", "", "")
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    try:
        s = await store.Store.open(workdir / "cache")
        lines = []
        base_rv = 10_000_000
        for i in range(events):
            obj = dict(sample_pod)
            meta = dict(obj["metadata"])
            meta["name"] = f"ingest-{i % 2000}"
            meta["resourceVersion"] = str(base_rv + i)
            obj["metadata"] = meta
            kind = "ADDED" if i < 2000 else "MODIFIED"
            lines.append(orjson.dumps({"type": kind, "object": obj}))
        started = time.perf_counter()
        for i in range(0, events, 4):
            # A watch stream arrives a few events per chunk; the tee submits per chunk.
            while not s.submit(store.WatchLines(list_key, tuple(lines[i : i + 4]))):
                await asyncio.sleep(0.001)
            if i % 400 == 0:
                await asyncio.sleep(0)
        assert await s.flush(120)
        elapsed = time.perf_counter() - started
        assert s.stats.write_failures == 0
        await s.close()
        return events / elapsed
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# --- the run -----------------------------------------------------------------------------------


async def bench(seed: str, runs: int) -> None:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="bench-cache-"))
    procs: list[asyncio.subprocess.Process] = []
    try:
        sim = await spawn(
            EDGEHUB,
            "sim-apiserver",
            "--seed",
            seed,
            "--port",
            "0",
            "--insecure-port",
            "0",
            "--workdir",
            str(workdir / "sim"),
        )
        procs.append(sim)
        await read_line(sim, "https://")
        insecure = await read_line(sim, "http://")
        sim_port = insecure.rsplit(":", 1)[1]
        link = await spawn(
            EDGEHUB,
            "partition",
            "--upstream",
            f"127.0.0.1:{sim_port}",
            "--listen",
            "127.0.0.1:0",
            "--control",
            "127.0.0.1:0",
        )
        procs.append(link)
        line = await read_line(link, "partition ")
        link_addr = line.split("listening=")[1].split()[0]
        control = line.split("control=")[1].split()[0]
        cache = workdir / "cache"
        hub, proxy = await start_hub(f"http://{link_addr}", cache)
        procs.append(hub)
        params: dict[str, str] = {}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            # The hub serves before its first heartbeat has found the apiserver: until then a
            # LIST is answered from the (empty) cache with a 404. Wait for an online answer.
            await first_answer(session, f"{proxy}/api/v1/namespaces/default/pods/scale-1")
            direct, count = await series(session, f"{insecure}/api/v1/pods", params, runs)
            online, _ = await series(session, f"{proxy}/api/v1/pods", params, runs)
            async with asyncio.timeout(120):
                while await cached_objects(cache) < count:
                    await asyncio.sleep(0.2)
            await asyncio.sleep(2)  # let the writer finish the queued relists (steady state)
            async with session.get(f"{insecure}/api/v1/namespaces/default/pods/scale-1") as resp:
                sample = orjson.loads(await resp.read())
            idle_rss = rss_mb(hub.pid)

            # Cut the link; time the first successful cached read.
            one = f"{proxy}/api/v1/namespaces/default/pods/scale-1"
            async with session.put(f"{control}/mode", params={"mode": "blackhole"}) as resp:
                assert resp.status == 200
            cut = time.perf_counter()
            await first_answer(session, one)
            failover = time.perf_counter() - cut
            offline, offline_count = await series(session, f"{proxy}/api/v1/pods", params, runs)
            assert offline_count == count, (offline_count, count)
            rss = rss_mb(hub.pid)

            # Restart the hub while the link is still cut.
            await stop(hub)
            started = time.perf_counter()
            hub, proxy = await start_hub(f"http://{link_addr}", cache)
            procs.append(hub)
            await first_answer(session, f"{proxy}/api/v1/namespaces/default/pods/scale-1")
            restart = time.perf_counter() - started
            restart_list, _ = await timed_list(session, f"{proxy}/api/v1/pods", params)
            restart_rss = rss_mb(hub.pid)

        rate = await ingest_rate(sample, 20_000)
    finally:
        for proc in reversed(procs):
            await stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)

    def row(name: str, times: list[float]) -> str:
        p50, p99 = pct(times, 0.5) * 1000, pct(times, 0.99) * 1000
        return f"  {name:<28} p50 {p50:8.1f} ms   p99 {p99:8.1f} ms"

    print(f"LIST of {count} pods ({runs} runs each, seed {seed})")
    print(row("direct (apiserver)", direct))
    print(row("online through the hub", online))
    print(row("offline from the cache", offline))
    print(
        f"  ratios: offline/direct {pct(offline, 0.5) / pct(direct, 0.5):.2f}x, "
        f"online-hub/direct {pct(online, 0.5) / pct(direct, 0.5):.2f}x, "
        f"offline/online-hub {pct(offline, 0.5) / pct(online, 0.5):.2f}x"
    )
    print(f"failover blackhole -> first cached read:  {failover:.2f} s   (target <= 3 s)")
    print(f"hub restart -> first cached answer:       {restart:.2f} s   (target <= 2 s)")
    print(f"  first full LIST after restart:          {restart_list * 1000:.1f} ms")
    print(f"hub RSS with {count} pods cached:          {rss:.1f} MB   (target <= 120 MB)")
    print(
        f"  before going offline: {idle_rss:.1f} MB; "
        f"restarted hub after one LIST: {restart_rss:.1f} MB"
    )
    print(f"watch-event ingest into the cache:        {rate:,.0f} events/s   (target >= 5,000)")
    print(
        f"offline LIST p50 <= 150 ms: {'yes' if pct(offline, 0.5) <= 0.150 else 'NO'}; "
        f"faster than direct: {'yes' if pct(offline, 0.5) < pct(direct, 0.5) else 'NO'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", default="scale:10000")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--serve-hub", metavar="SERVER_URL", help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=pathlib.Path, help=argparse.SUPPRESS)
    parser.add_argument("--heartbeat-interval", type=float, default=1.0, help=argparse.SUPPRESS)
    parser.add_argument("--heartbeat-timeout", type=float, default=1.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_hub:
        asyncio.run(
            serve_hub(args.serve_hub, args.cache, args.heartbeat_interval, args.heartbeat_timeout)
        )
        return
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(bench(args.seed, args.runs))


if __name__ == "__main__":
    main()
