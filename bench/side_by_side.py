"""Benchmark: edgehub and OpenYurt's YurtHub side by side, in front of one real apiserver.

    .venv/bin/python bench/side_by_side.py [--quick] [--no-yurthub]

Needs the test bed (``make cluster-bins``) and YurtHub (``make yurthub-bin``: built from the
module pinned in ``bench/yurthub/go.mod``); ``make bench`` builds both first. All on loopback.

Set-up: the real control plane (``yurthub.testing.realcluster``: etcd, kube-apiserver 1.37,
controller-manager, scheduler); 10,000 pods bound to node ``bench-node`` (1,000 in namespace
``bench-a``, 9,000 in ``bench-b``; a Node object so nothing reaps them, tolerations so nothing
evicts them). Each hub gets its own edge link (``edgehub partition``, which also counts the
bytes it relays) to the same apiserver, and the same identity: a client certificate for
``system:node:bench-node`` in ``system:nodes`` and ``openyurt:yurthub`` (YurtHub's certificate
files are laid out in its ``--root-dir`` as its own bootstrap would leave them, so it makes no
CSR). Both hubs run with their defaults (heartbeat 10 s, filters on); one more link without a
hub ("link") is the reference for what a hub adds.

The load is kubelet's: ``User-Agent: kubelet/...``, ``Accept:
application/vnd.kubernetes.protobuf,application/json``, gzip accepted. Every measurement runs
its targets back to back (the machine is shared; the order rotates), and prints absolute
numbers:

- GET of one pod: latency p50/p99 (sequential), throughput at concurrency 8, and each hub's
  CPU per GET (its process, user + system);
- LIST of 1,000 pods (one namespace) and 10,000 (all namespaces), online, then offline (both
  links blackholed) from each hub's cache;
- watch-event delay: a watch per target on one ConfigMap, patched 100 times, each event's
  arrival against the direct watch's;
- RSS idle and with the 10,000 pods cached;
- read failover: the link blackholed, to the first cached answer to a GET;
- restart to the first cached answer (link still cut);
- bytes on the link for the pod GETs and the online LISTs (protobuf vs JSON is visible here).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pathlib
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from yurthub.testing import ports

HERE = pathlib.Path(__file__).resolve().parent
EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
NODE = "bench-node"
USER = f"system:node:{NODE}"
GROUPS = ("system:nodes", "openyurt:yurthub")
KUBELET = {
    "User-Agent": "kubelet/v1.37.2 (linux/amd64) kubernetes/bench",
    "Accept": "application/vnd.kubernetes.protobuf,application/json",
}
JSON_KUBELET = {**KUBELET, "Accept": "application/json"}
POD_A = "/api/v1/namespaces/bench-a/pods/pod-a-0"
LIST_1K = "/api/v1/namespaces/bench-a/pods"
LIST_10K = "/api/v1/pods"
WATCH = "/api/v1/namespaces/bench-a/configmaps?watch=1&fieldSelector=metadata.name%3Dbench-watch"

BENCH_RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "edgehub-bench:read-all"}
rules:
  - apiGroups: ["*"]
    resources: ["*"]
    verbs: ["get", "list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "edgehub-bench:read-all"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "edgehub-bench:read-all"}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "openyurt:yurthub"}
"""
"""YurtHub's own ClusterRole lets its group read what it proxies; the bench lists every pod
as the node, which the Node authorizer alone refuses (it wants spec.nodeName)."""


# --- processes -----------------------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def idle_cpu(pid: int, quiet: float = 0.01, within: float = 180.0) -> float:
    """The process's CPU seconds once it stopped working (a cache writer done with its
    backlog): less than ``quiet`` s of CPU in 0.4 s; gives up after ``within`` s."""
    last = cpu_seconds(pid)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        await asyncio.sleep(0.4)
        now = cpu_seconds(pid)
        if now - last < quiet:
            return now
        last = now
    return last


