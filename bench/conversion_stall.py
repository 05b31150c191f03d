"""Benchmark: how long the hub's event loop waits while the cache writer converts protobuf.

    .venv/bin/python bench/conversion_stall.py [--quick]

No cluster needed: in-process, on loopback.

Why: the hub forwards kubelet's protobuf unchanged and the cache writer's thread converts its
copy to JSON (~290 us of Python per pod). That thread and the event loop share the GIL; with
CPython's default switch interval (5 ms) the loop waits up to 5 ms each time it wants the GIL
back, and it wants it several times per request (every socket call releases it). A 10,000-pod
list being converted so delays every watch event and answer going through the hub (the
side-by-side run saw +138 ms p99 on watch events during such a backlog).

What runs: a PodList of N pods in protobuf (the real v1.37.2 apiserver's pods fixture,
its items repeated) converted by ``Converter.list_json`` in a thread, as the cache writer does,
while the event loop (uvloop, as the hub) ping-pongs 64-byte messages over a loopback TCP
connection every 2 ms. Side by side in one run, rounds interleaved: the switch interval
CPython ships with (5 ms) and the shorter ones the hub could set. Printed per setting: the
ping round trip p50/p99/max while converting (and idle, for reference), and the conversion's
wall time (what the shorter interval costs the writer).
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import statistics
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from yurthub.kubeproto import converting, wire  # noqa: E402

FIXTURE = HERE.parent / "tests" / "data" / "kubeproto" / "pods.pb"
INTERVALS = (0.005, 0.001, 0.0005)
"""CPython's default first, then the candidates."""
PING_EVERY = 0.002


def pod_list(pods: int) -> bytes:
    """The fixture's PodList with its items repeated to ``pods`` items (envelope kept)."""
    body = FIXTURE.read_bytes()
    envelope = body[len(converting.MAGIC) :]
    out_envelope = bytearray()
    for number, _wire, value, whole in wire.fields(envelope):
        if number != 2:  # Unknown.raw holds the list message
            out_envelope += whole
            continue
        assert isinstance(value, bytes)
        head, items = bytearray(), []
        for inner, _w, item, inner_whole in wire.fields(value):
            if inner == 2:  # PodList.items
                assert isinstance(item, bytes)
                items.append(item)
            else:
                head += inner_whole
        assert items, "the fixture holds pods"
        raw = bytes(head) + b"".join(wire.delimited(2, items[i % len(items)]) for i in range(pods))
        out_envelope += wire.delimited(2, raw)
    return converting.MAGIC + bytes(out_envelope)


async def _pinger(stop: threading.Event, rtts: list[float]) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(64):
            writer.write(data)
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    payload = b"x" * 64
    try:
        while not stop.is_set():
            start = time.perf_counter()
            writer.write(payload)
            got = 0
            while got < len(payload):
                got += len(await reader.read(64))
            rtts.append(time.perf_counter() - start)
            await asyncio.sleep(PING_EVERY)
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


async def one_round(
    body: bytes, interval: float, converter: converting.Converter
) -> dict[str, float]:
    sys.setswitchinterval(interval)
    idle: list[float] = []
    busy: list[float] = []
    took: list[float] = []
    idle_stop, busy_stop = threading.Event(), threading.Event()

    def convert() -> None:
        start = time.perf_counter()
        assert converter.list_json(body) is not None
        took.append(time.perf_counter() - start)
        busy_stop.set()

    async with asyncio.TaskGroup() as tg:
        tg.create_task(_pinger(idle_stop, idle), name="pinger idle")
        await asyncio.sleep(0.3)
        idle_stop.set()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(_pinger(busy_stop, busy), name="pinger busy")
        await asyncio.to_thread(convert)
    return {
        "idle_p50": _q(idle, 0.5),
        "p50": _q(busy, 0.5),
        "p99": _q(busy, 0.99),
        "max": max(busy),
        "convert": took[0],
        "pings": len(busy),
    }


def _q(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main_async(pods: int, rounds: int) -> None:
    body = pod_list(pods)
    converter = converting.Converter()
    assert converter.list_json(pod_list(10)) is not None  # load descriptors and plans first
    default = sys.getswitchinterval()
    results: dict[float, list[dict[str, float]]] = {i: [] for i in INTERVALS}
    try:
        for _ in range(rounds):
            for interval in INTERVALS:
                results[interval].append(await one_round(body, interval, converter))
    finally:
        sys.setswitchinterval(default)

    def med(interval: float, key: str) -> float:
        return statistics.median(r[key] for r in results[interval])

    base = INTERVALS[0]
    print(
        f"converting a {pods:,}-pod protobuf list in a thread ({len(body) / 1e6:.1f} MB), "
        f"{rounds} interleaved rounds, medians; loopback ping every {PING_EVERY * 1e3:.0f} ms"
    )
    print(f"{'switch interval':>16} {'idle p50':>9} {'p50':>8} {'p99':>8} {'max':>8} "
          f"{'p99 vs 5 ms':>12} {'convert':>8} {'vs 5 ms':>8}")  # fmt: skip
    for interval in INTERVALS:
        print(
            f"{interval * 1e3:>13.1f} ms {med(interval, 'idle_p50') * 1e3:>7.2f}ms "
            f"{med(interval, 'p50') * 1e3:>6.2f}ms {med(interval, 'p99') * 1e3:>6.2f}ms "
            f"{med(interval, 'max') * 1e3:>6.2f}ms "
            f"{med(interval, 'p99') / med(base, 'p99'):>11.2f}x "
            f"{med(interval, 'convert'):>7.2f}s "
            f"{med(interval, 'convert') / med(base, 'convert'):>7.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 pods, 2 rounds")
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    pods, rounds = (2_000, 2) if args.quick else (args.pods, args.rounds)
    try:
        import uvloop
    except ImportError:
        asyncio.run(main_async(pods, rounds))
    else:
        uvloop.run(main_async(pods, rounds))


if __name__ == "__main__":
    main()
