"""Benchmark: the hub's secure port (10268, TLS + a pod's Bearer token) vs its plain port (10261).

    .venv/bin/python bench/tls.py [--quick]

One run, side by side, against the same hub and the same upstream: a simulated apiserver
(``edgehub sim-apiserver``, its own process) and ``edgehub hub`` (its own process) that joins it
with the demo cluster's bootstrap token and gets both certificates the real way (CSRs approved
by this bench with the admin identity). All traffic stays on 127.0.0.1.

Modes, each GET of one pod (sequential latency p50/p99, then throughput at concurrency 8):

- ``plain``: 10261, the node's identity (kubelet's way);
- ``plain+token``: 10261 with the pod's ServiceAccount token (the Bearer path: token verified
  for its cache partition, forwarded as it came) - the same work as below minus TLS;
- ``tls``: 10268 with the token, keep-alive connections (client-go's way);
- ``tls-handshake``: 10268 with the token, a new TLS connection per request (worst case).

Prints absolute numbers, the latency TLS adds per GET (tls - plain, tls - plain+token), the
ratios, and the hub's CPU time per request in each mode.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import pathlib
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

import aiohttp
import yaml

from yurthub.testing import joining, ports

EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
NODE = "bench-node"
DEMO_TOKEN = "abcdef.0123456789abcdef"  # the demo seed's bootstrap token
POD = "/api/v1/namespaces/kube-system/pods?limit=1"


def cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def wait_ok(url: str, ctx: ssl.SSLContext | bool = False, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while True:
            try:
                async with s.get(url, ssl=ctx) as r:
                    if r.status < 500:
                        return
            except (aiohttp.ClientError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not come up")
            await asyncio.sleep(0.1)


async def wait_answering(url: str, timeout: float = 60) -> None:
    """Until the hub answers ``url`` with 200 (ready, and the cloud healthy by its
    heartbeat: two good probes after it got its identity)."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while True:
            async with s.get(url) as r:
                if r.status == 200:
                    return
                why = await r.text()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the hub does not answer: {why}")
            await asyncio.sleep(0.2)


async def sequential(
    url: str, n: int, headers: dict[str, str], ctx: ssl.SSLContext | bool, fresh: bool
) -> list[float]:
    out = []
    connector = aiohttp.TCPConnector(force_close=fresh)
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(n):
            t0 = time.perf_counter()
            async with session.get(url, headers=headers, ssl=ctx) as r:
                body = await r.read()
                assert r.status == 200, (r.status, body[:300])
            out.append(time.perf_counter() - t0)
    return out


async def throughput(
    url: str, n: int, headers: dict[str, str], ctx: ssl.SSLContext | bool, fresh: bool
) -> float:
    connector = aiohttp.TCPConnector(limit=8, force_close=fresh)
    async with aiohttp.ClientSession(connector=connector) as session:
        remaining = n

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                async with session.get(url, headers=headers, ssl=ctx) as r:
                    await r.read()
                    assert r.status == 200, r.status

        t0 = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            for i in range(8):
                tg.create_task(worker(), name=f"bench-worker-{i}")
        return n / (time.perf_counter() - t0)


async def run(quick: bool) -> None:
    n = 300 if quick else 2000
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-tls-"))
    api_port, proxy_port, secure_port, serve_port = (ports.free_port() for _ in range(4))
    admin_kubeconfig = work / "admin.kubeconfig"
    sim = subprocess.Popen(
        [
            EDGEHUB, "sim-apiserver", "--port", str(api_port), "--seed", "demo",
            "--workdir", str(work / "sim"), "--kubeconfig-out", str(admin_kubeconfig),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    hub: subprocess.Popen[bytes] | None = None
    try:
        api = f"https://127.0.0.1:{api_port}"
        await wait_ok(api + "/healthz")
        while not admin_kubeconfig.exists():
            await asyncio.sleep(0.05)
        doc = yaml.safe_load(admin_kubeconfig.read_text())
        ca_pem = base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"])
        admin = joining.Admin.from_kubeconfig(admin_kubeconfig)
        token = (
            await admin.call(
                "POST",
                "/api/v1/namespaces/kube-system/serviceaccounts/default/token",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
            )
        )["status"]["token"]
        async with joining.approving(admin, node_name=NODE):
            hub = subprocess.Popen(
                [
                    EDGEHUB, "hub", f"--server-addr={api}", f"--node-name={NODE}",
                    f"--join-token={DEMO_TOKEN}",
                    f"--discovery-token-ca-cert-hash={joining.ca_pin(ca_pem)}",
                    f"--root-dir={work / 'root'}", f"--disk-cache-path={work / 'cache'}",
                    f"--proxy-port={proxy_port}", f"--proxy-secure-port={secure_port}",
                    f"--serve-port={serve_port}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            ca = ssl.create_default_context(cadata=ca_pem.decode())
            await wait_ok(f"https://127.0.0.1:{secure_port}/version", ctx=ca)
            await wait_answering(f"http://127.0.0.1:{proxy_port}{POD}")
        plain = f"http://127.0.0.1:{proxy_port}{POD}"
        secure = f"https://127.0.0.1:{secure_port}{POD}"
        bearer = {"Authorization": f"Bearer {token}", "User-Agent": "bench-pod/1.0"}
        node = {"User-Agent": "bench-kubelet/1.0"}
        modes: dict[str, tuple[str, dict[str, str], ssl.SSLContext | bool, bool]] = {
            "plain": (plain, node, False, False),
            "plain+token": (plain, bearer, False, False),
            "tls": (secure, bearer, ca, False),
            "tls-handshake": (secure, bearer, ca, True),
        }
        for url, headers, ctx, fresh in modes.values():  # warm up (caches, JIT-free paths)
            await sequential(url, 50, headers, ctx, fresh)
        results: dict[str, dict[str, float]] = {}
        for name, (url, headers, ctx, fresh) in modes.items():
            c0 = cpu_seconds(hub.pid)
            lat = await sequential(url, n, headers, ctx, fresh)
            rps = await throughput(url, n, headers, ctx, fresh)
            cpu = (cpu_seconds(hub.pid) - c0) / (2 * n)
            results[name] = {
                "p50": statistics.median(lat) * 1e3,
                "p99": pct(lat, 0.99) * 1e3,
                "rps": rps,
                "cpu_us": cpu * 1e6,
            }
    finally:
        for proc in (hub, sim):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()

    print(f"\nGET one pod through the hub, x{n} sequential then x{n} at concurrency 8")
    print(f"{'mode':14} {'p50':>9} {'p99':>9} {'req/s':>8} {'hub CPU/req':>12}")
    for name, row in results.items():
        print(
            f"{name:14} {row['p50']:7.3f}ms {row['p99']:7.3f}ms {row['rps']:8.0f} "
            f"{row['cpu_us']:9.0f} us"
        )
    base, token_row = results["plain"], results["plain+token"]
    for name in ("tls", "tls-handshake"):
        row = results[name]
        print(
            f"\n{name}: +{row['p50'] - base['p50']:.3f} ms per GET vs plain "
            f"(x{row['p50'] / base['p50']:.2f} p50), +{row['p50'] - token_row['p50']:.3f} ms vs "
            f"plain+token (the TLS part); throughput ratio vs plain "
            f"{row['rps'] / base['rps']:.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer requests")
    args = parser.parse_args()
    asyncio.run(run(args.quick))


if __name__ == "__main__":
    main()
