"""The partition injector on real loopback sockets: every mode, switched at run time."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import time
from collections.abc import AsyncIterator

import pytest

from yurthub.testing import partition


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[int]:
    handlers: set[asyncio.Task[None]] = set()

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            handlers.discard(task)

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for task in list(handlers):
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()


@contextlib.asynccontextmanager
async def link(
    mode: partition.Mode = partition.Mode.PASS, latency: float = 0.2
) -> AsyncIterator[partition.Partition]:
    async with (
        echo_server() as port,
        partition.Partition("127.0.0.1", port, mode=mode, latency=latency) as p,
    ):
        yield p


async def roundtrip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes, within: float = 2.0
) -> bytes:
    writer.write(data)
    await writer.drain()
    async with asyncio.timeout(within):
        return await reader.readexactly(len(data))


async def connect(p: partition.Partition) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", p.port)


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError, OSError):
        await writer.wait_closed()


async def test_pass_relays_both_ways() -> None:
    async with link() as p:
        reader, writer = await connect(p)
        assert await roundtrip(reader, writer, b"hello") == b"hello"
        await close(writer)


async def test_refuse_closes_the_listener_and_resets_existing() -> None:
    async with link() as p:
        reader, writer = await connect(p)
        await roundtrip(reader, writer, b"x")
        await p.set_mode(partition.Mode.REFUSE)
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await roundtrip(reader, writer, b"y")
        with pytest.raises(ConnectionRefusedError):
            await connect(p)
        await p.set_mode(partition.Mode.PASS)  # same port again
        reader, writer = await connect(p)
        assert await roundtrip(reader, writer, b"z") == b"z"
        await close(writer)


async def test_a_refusing_partition_keeps_its_port() -> None:
    """While refusing, nothing else on the machine can take the port (an outgoing connection's
    source port would have made the heal fail with EADDRINUSE)."""
    async with link(mode=partition.Mode.REFUSE) as p:
        assert p.port
        for _ in range(2):
            other = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            with other, pytest.raises(OSError) as taken:
                other.bind(("127.0.0.1", p.port))
            assert taken.value.errno == errno.EADDRINUSE
            with pytest.raises(ConnectionRefusedError):
                await connect(p)
            await p.set_mode(partition.Mode.PASS)
            reader, writer = await connect(p)
            assert await roundtrip(reader, writer, b"up") == b"up"
            await close(writer)
            await p.set_mode(partition.Mode.REFUSE)
    freed = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with freed:
        freed.bind(("127.0.0.1", p.port))  # stop gives it back


async def test_blackhole_stalls_and_then_delivers() -> None:
    async with link() as p:
        reader, writer = await connect(p)
        await roundtrip(reader, writer, b"a")
        await p.set_mode(partition.Mode.BLACKHOLE)
        with pytest.raises(TimeoutError):
            await roundtrip(reader, writer, b"held", within=0.3)
        new_reader, new_writer = await connect(p)  # accepted...
        with pytest.raises(TimeoutError):
            await roundtrip(new_reader, new_writer, b"new", within=0.3)  # ...never answered
        await p.set_mode(partition.Mode.PASS)
        async with asyncio.timeout(2):
            assert await reader.readexactly(4) == b"held"
            assert await new_reader.readexactly(3) == b"new"
        await close(writer)
        await close(new_writer)


async def test_reset_resets_existing_and_new_connections() -> None:
    async with link() as p:
        reader, writer = await connect(p)
        await roundtrip(reader, writer, b"a")
        await p.set_mode(partition.Mode.RESET)
        with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
            await roundtrip(reader, writer, b"b")
        reader, writer = await connect(p)
        with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError, BrokenPipeError)):
            await roundtrip(reader, writer, b"c")
        await close(writer)


async def test_latency_delays_each_direction() -> None:
    async with link(mode=partition.Mode.LATENCY, latency=0.15) as p:
        reader, writer = await connect(p)
        started = time.monotonic()
        await roundtrip(reader, writer, b"ping")
        assert time.monotonic() - started >= 0.3
        await close(writer)


async def test_flap_alternates_pass_and_blackhole() -> None:
    # Phases of a second and waits on the partition's own phase, not on sleeps: a loaded
    # machine must not turn a late wake-up into a wrong phase.
    async with link() as p:
        await p.set_mode(partition.Mode.FLAP, interval=1.0)
        assert p.effective() is partition.Mode.PASS
        reader, writer = await connect(p)
        assert await roundtrip(reader, writer, b"a", within=3) == b"a"
        async with asyncio.timeout(5):
            while p.effective() is not partition.Mode.BLACKHOLE:
                await asyncio.sleep(0.01)
        writer.write(b"held")
        await writer.drain()
        with pytest.raises(TimeoutError):  # held while the blackhole phase lasts
            async with asyncio.timeout(0.3):
                await reader.readexactly(4)
        async with asyncio.timeout(5):
            assert await reader.readexactly(4) == b"held"
        assert p.effective() is partition.Mode.PASS  # released by the next pass phase
        await close(writer)


@pytest.mark.parametrize(
    "timing",
    [{"interval": 0.0}, {"interval": -1.0}, {"interval": float("nan")}, {"latency": -0.5}],
)
async def test_bad_timings_are_refused_and_change_nothing(timing: dict[str, float]) -> None:
    # A zero flap period divided by zero in every pump; a negative one made them spin.
    async with link() as p:
        with pytest.raises(ValueError, match="seconds"):
            await p.set_mode(partition.Mode.FLAP, **timing)
        assert (p.mode, p.interval, p.latency) == (partition.Mode.PASS, 1.0, 0.2)
        reader, writer = await connect(p)
        assert await roundtrip(reader, writer, b"still") == b"still"
        await close(writer)


def test_only_loopback_upstreams() -> None:
    with pytest.raises(ValueError, match="loopback"):
        partition.Partition("10.0.0.1", 443)
