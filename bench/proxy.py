"""Benchmark: the hub's proxy vs direct vs nginx, side by side in one run.

    .venv/bin/python bench/proxy.py [--quick]

Upstream: the simulated apiserver (``edgehub sim-apiserver --seed scale:1000``, its plain-HTTP
port, so no target pays for TLS) unless ``--upstream builtin`` asks for a small aiohttp stand-in
serving the same shapes. The upstream, the hub (``edgehub hub``, so its CPU counters are its
own) and nginx (installed with apt-get if missing) each run in their own process. All traffic
stays on 127.0.0.1.

Targets: direct, the hub as shipped (the standard library's loop), the same hub on uvloop
(``EDGEHUB_EVENT_LOOP=uvloop``, the opt-in), the floor (aiohttp's low-level server and client
on uvloop streaming each answer through and nothing else: what any proxy on the hub's stack
costs at least), nginx, and with ``--compare-src DIR`` the hub of another source tree (e.g.
``git archive main | tar -x -C DIR``) as ``hub-before``.

Measured per target: GET one pod (sequential latency p50/p99 and concurrent throughput), LIST
1,000 pods (latency, throughput), watch-event delivery delay. For the watch, one watch per
target is open at the same time on the same objects; the bench changes a ConfigMap (simulator)
or the stand-in emits events, and each event's arrival is timed from the moment it was caused
(same CLOCK_MONOTONIC). Plus each proxy's CPU time per proxied request (process and children,
so nginx's worker counts), for a plain client and for the same GETs as kubelet (a cache agent:
teed into the cache and filtered), the ratios to nginx, and the hubs' RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import aiohttp
import orjson
from aiohttp import web

from yurthub.testing import ports

HERE = pathlib.Path(__file__).resolve().parent
PYTHON = sys.executable
EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
NODE = "bench-node"


# --- built-in upstream (a separate process: --serve-upstream PORT) -----------------------------


def _pod(i: int) -> dict[str, object]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": f"pod-{i}",
            "namespace": "default",
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "labels": {"app": "bench", "tier": "backend", "index": str(i)},
            "annotations": {"bench/annotation": "x" * 200},
        },
        "spec": {
            "nodeName": NODE,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.example/bench:1.0",
                    "env": [{"name": f"E{j}", "value": "v" * 40} for j in range(20)],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
        },
        "status": {"phase": "Running", "podIP": f"10.0.{i // 250}.{i % 250}"},
    }


def serve_upstream(port: int) -> None:
    pod = orjson.dumps(_pod(0))
    pod_list = orjson.dumps(
        {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "5000"},
            "items": [_pod(i) for i in range(1000)],
        }
    )
    lease: dict[str, object] = {"metadata": {"name": NODE, "namespace": "kube-node-lease"}}

    async def get_pod(request: web.Request) -> web.Response:
        return web.Response(body=pod, content_type="application/json")

    async def pods(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") not in ("1", "true"):
            return web.Response(body=pod_list, content_type="application/json")
        count = int(request.query.get("events", "200"))
        gap = float(request.query.get("gap", "0.005"))
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        for i in range(count):
            event = {"type": "MODIFIED", "object": {**_pod(i % 5), "sent": time.monotonic_ns()}}
            await resp.write(orjson.dumps(event) + b"\n")
            await asyncio.sleep(gap)
        await resp.write_eof()
        return resp

    async def lease_handler(request: web.Request) -> web.Response:
        return web.json_response(lease)

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/default/pods/pod-0", get_pod)
    app.router.add_get("/api/v1/namespaces/default/pods", pods)
    app.router.add_route(
        "*", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}", lease_handler
    )
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


# --- the floor: the least proxy the hub's stack can be (a separate process: --serve-floor) ----

_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host",
     "proxy-connection", "proxy-authorization", "proxy-authenticate", "content-length"}
)  # fmt: skip


def serve_floor(port: int, upstream: str) -> None:
    """aiohttp's low-level server and client on uvloop, streaming each answer through and
    nothing else: no routing, classification, cache, filters, metrics or limits. What any
    proxy on this stack costs at least; the hub's figures over it are the hub's own work."""
    import uvloop

    async def main() -> None:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(
            upstream, connector=connector, auto_decompress=False, skip_auto_headers=("Accept",)
        ) as session:

            async def handle(request: web.BaseRequest) -> web.StreamResponse:
                headers = [
                    (k, v) for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP
                ]
                async with session.request(
                    request.method, request.raw_path, headers=headers,
                    data=request.content if request.body_exists else None,
                ) as up:  # fmt: skip
                    resp = web.StreamResponse(status=up.status, reason=up.reason)
                    for k, v in up.headers.items():
                        if k.lower() not in _HOP_BY_HOP:
                            resp.headers.add(k, v)
                    await resp.prepare(request)
                    async for chunk in up.content.iter_any():
                        await resp.write(chunk)
                    await resp.write_eof()
                    return resp

            server = web.Server(handle, access_log=None)
            loop = asyncio.get_running_loop()
            await loop.create_server(server, "127.0.0.1", port)
            await asyncio.Event().wait()

    uvloop.run(main())


def serve_fixed(port: int, source: str) -> None:
    """aiohttp's low-level server on uvloop answering every request with the bytes ``source``
    answered once: what the server half of the floor costs (the rest is aiohttp's client)."""
    import urllib.request

    import uvloop

    with urllib.request.urlopen(source) as r:
        body, content_type = r.read(), r.headers["Content-Type"]

    async def main() -> None:
        async def handle(request: web.BaseRequest) -> web.Response:
            return web.Response(body=body, headers={"Content-Type": content_type})

        server = web.Server(handle, access_log=None)
        await asyncio.get_running_loop().create_server(server, "127.0.0.1", port)
        await asyncio.Event().wait()

    uvloop.run(main())


async def server_alone(get_url: str, n: int) -> float:
    """CPU per GET of ``serve_fixed`` answering what ``get_url`` answers."""
    port = ports.free_port()
    argv = [PYTHON, __file__, "--serve-fixed", str(port), "--fixed-source", get_url]
    with process(argv) as server:
        url = f"http://127.0.0.1:{port}/"
        await wait_http(url)
        async with aiohttp.ClientSession() as session:
            await sequential(session, url, 50)
            c0 = cpu_seconds(server.pid)
            await sequential(session, url, n)
            await throughput(url, n, 8)
            return (cpu_seconds(server.pid) - c0) / (2 * n)


# --- the simulated apiserver as upstream ------------------------------------------------------

SIM_GET = "/api/v1/namespaces/default/pods/scale-0"
SIM_LIST = "/api/v1/namespaces/default/pods?labelSelector=app%3Dscale"
SIM_WATCH = "/api/v1/namespaces/default/configmaps?watch=1&fieldSelector=metadata.name%3Dbench"
BUILTIN_GET = "/api/v1/namespaces/default/pods/pod-0"
BUILTIN_LIST = "/api/v1/namespaces/default/pods"


async def sim_watch_delays(
    targets: dict[str, str], direct: str, events: int
) -> dict[str, list[float]]:
    """One watch per target on ConfigMap default/bench; the bench patches it ``events`` times."""
    sent: dict[int, int] = {}
    received: dict[str, dict[int, int]] = {name: {} for name in targets}
    async with aiohttp.ClientSession() as session:
        async with session.post(
            direct + "/api/v1/namespaces/default/configmaps",
            json={"metadata": {"name": "bench"}, "data": {"seq": "-1"}},
        ) as r:
            assert r.status in (201, 409), r.status
        ready = asyncio.Event()
        opened = 0

        async def watch(name: str, base: str) -> None:
            nonlocal opened
            async with session.get(base + SIM_WATCH) as r:
                assert r.status == 200, (name, r.status)
                opened += 1
                if opened == len(targets):
                    ready.set()
                async for line in r.content:
                    now = time.monotonic_ns()
                    event = orjson.loads(line)
                    seq = int(event["object"].get("data", {}).get("seq", "-1"))
                    if seq >= 0:
                        received[name][seq] = now
                    if seq == events - 1:
                        return

        async with asyncio.TaskGroup() as tg:
            for name, base in targets.items():
                tg.create_task(watch(name, base), name=f"bench-watch-{name}")
            await ready.wait()
            await asyncio.sleep(0.3)
            url = direct + "/api/v1/namespaces/default/configmaps/bench"
            headers = {"Content-Type": "application/merge-patch+json"}
            for i in range(events):
                body = orjson.dumps({"data": {"seq": str(i)}})
                sent[i] = time.monotonic_ns()
                async with session.patch(url, data=body, headers=headers) as r:
                    assert r.status == 200, r.status
                    await r.read()
                await asyncio.sleep(0.005)
    delays = {
        name: [(got[i] - sent[i]) / 1e6 for i in sorted(got) if i in sent]
        for name, got in received.items()
    }
    # Per event, how much later than the direct watch each proxied watch got it.
    reference = received["direct"]
    for name, got in received.items():
        if name != "direct":
            delays[f"{name}-vs-direct"] = [
                (got[i] - reference[i]) / 1e6 for i in got if i in reference
            ]
    return delays


# --- processes ---------------------------------------------------------------------------------


async def wait_http(url: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while True:
            try:
                async with s.get(url) as r:
                    if r.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not come up")
            await asyncio.sleep(0.1)


@contextlib.contextmanager
def process(args: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        from yurthub.testing import processes  # here: a served hub never loads it

        processes.terminate_popen(proc)


def ensure_nginx() -> str | None:
    path = shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None
    )
    if path:
        return path
    print("nginx missing: apt-get install -y nginx ...", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update"], env=env, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "nginx"], env=env, capture_output=True)
    return shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None
    )


NGINX_CONF = """
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  upstream api {{ server 127.0.0.1:{upstream}; keepalive 32; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://api;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 3600s;
    }}
  }}
}}
"""


def cpu_seconds(*pids: int) -> float:
    """User + system CPU of ``pids`` and their children (nginx's worker is its master's child)."""
    total = 0.0
    seen: set[int] = set()
    todo = list(pids)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            children = pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        todo.extend(int(c) for c in children)
    return total


def rss_mb(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# --- measurements ------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def sequential(
    session: aiohttp.ClientSession, url: str, n: int, headers: dict[str, str] | None = None
) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        async with session.get(url, headers=headers) as r:
            await r.read()
            assert r.status == 200, r.status
        out.append(time.perf_counter() - t0)
    return out


async def throughput(
    url: str, n: int, concurrency: int, headers: dict[str, str] | None = None
) -> float:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        remaining = n

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                async with session.get(url) as r:
                    await r.read()

        t0 = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            for i in range(concurrency):
                tg.create_task(worker(), name=f"bench-worker-{i}")
        return n / (time.perf_counter() - t0)


async def watch_delays(session: aiohttp.ClientSession, url: str, events: int) -> list[float]:
    delays = []
    async with session.get(f"{url}?watch=1&events={events}&gap=0.005") as r:
        async for line in r.content:
            now = time.monotonic_ns()
            if line.strip():
                delays.append((now - orjson.loads(line)["object"]["sent"]) / 1e6)
    return delays


ROUNDS = 4
"""Measurement rounds; each runs every target once, in a rotating order."""
KUBELET = {"User-Agent": "kubelet/v1.37.2 (linux/amd64) kubernetes/bench"}
"""A cache agent: its GETs are teed into the cache and filtered (the hub's whole path)."""


def hub_argv(upstream: str, proxy_port: int, serve_port: int, cache: str) -> list[str]:
    return [
        EDGEHUB, "--log-level", "warning", "hub", "--server-addr", upstream,
        "--node-name", NODE, "--proxy-port", str(proxy_port), "--serve-port", str(serve_port),
        "--disk-cache-path", cache,
    ]  # fmt: skip


@contextlib.contextmanager
def hub_process(argv: list[str], loop: str, source: str = "") -> Iterator[subprocess.Popen[bytes]]:
    """``source``: run the hub of another source tree (``--compare-src``) instead."""
    env = dict(os.environ, EDGEHUB_EVENT_LOOP=loop)
    if source:
        env["PYTHONPATH"] = os.pathsep.join((source, os.path.join(source, "cmd")))
        argv = [PYTHON, "-m", "edgehub", *argv[1:]]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        yield proc
    finally:
        from yurthub.testing import processes  # here: a served hub never loads it

        processes.terminate_popen(proc)


async def wait_ready(serve_port: int) -> None:
    await wait_http(f"http://127.0.0.1:{serve_port}/v1/readyz")
    for _ in range(100):
        async with (
            aiohttp.ClientSession() as s,
            s.get(f"http://127.0.0.1:{serve_port}/v1/readyz") as r,
        ):
            if r.status == 200:
                return
        await asyncio.sleep(0.1)


async def run(quick: bool, upstream: str, compare: str = "") -> None:
    n_get, n_list, n_events = (300, 20, 100) if quick else (2000, 100, 500)
    up_port, ngx_port = ports.free_port(), ports.free_port()
    direct = f"http://127.0.0.1:{up_port}"
    targets = {"direct": direct}
    proxies: dict[str, int] = {}
    """Proxy target -> the pid whose CPU (with its children) is its cost."""
    nginx = ensure_nginx()
    use_sim = upstream == "sim"
    get_path, list_path = (SIM_GET, SIM_LIST) if use_sim else (BUILTIN_GET, BUILTIN_LIST)
    with contextlib.ExitStack() as stack:
        workdir = stack.enter_context(tempfile.TemporaryDirectory())
        if use_sim:
            upstream_argv = [
                EDGEHUB, "--log-level", "warning", "sim-apiserver", "--port", "0",
                "--seed", "scale:1000", "--insecure-port", str(up_port), "--workdir", workdir,
            ]  # fmt: skip
        else:
            upstream_argv = [PYTHON, __file__, "--serve-upstream", str(up_port)]
        stack.enter_context(process(upstream_argv))
        await wait_http(direct + get_path, timeout=60)
        # The hub as shipped (the standard library's loop) and on uvloop, side by side.
        hubs = [("hub", "asyncio", ""), ("hub-uvloop", "uvloop", "")]
        if compare:
            hubs.append(("hub-before", "asyncio", compare))
        for name, loop, source in hubs:
            hub_port, srv_port = ports.free_port(), ports.free_port()
            cache = os.path.join(workdir, f"cache-{name}")
            hub = stack.enter_context(
                hub_process(hub_argv(direct, hub_port, srv_port, cache), loop, source)
            )
            await wait_ready(srv_port)
            targets[name] = f"http://127.0.0.1:{hub_port}"
            proxies[name] = hub.pid
        floor_port = ports.free_port()
        floor_argv = [PYTHON, __file__, "--serve-floor", str(floor_port)]
        floor_proc = stack.enter_context(process([*floor_argv, "--floor-upstream", direct]))
        targets["floor"] = f"http://127.0.0.1:{floor_port}"
        proxies["floor"] = floor_proc.pid
        await wait_http(targets["floor"] + get_path)
        if nginx:
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            conf = pathlib.Path(tmp) / "nginx.conf"
            conf.write_text(NGINX_CONF.format(tmp=tmp, upstream=up_port, port=ngx_port))
            ngx = stack.enter_context(process([nginx, "-c", str(conf), "-p", tmp]))
            targets["nginx"] = f"http://127.0.0.1:{ngx_port}"
            proxies["nginx"] = ngx.pid
            await wait_http(targets["nginx"] + get_path)
        await asyncio.sleep(1.0)
        hub_names = [name for name in proxies if name.startswith("hub")]
        idle_rss = {name: rss_mb(proxies[name]) for name in (*hub_names, "floor")}

        results: dict[str, dict[str, float]] = {name: {} for name in targets}
        cpu: dict[str, dict[str, float]] = {name: {} for name in proxies}
        relative: dict[str, tuple[float, float]] = {}
        async with aiohttp.ClientSession() as session:
            for base in targets.values():
                await sequential(session, base + get_path, 50)  # warm-up
                await sequential(session, base + get_path, 20, KUBELET)
            # Rounds, every target in each (the order rotating): on a shared machine a burst of
            # load then hits all targets alike instead of one of them.
            acc: dict[str, dict[str, list[float]]] = {name: {} for name in targets}
            names = list(targets)
            for turn in range(ROUNDS):
                for name in names[turn % len(names) :] + names[: turn % len(names)]:
                    base, pid, row = targets[name], proxies.get(name), acc[name]
                    get_url, list_url = base + get_path, base + list_path
                    c0 = cpu_seconds(pid) if pid else 0.0
                    row.setdefault("lat", []).extend(
                        await sequential(session, get_url, n_get // ROUNDS)
                    )
                    row.setdefault("rps", []).append(await throughput(get_url, n_get // ROUNDS, 8))
                    c1 = cpu_seconds(pid) if pid else 0.0
                    # The same GETs as kubelet: a cache agent (teed, filtered).
                    await sequential(session, get_url, n_get // ROUNDS, KUBELET)
                    await throughput(get_url, n_get // ROUNDS, 8, KUBELET)
                    c2 = cpu_seconds(pid) if pid else 0.0
                    row.setdefault("list_lat", []).extend(
                        await sequential(session, list_url, max(1, n_list // ROUNDS))
                    )
                    row.setdefault("list_rps", []).append(
                        await throughput(list_url, max(1, n_list // ROUNDS), 4)
                    )
                    c3 = cpu_seconds(pid) if pid else 0.0
                    row.setdefault("cpu_get", []).append(c1 - c0)
                    row.setdefault("cpu_kubelet", []).append(c2 - c1)
                    row.setdefault("cpu_list", []).append(c3 - c2)
            for name, base in targets.items():
                row = acc[name]
                lat, list_lat = row["lat"], row["list_lat"]
                if name in proxies:
                    per = 2 * (n_get // ROUNDS) * ROUNDS
                    cpu[name]["get"] = sum(row["cpu_get"]) / per
                    cpu[name]["get_kubelet"] = sum(row["cpu_kubelet"]) / per
                    cpu[name]["list"] = sum(row["cpu_list"]) / (
                        2 * max(1, n_list // ROUNDS) * ROUNDS
                    )
                delays = [] if use_sim else await watch_delays(session, base + list_path, n_events)
                results[name] = {
                    "get_p50": statistics.median(lat) * 1e3,
                    "get_p99": pct(lat, 0.99) * 1e3,
                    "get_rps": statistics.median(row["rps"]),
                    "list_p50": statistics.median(list_lat) * 1e3,
                    "list_p99": pct(list_lat, 0.99) * 1e3,
                    "list_rps": statistics.median(row["list_rps"]),
                    "watch_p50": statistics.median(delays) if delays else 0.0,
                    "watch_p99": pct(delays, 0.99) if delays else 0.0,
                }
            if use_sim:
                all_delays = await sim_watch_delays(targets, direct, n_events)
                for name, delays in all_delays.items():
                    if name.endswith("-vs-direct"):
                        relative[name] = (statistics.median(delays), pct(delays, 0.99))
                        continue
                    results[name]["watch_p50"] = statistics.median(delays)
                    results[name]["watch_p99"] = pct(delays, 0.99)
        busy_rss = {name: rss_mb(proxies[name]) for name in (*hub_names, "floor")}
        fixed_cpu = await server_alone(direct + get_path, n_get)

    if use_sim:
        print("\nupstream: edgehub sim-apiserver --seed scale:1000 (plain-HTTP port)")
    else:
        print(f"\nupstream: built-in stand-in (1 pod {len(orjson.dumps(_pod(0)))} B, list of 1000)")
    print(
        f"requests in {ROUNDS} interleaved rounds: GET x{n_get} (+{n_get} at concurrency 8; "
        f"the same again as kubelet), LIST x{n_list}, ",
        end="",
    )
    print(f"watch events {n_events}; load average {os.getloadavg()[0]:.2f}\n")
    columns = ("GET p50", "GET p99", "GET rps", "LIST p50", "LIST p99", "LIST rps")
    print(f"{'target':11} " + " ".join(f"{c:>9}" for c in columns) + "  watch p50  watch p99")
    for name, row in results.items():
        print(
            f"{name:11} {row['get_p50']:8.3f}ms {row['get_p99']:8.3f}ms {row['get_rps']:9.0f} "
            f"{row['list_p50']:8.2f}ms {row['list_p99']:8.2f}ms {row['list_rps']:9.1f} "
            f"{row['watch_p50']:9.3f}ms {row['watch_p99']:9.3f}ms"
        )
    d = results["direct"]
    for name in proxies:
        row = results[name]
        print(f"\nadded by {name} ({name} - direct):")
        print(
            f"  GET  p50 {row['get_p50'] - d['get_p50']:+.3f} ms  p99 "
            f"{row['get_p99'] - d['get_p99']:+.3f} ms  throughput ratio "
            f"{row['get_rps'] / d['get_rps']:.2f}"
        )
        print(
            f"  LIST p50 {row['list_p50'] - d['list_p50']:+.3f} ms  p99 "
            f"{row['list_p99'] - d['list_p99']:+.3f} ms  throughput ratio "
            f"{row['list_rps'] / d['list_rps']:.2f}"
        )
        print(
            f"  watch delay p50 {row['watch_p50'] - d['watch_p50']:+.3f} ms  p99 "
            f"{row['watch_p99'] - d['watch_p99']:+.3f} ms"
        )
    if "nginx" not in proxies:
        print("nginx: not available (apt-get install -y nginx)")
    for name, (p50, p99) in relative.items():
        print(f"{name}, per event (same events, watches open side by side): ", end="")
        print(f"p50 {p50:+.3f} ms  p99 {p99:+.3f} ms")
    print("\nCPU per proxied request (process and children):")
    for name, used in cpu.items():
        kubelet = f", as kubelet (cached + filtered) {used['get_kubelet'] * 1e6:.0f} us"
        print(
            f"  {name:11} GET {used['get'] * 1e6:4.0f} us{kubelet}, "
            f"LIST(1000 pods) {used['list'] * 1e3:.2f} ms"
        )
    if "nginx" in cpu:
        ngx = cpu["nginx"]
        print(f"  floor / nginx: GET {cpu['floor']['get'] / ngx['get']:.1f}x (the stack's least)")
        for name in hub_names:
            print(
                f"  {name} / nginx: GET {cpu[name]['get'] / ngx['get']:.1f}x, "
                f"as kubelet {cpu[name]['get_kubelet'] / ngx['get_kubelet']:.1f}x, "
                f"LIST {cpu[name]['list'] / ngx['list']:.1f}x"
            )
    floor_get = cpu["floor"]["get"]
    print(
        f"  aiohttp's server alone (the same answer, fixed) {fixed_cpu * 1e6:.0f} us a GET: "
        f"the floor is {fixed_cpu / floor_get:.0%} server, {1 - fixed_cpu / floor_get:.0%} client"
    )
    for name in hub_names:
        print(
            f"  {name} / floor: GET {cpu[name]['get'] / cpu['floor']['get']:.2f}x, "
            f"as kubelet {cpu[name]['get_kubelet'] / cpu['floor']['get_kubelet']:.2f}x"
        )
    print(
        f"  hub-uvloop / hub: GET {cpu['hub-uvloop']['get'] / cpu['hub']['get']:.2f}x,"
        f" as kubelet {cpu['hub-uvloop']['get_kubelet'] / cpu['hub']['get_kubelet']:.2f}x"
    )
    for name in (*hub_names, "floor"):
        ratio = results[name]["get_rps"] / d["get_rps"]
        print(f"GET throughput through {name} / direct: {ratio:.2f}x")
    if compare:
        # hub-before runs on the standard loop: compared with this tree's on the same loop.
        now, before = cpu["hub"], cpu["hub-before"]
        print(
            "this tree / --compare-src (both on the standard loop): "
            f"CPU per GET {now['get'] / before['get']:.2f}x, "
            f"as kubelet {now['get_kubelet'] / before['get_kubelet']:.2f}x"
        )
    for name in (*hub_names, "floor"):
        print(f"{name} RSS: idle {idle_rss[name]:.1f} MB, after the run {busy_rss[name]:.1f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer requests")
    parser.add_argument("--upstream", choices=("sim", "builtin"), default="sim")
    parser.add_argument(
        "--compare-src",
        default="",
        help="another source tree (e.g. `git archive main` unpacked): its hub runs beside, "
        "as hub-before, on the standard loop",
    )
    parser.add_argument("--serve-upstream", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--serve-floor", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--floor-upstream", default="", help=argparse.SUPPRESS)
    parser.add_argument("--serve-fixed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--fixed-source", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fixed:
        serve_fixed(args.serve_fixed, args.fixed_source)
        return
    if args.serve_floor:
        serve_floor(args.serve_floor, args.floor_upstream)
        return
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return
    asyncio.run(run(args.quick, args.upstream, args.compare_src))


if __name__ == "__main__":
    main()
