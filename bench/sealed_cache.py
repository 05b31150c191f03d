"""Benchmark: the sealed disk cache next to the plaintext one, side by side in one run.

    .venv/bin/python bench/sealed_cache.py [--seed scale:10000] [--runs 7] [--quick]

Processes (all on 127.0.0.1): the simulated apiserver (``edgehub sim-apiserver``), the
partition injector in front of it, and two hubs behind the same link, each its own process
(``--serve-hub``: ``yurthub.assembly.running``, as ``edgehub hub`` runs it): one with a
plaintext cache (``--cache-key-source none``), one sealed by a key file. Both see the same
apiserver, the same cut and the same restart, measured in turn.

Measured, for each and as the ratio sealed/plaintext (the target is each <= 1.2x):

- offline LIST of every pod (10,000 with ``scale:10000``), link blackholed: p50/p99 of
  ``3 x runs`` rounds, each round one LIST of each hub;
- hub restart to the first cached answer (a new hub process while the link is still cut),
  p50 of the runs;
- ingest of the whole 10,000-pod list into a fresh store (``Store.submit(PutList)`` + flush,
  the writer's work for one relist, in this process), p50 of the runs.

Noise (the machine is shared): every round measures both parties, alternating which goes
first; the ratios printed are of the p50s and, beside them, the median of the rounds' own
ratios (each round's two figures were taken seconds apart, under the same load); the load
average is printed before and after. Beside the wall-clock times, the CPU time each party
spent is measured (the hub process's threads, ``/proc/<pid>/task/*/schedstat``, for a LIST;
the new process's ``utime + stime`` for a restart; this process's for an ingest): what the
work costs, which other processes on the machine change much less than how long it takes.
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

import aiohttp
import orjson

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cache as cachebench  # bench/cache.py: the shared helpers

HERE = pathlib.Path(__file__).resolve().parent
READY = cachebench.READY
ONE = "/api/v1/namespaces/default/pods/scale-1"


async def serve_hub(server: str, cache: pathlib.Path, key_file: str) -> None:
    from yurthub import assembly, settings
    from yurthub.cache import sealing

    source = (
        sealing.Source(sealing.Kind.KEYFILE, pathlib.Path(key_file))
        if key_file
        else sealing.Source(sealing.Kind.NONE)
    )
    hub_settings = settings.HubSettings(
        node_name=cachebench.NODE,
        upstream=settings.UpstreamSettings(servers=(server,), connect_timeout=1.0),
        listen=settings.ListenSettings(serve_port=0, proxy_port=0),
        heartbeat=settings.HeartbeatSettings(
            interval=1.0, timeout=1.0, healthy_threshold=1, failed_retry=1
        ),
        cache=settings.CacheSettings(disk_cache_path=cache, key_source=source),
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with assembly.running(hub_settings) as node:
        print(f"{READY} proxy={node.hub.proxy_url} server={node.hub.server_url}", flush=True)
        await stop.wait()


async def start_hub(
    partition_url: str, cache: pathlib.Path, key_file: str
) -> tuple[asyncio.subprocess.Process, str]:
    argv = [sys.executable, str(HERE / "sealed_cache.py"), "--serve-hub", partition_url]
    argv += ["--cache", str(cache), "--key-file", key_file]
    proc = await cachebench.spawn(*argv)
    line = await cachebench.read_line(proc, READY)
    return proc, line.split("proxy=")[1].split()[0]


def _key_file(path: pathlib.Path) -> str:
    path.write_bytes(os.urandom(32))
    path.chmod(0o600)
    return str(path)


async def ingest(body: bytes, key_file: str, runs: int) -> list[float]:
    """Seconds to store the whole list ``body`` into a fresh store, ``runs`` times."""
    from yurthub.cache import keys, sealing, store

    scope = keys.Scope("kubelet", "pods", "v1")
    list_key = keys.list_key(scope, "", "", "")
    source = sealing.Source(sealing.Kind.KEYFILE, pathlib.Path(key_file)) if key_file else None
    times = []
    for _ in range(runs):
        workdir = pathlib.Path(tempfile.mkdtemp(prefix="bench-sealed-ingest-"))
        try:
            s = await store.Store.open(
                workdir / "cache", key_source=source, max_pending_bytes=256 << 20
            )
            started = time.perf_counter()
            assert s.submit(store.PutList(list_key, body))
            assert await s.flush(300)
            times.append(time.perf_counter() - started)
            assert s.stats.write_failures == 0 and len(s) > 0
            await s.close()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    return times


async def online_list(session: aiohttp.ClientSession, proxy: str, within: float = 120) -> int:
    """LIST every pod through ``proxy`` until the hub answers it online (200): a hub that has
    not yet seen the apiserver healthy (a loaded machine) answers from its empty cache (404)."""
    async with asyncio.timeout(within):
        while True:
            await cachebench.first_answer(session, proxy + ONE)
            headers = {"User-Agent": cachebench.UA}
            async with session.get(proxy + "/api/v1/pods", headers=headers) as resp:
                body = await resp.read()
                if resp.status == 200:
                    return body.count(b'"kind":"Pod"') or len(orjson.loads(body)["items"])
            await asyncio.sleep(0.2)


async def bench(seed: str, runs: int) -> None:
    load_before = os.getloadavg()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="bench-sealed-"))
    procs: list[asyncio.subprocess.Process] = []
    key_file = _key_file(workdir / "kek")
    parties = {"plaintext": "", "sealed": key_file}
    try:
        sim = await cachebench.spawn(
            cachebench.EDGEHUB, "sim-apiserver", "--seed", seed, "--port", "0",
            "--insecure-port", "0", "--workdir", str(workdir / "sim"),
        )  # fmt: skip
        procs.append(sim)
        await cachebench.read_line(sim, "https://")
        insecure = await cachebench.read_line(sim, "http://")
        link = await cachebench.spawn(
            cachebench.EDGEHUB, "partition", "--upstream",
            f"127.0.0.1:{insecure.rsplit(':', 1)[1]}", "--listen", "127.0.0.1:0",
            "--control", "127.0.0.1:0",
        )  # fmt: skip
        procs.append(link)
        line = await cachebench.read_line(link, "partition ")
        upstream = "http://" + line.split("listening=")[1].split()[0]
        control = line.split("control=")[1].split()[0]
        hubs: dict[str, tuple[asyncio.subprocess.Process, str]] = {}
        for name, key in parties.items():
            hubs[name] = await start_hub(upstream, workdir / name, key)
            procs.append(hubs[name][0])
        offline: dict[str, list[float]] = {name: [] for name in parties}
        restart: dict[str, list[float]] = {name: [] for name in parties}
        offline_cpu: dict[str, list[float]] = {name: [] for name in parties}
        restart_cpu: dict[str, list[float]] = {name: [] for name in parties}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
            count = 0
            for name, (_, proxy) in hubs.items():
                count = await online_list(session, proxy)
                async with asyncio.timeout(300):
                    while await _cached(workdir / name) < count:
                        await asyncio.sleep(0.2)
            async with session.get(insecure + "/api/v1/pods") as resp:
                body = await resp.read()
            async with session.put(f"{control}/mode", params={"mode": "blackhole"}) as resp:
                assert resp.status == 200
            for _, proxy in hubs.values():
                await cachebench.first_answer(session, proxy + ONE)
            for run in range(3 * runs):
                for name in _order(parties, run):
                    proc, proxy = hubs[name]
                    before = thread_cpu(proc.pid)
                    elapsed, got = await cachebench.timed_list(session, proxy + "/api/v1/pods", {})
                    offline_cpu[name].append(thread_cpu(proc.pid) - before)
                    assert got == count, (name, got, count)
                    offline[name].append(elapsed)
            for run in range(runs):
                # Alternate who goes first: the other hub's start-up tail must not weigh on
                # one side only.
                for name in _order(parties, run):
                    proc, _ = hubs[name]
                    await cachebench.stop(proc)
                    procs.remove(proc)
                    started = time.perf_counter()
                    hubs[name] = await start_hub(upstream, workdir / name, parties[name])
                    procs.append(hubs[name][0])
                    await cachebench.first_answer(session, hubs[name][1] + ONE)
                    restart[name].append(time.perf_counter() - started)
                    restart_cpu[name].append(process_cpu(hubs[name][0].pid))
        ingest_times: dict[str, list[float]] = {name: [] for name in parties}
        ingest_cpu: dict[str, list[float]] = {name: [] for name in parties}
        for run in range(runs):
            for name in _order(parties, run):
                before = time.process_time()
                ingest_times[name] += await ingest(body, parties[name], 1)
                ingest_cpu[name].append(time.process_time() - before)
    finally:
        for proc in reversed(procs):
            await cachebench.stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)

    p50 = cachebench.pct
    print(f"sealed vs plaintext cache, {count} pods ({runs} runs, seed {seed})")
    print(f"  load average before {_load(load_before)}, after {_load(os.getloadavg())}")
    for name in parties:
        print(
            f"  {name:<10} offline LIST p50 {p50(offline[name], 0.5) * 1000:8.1f} ms"
            f"  p99 {p50(offline[name], 0.99) * 1000:8.1f} ms"
            f"   restart->first answer p50 {p50(restart[name], 0.5):6.2f} s"
            f"   ingest of the list p50 {p50(ingest_times[name], 0.5) * 1000:8.1f} ms"
        )
    for name in parties:
        print(
            f"  {name:<10} CPU: offline LIST p50 {p50(offline_cpu[name], 0.5) * 1000:8.1f} ms"
            f"   restart->first answer p50 {p50(restart_cpu[name], 0.5):6.2f} s"
            f"   ingest of the list p50 {p50(ingest_cpu[name], 0.5) * 1000:8.1f} ms"
        )
    measured = {
        "offline LIST": (offline, offline_cpu),
        "restart to first cached answer": (restart, restart_cpu),
        "ingest of the list": (ingest_times, ingest_cpu),
    }
    for what, (times, cpu) in measured.items():
        ratio = p50(times["sealed"], 0.5) / p50(times["plaintext"], 0.5)
        paired = [s / p for s, p in zip(times["sealed"], times["plaintext"], strict=True)]
        cpu_ratio = p50(cpu["sealed"], 0.5) / max(p50(cpu["plaintext"], 0.5), 1e-9)
        print(
            f"  sealed/plaintext {what:<31} wall {ratio:5.2f}x (rounds' median"
            f" {p50(paired, 0.5):5.2f}x)  CPU {cpu_ratio:5.2f}x  (target <= 1.2x)"
        )


def thread_cpu(pid: int) -> float:
    """Seconds of CPU the live threads of ``pid`` have used (nanosecond counters)."""
    total = 0
    for stat in pathlib.Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def process_cpu(pid: int) -> float:
    """Seconds of CPU ``pid`` has used, ended threads included (clock ticks)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load(load: tuple[float, float, float]) -> str:
    return " ".join(f"{x:.2f}" for x in load)


def _order(parties: dict[str, str], run: int) -> list[str]:
    names = list(parties)
    return names if run % 2 == 0 else names[::-1]


async def _cached(cache: pathlib.Path) -> int:
    argv = [cachebench.EDGEHUB, "cache", "stats", "--disk-cache-path", str(cache)]
    done = await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("objects:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", default="scale:10000")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="3 runs")
    parser.add_argument("--serve-hub", metavar="SERVER_URL", help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=pathlib.Path, help=argparse.SUPPRESS)
    parser.add_argument("--key-file", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_hub:
        asyncio.run(serve_hub(args.serve_hub, args.cache, args.key_file))
        return
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(bench(args.seed, 3 if args.quick else args.runs))


if __name__ == "__main__":
    main()
