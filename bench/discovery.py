"""Benchmark: discovery handler latency, udev enumeration and handler memory, side by side.

    .venv/bin/python bench/discovery.py [--runs N]

Measured in one run (all traffic on Unix sockets under /tmp):

* registration -> first device list: a registry (agent side, in this process) with a live
  request for ``debugEcho``; ``edgehub handler debugEcho`` is started as a subprocess; we time
  process start -> registration received, and registration -> first merged device list. Side
  by side: the same handler embedded in-process (register -> first list). Target: <= 200 ms.
* udev enumeration on this machine: ``udev.scan`` (parse + libudev pre-filter + our matching
  + device construction) vs bare pyudev enumeration of the same subsystem.
* memory: VmRSS (and peak VmHWM) of the handler process while it streams to the registry,
  vs a bare ``python -c "import asyncio, grpc"`` process. Target: <= 40 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# This file is named like the package it measures: drop bench/ from the import path so
# ``import discovery`` finds the package, not this script.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import pyudev

from discovery import registry
from discovery.handlers import debug_echo, udev

DETAILS = "descriptions: [cam-1, cam-2, cam-3]"


def _status(pid: int) -> dict[str, int]:
    text = Path(f"/proc/{pid}/status").read_text()
    return {k: int(v) for k, v in re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", text, re.M)}


async def _first_list(request: registry.DiscoveryRequest) -> None:
    async for snapshot in request.snapshots():
        if snapshot.devices:
            return


async def handler_process_run(directory: Path) -> tuple[float, float, dict[str, int]]:
    """(start->registration s, registration->first list s, handler /proc status)."""
    settings = registry.RegistrySettings(directory=directory)
    async with registry.running(settings) as reg:
        request = reg.request("bench/cfg", "debugEcho", DETAILS)
        registrations = reg.registrations()
        env = {**os.environ, "DEBUG_ECHO_AVAILABILITY_FILE": str(directory / "avail")}
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "edgehub", "--log-level", "warning", "handler", "debugEcho",
             "--discovery-handlers-directory", str(directory)],
            env=env,
        )  # fmt: skip
        try:
            async with asyncio.timeout(30):
                await anext(registrations)
                registered = time.perf_counter()
                await _first_list(request)
                listed = time.perf_counter()
            await asyncio.sleep(1.0)  # let it settle into steady streaming
            status = _status(proc.pid)
        finally:
            proc.terminate()
            await asyncio.to_thread(proc.wait, 10)
            await registrations.aclose()
    return registered - started, listed - registered, status


async def embedded_run() -> float:
    async with registry.running(registry.RegistrySettings(directory=None)) as reg:
        request = reg.request("bench/cfg", "debugEcho", DETAILS)
        started = time.perf_counter()
        reg.register_embedded(debug_echo.DebugEcho(availability_file=Path("/nonexistent")))
        await _first_list(request)
        return time.perf_counter() - started


def baseline_rss() -> int:
    code = (
        "import asyncio, grpc, re, sys; sys.stdout.write(re.search(r'VmRSS:\\s+(\\d+)', "
        "open('/proc/self/status').read()).group(1))"
    )
    return int(subprocess.check_output([sys.executable, "-c", code]))


def udev_times(runs: int) -> list[tuple[str, float, float, int]]:
    rows = []
    for label, rule, subsystem in (
        ('SUBSYSTEM=="tty"', 'SUBSYSTEM=="tty"', "tty"),
        ('SUBSYSTEM=="net"', 'SUBSYSTEM=="net"', "net"),
        ("all devices (empty rule)", "", None),
    ):
        parsed = udev.parse_details(f"udevRules: ['{rule}']")
        ours, bare, count = [], [], 0
        for _ in range(runs):
            t0 = time.perf_counter()
            count = len(udev.scan(parsed, "", False))
            ours.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            context = pyudev.Context()
            enumerator = (
                context.list_devices(subsystem=subsystem) if subsystem else context.list_devices()
            )
            _ = [d.device_path for d in enumerator]
            bare.append(time.perf_counter() - t0)
        rows.append((label, statistics.median(ours), statistics.median(bare), count))
    return rows


async def main(runs: int) -> None:
    # Stream-closed warnings when the benchmark stops its handlers are expected noise.
    logging.getLogger("discovery").setLevel(logging.ERROR)
    tmp = Path(tempfile.mkdtemp(prefix="ehb-", dir="/tmp"))
    try:
        process_runs = [await handler_process_run(tmp) for _ in range(runs)]
        embedded = [await embedded_run() for _ in range(runs)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    start_reg = statistics.median(r[0] for r in process_runs)
    reg_list = statistics.median(r[1] for r in process_runs)
    worst = max(r[1] for r in process_runs)
    emb = statistics.median(embedded)
    rss = statistics.median(r[2]["VmRSS"] for r in process_runs) / 1024
    hwm = max(r[2]["VmHWM"] for r in process_runs) / 1024
    base = baseline_rss() / 1024

    print(f"discovery benchmark ({runs} runs each, medians)")
    print()
    print("latency                                   ms")
    print(f"  handler process start -> registered     {start_reg * 1000:8.1f}")
    verdict = "OK" if worst <= 0.2 else "MISSED"
    print(f"  registered -> first device list (gRPC)  {reg_list * 1000:8.1f}   "
          f"worst {worst * 1000:.1f}   target <= 200  {verdict}")  # fmt: skip
    print(f"  embedded register -> first device list  {emb * 1000:8.1f}")
    print(f"  ratio gRPC / embedded                   {reg_list / emb:8.1f}x")
    print()
    print("memory                                    MB")
    print(f"  edgehub handler debugEcho VmRSS         {rss:8.1f}   peak {hwm:.1f}   "
          f"target <= 40  {'OK' if rss <= 40 else 'MISSED'}")  # fmt: skip
    print(f"  bare python + asyncio + grpc VmRSS      {base:8.1f}")
    print(f"  ratio handler / bare                    {rss / base:8.2f}x")
    print()
    print("udev enumeration (this machine)           ours ms   bare pyudev ms   ratio   devices")
    for label, ours, bare, count in udev_times(max(runs, 5)):
        ratio = ours / bare
        print(
            f"  {label:38s} {ours * 1000:8.2f}   {bare * 1000:14.2f}   {ratio:5.2f}x   {count:7d}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    asyncio.run(main(parser.parse_args().runs))
