"""Benchmark: bytes on the edge link and the hub's CPU, protobuf end to end vs the old JSON path.

    .venv/bin/python bench/protobuf_link.py [--quick]

Needs the test bed (``make cluster-bins``). All on loopback.

Set-up as ``side_by_side.py`` (whose pieces it reuses): the real control plane, 10,000 pods
bound to ``bench-node`` (plus 30 in ``bench-k``, the node's "own" pods for the kubelet-start
set), one ``edgehub hub`` with the node's identity behind its own counting edge link
(``edgehub partition``).

Side by side in one run, each measurement alternating between the two:

- **protobuf**: kubelet's ``Accept: application/vnd.kubernetes.protobuf,application/json``; the
  hub now forwards it, the link carries protobuf, the cache converts its copy to JSON;
- **json (old path)**: ``Accept: application/json``, which is exactly what the hub sent upstream
  for kubelet before (it dropped the protobuf clause), so the link carries what it used to.

Printed: bytes on the link for a kubelet start (its node, namespace and a ConfigMap; its 30
pods, Services, EndpointSlices, CSIDrivers and RuntimeClasses as plain LISTs, then as the
streaming lists kubelet 1.37 really sends) and per LIST of 10,000 pods (gzip, as Go clients
ask; the apiserver compresses only answers over 128 KiB, so a mid-sized list can be smaller as
gzipped JSON than as plain protobuf), the hub's CPU per LIST of 10,000 including its cache
write (waited for: the process is sampled until idle), the converter's CPU per pod
in-process against ``orjson`` parsing the JSON list, and a check that the hub answers the
10,000 pods offline from what the protobuf path cached.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import pathlib
import shutil
import ssl
import sys
import tempfile
import time
from typing import Any

import aiohttp
import orjson

from yurthub.testing import ports

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import side_by_side as sbs  # noqa: E402  (bench/side_by_side.py: the shared set-up)

PROTOBUF = dict(sbs.KUBELET)
JSON = dict(sbs.JSON_KUBELET)
START_LISTS = (
    "/api/v1/namespaces/bench-k/pods",
    "/api/v1/services",
    "/apis/discovery.k8s.io/v1/endpointslices",
    "/apis/storage.k8s.io/v1/csidrivers",
    "/apis/node.k8s.io/v1/runtimeclasses",
)
START_GETS = (
    f"/api/v1/nodes/{sbs.NODE}",
    "/api/v1/namespaces/bench-k",
    "/api/v1/namespaces/bench-k/configmaps/kube-root-ca.crt",
)
# kubelet 1.37 lists with streaming lists (client-go's WatchListClient): a watch whose initial
# events end with a BOOKMARK; here the server ends it after a second.
STREAMING = (
    "?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
    "&allowWatchBookmarks=true&timeoutSeconds=1"
)
KUBELET_STARTS = {
    "start": START_GETS + START_LISTS,
    "start_stream": START_GETS + tuple(p + STREAMING for p in START_LISTS),
}


async def get(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    ssl_context: ssl.SSLContext | bool = False,
) -> bytes:
    async with session.get(url, headers=headers, ssl=ssl_context) as r:
        body = await r.read()
        if r.status != 200:
            raise RuntimeError(f"GET {url}: {r.status} {body[:200]!r}")
        return body


async def run(args: argparse.Namespace, workdir: pathlib.Path) -> None:
    from yurthub.testing import k8sbinaries, realcluster

    runs = 2 if args.quick else 4
    logs = workdir / "logs"
    logs.mkdir()
    cluster = realcluster.RealCluster(workdir / "k8s", k8sbinaries.locate(), die_with_parent=True)
    print("starting the control plane ...", flush=True)
    await asyncio.to_thread(cluster.up)
    stack = contextlib.ExitStack()
    stack.callback(cluster.down)
    try:
        await bench(workdir, logs, cluster, stack, runs)
    finally:
        await asyncio.to_thread(stack.close)


async def bench(
    workdir: pathlib.Path, logs: pathlib.Path, cluster: Any, stack: contextlib.ExitStack, runs: int
) -> None:
    cluster.kubectl("apply", "-f", str(HERE.parent / "manifests" / "hub" / "rbac.yaml"))
    cluster.kubectl("apply", "-f", "-", input=sbs.BENCH_RBAC)
    counts = {"bench-k": 30, "bench-a": 1000, "bench-b": 9000}
    total = counts["bench-a"] + counts["bench-b"] + counts["bench-k"]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        print(f"creating {total} pods ...", flush=True)
        await sbs.seed(cluster, session, counts)
        node_kc = cluster.write_kubeconfig(workdir / "edgehub.kubeconfig", sbs.USER, sbs.GROUPS)
        link = sbs.Link("edgehub", int(cluster.url.rsplit(":", 1)[1]), logs)
        link.proc.start()
        stack.callback(link.proc.stop)
        # The same link without a hub: what kubelet's protobuf costs the link direct.
        bare = sbs.Link("direct", int(cluster.url.rsplit(":", 1)[1]), logs)
        bare.proc.start()
        stack.callback(bare.proc.stop)
        cert, key = cluster.issue_identity(sbs.USER, sbs.GROUPS)
        (workdir / "client.pem").write_bytes(cert + key)
        direct_ctx = ssl.create_default_context(cafile=str(cluster.ca_path))
        direct_ctx.load_cert_chain(str(workdir / "client.pem"))
        await asyncio.sleep(1.5)
        serve, proxy = ports.free_port(), ports.free_port()
        argv = sbs.edgehub_argv(node_kc, workdir / "cache", link, serve, proxy)
        hub = sbs.Hub("edgehub", link, argv, serve, proxy)
        hub.proc.start()
        stack.callback(hub.proc.stop)
        await hub.wait_ready(session)
        await asyncio.sleep(5)
        pid = hub.proc.pid

        # A fresh hub's first list: every pod is new to the cache (stored as received, its
        # index fields read from the wire).
        await sbs.idle_cpu(pid)
        cpu0 = sbs.cpu_seconds(pid)
        await get(session, hub.url + sbs.LIST_10K, PROTOBUF)
        first_cpu = await sbs.idle_cpu(pid) - cpu0

        forms = {"protobuf": PROTOBUF, "json (old path)": JSON, "direct": PROTOBUF}
        res: dict[str, dict[str, list[float]]] = {f: {} for f in forms}
        print("kubelet start and LISTs of 10,000 ...", flush=True)
        for turn in range(runs):
            # Alternate which goes first; the protobuf path goes last in the final turn, so the
            # offline check below answers from what it cached.
            order = list(forms) if turn % 2 else list(reversed(forms))
            for form in order:
                headers = forms[form]
                row = res[form]
                # "direct": kubelet's Accept over the bare link, no hub.
                via, base, ctx = (
                    (bare, bare.url, direct_ctx) if form == "direct" else (link, hub.url, False)
                )
                for key, paths in KUBELET_STARTS.items():
                    before = await via.relayed(session)
                    for path in paths:
                        await get(session, base + path, headers, ctx)
                    row.setdefault(key, []).append(await via.relayed(session) - before)
                if form == "direct":
                    before = await via.relayed(session)
                    await get(session, base + sbs.LIST_10K, headers, ctx)
                    row.setdefault("list", []).append(await via.relayed(session) - before)
                    continue

                await sbs.idle_cpu(pid)
                cpu0 = sbs.cpu_seconds(pid)
                before = await link.relayed(session)
                started = time.perf_counter()
                body = await get(session, hub.url + sbs.LIST_10K, headers)
                row.setdefault("list_s", []).append(time.perf_counter() - started)
                row.setdefault("list", []).append(await link.relayed(session) - before)
                row.setdefault("cpu", []).append(await sbs.idle_cpu(pid) - cpu0)
                row.setdefault("answer", []).append(len(body))

        # The converter in this process, against orjson on the same list as JSON.
        from yurthub.cache import selectors
        from yurthub.kubeproto import converting

        pb_body = await get(
            session, hub.url + sbs.LIST_10K, {**PROTOBUF, "Accept-Encoding": "identity"}
        )
        json_body = await get(
            session, hub.url + sbs.LIST_10K, {**JSON, "Accept-Encoding": "identity"}
        )
        converter = converting.Converter()
        converter.object(pb_body)  # loads the descriptors, builds the plans
        # Without the cyclic GC, which otherwise walks the millions of new objects of both
        # many times over (the hub's CPU above includes it, as it really runs).
        gc.collect()
        gc.disable()
        started = time.process_time()
        converted = converter.object(pb_body)
        convert_s = time.process_time() - started
        started = time.process_time()
        parsed = orjson.loads(json_body)
        parse_s = time.process_time() - started
        started = time.process_time()
        orjson.dumps(converted)
        dump_s = time.process_time() - started
        # What the cache does now instead: the fields its index needs, read from each item.
        split = converter.split_list(pb_body)
        assert split is not None
        paths = selectors.index_paths("pods")
        split.skeleton(split.items[0], paths)  # builds the restricted plans
        started = time.process_time()
        for span in split.items:
            split.skeleton(span, paths)
        index_s = time.process_time() - started
        gc.enable()
        assert len(converted["items"]) == len(parsed["items"]) == total

        print("offline ...", flush=True)
        await link.set_mode(session, "blackhole")
        await asyncio.sleep(1)
        offline = None
        deadline = time.monotonic() + 60
        while offline is None and time.monotonic() < deadline:
            try:
                offline = await get(session, hub.url + sbs.LIST_10K, PROTOBUF)
            except (RuntimeError, aiohttp.ClientError):
                await asyncio.sleep(1)
        # Timed once the hub knows (a request before that waits for its upstream first).
        status_url = f"http://127.0.0.1:{serve}/v1/status"
        while time.monotonic() < deadline:
            async with session.get(status_url) as r:
                if not any(s["healthy"] for s in (await r.json())["servers"]):
                    break
            await asyncio.sleep(0.5)
        offline_form = "none"
        offline_items = 0
        offline_s: dict[str, float] = {}
        if offline is not None:
            offline_form = "protobuf" if offline.startswith(converting.MAGIC) else "JSON"
            decoded = converter.object(offline) if offline_form == "protobuf" else None
            offline_items = len((decoded or orjson.loads(offline))["items"])
            for form, headers in (("protobuf", PROTOBUF), ("JSON", JSON)):
                times = []
                for _ in range(3):
                    started = time.perf_counter()
                    await get(session, hub.url + sbs.LIST_10K, headers)
                    times.append(time.perf_counter() - started)
                offline_s[form] = sorted(times)[1]

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    pb, js, direct = res["protobuf"], res["json (old path)"], res["direct"]
    print()
    print(f"edge link, {runs} runs each, alternating; kubelet's load; gzip accepted")
    head = ("protobuf", "json (old)", "json/protobuf", "direct", "protobuf/direct")
    print(f"{'':40} " + " ".join(f"{h:>15}" for h in head))
    rows = (
        ("bytes on the link, kubelet start (LISTs)", "start", "{:,.0f} B"),
        ("  same with streaming lists (kubelet)", "start_stream", "{:,.0f} B"),
        (f"bytes on the link per LIST {total:,}", "list", "{:,.0f} B"),
        (f"hub CPU per LIST {total:,} (+cache)", "cpu", "{:.2f} s"),
        (f"LIST {total:,} through the hub", "list_s", "{:.2f} s"),
    )
    for label, key, fmt in rows:
        a, b = mean(pb[key]), mean(js[key])
        line = f"{label:40} {fmt.format(a):>15} {fmt.format(b):>15} {b / a:>14.2f}x"
        if key in direct:
            d = mean(direct[key])
            line += f" {fmt.format(d):>15} {a / d:>14.2f}x"
        print(line)
    per_pod = 1e6 / total
    print(
        f"converter (in-process, GC off, {total:,} pods): {convert_s * per_pod:.0f} us/pod "
        "protobuf->dict "
        f"+ {dump_s * per_pod:.0f} us/pod to JSON bytes; orjson.loads of the JSON list "
        f"{parse_s * per_pod:.0f} us/pod ({(convert_s + dump_s) / parse_s:.1f}x)"
    )
    print(
        f"index fields of each pod read from the wire (what the cache does now): "
        f"{index_s * per_pod:.0f} us/pod, {index_s / (convert_s + dump_s):.2f}x the conversion; "
        f"a fresh hub's first LIST {total:,} (+cache): {first_cpu:.2f} s hub CPU"
    )
    print(
        f"offline LIST through the hub (link blackholed): {offline_items:,} pods, "
        f"{offline_form} to kubelet's Accept; median of 3: "
        + ", ".join(f"{form} {seconds * 1000:.0f} ms" for form, seconds in offline_s.items())
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="bench-protobuf-"))
    try:
        asyncio.run(run(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
