"""``edgehub handler debugEcho`` as a separate process, driven by an independent gRPC client
(message classes compiled from discovery.proto in a private pool, raw method paths)."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from discovery_support import FakeAgent, HandlerProcesses, IndependentProto, wait_until


def _details_request(proto: IndependentProto, details: str, **props: bytes | None) -> Any:
    request = proto.message("DiscoverRequest")(discovery_details=details)
    for key, value in props.items():
        entry = request.discovery_properties[key]
        if value is not None:
            entry.vec = value
    return request


def _ids(response: Any) -> list[str]:
    return [d.id for d in response.devices]


def _start_debug_echo(
    procs: HandlerProcesses, sock_dir: Path, *extra: str, shared: str = "true"
) -> Any:
    return procs.start(
        "debugEcho",
        "--discovery-handlers-directory",
        str(sock_dir),
        *extra,
        env={
            "DEBUG_ECHO_AVAILABILITY_FILE": str(sock_dir / "availability"),
            "DEBUG_ECHO_POLL_SECONDS": "0.05",
            "DEBUG_ECHO_INSTANCES_SHARED": shared,
        },
    )


async def test_registers_and_streams_full_lists_on_change(
    fake_agent: FakeAgent, handler_processes: HandlerProcesses, sock_dir: Path
) -> None:
    proc = _start_debug_echo(handler_processes, sock_dir, shared="false")
    registration = await fake_agent.next_registration()
    assert registration.name == "debugEcho"
    assert registration.endpoint == str(sock_dir / "debugEcho.sock")
    assert registration.endpoint_type == 0  # UDS
    assert registration.shared is False

    availability = sock_dir / "availability"
    async with grpc.aio.insecure_channel(f"unix:{registration.endpoint}") as channel:
        call = fake_agent.discover_call(channel)(
            _details_request(fake_agent.proto, "descriptions: [foo1, foo2]", unused=None)
        )
        first = await call.read()
        assert _ids(first) == ["foo1", "foo2"]
        assert dict(first.devices[0].properties) == {"DEBUG_ECHO_DESCRIPTION": "foo1"}
        availability.write_text("OFFLINE\n")
        assert _ids(await call.read()) == []
        availability.write_text("ONLINE\n")
        assert _ids(await call.read()) == ["foo1", "foo2"]
        call.cancel()

    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 10) == 0
    assert not (sock_dir / "debugEcho.sock").exists()


@pytest.mark.parametrize(
    ("details", "mentions"),
    [
        ("", "descriptions: required"),
        ("descriptons: [b]", "descriptions: required"),
        ("descriptions: [a", "not valid YAML"),
        ('{"descriptions": "a"}', "descriptions: expected a list"),
        ("descriptions: [[1]]", "descriptions[0]: expected a string"),
    ],
)
async def test_invalid_details_are_invalid_argument_naming_the_field(
    fake_agent: FakeAgent,
    handler_processes: HandlerProcesses,
    sock_dir: Path,
    details: str,
    mentions: str,
) -> None:
    _start_debug_echo(handler_processes, sock_dir)
    registration = await fake_agent.next_registration()
    async with grpc.aio.insecure_channel(f"unix:{registration.endpoint}") as channel:
        call = fake_agent.discover_call(channel)(_details_request(fake_agent.proto, details))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call.read()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert mentions in (caught.value.details() or "")


async def test_reregisters_promptly_when_the_agent_restarts(
    fake_agent: FakeAgent, handler_processes: HandlerProcesses, sock_dir: Path
) -> None:
    # Default 10 s retry: recovery must come from noticing the new socket, not a retry tick.
    _start_debug_echo(handler_processes, sock_dir)
    first = await fake_agent.next_registration()
    async with grpc.aio.insecure_channel(f"unix:{first.endpoint}") as channel:
        call = fake_agent.discover_call(channel)(
            _details_request(fake_agent.proto, "descriptions: [a]")
        )
        await call.read()
        await fake_agent.stop()
        call.cancel()
    await asyncio.sleep(0.3)  # the agent is away for a moment
    restarted = time.monotonic()
    await fake_agent.start()
    # Half the retry interval: well clear of a retry tick, with room for a loaded machine.
    again = await fake_agent.next_registration(seconds=5)
    assert again.endpoint == first.endpoint
    assert time.monotonic() - restarted < 5.0


async def test_waits_for_an_agent_that_starts_later(
    independent_proto: IndependentProto, handler_processes: HandlerProcesses, sock_dir: Path
) -> None:
    _start_debug_echo(handler_processes, sock_dir)
    await wait_until(lambda: (sock_dir / "debugEcho.sock").exists())
    await asyncio.sleep(0.3)  # at least one failed registration attempt
    agent = FakeAgent(independent_proto, sock_dir / "agent-registration.sock")
    await agent.start()
    try:
        registration = await agent.next_registration(seconds=3)
        assert registration.name == "debugEcho"
    finally:
        await agent.stop()


async def test_network_endpoint_with_pod_ip(
    fake_agent: FakeAgent, handler_processes: HandlerProcesses, sock_dir: Path
) -> None:
    _start_debug_echo(handler_processes, sock_dir, "--pod-ip", "127.0.0.1", "--port", "0")
    registration = await fake_agent.next_registration()
    assert registration.endpoint_type == 1  # NETWORK
    assert registration.endpoint.startswith("http://127.0.0.1:")
    target = registration.endpoint.removeprefix("http://")
    async with grpc.aio.insecure_channel(target) as channel:
        call = fake_agent.discover_call(channel)(
            _details_request(fake_agent.proto, "descriptions: [net0]")
        )
        assert _ids(await call.read()) == ["net0"]
        call.cancel()


async def test_stale_socket_is_replaced(
    fake_agent: FakeAgent, handler_processes: HandlerProcesses, sock_dir: Path
) -> None:
    first = _start_debug_echo(handler_processes, sock_dir)
    await fake_agent.next_registration()
    first.send_signal(signal.SIGKILL)  # leaves debugEcho.sock behind
    await asyncio.to_thread(first.wait, 10)
    assert (sock_dir / "debugEcho.sock").exists()
    _start_debug_echo(handler_processes, sock_dir)
    registration = await fake_agent.next_registration()
    async with grpc.aio.insecure_channel(f"unix:{registration.endpoint}") as channel:
        call = fake_agent.discover_call(channel)(
            _details_request(fake_agent.proto, "descriptions: [x]")
        )
        assert _ids(await call.read()) == ["x"]
        call.cancel()


async def test_unknown_handler_is_a_startup_failure(handler_processes: HandlerProcesses) -> None:
    proc = handler_processes.start("noSuchHandler")
    assert await asyncio.to_thread(proc.wait, 10) == 3
