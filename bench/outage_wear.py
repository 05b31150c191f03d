"""Benchmark: bytes the outage record writes to disk per hour of a busy outage.

    .venv/bin/python bench/outage_wear.py [--quick] [--hours 1]

Each measured party is its own process (this file with ``--party``): the hub's outage recorder
(``outages.recording.Recorder``) on the real history (SQLite, WAL, in a temporary directory on
the disk ``TMPDIR`` names), fed an outage of ``--hours`` simulated hours on a fake clock (no
waiting): every simulated second the requests a busy node sends and the failed probes, and a
save wherever the recorder's loop would make one (at the outage's begin and end, and once per
save interval while the record changes, which during a busy outage is always). The party
reads its own ``/proc/self/io`` before and after: ``wchar`` (bytes handed to ``write``, every
file: the database, its WAL) and ``write_bytes`` (bytes the kernel sent to the block device;
0 on tmpfs, and the page cache may hold some back). Bytes per simulated hour, side by side:

- the save interval: 5 s (the record's first version) and 30 s (the default of
  ``--outage-save-interval-seconds``);
- the stored form: plain JSON (the first version) and zlib-compressed JSON (``history.encode``);
- the load: ``typical`` (kubelet, kube-proxy, coredns, flanneld: leases, node status, pods,
  Events, a few tokens: about 15 keys) and ``inflated`` (a local process sending every distinct
  request the label bounds let through, and pods asking for 64 tokens with long names: the
  record at its bounds).

``--quick``: a tenth of an hour, the two ends only (5 s JSON, 30 s compressed).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import orjson

from yurthub.authn import offlinetokens

HOUR = 3600


def _io() -> dict[str, int]:
    out = {}
    for line in pathlib.Path("/proc/self/io").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = int(value)
    return out


async def party(interval: float, form: str, load: str, hours: float, directory: str) -> None:
    from yurthub import labels, metrics
    from yurthub.outages import causes, history, recording, records

    if form == "json":  # the first version's stored form (history.decode reads both)
        history.encode = lambda o: orjson.dumps(records.to_stored(o))  # type: ignore[assignment]

    class Clock:
        def __init__(self) -> None:
            self.now = records.Instant(1_767_225_600.0, "bench", 1000.0)

        def __call__(self) -> records.Instant:
            return self.now

        def run(self, seconds: float) -> None:
            n = self.now
            self.now = records.Instant(n.wall + seconds, n.boot, n.mono + seconds)

    clock = Clock()
    store = await history.open_history(pathlib.Path(directory))
    recorder = recording.Recorder(store, metrics.Metrics(), clock=clock, save_interval=interval)
    await recorder.open()
    node_keys = [
        ("kubelet", "update", "leases"),
        ("kubelet", "get", "leases"),
        ("kubelet", "get", "nodes"),
        ("kubelet", "patch", "nodes/status"),
        ("kubelet", "list", "pods"),
        ("kubelet", "watch", "pods"),
        ("kubelet", "create", "events"),
        ("kubelet", "patch", "events"),
        ("kubelet", "get", "configmaps"),
        ("kubelet", "get", "secrets"),
        ("kubelet", "create", "serviceaccounts/token"),
        ("kube-proxy", "watch", "endpointslices"),
        ("kube-proxy", "watch", "services"),
        ("coredns", "watch", "services"),
        ("flanneld", "get", "nodes"),
    ]
    inflating = [
        (c, v, r)
        for c in sorted(labels.KNOWN_COMPONENTS)
        for v in sorted(labels.VERBS)
        for r in sorted(labels.BUILTIN_RESOURCES)
    ]
    seconds = round(hours * HOUR)
    saves = 0
    before = _io()
    started = time.perf_counter()
    recorder.failure("https://10.0.0.10:6443", causes.Cause.SILENT, "no answer within 2 s")
    recorder.cloud(False)
    await recorder.save()  # the begin: at once
    saves += 1
    since_save = 0.0
    for second in range(seconds):
        clock.run(1.0)
        since_save += 1.0
        if second % 10 == 0:
            recorder.failure("https://10.0.0.10:6443", causes.Cause.SILENT, "no answer in 2 s")
        for i, key in enumerate(node_keys):
            if (second + i) % 10 == 0:
                outage = recorder.begin_request()
                if outage is not None:
                    recorder.answered(outage, key, "cache", 404 if i == 9 else 200)
        if load == "inflated":
            for k in range(20):
                key = inflating[(second * 20 + k) % len(inflating)]
                outage = recorder.begin_request()
                if outage is not None:
                    recorder.answered(outage, key, "cache", 200 + (second + k) % 300)
            if second < records.MAX_TOKENS * 10 and second % 10 == 0:
                recorder.token(_minted(second, clock.now.wall))
        elif second % 600 == 0:
            recorder.token(_minted(second, clock.now.wall))
        if since_save >= interval:  # the loop's timeout: a save of what changed
            await recorder.save()
            saves += 1
            since_save = 0.0
    recorder.cloud(True)
    await recorder.save()  # the end: at once
    saves += 1
    await recorder.close()
    await store.close()
    after = _io()
    size = orjson.dumps(records.to_stored(recorder.last)) if recorder.last else b""
    print(
        orjson.dumps(
            {
                "wchar": after["wchar"] - before["wchar"],
                "write_bytes": after["write_bytes"] - before["write_bytes"],
                "saves": saves,
                "record_json": len(size),
                "record_stored": len(history.encode(recorder.last)) if recorder.last else 0,
                "simulated_seconds": seconds,
                "cpu_seconds": time.perf_counter() - started,
            }
        ).decode()
    )


def _minted(i: int, wall: float) -> offlinetokens.Minted:
    return offlinetokens.Minted(
        namespace="apps",
        service_account=f"account-{i:04d}",
        pod=f"web-{i:04d}-" + "x" * 48,
        audiences=("https://kubernetes.default.svc.cluster.local",),
        issued=wall,
        expires=wall + 3600,
    )


def run_party(interval: float, form: str, load: str, hours: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="outage-wear-") as directory:
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--party",
                f"{interval}:{form}:{load}",
                "--hours",
                str(hours),
                "--dir",
                directory,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"party {interval}:{form}:{load} failed:\n{done.stderr}")
    found: dict[str, float] = orjson.loads(done.stdout.strip().splitlines()[-1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--hours", type=float, default=None)
    parser.add_argument("--party", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    hours = args.hours if args.hours is not None else (0.1 if args.quick else 1.0)
    if args.party:
        interval, form, load = args.party.split(":")
        asyncio.run(party(float(interval), form, load, hours, args.dir))
        return
    pairs = [(5.0, "json"), (30.0, "zlib")]
    if not args.quick:
        pairs = [(5.0, "json"), (5.0, "zlib"), (30.0, "json"), (30.0, "zlib")]
    print(f"load average {os.getloadavg()[0]:.2f}; {hours:g} simulated hour(s) of outage each")
    print(
        f"{'load':9} {'interval':>8} {'stored':>6} {'saves':>6} {'record B':>9} "
        f"{'written KiB/h':>14} {'block KiB/h':>12} {'MiB/day':>8} {'vs 5s json':>10}"
    )
    for load in ("typical", "inflated"):
        base = None
        for interval, form in pairs:
            r = run_party(interval, form, load, hours)
            per_hour = r["wchar"] / hours
            base = base or per_hour
            print(
                f"{load:9} {interval:>7g}s {form:>6} {r['saves']:>6} {r['record_stored']:>9} "
                f"{per_hour / 1024:>14.0f} {r['write_bytes'] / hours / 1024:>12.0f} "
                f"{per_hour * 24 / (1 << 20):>8.1f} {per_hour / base:>9.3f}x"
            )


if __name__ == "__main__":
    main()