class Proc:
    """A child process with its output in a log file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, name: str, argv: list[str], log: pathlib.Path) -> None:
        self.name = name
        self.argv = argv
        self.log = log
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(argv_safe(self.argv), stdout=out, stderr=out)
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def stop(self) -> None:
        proc, self.popen = self.popen, None
        if proc is None or proc.poll() is not None:
            return
        from yurthub.testing import processes  # here: a served hub never loads it

        processes.terminate_popen(proc, 15)

    def tail(self) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])
        except OSError:
            return ""


def argv_safe(argv: list[str]) -> list[str]:
    return [str(a) for a in argv]


class Link:
    """``edgehub partition`` between one client and the apiserver."""

    def __init__(self, name: str, upstream_port: int, logs: pathlib.Path) -> None:
        self.name = name
        self.port = ports.free_port()
        self.control_port = ports.free_port()
        self.proc = Proc(
            f"link-{name}",
            [
                EDGEHUB, "--log-level", "warning", "partition",
                "--upstream", f"127.0.0.1:{upstream_port}",
                "--listen", f"127.0.0.1:{self.port}",
                "--control", f"127.0.0.1:{self.control_port}",
            ],
            logs / f"link-{name}.log",
        )  # fmt: skip

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def set_mode(self, session: aiohttp.ClientSession, mode: str) -> None:
        url = f"http://127.0.0.1:{self.control_port}/mode"
        async with session.put(url, params={"mode": mode}) as r:
            assert r.status == 200, await r.text()

    async def relayed(self, session: aiohttp.ClientSession) -> int:
        async with session.get(f"http://127.0.0.1:{self.control_port}/mode") as r:
            state = await r.json()
        return int(state["relayed"]["from_upstream"]) + int(state["relayed"]["to_upstream"])


# --- the hubs ----------------------------------------------------------------------------------


class Hub:
    def __init__(self, name: str, link: Link, argv: list[str], serve_port: int, proxy_port: int):
        self.name = name
        self.link = link
        self.serve_port = serve_port
        self.proxy_port = proxy_port
        self.proc = Proc(name, argv, link.proc.log.parent / f"{name}.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.proxy_port}"

    async def wait_ready(self, session: aiohttp.ClientSession, within: float = 120) -> None:
        url = f"http://127.0.0.1:{self.serve_port}/v1/readyz"
        deadline = time.monotonic() + within
        while True:
            try:
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            if self.proc.popen is None or self.proc.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.proc.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not ready in {within} s:\n{self.proc.tail()}")
            await asyncio.sleep(0.2)


def yurthub_root(cluster: Any, root: pathlib.Path, server: str) -> pathlib.Path:
    """YurtHub's --root-dir as its token bootstrap leaves it (``yurthub.testing.yurthubs``)."""
    from yurthub.testing import yurthubs

    return yurthubs.lay_out_root(cluster, root, server, NODE, GROUPS)


def yurthub_argv(binary: str, root: pathlib.Path, link: Link, serve: int, proxy: int) -> list[str]:
    from yurthub.testing import yurthubs

    listen = (serve, proxy, ports.free_port(), ports.free_port())
    return yurthubs.argv(binary, root, link.url, NODE, "bench-pool", listen)


def edgehub_argv(kubeconfig: pathlib.Path, cache: pathlib.Path, link: Link, serve: int, proxy: int):
    return [
        EDGEHUB, "--log-level", "warning", "hub",
        "--server-addr", link.url, "--node-name", NODE, "--kubeconfig", str(kubeconfig),
        "--disk-cache-path", str(cache), "--serve-port", str(serve), "--proxy-port", str(proxy),
        "--proxy-secure-port", str(ports.free_port()),
    ]  # fmt: skip


# --- the cluster's content -----------------------------------------------------------------------


