"""Benchmark: udev rule values on RE2 (now) vs Python's backtracking ``re``/``fnmatch`` (before).

    .venv/bin/python bench/udev_patterns.py [--rounds N]

Measured side by side in one run:

* pathological: ``DEVPATH!="(.|.)*!"`` against values of growing length. Before: ``re``'s
  time doubles with every character (a real devpath of 50+ characters would take days, with
  the GIL held); after: microseconds, linear. Lengths stop at 24 so "before" finishes.
* ordinary rules: Akri's example rules against every device of this machine's ``/sys``:
  the same (term, value) comparisons made by the old matcher (``re.fullmatch`` for regex
  terms, ``fnmatch`` per ``|`` alternative for globs) and by the new one (``patterns``).
  Ratio < 1 means the new engine is faster.
* event-loop lag: the largest delay of a 10 ms ticker while an embedded-style scan of /sys
  with the pathological rule runs in its thread (after only: before, the loop froze).
"""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

# This directory holds a file named like a package: import ours, not a sibling script.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import pyudev

from discovery.handlers import udev, udev_rules

PATHOLOGICAL = "(.|.)*!"
ORDINARY_RULES = [
    'SUBSYSTEM=="tty", KERNEL=="tty[0-9]*"',
    'KERNEL=="video*|vbi*", DRIVER=="some driver"',
    'SUBSYSTEMS=="pci", DRIVERS!="a driver"',
    'ATTRS{idVendor}=="0bdd", KERNELS=="card[0-9]*"',
    'KERNEL!="video0", TAG!="tag[3-9]", DEVPATH!="/devices/path/exclude", DRIVER!="exclude"',
    'SUBSYSTEM=="net", KERNEL!="lo|eth.*", ENV{ID_NET_NAME}!="wl.*"',
]


def _old_compare(term: udev_rules.Term) -> Callable[[str], bool]:
    """The matcher before issue 14: Python's re for regex terms, fnmatch for globs."""
    if term.pattern.kind == "regex":
        compiled = re.compile(term.value)
        return lambda value: compiled.fullmatch(value) is not None
    alternatives = term.value.split("|")
    return lambda value: any(fnmatch.fnmatchcase(value, alt) for alt in alternatives)


def _best(seconds: Callable[[], float], rounds: int) -> float:
    return min(seconds() for _ in range(rounds))


def pathological(rounds: int) -> None:
    (term,) = udev_rules.parse(f'DEVPATH!="{PATHOLOGICAL}"')
    old = _old_compare(term)
    print(f'pathological DEVPATH!="{PATHOLOGICAL}" (best of {rounds}):')
    print(f"  {'length':>6} {'before (re)':>14} {'after (RE2)':>14} {'ratio':>12}")
    for length in (16, 18, 20, 22, 24):
        value = "x" * length

        def timed(compare: Callable[[str], bool], value: str = value) -> float:
            start = time.perf_counter()
            compare(value)
            return time.perf_counter() - start

        before = _best(lambda: timed(old), 1 if length >= 22 else rounds)
        after = _best(lambda: timed(term.pattern.fullmatch), rounds)
        ratio = before / after
        print(f"  {length:>6} {before * 1e3:>11.2f} ms {after * 1e6:>11.2f} µs {ratio:>11.0f}x")
    long_value = "/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/" + "x" * 4000
    start = time.perf_counter()
    term.pattern.fullmatch(long_value)
    print(
        f"  after, a {len(long_value)}-character value: "
        f"{(time.perf_counter() - start) * 1e6:.1f} µs (before: not measurable)"
    )


def _pairs() -> list[tuple[udev_rules.Term, str]]:
    """Every (term, value) comparison the rules make against this machine's devices."""
    pairs = []
    devices = [udev.PyudevView(d) for d in pyudev.Context().list_devices()]
    for rule in ORDINARY_RULES:
        for term in udev_rules.parse(rule):
            for device in devices:
                for value in udev_rules._own_value(term, device):
                    pairs.append((term, value))
    return pairs


def ordinary(rounds: int) -> None:
    pairs = _pairs()
    old = {id(term): _old_compare(term) for term, _ in pairs}
    checked = [(old[id(t)], t.pattern.fullmatch, v) for t, v in pairs]
    mismatches = sum(1 for o, n, v in checked if o(v) != n(v))

    def run(pick: int) -> float:
        start = time.perf_counter()
        for entry in checked:
            entry[pick](entry[2])  # type: ignore[operator]
        return time.perf_counter() - start

    before = [run(0) for _ in range(rounds)]
    after = [run(1) for _ in range(rounds)]
    b, a = statistics.median(before), statistics.median(after)
    print(f"ordinary rules: {len(ORDINARY_RULES)} rules, {len(pairs)} comparisons on /sys")
    print(f"  before (re/fnmatch): {b * 1e3:.2f} ms  ({b / len(pairs) * 1e9:.0f} ns each)")
    print(f"  after  (RE2):        {a * 1e3:.2f} ms  ({a / len(pairs) * 1e9:.0f} ns each)")
    print(f"  ratio after/before: {a / b:.2f}  (decisions that differ: {mismatches})")
    parsed = udev.parse_details("udevRules: [" + ", ".join(repr(r) for r in ORDINARY_RULES) + "]")
    scans = []
    for _ in range(rounds):
        start = time.perf_counter()
        udev.scan(parsed, "", False)
        scans.append(time.perf_counter() - start)
    print(f"  whole scan of /sys with these rules (after): {statistics.median(scans) * 1e3:.1f} ms")


async def loop_lag() -> None:
    lags: list[float] = []

    async def tick() -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(0.01)
            lags.append(loop.time() - before - 0.01)

    parsed = udev.parse_details(f"udevRules: ['DEVPATH!=\"{PATHOLOGICAL}\"']")
    async with asyncio.TaskGroup() as tg:
        ticker = tg.create_task(tick(), name="lag probe")
        start = time.perf_counter()
        found = await udev.scan_in_thread(parsed, "", False)
        took = time.perf_counter() - start
        ticker.cancel()
    print(
        f"event loop during a pathological-rule scan of {len(found)} devices ({took * 1e3:.0f} ms):"
        f" max lag {max(lags) * 1e3:.1f} ms, median {statistics.median(lags) * 1e3:.2f} ms"
        " (before: frozen for the whole scan)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    pathological(args.rounds)
    ordinary(args.rounds)
    asyncio.run(loop_lag())


if __name__ == "__main__":
    main()
