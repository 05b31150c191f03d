"""A simulated kubelet for device-plugin tests: real gRPC over Unix sockets.

``SimKubelet`` serves ``v1beta1.Registration`` on ``<dir>/kubelet.sock``. For
each registered plugin it dials the plugin's socket and follows
``ListAndWatch`` like kubelet's device manager does, keeping the newest
device list per resource; tests wait on it (``wait_for_devices``) and call
``allocate`` like kubelet does at container creation. ``restart`` re-creates
the socket (and, like kubelet, wipes the plugin sockets), forgetting every
registration — plugins must notice and register again.

``SimPodResources`` serves ``v1.PodResourcesLister`` on a socket; the test
sets which device ids are "in use" (``set_in_use``).

Both are async context managers that own their tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from discovery import grpcserving
from discovery.proto import deviceplugin_v1beta1_pb2 as pb
from discovery.proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from discovery.proto import podresources_v1_pb2 as pr
from discovery.proto import podresources_v1_pb2_grpc as pr_grpc

logger = logging.getLogger(__name__)

Devices = dict[str, str]  # device id -> health


@dataclasses.dataclass
class Registered:
    resource: str
    endpoint: str
    version: str
    devices: Devices | None = None
    updates: int = 0
    task: asyncio.Task[None] | None = None


class SimKubelet(pb_grpc.RegistrationServicer):
    def __init__(self, directory: Path, *, reject: Callable[[str], str | None] | None = None):
        self.directory = directory
        self.reject = reject
        self.plugins: dict[str, Registered] = {}
        self.registrations: list[tuple[str, str]] = []
        self._changed = asyncio.Event()
        self._server: grpc.aio.Server | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._tg: asyncio.TaskGroup | None = None
        # Every ListAndWatch we follow, including those of plugins that re-registered since:
        # shutdown cancels them all, not only the ones ``plugins`` still names.
        self._follows: set[asyncio.Task[None]] = set()
        self._accepting = False

    @property
    def socket(self) -> Path:
        return self.directory / "kubelet.sock"

    async def __aenter__(self) -> SimKubelet:
        stack = contextlib.AsyncExitStack()
        self._tg = await stack.enter_async_context(asyncio.TaskGroup())
        self._stack = stack
        await self._serve()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._shutdown()
        if self._stack is not None:
            await self._stack.aclose()

    async def _serve(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(self, server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(f"unix:{self.socket}")
        self._accepting = True
        await server.start()
        self._server = server

    async def _shutdown(self) -> None:
        # Registrations stop first: a Register handled while we wait for the streams to end
        # would start a ListAndWatch nobody cancels, and our TaskGroup would wait for it for
        # ever (seen: a plugin re-registering during exit, its handler run after the server
        # had stopped). Every stream ever started is then cancelled until none is left.
        self._accepting = False
        try:
            if self._server is not None:
                server, self._server = self._server, None
                await grpcserving.stop(server, 0)
        finally:
            self.socket.unlink(missing_ok=True)
        while self._follows:
            pending = set(self._follows)
            for task in pending:
                task.cancel()
            # A timeout, not for ever: a cancellation swallowed inside grpc is sent again.
            await asyncio.wait(pending, timeout=1.0)  # never swallows a cancellation of ours
        self.plugins.clear()

    async def restart(self, *, wipe: bool = True, down_for: float = 0.0) -> None:
        """Like a kubelet restart: registrations forgotten, its socket (and plugins') re-created."""
        await self._shutdown()
        if wipe:
            for path in self.directory.glob("*.sock"):
                path.unlink(missing_ok=True)
        if down_for:
            await asyncio.sleep(down_for)
        # A new inode/ctime even on filesystems with coarse timestamps.
        await asyncio.sleep(0.01)
        await self._serve()
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # -- Registration service

    async def Register(self, request: Any, context: Any) -> Any:
        if not self._accepting:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet is shutting down")
        if request.version != "v1beta1":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unsupported version")
        reason = self.reject(request.resource_name) if self.reject else None
        if reason:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, reason)
        old = self.plugins.pop(request.resource_name, None)
        if old is not None and old.task is not None:
            old.task.cancel()
        plugin = Registered(request.resource_name, request.endpoint, request.version)
        self.plugins[request.resource_name] = plugin
        self.registrations.append((request.resource_name, request.endpoint))
        assert self._tg is not None
        plugin.task = self._tg.create_task(
            self._follow(plugin), name=f"sim kubelet ListAndWatch {request.resource_name}"
        )
        self._follows.add(plugin.task)
        plugin.task.add_done_callback(self._follows.discard)
        self._wake()
        return pb.Empty()

    async def _follow(self, plugin: Registered) -> None:
        try:
            async with grpcserving.unix_channel(self.directory / plugin.endpoint) as channel:
                stub = pb_grpc.DevicePluginStub(channel)  # type: ignore[no-untyped-call]
                async for response in stub.ListAndWatch(pb.Empty()):
                    plugin.devices = {d.ID: d.health for d in response.devices}
                    plugin.updates += 1
                    self._wake()
        except grpc.aio.AioRpcError as e:
            logger.debug("ListAndWatch of %s ended: %s", plugin.resource, e.code().name)
        if self.plugins.get(plugin.resource) is plugin:
            # kubelet drops a plugin whose stream ended.
            del self.plugins[plugin.resource]
            self._wake()

    # -- what tests use

    async def wait_for(self, predicate: Callable[[], bool], within: float = 10.0) -> None:
        async with asyncio.timeout(within):
            while not predicate():
                await self._changed.wait()

    async def wait_for_devices(
        self,
        resource: str,
        predicate: Callable[[Devices], bool] = bool,
        within: float = 10.0,
    ) -> Devices:
        def ok() -> bool:
            plugin = self.plugins.get(resource)
            return plugin is not None and plugin.devices is not None and predicate(plugin.devices)

        await self.wait_for(ok, within)
        devices = self.plugins[resource].devices
        assert devices is not None
        return devices

    async def allocate(self, resource: str, *containers: Iterable[str]) -> Any:
        """Allocate like kubelet: one ContainerAllocateRequest per container."""
        plugin = self.plugins[resource]
        async with grpcserving.unix_channel(self.directory / plugin.endpoint) as ch:
            stub = pb_grpc.DevicePluginStub(ch)  # type: ignore[no-untyped-call]
            request = pb.AllocateRequest(
                container_requests=[
                    pb.ContainerAllocateRequest(devices_ids=list(ids)) for ids in containers
                ]
            )
            return await stub.Allocate(request, timeout=10.0)

    async def options(self, resource: str) -> Any:
        plugin = self.plugins[resource]
        async with grpcserving.unix_channel(self.directory / plugin.endpoint) as ch:
            stub = pb_grpc.DevicePluginStub(ch)  # type: ignore[no-untyped-call]
            return await stub.GetDevicePluginOptions(pb.Empty(), timeout=5.0)


