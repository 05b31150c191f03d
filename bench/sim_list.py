"""Benchmark: listing 10,000 pods from ``edgehub sim-apiserver --seed scale:10000``.

Runs the simulated apiserver as a subprocess (so client and server do not share
a CPU budget in one process), then measures side by side in one run:

- a full JSON list with aiohttp (``GET /api/v1/pods``), the target being < 1 s, and
  the same without decoding the JSON on the client (server + transfer only);
- the same list paged with ``limit=500`` (what client-go reflectors do);
- the Table form kubectl asks for, paged by 500;
- metadata-only (PartialObjectMetadataList);
- the real ``kubectl get pods -A -o name`` and ``kubectl get pods -A`` end to end.

Prints absolute medians and ratios against the plain JSON list.
Usage: ``.venv/bin/python bench/sim_list.py [--pods N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import os
import pathlib
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import aiohttp
import yaml

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
PARTIAL = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"


async def _median(repeat: int, run: Callable[[], Awaitable[int]]) -> tuple[float, int]:
    times, count = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        count = await run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), count


def _kubectl(kubeconfig: pathlib.Path, cache: pathlib.Path, *args: str) -> int:
    out = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache), *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return len(out.splitlines())


async def measure(url: str, kubeconfig: pathlib.Path, repeat: int, cache: pathlib.Path) -> None:
    config = yaml.safe_load(kubeconfig.read_text())
    user = config["users"][0]["user"]
    workdir = kubeconfig.parent

    (workdir / "c.crt").write_bytes(base64.b64decode(user["client-certificate-data"]))
    (workdir / "c.key").write_bytes(base64.b64decode(user["client-key-data"]))
    ca = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
    ctx = ssl.create_default_context(cadata=ca)
    ctx.load_cert_chain(workdir / "c.crt", workdir / "c.key")
    async with aiohttp.ClientSession(url, connector=aiohttp.TCPConnector(ssl=ctx)) as session:

        async def full() -> int:
            async with session.get("/api/v1/pods") as resp:
                body = await resp.json()
            return len(body["items"])

        async def raw() -> int:
            async with session.get("/api/v1/pods") as resp:
                body = await resp.read()
            return body.count(b'"kind":"Pod"')

        async def paged(accept: str = "application/json", key: str = "items") -> int:
            count, token = 0, ""
            while True:
                params = {"limit": "500"}
                if token:
                    params["continue"] = token
                async with session.get(
                    "/api/v1/pods", params=params, headers={"Accept": accept}
                ) as resp:
                    body = await resp.json()
                count += len(body[key])
                token = body["metadata"].get("continue", "")
                if not token:
                    return count

        async def partial() -> int:
            async with session.get("/api/v1/pods", headers={"Accept": PARTIAL}) as resp:
                return len((await resp.json())["items"])

        await full()  # warm up connections and caches
        results = {
            "JSON list, one request": await _median(repeat, full),
            "JSON list, bytes only (no client decode)": await _median(repeat, raw),
            "JSON list, limit=500 pages": await _median(repeat, paged),
            "Table (kubectl form), limit=500 pages": await _median(
                repeat, lambda: paged(TABLE, "rows")
            ),
            "PartialObjectMetadataList, one request": await _median(repeat, partial),
        }
    _kubectl(kubeconfig, cache, "get", "ns")  # discovery into the cache first
    loop = asyncio.get_running_loop()
    for label, args in (
        ("kubectl get pods -A -o name", ("get", "pods", "-A", "-o", "name")),
        ("kubectl get pods -A (table)", ("get", "pods", "-A")),
    ):
        run = functools.partial(_kubectl, kubeconfig, cache, *args)

        async def in_thread(run: Callable[[], int] = run) -> int:
            return await loop.run_in_executor(None, run)

        results[label] = await _median(max(1, repeat // 2), in_thread)
    base = results["JSON list, one request"][0]
    print(f"{'what':45} {'median':>9} {'items':>7} {'vs JSON list':>12}")
    for label, (seconds, count) in results.items():
        print(f"{label:45} {seconds * 1000:7.1f}ms {count:7d} {seconds / base:11.2f}x")
    verdict = "PASS" if base < 1.0 else "FAIL"
    listed = results["JSON list, one request"][1]
    print(f"\n{verdict}: a full list of {listed} pods took {base:.3f}s (target < 1 s)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sim-list-bench-") as tmp:
        base = pathlib.Path(tmp)
        kubeconfig = base / "kubeconfig"
        started = time.perf_counter()
        server = subprocess.Popen(
            [
                sys.executable, "-m", "edgehub", "--log-level", "warning", "sim-apiserver",
                "--port", "0", "--seed", f"scale:{args.pods}", "--kubeconfig-out", str(kubeconfig),
                "--workdir", str(base / "sim"),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        try:
            assert server.stdout is not None
            url = server.stdout.readline().strip()
            if not url.startswith("https://"):
                raise SystemExit(f"the simulated apiserver did not start (got {url!r})")
            took = time.perf_counter() - started
            print(f"seeded scale:{args.pods} and serving in {took:.2f}s at {url}")
            asyncio.run(measure(url, kubeconfig, args.repeat, base / "kubectl-cache"))
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
