"""edgehub's registry and handlers against Akri's own gRPC stack (``tests/akripeer``: tonic 0.13
over h2 0.4, the HTTP/2 implementation of Akri's agent and handlers), over Unix sockets.

What grpc-python against grpc-python cannot show: h2 resets every stream whose ``:authority``
is not a valid authority (grpc-python's default for a ``unix:`` target is the percent-encoded
path), and Akri's handlers register *before* they bind their socket. Also here: a peer that
resets our streams is named in one log line, and a socket is only ever removed by its creator.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
from pathlib import Path

import akripeer_support as akripeer
import pytest
from discovery_support import HandlerProcesses, wait_until

from discovery import grpcserving, registry, sdk, wire
from discovery.handlers import debug_echo

FAST = registry.RegistrySettings(
    directory=None, connect_timeout=2.0, initial_backoff=0.05, max_backoff=0.2
)


def _echo_process(procs: HandlerProcesses, sock_dir: Path) -> None:
    procs.start(
        "debugEcho",
        "--discovery-handlers-directory",
        str(sock_dir),
        env={
            "DEBUG_ECHO_AVAILABILITY_FILE": str(sock_dir / "availability"),
            "DEBUG_ECHO_POLL_SECONDS": "0.05",
            "DEBUG_ECHO_INSTANCES_SHARED": "false",
        },
    )


async def test_debug_echo_registers_with_akris_registration_server_and_answers_discover(
    sock_dir: Path, handler_processes: HandlerProcesses
) -> None:
    registration = sock_dir / sdk.REGISTRATION_SOCKET
    async with akripeer.running(
        "registration", "--socket", str(registration), "--details", "descriptions: [foo0, foo1]"
    ) as peer:
        await peer.next_event("listening")
        _echo_process(handler_processes, sock_dir)
        registered = await peer.next_event("registered")
        assert registered == {
            "event": "registered",
            "name": "debugEcho",
            "endpoint": str(sock_dir / "debugEcho.sock"),
            "endpoint_type": "UDS",
            "shared": False,
        }
        listed = await peer.next_event("devices")
        assert listed["devices"] == [
            {"id": "foo0", "properties": {"DEBUG_ECHO_DESCRIPTION": "foo0"}},
            {"id": "foo1", "properties": {"DEBUG_ECHO_DESCRIPTION": "foo1"}},
        ]
        # The stream stays open: a change reaches Akri's side as a new full list.
        (sock_dir / "availability").write_text("OFFLINE")
        assert (await peer.next_event("devices"))["devices"] == []


async def test_registry_streams_from_an_akri_handler_that_registers_before_it_binds(
    sock_dir: Path,
) -> None:
    async with registry.running(dataclasses.replace(FAST, directory=sock_dir)) as reg:
        request = reg.request("ns/cfg", "debugEcho", "descriptions: [ignored]")
        handler_socket = sock_dir / "debugEcho.sock"
        async with akripeer.running(
            "handler",
            "--socket",
            str(handler_socket),
            "--register",
            str(sock_dir / sdk.REGISTRATION_SOCKET),
            "--shared",
            "--device",
            "cam1",
            "--device",
            "cam0",
        ) as peer:
            await peer.next_event("registered")
            assert (await peer.next_event("discover"))["details"] == "descriptions: [ignored]"
            async with asyncio.timeout(10):
                async for snapshot in request.snapshots():
                    if snapshot.devices:
                        break
            uid = f"debugEcho@{handler_socket}"
            assert [(d.device.id, d.shared, d.endpoint) for d in snapshot.devices] == [
                ("cam0", True, uid),
                ("cam1", True, uid),
            ]
            assert snapshot.devices[0].device.properties == {"DEBUG_ECHO_DESCRIPTION": "cam0"}


async def test_a_socket_that_never_appears_removes_the_endpoint_naming_it(
    sock_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = dataclasses.replace(FAST, directory=sock_dir, socket_wait=0.3)
    missing = sock_dir / "late.sock"
    async with (
        registry.running(settings) as reg,
        grpcserving.unix_channel(sock_dir / sdk.REGISTRATION_SOCKET) as channel,
    ):
        request = reg.request("ns/cfg", "late", "")
        # Accepted: Akri's handlers bind right after registering.
        await wire.register_call(channel)(wire.register_request("late", str(missing), False, True))
        assert [e.uid for e in reg.endpoints()] == [f"late@{missing}"]
        await wait_until(lambda: reg.endpoints() == (), seconds=10)
        assert request.snapshot().endpoints == ()
    removals = [
        r.getMessage() for r in caplog.records if "removing discovery handler" in r.getMessage()
    ]
    gone = f"its socket {missing} did not appear within 0.3s"
    assert removals == [f"removing discovery handler late@{missing}: {gone}"]


async def test_a_handler_that_resets_our_streams_is_named_in_one_line(
    sock_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="discovery.registry")
    handler_socket = sock_dir / "debugEcho.sock"
    async with (
        akripeer.running("reset", "--socket", str(handler_socket)) as peer,
        registry.running(dataclasses.replace(FAST, directory=sock_dir)) as reg,
    ):
        await peer.next_event("listening")
        reg.register(
            registry.Endpoint("debugEcho", str(handler_socket), registry.EndpointKind.UDS, True)
        )
        request = reg.request("ns/cfg", "debugEcho", "descriptions: [a]")
        uid = f"debugEcho@{handler_socket}"
        async with asyncio.timeout(10):
            async for snapshot in request.snapshots():
                if uid in snapshot.errors:
                    break
        error = snapshot.errors[uid]
        assert error.startswith(f"handler at {handler_socket} reset the stream (PROTOCOL_ERROR): ")
        # Our requests carry an authority h2 accepts: the reset is the peer's own choice here.
        assert (await peer.next_event("reset"))["authority"] == grpcserving.UNIX_AUTHORITY
        # Retries that fail alike add no further warnings.
        await peer.next_event("reset")
        await peer.next_event("reset")
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name == "discovery.registry"
    ]
    assert warnings == [f"discovery of ns/cfg from {uid} failed: {error}"]


async def test_a_registration_server_that_resets_our_streams_is_named_in_one_line(
    sock_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registration = sock_dir / sdk.REGISTRATION_SOCKET
    handler = debug_echo.create(sdk.HandlerOptions(environ={}))
    settings = sdk.ServeSettings(directory=sock_dir, registration_retry=0.2)
    async with akripeer.running("reset", "--socket", str(registration)) as peer:
        await peer.next_event("listening")
        async with asyncio.TaskGroup() as tg:
            serve = tg.create_task(sdk.serve(handler, settings), name="serve")
            assert (await peer.next_event("reset"))["path"] == wire.REGISTER_METHOD
            await peer.next_event("reset")
            await peer.next_event("reset")
            serve.cancel()
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name == "discovery.sdk"
    ]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(
        f"registering debugEcho with the agent failed: the agent at {registration} "
        "reset the stream (PROTOCOL_ERROR): "
    )


def _take_over(path: Path) -> socket.socket:
    """Another process's socket at ``path``: what a second server of that name would leave."""
    path.unlink()
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(str(path))
    return other