def pod(name: str, namespace: str, i: int) -> dict[str, Any]:
    """A pod as a controller writes it: labels, an owner, two containers with env and probes."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": f"app-{i % 50}", "tier": "backend", "pod-template-hash": "5d4f8c"},
            "annotations": {"bench.edgehub/index": str(i)},
        },
        "spec": {
            "nodeName": NODE,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": name_,
                    "image": f"registry.example/{name_}:1.{i % 7}",
                    "args": ["--port=8080", "--log-level=info"],
                    "env": [{"name": f"VAR_{j}", "value": f"value-{j}-{i}"} for j in range(8)],
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
                }
                for name_ in ("app", "sidecar")
            ],
        },
    }


async def seed(cluster: Any, session: aiohttp.ClientSession, counts: dict[str, int]) -> None:
    base = cluster.url
    ctx = cluster.admin_ssl_context()

    async def post(path: str, body: dict[str, Any]) -> None:
        for attempt in range(20):
            async with session.post(base + path, json=body, ssl=ctx) as r:
                if r.status in (201, 409):
                    return
                if r.status not in (429, 500, 503, 504) or attempt == 19:
                    raise RuntimeError(f"POST {path}: {r.status} {await r.text()}")
            await asyncio.sleep(0.2 * (attempt + 1))

    await post("/api/v1/nodes", {"metadata": {"name": NODE}})
    for namespace in counts:
        await post("/api/v1/namespaces", {"metadata": {"name": namespace}})
    # Namespaces are usable once their ServiceAccount controller caught up; pods need none.
    todo = [(ns, i) for ns, n in counts.items() for i in range(n)]

    async def worker() -> None:
        while todo:
            namespace, i = todo.pop()
            name = f"pod-{namespace.removeprefix('bench-')}-{i}"
            await post(f"/api/v1/namespaces/{namespace}/pods", pod(name, namespace, i))

    async with asyncio.TaskGroup() as tg:
        for n in range(24):
            tg.create_task(worker(), name=f"seed-{n}")
    await post(
        "/api/v1/namespaces/bench-a/configmaps",
        {"metadata": {"name": "bench-watch"}, "data": {"seq": "-1"}},
    )


# --- measurements --------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def count_items(body: bytes, content_type: str) -> int:
    """Items of a list answer, protobuf or JSON."""
    if content_type.startswith("application/vnd.kubernetes.protobuf"):
        from yurthub.filters import protobodies

        _, raw, _ = protobodies._envelope(body)
        return sum(1 for number, *_ in protobodies._fields(raw) if number == 2)
    items = orjson.loads(body).get("items") or []
    return len(items)


class Target:
    """Where a client sends its requests, and how."""

    def __init__(self, name: str, base: str, ssl_context: ssl.SSLContext | bool) -> None:
        self.name = name
        self.base = base
        self.ssl = ssl_context


async def get_once(
    session: aiohttp.ClientSession, target: Target, path: str, headers: dict[str, str]
) -> tuple[float, bytes, str]:
    started = time.perf_counter()
    async with session.get(target.base + path, headers=headers, ssl=target.ssl) as r:
        body = await r.read()
        if r.status != 200:
            raise RuntimeError(f"{target.name} GET {path}: {r.status} {body[:300]!r}")
        content_type = r.headers.get("Content-Type", "")
    return time.perf_counter() - started, body, content_type


async def sequential(
    session: aiohttp.ClientSession, target: Target, path: str, n: int
) -> list[float]:
    return [(await get_once(session, target, path, KUBELET))[0] for _ in range(n)]


async def throughput(target: Target, path: str, n: int, concurrency: int) -> float:
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=target.ssl)
    async with aiohttp.ClientSession(connector=connector, headers=KUBELET) as session:
        remaining = n

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                async with session.get(target.base + path) as r:
                    await r.read()
                    assert r.status == 200, r.status

        started = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            for i in range(concurrency):
                tg.create_task(worker(), name=f"bench-worker-{i}")
        return n / (time.perf_counter() - started)


class Refused(Exception):
    """A target answered a list with an error (YurtHub offline: what it cannot answer)."""


async def lists(
    session: aiohttp.ClientSession, target: Target, path: str, runs: int, want: int
) -> list[float]:
    times = []
    for _ in range(runs):
        try:
            elapsed, body, content_type = await get_once(session, target, path, KUBELET)
        except RuntimeError as e:
            raise Refused(str(e)[:200]) from e
        got = count_items(body, content_type)
        if got != want:
            raise RuntimeError(f"{target.name} LIST {path}: {got} items, not {want}")
        times.append(elapsed)
    return times


TRY_TIMEOUT = 5.0


async def first_answer(
    session: aiohttp.ClientSession, target: Target, path: str, within: float = 120
) -> float:
    """Seconds until GET ``path`` answers 200. Each try waits up to ``TRY_TIMEOUT`` s, as a
    client with a real timeout does (kubelet's are 10 s and more): a try given up sooner than a
    hub's own deadline for response headers (edgehub: 1 s) ends before the hub can take its
    silence as a sign, and the measure becomes the heartbeat's phase."""
    started = time.perf_counter()
    deadline = started + within
    while time.perf_counter() < deadline:
        try:
            async with session.get(
                target.base + path,
                headers=KUBELET,
                timeout=aiohttp.ClientTimeout(total=TRY_TIMEOUT),
            ) as r:
                await r.read()
                if r.status == 200:
                    return time.perf_counter() - started
        except (aiohttp.ClientError, TimeoutError):
            pass
        await asyncio.sleep(0.01)
    return float("nan")


async def watch_delays(
    session: aiohttp.ClientSession, cluster: Any, targets: list[Target], events: int
) -> dict[str, list[float]]:
    """Per target, each event's arrival minus the direct watch's (ms)."""
    arrived: dict[str, dict[int, int]] = {t.name: {} for t in targets}
    opened = 0
    ready = asyncio.Event()

    async def watch(target: Target) -> None:
        nonlocal opened
        async with session.get(
            target.base + WATCH,
            headers=JSON_KUBELET,
            ssl=target.ssl,
            timeout=aiohttp.ClientTimeout(total=None),
        ) as r:
            assert r.status == 200, (target.name, r.status)
            opened += 1
            if opened == len(targets):
                ready.set()
            async for line in r.content:
                now = time.monotonic_ns()
                if not line.strip():
                    continue
                seq = int(orjson.loads(line)["object"].get("data", {}).get("seq", "-1"))
                if seq >= 0:
                    arrived[target.name][seq] = now
                if seq == events - 1:
                    return

    async with asyncio.TaskGroup() as tg:
        for target in targets:
            tg.create_task(watch(target), name=f"bench-watch-{target.name}")
        async with asyncio.timeout(30):
            await ready.wait()
        await asyncio.sleep(0.5)
        url = f"{cluster.url}/api/v1/namespaces/bench-a/configmaps/bench-watch"
        patch = {"Content-Type": "application/merge-patch+json"}
        ctx = cluster.admin_ssl_context()
        for i in range(events):
            body = orjson.dumps({"data": {"seq": str(i)}})
            async with session.patch(url, data=body, headers=patch, ssl=ctx) as r:
                assert r.status == 200, r.status
                await r.read()
            await asyncio.sleep(0.02)
    direct = arrived["direct"]
    return {
        name: [(got[i] - direct[i]) / 1e6 for i in got if i in direct]
        for name, got in arrived.items()
        if name != "direct"
    }


def rotated(items: list[Target], turn: int) -> list[Target]:
    turn %= len(items)
    return items[turn:] + items[:turn]


# --- the run -----------------------------------------------------------------------------------


async def run(args: argparse.Namespace, workdir: pathlib.Path) -> None:
    from yurthub.testing import k8sbinaries, realcluster

    sys.path.insert(0, str(HERE / "yurthub"))
    import build as yurthub_build  # bench/yurthub/build.py

    yurthub_bin = yurthub_build.binary()
    with_yurthub = not args.no_yurthub
    if with_yurthub and not yurthub_bin.is_file():
        raise SystemExit(f"{yurthub_bin} is missing: run `make yurthub-bin` first")
    n_get = 200 if args.quick else 1000
    runs_1k, runs_10k = (3, 2) if args.quick else (7, 5)
    logs = workdir / "logs"
    logs.mkdir()
    cluster = realcluster.RealCluster(workdir / "k8s", k8sbinaries.locate(), die_with_parent=True)
    print("starting the control plane ...", flush=True)
    await asyncio.to_thread(cluster.up)
    stack = contextlib.ExitStack()
    stack.callback(cluster.down)
    try:
        await bench(args, workdir, logs, cluster, stack, yurthub_bin if with_yurthub else None,
                    n_get, runs_1k, runs_10k)  # fmt: skip
    finally:
        await asyncio.to_thread(stack.close)


async def bench(
    args: argparse.Namespace,
    workdir: pathlib.Path,
    logs: pathlib.Path,
    cluster: Any,
    stack: contextlib.ExitStack,
    yurthub_bin: pathlib.Path | None,
    n_get: int,
    runs_1k: int,
    runs_10k: int,
) -> None:
    manifests = HERE.parent / "manifests"
    cluster.kubectl("apply", "-f", str(manifests / "hub" / "rbac.yaml"))
    # OpenYurt's pool CRDs: YurtHub's filters wait for NodePools to list (readyz says so).
    for crd in ("nodepools.apps.openyurt.io.yaml", "nodebuckets.apps.openyurt.io.yaml"):
        cluster.kubectl("apply", "-f", str(manifests / "crds" / crd))
    cluster.kubectl(
        "wait", "--for", "condition=established", "--timeout", "60s",
        "crd/nodepools.apps.openyurt.io", "crd/nodebuckets.apps.openyurt.io",
    )  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=BENCH_RBAC)
    apiserver_port = int(cluster.url.rsplit(":", 1)[1])
    counts = {"bench-a": 1000, "bench-b": 9000}
    total = sum(counts.values())
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        started = time.perf_counter()
        print(f"creating {total} pods ...", flush=True)
        await seed(cluster, session, counts)
        print(f"  done in {time.perf_counter() - started:.0f} s", flush=True)

        # Direct: the node's identity over TLS, as kubelet would hold it.
        node_kc = cluster.write_kubeconfig(workdir / "edgehub.kubeconfig", USER, GROUPS)
        cert, key = cluster.issue_identity(USER, GROUPS)
        (workdir / "client.pem").write_bytes(cert + key)
        direct_ctx = ssl.create_default_context(cafile=str(cluster.ca_path))
        direct_ctx.load_cert_chain(str(workdir / "client.pem"))

        links = {name: Link(name, apiserver_port, logs) for name in ("link", "edgehub", "yurthub")}
        for link in links.values():
            link.proc.start()
            stack.callback(link.proc.stop)
        await asyncio.sleep(1.5)
        hubs: list[Hub] = []
        serve, proxy = ports.free_port(), ports.free_port()
        hubs.append(
            Hub(
                "edgehub",
                links["edgehub"],
                edgehub_argv(node_kc, workdir / "edgehub-cache", links["edgehub"], serve, proxy),
                serve,
                proxy,
            )
        )
        if yurthub_bin is not None:
            root = yurthub_root(cluster, workdir / "yurthub", links["yurthub"].url)
            serve, proxy = ports.free_port(), ports.free_port()
            hubs.append(
                Hub(
                    "yurthub",
                    links["yurthub"],
                    yurthub_argv(str(yurthub_bin), root, links["yurthub"], serve, proxy),
                    serve,
                    proxy,
                )
            )
        for hub in hubs:
            hub.proc.start()
            stack.callback(hub.proc.stop)
        for hub in hubs:
            await hub.wait_ready(session)
        await asyncio.sleep(5)  # settle: first syncs, filters, heartbeats
        idle_rss = {hub.name: rss_mb(hub.proc.pid) for hub in hubs}

        direct = Target("direct", cluster.url, direct_ctx)
        via_link = Target("link", links["link"].url.replace("https", "https"), direct_ctx)
        targets = [direct, via_link] + [Target(h.name, h.url, False) for h in hubs]
        by_name = {t.name: t for t in targets}
        pids = {hub.name: hub.proc.pid for hub in hubs}
        res: dict[str, dict[str, Any]] = {t.name: {} for t in targets}

        print("GETs ...", flush=True)
        for target in targets:
            await sequential(session, target, POD_A, 50)  # warm-up, connections
        for turn in range(2):
            for target in rotated(targets, turn):
                pid = pids.get(target.name)
                c0 = cpu_seconds(pid) if pid else 0.0
                lat = await sequential(session, target, POD_A, n_get // 2)
                rps = await throughput(target, POD_A, n_get // 2, 8)
                row = res[target.name]
                row.setdefault("get", []).extend(lat)
                row.setdefault("rps", []).append(rps)
                if pid:
                    row["cpu"] = row.get("cpu", 0.0) + cpu_seconds(pid) - c0
        _, body, content_type = await get_once(session, direct, POD_A, KUBELET)
        for target in targets:
            _, body, content_type = await get_once(session, target, POD_A, KUBELET)
            res[target.name]["get_type"] = content_type.split(";")[0]
            res[target.name]["get_bytes"] = len(body)

        print("LISTs online ...", flush=True)
        for target in targets:  # the hubs cache the lists here
            await lists(session, target, LIST_10K, 1, total)
        before = {name: await link.relayed(session) for name, link in links.items()}
        for turn in range(runs_10k):
            for target in rotated(targets, turn):
                res[target.name].setdefault("list10k", []).extend(
                    await lists(session, target, LIST_10K, 1, total)
                )
        after = {name: await link.relayed(session) for name, link in links.items()}
        for name in links:
            if name in res:
                res[name]["list10k_link_bytes"] = (after[name] - before[name]) / runs_10k
        for turn in range(runs_1k):
            for target in rotated(targets, turn):
                res[target.name].setdefault("list1k", []).extend(
                    await lists(session, target, LIST_1K, 1, counts["bench-a"])
                )

        print("watch ...", flush=True)
        delays = await watch_delays(session, cluster, targets, 50 if args.quick else 100)
        for name, values in delays.items():
            res[name]["watch"] = values

        # The caches finish writing (edgehub converts its protobuf lists in the background).
        for hub in hubs:
            await idle_cpu(hub.proc.pid)
        cached_rss = {hub.name: rss_mb(hub.proc.pid) for hub in hubs}

        print("offline ...", flush=True)
        for hub in hubs:
            await hub.link.set_mode(session, "blackhole")
        failovers = await asyncio.gather(
            *(first_answer(session, by_name[hub.name], POD_A) for hub in hubs)
        )
        for hub, seconds in zip(hubs, failovers, strict=True):
            res[hub.name]["failover"] = seconds
        hub_targets = [by_name[h.name] for h in hubs]
        for key, path, runs, want in (
            ("off10k", LIST_10K, runs_10k, total),
            ("off1k", LIST_1K, runs_1k, counts["bench-a"]),
        ):
            for turn in range(runs):
                for target in rotated(hub_targets, turn):
                    row = res[target.name]
                    if f"{key}_refused" in row:
                        continue
                    try:
                        row.setdefault(key, []).extend(await lists(session, target, path, 1, want))
                    except Refused as e:
                        row[f"{key}_refused"] = str(e)
                        print(f"  {target.name} offline LIST {path}: {e}", flush=True)
        offline_rss = {hub.name: rss_mb(hub.proc.pid) for hub in hubs}

        print("restarts ...", flush=True)
        for hub in hubs:
            hub.proc.stop()
            hub.proc.start()
            res[hub.name]["restart"] = await first_answer(session, by_name[hub.name], POD_A)

    report(res, hubs, idle_rss, cached_rss, offline_rss, n_get, runs_1k, runs_10k, total)


def report(
    res: dict[str, dict[str, Any]],
    hubs: list[Hub],
    idle_rss: dict[str, float],
    cached_rss: dict[str, float],
    offline_rss: dict[str, float],
    n_get: int,
    runs_1k: int,
    runs_10k: int,
    total: int,
) -> None:
    names = ["direct", "link"] + [h.name for h in hubs]
    link = res["link"]

    def ms(v: float) -> str:
        return f"{v * 1e3:.2f} ms" if v == v else "-"

    def offline(row: dict[str, Any], key: str) -> str:
        refused = row.get(f"{key}_refused", "")
        if refused:
            code = refused.split(": ", 2)[1].split()[0] if ": " in refused else "?"
            return f"refused ({code})"
        return ms(pct(row[key], 0.5))

    def cell(name: str, fn: Callable[[dict[str, Any]], str]) -> str:
        try:
            return fn(res[name])
        except (KeyError, ZeroDivisionError, statistics.StatisticsError):
            return "-"

    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("GET p50 / p99", lambda r: f"{ms(pct(r['get'], 0.5))} / {ms(pct(r['get'], 0.99))}"),
        (
            "added GET latency p50 / p99 (vs link)",
            lambda r: (
                f"{(pct(r['get'], 0.5) - pct(link['get'], 0.5)) * 1e3:+.2f} / "
                f"{(pct(r['get'], 0.99) - pct(link['get'], 0.99)) * 1e3:+.2f} ms"
            ),
        ),
        ("GET throughput (8 concurrent)", lambda r: f"{statistics.median(r['rps']):.0f}/s"),
        # Two turns of n_get / 2 sequential and n_get / 2 concurrent GETs each.
        ("CPU per GET", lambda r: f"{r['cpu'] / (2 * n_get) * 1e6:.0f} us"),
        ("GET answer", lambda r: f"{r['get_type'].rsplit('.', 1)[-1]} {r['get_bytes']} B"),
        ("LIST 1,000 pods online p50", lambda r: ms(pct(r["list1k"], 0.5))),
        (f"LIST {total:,} pods online p50", lambda r: ms(pct(r["list10k"], 0.5))),
        (
            f"  bytes on the link per LIST {total:,}",
            lambda r: f"{r['list10k_link_bytes'] / 1e6:.1f} MB",
        ),
        ("LIST 1,000 pods offline p50", lambda r: offline(r, "off1k")),
        (f"LIST {total:,} pods offline p50", lambda r: offline(r, "off10k")),
        (
            "watch-event delay p50 / p99 (vs direct)",
            lambda r: f"{pct(r['watch'], 0.5):+.2f} / {pct(r['watch'], 0.99):+.2f} ms",
        ),
        ("read failover after a blackhole", lambda r: f"{r['failover']:.2f} s"),
        ("restart to first cached answer", lambda r: f"{r['restart']:.2f} s"),
    ]
    width = 42
    print(
        f"\nload average {os.getloadavg()[0]:.1f}; GET x{n_get}, LIST 1k x{runs_1k}, "
        f"LIST {total // 1000}k x{runs_10k}; kubelet's Accept (protobuf, json) and gzip\n"
    )
    print(f"| {'measure':{width}} | " + " | ".join(f"{n:>16}" for n in names) + " |")
    print(f"|{'-' * (width + 2)}|" + "|".join("-" * 18 for _ in names) + "|")
    for label, fn in rows:
        print(f"| {label:{width}} | " + " | ".join(f"{cell(n, fn):>16}" for n in names) + " |")
    for label, values in (
        ("RSS idle", idle_rss),
        (f"RSS with {total:,} pods cached", cached_rss),
        ("RSS after the offline LISTs", offline_rss),
    ):
        cells = [f"{values[n]:.1f} MB" if n in values else "-" for n in names]
        print(f"| {label:{width}} | " + " | ".join(f"{c:>16}" for c in cells) + " |")
    direct = res["direct"]
    print()
    for hub in hubs:
        r = res[hub.name]
        if "off10k" not in r:
            continue
        off_ratio = pct(r["off10k"], 0.5) / pct(direct["list10k"], 0.5)
        rps = statistics.median(r["rps"])
        print(
            f"{hub.name}: offline LIST {total:,} / direct online {off_ratio:.2f}x, "
            f"GET throughput / direct {rps / statistics.median(direct['rps']):.2f}x, "
            f"/ the link alone {rps / statistics.median(link['rps']):.2f}x"
        )
    if len(hubs) == 2:
        e, y = res["edgehub"], res["yurthub"]
        print(
            f"edgehub / yurthub: CPU per GET {e['cpu'] / y['cpu']:.2f}x, "
            f"RSS cached {cached_rss['edgehub'] / cached_rss['yurthub']:.2f}x"
        )
        if "off10k" in e and "off10k" in y:
            ratio = pct(e["off10k"], 0.5) / pct(y["off10k"], 0.5)
            print(f"edgehub / yurthub: offline LIST {total:,} {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests")
    parser.add_argument("--no-yurthub", action="store_true", help="edgehub and direct only")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="bench-side-"))
    try:
        asyncio.run(run(args, workdir))
    finally:
        if args.keep:
            print(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
