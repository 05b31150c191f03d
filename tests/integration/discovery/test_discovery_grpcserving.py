"""``discovery.grpcserving.stop`` against real grpc.aio servers on Unix sockets.

grpcio's own ``Server.stop`` fails these tests: it swallows a cancellation that arrives as the
shutdown completes, leaves in-flight handlers running when cancelled mid-grace, and after a
cancelled stop raises ``CancelledError`` from a later stop that nobody cancelled. Whether a
given cancel lands in those windows depends on grpc's poller thread, so the sweep cancels at
many points; grpcio's behaviour hits each window several times per run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from discovery import grpcserving, registry, sdk, wire
from discovery.handlers import debug_echo


class Hanging:
    """A Discover handler that never ends by itself and records its cancellation."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.ended = asyncio.Event()

    async def discover(self, request: Any, context: Any) -> None:
        self.started.set()
        try:
            await asyncio.sleep(3600)
        finally:
            self.ended.set()


async def serving(path: Path, hanging: Hanging) -> grpc.aio.Server:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((wire.discovery_handler_service(hanging.discover),))
    assert server.add_insecure_port(f"unix:{path}") != 0
    await server.start()
    return server


class Call:
    """One Discover call held open against ``path``."""

    def __init__(self, path: Path, details: str = "") -> None:
        self.channel = grpc.aio.insecure_channel(f"unix:{path}")
        request = wire.discover_request(details, {})
        self.call = wire.discover_call(self.channel)(request)
        self.lists = asyncio.Event()
        self.error: grpc.StatusCode | None = None

    async def read(self) -> None:
        try:
            async for _ in self.call:
                self.lists.set()
        except grpc.aio.AioRpcError as e:
            self.error = e.code()

    async def close(self) -> None:
        self.call.cancel()
        await self.channel.close()


async def test_cancel_during_the_grace_propagates_and_cuts_the_calls(sock_dir: Path) -> None:
    hanging = Hanging()
    server = await serving(sock_dir / "h.sock", hanging)
    call = Call(sock_dir / "h.sock")
    try:
        async with asyncio.TaskGroup() as tg:
            reader = tg.create_task(call.read(), name="reader")
            await hanging.started.wait()
            stopping = tg.create_task(grpcserving.stop(server, 30.0), name="stopping")
            await asyncio.sleep(0.05)
            assert not stopping.done()
            stopping.cancel()
            await asyncio.wait([stopping])
            assert stopping.cancelled()
            # The 30 s grace was cut: the handler was cancelled and the client told so (well
            # before the grace could have run out: the deadline is half of it).
            async with asyncio.timeout(15):
                await hanging.ended.wait()
                await reader
            assert call.error is not None
    finally:
        await call.close()


async def _sweep_once(
    path: Path, grace: float | None, inflight: bool, cancel_point: Callable[[Any], Awaitable[None]]
) -> tuple[list[str], bool]:
    """Cancel a stop at ``cancel_point``; return the broken invariants (empty when all hold)
    and whether the stop was still running when the cancel came."""
    hanging = Hanging()
    server = await serving(path, hanging)
    call = Call(path) if inflight else None
    problems: list[str] = []
    try:
        async with asyncio.TaskGroup() as tg:
            reader = tg.create_task(call.read(), name="reader") if call else None
            if call is not None:
                await hanging.started.wait()
            first = tg.create_task(grpcserving.stop(server, grace), name="first stop")
            await cancel_point(server)
            running = not first.done()
            first.cancel()
            await asyncio.wait([first])
            if first.cancelled() != running:
                problems.append(f"first stop: cancelled={first.cancelled()}, running={running}")
            # A later stop from a task nobody cancels must return normally.
            second = tg.create_task(grpcserving.stop(server, 0), name="second stop")
            await asyncio.wait([second])
            if second.cancelled():
                problems.append("second stop raised CancelledError")
            if reader is not None:
                async with asyncio.timeout(2):
                    await reader
                    await hanging.ended.wait()
    finally:
        if call is not None:
            await call.close()
    return problems, running


def _after_spins(count: int) -> Callable[[Any], Awaitable[None]]:
    async def point(server: Any) -> None:
        for _ in range(count):
            await asyncio.sleep(0)

    return point


async def _at_termination(server: Any) -> None:
    # Lands the cancel as the shutdown completes: the window where wait_for drops it.
    await asyncio.sleep(0)
    await server.wait_for_termination()


@pytest.mark.parametrize(("grace", "inflight"), [(5.0, False), (0, True), (None, True)])
async def test_stop_raises_cancelled_exactly_when_cancelled(
    sock_dir: Path, grace: float | None, inflight: bool
) -> None:
    points: list[Callable[[Any], Awaitable[None]]] = [_after_spins(n) for n in range(0, 40, 2)]
    if not inflight:
        points += [_at_termination] * 10
    problems: list[str] = []
    cancelled_while_running = 0
    for number, point in enumerate(points):
        found, running = await _sweep_once(sock_dir / f"s{number}.sock", grace, inflight, point)
        problems += [f"cancel point {number}: {p}" for p in found]
        cancelled_while_running += running
    assert not problems, "\n".join(problems)
    # The sweep must really cancel stops in progress, or it proves nothing.
    assert cancelled_while_running >= len(points) // 4


async def test_sdk_serve_cancelled_while_stopping_ends_and_removes_its_socket(
    sock_dir: Path,
) -> None:
    handler = debug_echo.create(
        sdk.HandlerOptions(environ={"DEBUG_ECHO_AVAILABILITY_FILE": str(sock_dir / "a")})
    )
    ready = asyncio.Event()
    settings = sdk.ServeSettings(directory=sock_dir, shutdown_grace=30.0)
    socket = sock_dir / "debugEcho.sock"
    async with asyncio.TaskGroup() as tg:
        serve = tg.create_task(
            sdk.serve(handler, settings, on_ready=lambda _: ready.set()), name="serve"
        )
        await ready.wait()
        call = Call(socket, "descriptions: [x]")
        try:
            reader = tg.create_task(call.read(), name="reader")
            async with asyncio.timeout(5):
                await call.lists.wait()
            serve.cancel()  # serve stops its server: the open stream gets 30 s of grace ...
            await asyncio.sleep(0.1)
            assert not serve.done()
            serve.cancel()  # ... and a second cancel must end it now.
            async with asyncio.timeout(2):
                await asyncio.wait([serve])
                await reader
            assert serve.cancelled()
            assert not socket.exists()
            assert call.error is not None
        finally:
            await call.close()


async def test_registry_cancelled_while_stopping_propagates(sock_dir: Path) -> None:
    stopping = asyncio.Event()

    async def run() -> None:
        settings = registry.RegistrySettings(directory=sock_dir)
        try:
            async with registry.running(settings):
                await asyncio.sleep(3600)
        finally:
            stopping.set()

    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(run(), name="registry")
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.wait([task])
        assert task.cancelled()
        assert stopping.is_set()
        assert not (sock_dir / sdk.REGISTRATION_SOCKET).exists()