class SimPodResources(pr_grpc.PodResourcesListerServicer):
    """kubelet's pod-resources API with answers the test controls."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.in_use: dict[str, list[str]] = {}  # resource -> device ids
        self.calls = 0
        self.last_call = 0.0
        self._server: grpc.aio.Server | None = None

    def set_in_use(self, in_use: Mapping[str, Iterable[str]]) -> None:
        self.in_use = {resource: list(ids) for resource, ids in in_use.items()}

    async def __aenter__(self) -> SimPodResources:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        server = grpc.aio.server()
        pr_grpc.add_PodResourcesListerServicer_to_server(self, server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(f"unix:{self.socket}")
        self._accepting = True
        await server.start()
        self._server = server
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self._server is not None:
                await grpcserving.stop(self._server, 0)
        finally:
            self.socket.unlink(missing_ok=True)

    async def List(self, request: Any, context: Any) -> Any:
        self.calls += 1
        self.last_call = time.monotonic()
        containers = [
            pr.ContainerResources(
                name=f"c{n}",
                devices=[pr.ContainerDevices(resource_name=resource, device_ids=ids)],
            )
            for n, (resource, ids) in enumerate(sorted(self.in_use.items()))
        ]
        return pr.ListPodResourcesResponse(
            pod_resources=[pr.PodResources(name="pod", namespace="default", containers=containers)]
        )