async def test_a_handler_removes_only_the_socket_it_bound(sock_dir: Path) -> None:
    handler = debug_echo.create(sdk.HandlerOptions(environ={}))
    ready = asyncio.Event()
    path = sock_dir / "debugEcho.sock"
    async with asyncio.TaskGroup() as tg:
        serve = tg.create_task(
            sdk.serve(handler, sdk.ServeSettings(sock_dir), on_ready=lambda _: ready.set()),
            name="serve",
        )
        await ready.wait()
        with _take_over(path):
            identity = path.lstat().st_ino
            serve.cancel()
            await asyncio.wait([serve])
            assert path.lstat().st_ino == identity, "the other process's socket was removed"
    # A socket that still is ours is removed as before.
    async with asyncio.TaskGroup() as tg:
        ready.clear()
        serve = tg.create_task(
            sdk.serve(handler, sdk.ServeSettings(sock_dir), on_ready=lambda _: ready.set()),
            name="serve",
        )
        await ready.wait()
        serve.cancel()
    assert not path.exists()


async def test_the_registry_removes_only_the_registration_socket_it_bound(sock_dir: Path) -> None:
    path = sock_dir / sdk.REGISTRATION_SOCKET
    async with registry.running(dataclasses.replace(FAST, directory=sock_dir)):
        other = _take_over(path)
        identity = path.lstat().st_ino
    with other:
        assert path.lstat().st_ino == identity, "the other process's socket was removed"
