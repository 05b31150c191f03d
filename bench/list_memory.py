"""Benchmark: the hub's memory while it caches one big protobuf list (in one process).

    .venv/bin/python bench/list_memory.py [--body /tmp/pods10k.pb] [--identity]

The ingest path the proxy drives, without sockets: a ``Store`` in a temp dir, the tee's sink
for kubelet's ``GET /api/v1/pods`` (protobuf, gzip on the wire unless ``--identity``) fed
the body in 64 KiB chunks, ``await finish()``, then ``await store.flush()``. The body is read
from a file chunk by chunk (gzip-compressed into a temp file first), so the input never sits
in memory and what is measured is the hub's own.

Each measurement runs in a fresh child process (a process's peak RSS only goes up):

- ``rss``: VmRSS before (store open, tee ready), VmHWM during the ingest (the peak is reset
  through ``/proc/self/clear_refs`` when the kernel allows it), VmRSS after the flush
  (settled: the store trims the heap itself after a big list), and the ingest time;
- ``trace``: tracemalloc's peak of Python allocations during the ingest (SQLite's own memory
  is not Python's: only RSS shows it).

Two lists per process: a first list into the empty store, then the same list again (a relist:
every item unchanged). Prints absolute numbers and ratios to the body size; nothing asserted.
The body: ``--body FILE`` (a protobuf list as the apiserver sends it), else a ``PodList`` of
``--pods`` pods made from the real apiserver's pods fixture, each item renamed to be its own.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import pathlib
import subprocess
import sys
import tempfile
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from typing import Any

from multidict import CIMultiDict

HERE = pathlib.Path(__file__).resolve().parent
FIXTURE = HERE.parent / "tests" / "data" / "kubeproto" / "pods.pb"
CHUNK = 64 << 10
KUBELET = "kubelet/v1.35.0 (linux/amd64) kubernetes/abcdef0"
PROTOBUF = "application/vnd.kubernetes.protobuf"
MiB = 1 << 20


def status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def reset_peak_rss() -> bool:
    """Make VmHWM start again from the current RSS (Linux ``clear_refs`` 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def chunks(path: pathlib.Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk


def gzip_file(source: pathlib.Path, target: pathlib.Path) -> None:
    z = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    with target.open("wb") as out:
        for chunk in chunks(source):
            out.write(z.compress(chunk))
        out.write(z.flush())


def pod_list(pods: int) -> bytes:
    """The fixture's ``PodList`` with ``pods`` items: its pods in turn, the i-th named
    ``<name>-<i>`` (``metadata.name`` rewritten on the wire, nothing else touched)."""
    sys.path.insert(0, str(HERE.parent))
    from yurthub.kubeproto import converting, wire

    body = FIXTURE.read_bytes()
    split = converting.Converter().split_list(body)
    assert split is not None and split.items, "the fixture is a PodList with pods"
    api_version, kind, start, end = converting.envelope_at(body)
    items = [bytes(item) for item in split.items]
    head = b"".join(whole for number, _, _, whole in wire.fields(body[start:end]) if number != 2)
    raw = head + b"".join(
        wire.delimited(2, _renamed(items[i % len(items)], i)) for i in range(pods)
    )
    type_meta = wire.delimited(1, api_version.encode()) + wire.delimited(2, kind.encode())
    tail = b"\x1a\x00\x22\x00"
    return converting.MAGIC + wire.delimited(1, type_meta) + wire.delimited(2, raw) + tail


def _renamed(pod: bytes, i: int) -> bytes:
    from yurthub.kubeproto import wire

    out = bytearray()
    for number, _, value, whole in wire.fields(pod):
        if number != 1 or not isinstance(value, bytes):  # Pod.metadata
            out += whole
            continue
        meta = bytearray()
        for inner, _, field, inner_whole in wire.fields(value):
            if inner == 1 and isinstance(field, bytes):  # ObjectMeta.name
                meta += wire.delimited(1, field + f"-{i}".encode())
            else:
                meta += inner_whole
        out += wire.delimited(1, bytes(meta))
    return bytes(out)


async def ingest(wire: pathlib.Path, gzip: bool, trace: bool) -> list[dict[str, Any]]:
    sys.path.insert(0, str(HERE.parent))
    from yurthub import requestinfo
    from yurthub.cache import agents, store, teeing

    headers = CIMultiDict({"User-Agent": KUBELET, "Accept": PROTOBUF})
    info = requestinfo.classify("GET", "/api/v1/pods", {}, headers)
    response = {"Content-Type": PROTOBUF}
    if gzip:
        response["Content-Encoding"] = "gzip"
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = await store.Store.open(pathlib.Path(tmp) / "cache", max_pending_bytes=128 * MiB)
        tee = teeing.Tee(
            cache,
            agents.AgentSet(node_name="n"),
            max_body_bytes=128 * MiB,
            max_event_bytes=16 * MiB,
        )
        for name in ("first list", "relist"):
            gc.collect()
            store.trim_heap()
            before = status_kib("VmRSS")
            reset = reset_peak_rss()
            if trace:
                tracemalloc.reset_peak()
                traced_before = tracemalloc.get_traced_memory()[0]
            started = time.perf_counter()
            sink = tee.open(info, 200, response)
            assert sink is not None, "the tee does not keep this response"
            for chunk in chunks(wire):
                sink.feed(chunk)
            await sink.finish()
            del sink
            assert await cache.flush(600), "the store did not flush"
            elapsed = time.perf_counter() - started
            run: dict[str, Any] = {
                "name": name,
                "seconds": elapsed,
                "rss_before": before,
                "hwm": status_kib("VmHWM") if reset else -1,
                "rss_after": status_kib("VmRSS"),
                "objects": len(cache),
                "bad_bodies": cache.stats.bad_bodies,
            }
            if trace:
                run["traced_peak"] = tracemalloc.get_traced_memory()[1] - traced_before
                run["traced_after"] = tracemalloc.get_traced_memory()[0] - traced_before
            runs.append(run)
        await cache.close()
    return runs


def child(args: argparse.Namespace) -> None:
    if args.mode == "trace":
        tracemalloc.start(5)
    runs = asyncio.run(ingest(pathlib.Path(args.wire), not args.identity, args.mode == "trace"))
    print(json.dumps(runs))


def run_child(script_args: list[str]) -> list[dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, __file__, *script_args], check=True, capture_output=True, text=True
    )
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def mib(kib: int) -> str:
    return "n/a" if kib < 0 else f"{kib / 1024:7.1f} MiB"


def report(body_size: int, rss: list[dict[str, Any]], traced: list[dict[str, Any]]) -> None:
    body_mib = body_size / MiB
    print(f"body: {body_mib:.1f} MiB inflated")
    for plain, trace in zip(rss, traced, strict=True):
        hwm_growth = (plain["hwm"] - plain["rss_before"]) / 1024
        settled = (plain["rss_after"] - plain["rss_before"]) / 1024
        peak = trace["traced_peak"] / MiB
        print(f"\n{plain['name']} ({plain['objects']} objects, {plain['bad_bodies']} bad bodies)")
        print(f"  ingest time          {plain['seconds']:7.2f} s")
        print(f"  tracemalloc peak     {peak:7.1f} MiB  ({peak / body_mib:.2f}x body)")
        print(f"  VmRSS before         {mib(plain['rss_before'])}")
        print(
            f"  VmHWM during         {mib(plain['hwm'])}  "
            f"(+{hwm_growth:.1f} MiB, {hwm_growth / body_mib:.2f}x body)"
        )
        print(
            f"  VmRSS after          {mib(plain['rss_after'])}  "
            f"(+{settled:.1f} MiB, {settled / body_mib:.2f}x body)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--body", help="a protobuf list body (default: made, --pods)")
    parser.add_argument("--pods", type=int, default=10_000, help="pods of the made list")
    parser.add_argument("--identity", action="store_true", help="no gzip on the wire")
    parser.add_argument("--mode", choices=("rss", "trace"), help=argparse.SUPPRESS)
    parser.add_argument("--wire", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        child(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        body = pathlib.Path(args.body or pathlib.Path(tmp) / "list.pb")
        if not args.body:
            body.write_bytes(pod_list(args.pods))
        wire = body
        if not args.identity:
            wire = pathlib.Path(tmp) / "body.gz"
            gzip_file(body, wire)
        common = ["--wire", str(wire)] + (["--identity"] if args.identity else [])
        wire_mib = wire.stat().st_size / MiB
        rss = run_child(["--mode", "rss", *common])
        traced = run_child(["--mode", "trace", *common])
        body_size = body.stat().st_size
    print(f"wire: {'identity' if args.identity else 'gzip'}, {wire_mib:.1f} MiB")
    report(body_size, rss, traced)


if __name__ == "__main__":
    main()
