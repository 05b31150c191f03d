"""Helpers for discovery integration tests: handler processes, an independent gRPC client
built from discovery.proto (not from our committed stubs), and polling."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from google.protobuf import (  # type: ignore[import-untyped]
    descriptor_pb2,
    descriptor_pool,
    message_factory,
)

from discovery.proto import generate


class HandlerProcesses:
    """Starts ``python -m edgehub handler ...`` processes and stops them at teardown."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "edgehub", "--log-level", "debug", "handler", *args],
            env={**os.environ, **(env or {})},
        )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)


class IndependentProto:
    """Message classes for package v0 built from discovery.proto in a private descriptor pool
    (compiled fresh by protoc), so the test client shares no code with the implementation."""

    def __init__(self, workdir: Path) -> None:
        from grpc_tools import protoc

        out = workdir / "discovery.pb"
        status = protoc.main(
            [
                "protoc",
                f"--proto_path={generate.PROTO_DIR}",
                f"--descriptor_set_out={out}",
                "discovery.proto",
            ]
        )
        assert status == 0
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
        pool = descriptor_pool.DescriptorPool()
        for file in files.file:
            pool.Add(file)
        self.pool = pool

    def message(self, name: str) -> Any:
        return message_factory.GetMessageClass(self.pool.FindMessageTypeByName(f"v0.{name}"))


class FakeAgent:
    """An independent ``v0.Registration`` server that records registrations."""

    def __init__(self, proto: IndependentProto, socket_path: Path) -> None:
        self.proto = proto
        self.socket_path = socket_path
        self.registrations: asyncio.Queue[Any] = asyncio.Queue()
        self.server: grpc.aio.Server | None = None

    async def start(self) -> None:
        request_type = self.proto.message("RegisterDiscoveryHandlerRequest")
        empty = self.proto.message("Empty")

        async def register(request: Any, context: Any) -> Any:
            await self.registrations.put(request)
            return empty()

        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "v0.Registration",
                    {
                        "RegisterDiscoveryHandler": grpc.unary_unary_rpc_method_handler(
                            register,
                            request_deserializer=request_type.FromString,
                            response_serializer=empty.SerializeToString,
                        )
                    },
                ),
            )
        )
        if self.socket_path.exists():
            self.socket_path.unlink()
        self.server.add_insecure_port(f"unix:{self.socket_path}")
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(0)
            self.server = None
        if self.socket_path.exists():
            self.socket_path.unlink()

    async def next_registration(self, seconds: float = 10.0) -> Any:
        async with asyncio.timeout(seconds):
            return await self.registrations.get()

    def discover_call(self, channel: grpc.aio.Channel) -> Any:
        return channel.unary_stream(
            "/v0.DiscoveryHandler/Discover",
            request_serializer=self.proto.message("DiscoverRequest").SerializeToString,
            response_deserializer=self.proto.message("DiscoverResponse").FromString,
        )


async def wait_until(
    predicate: Callable[[], bool | Awaitable[bool]], seconds: float = 10.0, step: float = 0.02
) -> None:
    async with asyncio.timeout(seconds):
        while True:
            result = predicate()
            if not isinstance(result, bool):
                result = await result
            if result:
                return
            await asyncio.sleep(step)
