"""Benchmark: ``/metrics`` and the hub's memory stay flat whatever local clients send.

    .venv/bin/python bench/metrics.py [--quick]

A simulated apiserver (plain-HTTP port) and the hub (``edgehub hub``, its own process, so its
RSS is its own) on 127.0.0.1. Measured twice in one run, side by side:

- baseline: after 200 kubelet requests;
- after 1,000 and after 10,000 more requests, each with a random User-Agent, method and resource
  name (before the label bounds, each made its own series: 3,000 made a 27.8 MB ``/metrics``).

Each time: the ``/metrics`` size, the median and worst scrape time, the hub's RSS, and kubelet's
GET latency (p50/p99) while ``/metrics`` is scraped in a loop (a scrape on the event loop used to
stall kubelet's requests for its whole duration). Printed with the ratio 10,000/1,000 ("flat":
near 1, nothing grows with the count of distinct strings sent) and the ratio to the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import pathlib
import random
import statistics
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import aiohttp

from yurthub.testing import ports

EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
NODE = "edge-node-1"
KUBELET = {"User-Agent": "kubelet/v1.32.4 (linux/amd64) kubernetes/abcdef0"}


@contextlib.contextmanager
def process(args: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        from yurthub.testing import processes  # here: a served hub never loads it

        processes.terminate_popen(proc)


async def wait_ok(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while True:
            with contextlib.suppress(aiohttp.ClientError):
                async with s.get(url) as r:
                    if r.status == 200:
                        return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not come up")
            await asyncio.sleep(0.1)


def rss_mb(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def junk(n: int) -> str:
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=n))


async def hostile(proxy: str, count: int, concurrency: int = 50) -> None:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as s:

        async def one() -> None:
            ua = f"{junk(10)}/{junk(6)} ({junk(24)})"
            path = random.choice(
                [
                    f"/api/v1/{junk(10)}",
                    f"/apis/{junk(8)}.example.com/v1/namespaces/{junk(5)}/{junk(9)}",
                    f"/api/v1/namespaces/default/pods/{junk(6)}/{junk(8)}",
                    f"/{junk(14)}",
                ]
            )
            method = random.choice(["GET", "GET", "POST", junk(5).upper()])
            with contextlib.suppress(aiohttp.ClientError):
                async with s.request(method, proxy + path, headers={"User-Agent": ua}) as r:
                    await r.read()

        remaining = count

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await one()

        async with asyncio.TaskGroup() as tg:
            for i in range(concurrency):
                tg.create_task(worker(), name=f"hostile-{i}")


async def kubelet_gets(proxy: str, count: int) -> list[float]:
    out = []
    async with aiohttp.ClientSession(headers=KUBELET) as s:
        for _ in range(count):
            t0 = time.perf_counter()
            async with s.get(f"{proxy}/api/v1/nodes/{NODE}") as r:
                await r.read()
            out.append(time.perf_counter() - t0)
    return out


async def measure(proxy: str, server: str, pid: int, scrapes: int, gets: int) -> dict[str, float]:
    times = []
    size = 0
    async with aiohttp.ClientSession() as s:
        for _ in range(scrapes):
            t0 = time.perf_counter()
            async with s.get(server + "/metrics") as r:
                size = len(await r.read())
            times.append(time.perf_counter() - t0)

        # kubelet's GETs while /metrics is scraped back to back
        stop = asyncio.Event()

        async def scraping() -> None:
            while not stop.is_set():
                async with s.get(server + "/metrics") as r:
                    await r.read()

        async with asyncio.TaskGroup() as tg:
            tg.create_task(scraping(), name="scrape-loop")
            latencies = await kubelet_gets(proxy, gets)
            stop.set()
    latencies.sort()
    return {
        "metrics_kb": size / 1024,
        "scrape_ms": statistics.median(times) * 1000,
        "scrape_max_ms": max(times) * 1000,
        "rss_mb": rss_mb(pid),
        "get_p50_ms": latencies[len(latencies) // 2] * 1000,
        "get_p99_ms": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] * 1000,
    }


async def run(quick: bool) -> None:
    n_hostile = 2000 if quick else 10_000
    sim_port, proxy_port, serve_port = ports.free_port(), ports.free_port(), ports.free_port()
    first = n_hostile // 10
    with contextlib.ExitStack() as stack:
        workdir = stack.enter_context(tempfile.TemporaryDirectory())
        sim_argv = [
            EDGEHUB, "--log-level", "warning", "sim-apiserver", "--port", "0",
            "--insecure-port", str(sim_port), "--workdir", f"{workdir}/sim",
        ]  # fmt: skip
        stack.enter_context(process(sim_argv))
        await wait_ok(f"http://127.0.0.1:{sim_port}/version")
        hub_argv = [
            EDGEHUB, "--log-level", "warning", "hub", "--server-addr",
            f"http://127.0.0.1:{sim_port}", "--node-name", NODE, "--proxy-port", str(proxy_port),
            "--serve-port", str(serve_port), "--disk-cache-path", f"{workdir}/cache",
        ]  # fmt: skip
        hub = stack.enter_context(process(hub_argv))
        proxy, server = f"http://127.0.0.1:{proxy_port}", f"http://127.0.0.1:{serve_port}"
        await wait_ok(server + "/v1/readyz")
        await kubelet_gets(proxy, 200)
        base = await measure(proxy, server, hub.pid, 20, 200)
        await hostile(proxy, first)
        some = await measure(proxy, server, hub.pid, 20, 200)
        started = time.perf_counter()
        await hostile(proxy, n_hostile - first)
        took = time.perf_counter() - started
        after = await measure(proxy, server, hub.pid, 20, 200)

    print(f"{n_hostile} requests with random User-Agents/methods/resources ({took:.1f} s)")
    print("flat = the hostile/hostile ratio near 1: every label is bounded, nothing grows with")
    print("the count of distinct strings sent (the first ones fill the bounded 'other' series)")
    head = f"after {first}", f"after {n_hostile}", f"{n_hostile}/{first}", "vs base"
    print(f"{'':14}{'baseline':>11}{head[0]:>12}{head[1]:>13}{head[2]:>13}{head[3]:>9}")
    for key in base:
        flat = after[key] / some[key] if some[key] else float("nan")
        grown = after[key] / base[key] if base[key] else float("nan")
        print(
            f"{key:14}{base[key]:11.2f}{some[key]:12.2f}{after[key]:13.2f}{flat:13.2f}{grown:9.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 hostile requests")
    args = parser.parse_args()
    asyncio.run(run(args.quick))


if __name__ == "__main__":
    main()
