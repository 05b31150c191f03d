"""Agent side of the discovery protocol: registered handlers, discovery requests, device lists.

The discovery agent builds on this module. Everything runs inside :func:`running`, which owns
the ``v0.Registration`` server and one task group for every stream::

    async with registry.running(registry.RegistrySettings(directory=Path("/var/lib/akri"))) as reg:
        reg.register_embedded(debug_echo.create(sdk.HandlerOptions(os.environ)))
        request = reg.request(
            "default/my-config", "debugEcho", details_text, properties=resolve_properties
        )
        async for snapshot in request.snapshots():
            ...  # snapshot.devices, snapshot.reported, snapshot.invalid_details
        await reg.stop_request("default/my-config")

API (all methods are called from the event loop that entered :func:`running`):

* ``Registry.request(key, handler_name, details, properties) -> DiscoveryRequest`` starts (or
  returns the identical running) request for a Configuration ``key``; a request with other
  details/name/properties under the same key is replaced. ``properties`` is an async callable
  returning ``Mapping[str, bytes | None]`` (``None`` = a property without a value); it is
  called before every (re)query of an endpoint, so ConfigMap/Secret changes are picked up.
  ``await Registry.stop_request(key)`` ends it; ``Registry.get_request(key)`` looks it up.
* ``DiscoveryRequest.snapshot()`` is the current :class:`Snapshot`; ``await
  DiscoveryRequest.wait_for_change(version)`` returns the first snapshot with a higher
  version; ``DiscoveryRequest.snapshots()`` iterates the current snapshot and then every change
  (intermediate versions are coalesced: each snapshot is complete).
* ``Registry.register_embedded(handler)`` adds an in-process handler (uid ``<name>@embedded``).
* ``Registry.endpoints(name=None)`` lists registered :class:`Endpoint` s;
  ``Registry.handler_names()`` the names with at least one endpoint.
* ``Registry.registrations()`` is an async iterator of handler names, yielded whenever an
  endpoint of that name is registered (new or re-registered, including an agent restart
  being noticed by the handler). The agent re-triggers Configurations waiting for that name.
  Each iterator has its own bounded pending set (one entry per name).

Semantics (Akri reference §1.4, without its quirks):
  * Endpoints are keyed ``<name>@<endpoint>``; registering the same uid again is idempotent
    (a live stream is kept; a waiting retry is woken up). A changed ``shared`` flag or
    endpoint type replaces the endpoint and restarts its streams.
  * A request streams ``Discover`` from every endpoint of its handler name, including those
    registering later, and merges their lists: devices are de-duplicated by ``(id, shared)``
    (a shared device is one Instance cluster-wide, a local one is per node), the endpoint
    with the smallest uid winning; the merged list is sorted by ``(id, shared)``.
  * A stream that ends or fails drops that endpoint's devices and is retried with capped
    exponential back-off (not the whole request, as Akri does); a successful list resets it.
  * Failing to connect to an endpoint removes it from the registry (its streams stop); it
    comes back when the handler re-registers.
  * A failed stream is logged once per distinct cause (then at debug level), naming the
    handler's socket and the gRPC status; a handler that resets our streams (HTTP/2
    ``RST_STREAM``) is named as such (``wire.describe_failure``).
  * ``INVALID_ARGUMENT`` from a handler is final for that request/endpoint: it is reported
    in ``Snapshot.invalid_details`` (the Configuration must change) and not retried.
  * Property resolution errors are reported in ``Snapshot.errors`` and retried with back-off.

Trust (THREAT_MODEL.md, "Discovery"): the registration socket is created mode
``RegistrySettings.socket_mode`` (0660) explicitly, never by umask: only its owner, its group
and root can register. What they register and report passes ``discovery.admission`` (device
paths judged where their links lead, resolved here off the loop, once per list): a refused
registration ends with ``INVALID_ARGUMENT`` naming the field and one log line; UDS
endpoints must also *be* a socket in the handlers directory (checked here, off the loop, at
registration and again before each dial). A socket that does not exist *yet* is not refused:
Akri's handlers register before they bind, so the registration is accepted and dialling waits
up to ``RegistrySettings.socket_wait`` for the socket (looking with capped back-off), then
removes the endpoint with one log line naming the path;
at most ``max_endpoints_per_name`` endpoints per name (``RESOURCE_EXHAUSTED``). A device
that cannot be admitted is left out of its endpoint's list, logged once per stream and
reported in ``Snapshot.rejected``; a writable mount is made read-only unless allowed.

Dangers: a misbehaving handler can only cost one bounded stream per request; device lists
are capped at ``RegistrySettings.max_devices`` per endpoint (the excess is dropped with an
error) and registrations at ``RegistrySettings.max_endpoints`` (re-registering a known
endpoint always works). All state is owned by one event loop; no locking.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import os
import stat
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
import grpc.aio

from discovery import admission, details, devices, grpcserving, sdk, wire
from discovery.proto import discovery_pb2

logger = logging.getLogger(__name__)

PropertiesSource = Callable[[], Awaitable[Mapping[str, bytes | None]]]


async def no_properties() -> Mapping[str, bytes | None]:
    return {}


class EndpointKind(enum.Enum):
    UDS = "uds"
    NETWORK = "network"
    EMBEDDED = "embedded"


@dataclasses.dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    endpoint: str
    """Socket path (UDS), ``http://ip:port`` (NETWORK) or ``embedded``."""
    kind: EndpointKind
    shared: bool

    @property
    def uid(self) -> str:
        return f"{self.name}@{self.endpoint}"

    @property
    def target(self) -> str:
        """gRPC target to dial."""
        if self.kind is EndpointKind.UDS:
            return f"unix:{self.endpoint}"
        parts = urlsplit(self.endpoint if "://" in self.endpoint else f"http://{self.endpoint}")
        host = parts.hostname or ""
        port = parts.port
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclasses.dataclass(frozen=True, slots=True)
class DiscoveredDevice:
    device: devices.Device
    shared: bool
    endpoint: str
    """uid of the endpoint whose report this is."""


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """The merged state of one request. Every field is complete (not a delta)."""

    version: int
    devices: tuple[DiscoveredDevice, ...] = ()
    endpoints: tuple[str, ...] = ()
    """uids of the endpoints this request currently queries (streaming or retrying)."""
    reported: frozenset[str] = frozenset()
    """uids of the endpoints that delivered at least one device list on their current stream
    (an empty list counts). Tells "reported nothing" from "has not reported yet": a stream
    that ends or fails leaves this set until its next stream delivers a list."""
    invalid_details: str | None = None
    """Set when a handler rejected the details (gRPC INVALID_ARGUMENT); report it on the
    Configuration. Not retried until the request is replaced."""
    errors: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Last transient error per endpoint uid (stream failures, property resolution)."""
    rejected: tuple[str, ...] = ()
    """Why devices reported by the current streams were left out (``discovery.admission``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class RegistrySettings:
    directory: Path | None
    """``DISCOVERY_HANDLERS_DIRECTORY``; ``None`` serves no socket (embedded handlers only)."""
    connect_timeout: float = 2.0
    """Seconds to wait for a handler endpoint to accept a connection before removing it."""
    socket_wait: float = 10.0
    """Seconds a UDS endpoint's socket gets to appear before the endpoint is removed. Akri's
    handlers register first and bind their socket right after, so a registration naming a
    socket that is not there yet is accepted, and dialling waits for it."""
    socket_poll_initial: float = 0.01
    """First delay between looks for a socket that is not there yet (doubling)."""
    socket_poll_max: float = 0.25
    """Cap of that delay."""
    initial_backoff: float = 0.5
    """First delay before re-querying an endpoint whose stream ended or failed."""
    max_backoff: float = 10.0
    """Cap of the doubling back-off (one registration interval)."""
    max_devices: int = 10_000
    """Devices accepted per endpoint list; a hostile handler cannot grow memory without bound."""
    max_message_bytes: int = 16 * 1024 * 1024
    """Largest DiscoverResponse accepted."""
    max_endpoints: int = 256
    """Registered endpoints; more are refused (``RESOURCE_EXHAUSTED``). Each one costs a
    stream per request, so whatever can reach the registration socket must not grow that
    without bound (a node runs a handful of handlers)."""
    max_endpoints_per_name: int = 16
    """Endpoints of one handler name (``RESOURCE_EXHAUSTED`` above): every request using
    that name streams from each of them."""
    socket_mode: int = 0o660
    """Mode of ``agent-registration.sock``, set explicitly (the umask plays no part)."""
    handler_networks: tuple[admission.Network, ...] = ()
    """Where NETWORK endpoints may be (``--handler-networks``); empty refuses them all."""
    writable_mount_handlers: frozenset[str] = frozenset()
    """Handler names whose device mounts may stay writable (``--writable-mount-handlers``)."""
    protected_paths: tuple[Path, ...] = ()
    """Host directories of the agent's own no device mount may expose; the handlers directory
    always is."""
    protected_trees: tuple[admission.Tree, ...] = ()
    """Host paths no device mount may expose besides ``admission.TREES``: the embedding
    hub's, the operator's (``--protected-mount-paths``)."""

    def policy(self) -> admission.Policy:
        directory = None if self.directory is None else os.path.abspath(self.directory)
        protected = {os.path.abspath(p) for p in self.protected_paths}
        if directory is not None:
            protected.add(directory)
        return admission.Policy(
            handlers_directory=directory,
            registration_socket=(
                None if directory is None else os.path.join(directory, sdk.REGISTRATION_SOCKET)
            ),
            networks=self.handler_networks,
            writable_mounts=self.writable_mount_handlers,
            protected=tuple(sorted(protected)),
            trees=(*admission.TREES, *self.protected_trees),
        )


def endpoint_from_request(
    message: discovery_pb2.RegisterDiscoveryHandlerRequest, policy: admission.Policy
) -> Endpoint:
    """The endpoint a registration asks for; ``admission.Refused`` names what is wrong."""
    if message.endpoint_type not in (wire.NETWORK, wire.UDS):
        raise admission.Refused("endpoint_type", f"unknown value {message.endpoint_type}")
    network = message.endpoint_type == wire.NETWORK
    checked = admission.endpoint(message.name, message.endpoint, network, policy)
    kind = EndpointKind.NETWORK if network else EndpointKind.UDS
    return Endpoint(checked.name, checked.endpoint, kind, message.shared)


def resolve(paths: Iterable[str]) -> dict[str, str]:
    """Where each path's links lead (``os.path.realpath``: as far as the path exists).
    Blocking: run off the loop."""
    return {path: os.path.realpath(path) for path in paths}


def check_socket(path: str) -> bool:
    """Whether ``path`` is a Unix socket (not a link to one); ``False`` if nothing is there
    yet. ``admission.Refused`` if something else is there or it cannot be looked at. Blocking."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as e:
        raise admission.Refused("endpoint", f"{path!r}: {e.strerror or e}") from None
    if not stat.S_ISSOCK(mode):
        raise admission.Refused("endpoint", f"{path!r} is not a Unix socket")
    return True


def merge(
    per_endpoint: Mapping[str, tuple[bool, list[devices.Device]]],
) -> tuple[DiscoveredDevice, ...]:
    """Merge endpoint lists: one device per ``(id, shared)``; the smallest uid wins."""
    merged: dict[tuple[str, bool], DiscoveredDevice] = {}
    for uid in sorted(per_endpoint):
        shared, found = per_endpoint[uid]
        for device in found:
            merged.setdefault((device.id, shared), DiscoveredDevice(device, shared, uid))
    return tuple(merged[key] for key in sorted(merged))


class _Backoff:
    def __init__(self, initial: float, cap: float) -> None:
        self._initial = initial
        self._cap = cap
        self._next = initial

    def reset(self) -> None:
        self._next = self._initial

    def take(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self._cap)
        return delay


class _Kick:
    """Wakes a retry wait early (the endpoint re-registered)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def fire(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    async def sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._event.wait()
        self._event.clear()


class _EndpointGone(Exception):
    """The endpoint did not accept a connection; it is removed from the registry."""


class DiscoveryRequest:
    """One Configuration's discovery: streams from every endpoint of one handler name."""

    def __init__(
        self,
        registry: Registry,
        key: str,
        handler_name: str,
        details_text: str,
        properties: PropertiesSource,
    ) -> None:
        self.key = key
        self.handler_name = handler_name
        self.details = details_text
        self.properties = properties
        self._registry = registry
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._kicks: dict[str, _Kick] = {}
        self._lists: dict[str, tuple[bool, list[devices.Device]]] = {}
        self._errors: dict[str, str] = {}
        self._rejected: dict[str, dict[str, str]] = {}
        """uid -> device id -> why it was left out, for the current stream of each endpoint."""
        self._downgraded: dict[str, set[str]] = {}
        self._invalid: str | None = None
        self._snapshot = Snapshot(version=0)
        # Set (and replaced) on every publish: waiters hold the event of the version they saw.
        self._changed = asyncio.Event()
        self._stopped = False

    # -- reading

    def snapshot(self) -> Snapshot:
        return self._snapshot

    async def wait_for_change(self, version: int) -> Snapshot:
        while self._snapshot.version <= version:
            await self._changed.wait()
        return self._snapshot

    async def snapshots(self) -> AsyncGenerator[Snapshot, None]:
        snapshot = self._snapshot
        yield snapshot
        while True:
            snapshot = await self.wait_for_change(snapshot.version)
            yield snapshot

    # -- state changes (event loop only)

    def _publish(self) -> None:
        candidate = Snapshot(
            version=self._snapshot.version + 1,
            devices=merge(self._lists),
            endpoints=tuple(sorted(self._tasks)),
            reported=frozenset(self._lists),
            invalid_details=self._invalid,
            errors=dict(sorted(self._errors.items())),
            rejected=tuple(
                sorted(m for uid in sorted(self._rejected) for m in self._rejected[uid].values())
            ),
        )
        if dataclasses.replace(candidate, version=self._snapshot.version) == self._snapshot:
            return
        self._snapshot = candidate
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _set_list(self, uid: str, shared: bool, found: list[devices.Device]) -> None:
        self._lists[uid] = (shared, found)
        self._errors.pop(uid, None)
        self._publish()

    def _drop(self, uid: str, error: str | None) -> None:
        self._lists.pop(uid, None)
        self._rejected.pop(uid, None)
        self._downgraded.pop(uid, None)
        if error is None:
            self._errors.pop(uid, None)
        else:
            self._errors[uid] = error
        self._publish()

    # -- endpoints

    def _attach(self, endpoint: Endpoint) -> None:
        if self._stopped or endpoint.uid in self._tasks or self._invalid is not None:
            return
        kick = _Kick()
        self._kicks[endpoint.uid] = kick
        self._tasks[endpoint.uid] = self._registry._spawn(
            self._stream(endpoint, kick), name=f"discover {self.key} from {endpoint.uid}"
        )
        self._publish()

    def _kick(self, uid: str) -> None:
        kick = self._kicks.get(uid)
        if kick is not None:
            kick.fire()

    def _detach(self, uid: str) -> asyncio.Task[None] | None:
        task = self._tasks.pop(uid, None)
        self._kicks.pop(uid, None)
        self._lists.pop(uid, None)
        self._errors.pop(uid, None)
        self._rejected.pop(uid, None)
        self._downgraded.pop(uid, None)
        self._publish()
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            return task
        return None

    async def _stop(self) -> None:
        self._stopped = True
        tasks = [t for uid in list(self._tasks) if (t := self._detach(uid)) is not None]
        if tasks:
            # wait(), not ``await task`` under suppress(CancelledError): that would also swallow
            # a cancellation of the task calling _stop.
            await asyncio.wait(tasks)

    async def _stream(self, endpoint: Endpoint, kick: _Kick) -> None:
        settings = self._registry.settings
        backoff = _Backoff(settings.initial_backoff, settings.max_backoff)
        logged: str | None = None
        try:
            while True:
                # A re-registration while a stream was healthy must not skip the next back-off.
                kick.clear()
                try:
                    properties = await self.properties()
                    if endpoint.kind is EndpointKind.EMBEDDED:
                        await self._stream_embedded(endpoint, properties, backoff)
                    else:
                        await self._stream_grpc(endpoint, properties, backoff)
                    self._drop(endpoint.uid, "discovery stream ended")
                    logger.warning("%s closed the discovery stream of %s", endpoint.uid, self.key)
                except _InvalidDetails as e:
                    logger.warning("%s rejected the details of %s: %s", endpoint.uid, self.key, e)
                    self._invalid = str(e)
                    self._drop(endpoint.uid, None)
                    return
                except _EndpointGone as e:
                    logger.warning("removing discovery handler %s: %s", endpoint.uid, e)
                    self._drop(endpoint.uid, str(e))
                    self._registry._remove(endpoint.uid)
                    return
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    cause = str(e) or type(e).__name__
                    if endpoint.uid in self._lists:
                        logged = None  # this stream had worked: its failure is news again
                    # One line per distinct cause: a retry that fails alike is no news.
                    level = logging.DEBUG if cause == logged else logging.WARNING
                    logged = cause
                    logger.log(
                        level, "discovery of %s from %s failed: %s", self.key, endpoint.uid, cause
                    )
                    self._drop(endpoint.uid, cause)
                await kick.sleep(backoff.take())
        finally:
            if self._tasks.get(endpoint.uid) is asyncio.current_task():
                del self._tasks[endpoint.uid]
                self._kicks.pop(endpoint.uid, None)
                self._publish()

    async def _stream_embedded(
        self, endpoint: Endpoint, properties: Mapping[str, bytes | None], backoff: _Backoff
    ) -> None:
        handler = self._registry._embedded[endpoint.name]
        try:
            parsed = handler.parse_details(self.details)
        except details.DetailsError as e:
            raise _InvalidDetails(f"invalid discoveryDetails for {endpoint.name}: {e}") from e
        for warning in sdk.details_warnings(parsed):
            logger.warning("discoveryDetails of %s for %s: %s", self.key, endpoint.name, warning)
        plain = {k: v or b"" for k, v in properties.items()}
        async for found in sdk.device_lists(handler, parsed, plain):
            backoff.reset()
            self._set_list(endpoint.uid, endpoint.shared, await self._admit(endpoint, found))

    async def _stream_grpc(
        self, endpoint: Endpoint, properties: Mapping[str, bytes | None], backoff: _Backoff
    ) -> None:
        settings = self._registry.settings
        options = (("grpc.max_receive_message_length", settings.max_message_bytes),)
        if endpoint.kind is EndpointKind.UDS:
            await self._wait_for_socket(endpoint)
            channel = grpcserving.unix_channel(endpoint.endpoint, options)
        else:
            channel = grpc.aio.insecure_channel(endpoint.target, options=options)
        async with channel:
            try:
                async with asyncio.timeout(settings.connect_timeout):
                    await channel.channel_ready()
            except TimeoutError as e:
                raise _EndpointGone(
                    f"no connection within {settings.connect_timeout:g}s to {endpoint.target}"
                ) from e
            request = wire.discover_request(self.details, properties)
            call = wire.discover_call(channel)(request)
            try:
                async for response in call:
                    backoff.reset()
                    found = await self._admit(endpoint, wire.devices_from_response(response))
                    self._set_list(endpoint.uid, endpoint.shared, found)
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    raise _InvalidDetails(e.details() or "invalid discoveryDetails") from e
                peer = f"handler at {endpoint.endpoint}"
                raise _StreamFailed(wire.describe_failure(peer, e.code().name, e.details())) from e
            finally:
                call.cancel()

    async def _wait_for_socket(self, endpoint: Endpoint) -> None:
        """Return once ``endpoint``'s socket exists; ``_EndpointGone`` if something else is
        there, or nothing within ``socket_wait`` seconds (see the module docstring)."""
        settings = self._registry.settings
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.socket_wait
        looks = _Backoff(settings.socket_poll_initial, settings.socket_poll_max)
        while True:
            try:
                if await asyncio.to_thread(check_socket, endpoint.endpoint):
                    return
            except admission.Refused as e:
                raise _EndpointGone(str(e)) from e
            left = deadline - loop.time()
            if left <= 0:
                raise _EndpointGone(
                    f"its socket {endpoint.endpoint} did not appear within "
                    f"{settings.socket_wait:g}s"
                )
            await asyncio.sleep(min(looks.take(), left))

    def _capped(self, endpoint: Endpoint, found: list[devices.Device]) -> list[devices.Device]:
        limit = self._registry.settings.max_devices
        if len(found) <= limit:
            return found
        logger.warning(
            "%s reported %d devices for %s; keeping the first %d",
            endpoint.uid,
            len(found),
            self.key,
            limit,
        )
        return found[:limit]

    async def _admit(self, endpoint: Endpoint, found: list[devices.Device]) -> list[devices.Device]:
        """The devices of one list that ``discovery.admission`` accepts (see module doc),
        judged on real paths: links are resolved off the loop, once per list."""
        policy = self._registry.policy
        found = self._capped(endpoint, found)
        real = await asyncio.to_thread(resolve, admission.paths_to_resolve(found, policy))
        admitted: list[devices.Device] = []
        rejected: dict[str, str] = {}
        downgraded: set[str] = set()
        before = self._rejected.get(endpoint.uid, {})
        was_downgraded = self._downgraded.get(endpoint.uid, set())
        for device in found:
            try:
                device, made_read_only = admission.device(device, endpoint.name, policy, real)
            except admission.Refused as e:
                message = f"{endpoint.uid}: {e}"
                rejected[device.id] = message
                if before.get(device.id) != message:
                    logger.warning("left out a device of %s: %s", self.key, message)
                continue
            if made_read_only:
                downgraded.add(device.id)
                if device.id not in was_downgraded:
                    logger.info(
                        "%s: writable mounts of device %r of %s made read-only "
                        "(not allowed for handler %r)",
                        endpoint.uid,
                        device.id,
                        self.key,
                        endpoint.name,
                    )
            admitted.append(device)
        self._rejected[endpoint.uid] = rejected
        self._downgraded[endpoint.uid] = downgraded
        return admitted


class _InvalidDetails(Exception):
    pass


class _StreamFailed(Exception):
    pass


class _Subscription:
    def __init__(self) -> None:
        self.pending: dict[str, None] = {}
        self.event = asyncio.Event()

    def push(self, name: str) -> None:
        self.pending[name] = None
        self.event.set()


class Registry:
    """Registered discovery handlers and the discovery requests running against them."""

    def __init__(self, settings: RegistrySettings, tg: asyncio.TaskGroup) -> None:
        self.settings = settings
        self.policy = settings.policy()
        self._tg = tg
        self._endpoints: dict[str, Endpoint] = {}
        self._embedded: dict[str, sdk.Handler[Any]] = {}
        self._requests: dict[str, DiscoveryRequest] = {}
        self._subscriptions: set[_Subscription] = set()
        self._closing = False

    # -- task ownership

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = self._tg.create_task(coro, name=name)
        return task

    # -- endpoints

    def endpoints(self, name: str | None = None) -> tuple[Endpoint, ...]:
        return tuple(
            e for uid, e in sorted(self._endpoints.items()) if name is None or e.name == name
        )

    def handler_names(self) -> set[str]:
        return {e.name for e in self._endpoints.values()}

    def register(self, endpoint: Endpoint) -> None:
        """Add or refresh an endpoint (idempotent for an unchanged registration)."""
        if self._closing:
            return
        existing = self._endpoints.get(endpoint.uid)
        if existing != endpoint:
            if existing is not None:
                self._remove(endpoint.uid)
            self._endpoints[endpoint.uid] = endpoint
            logger.info(
                "registered discovery handler %s (%s, shared=%s)",
                endpoint.uid,
                endpoint.kind.value,
                endpoint.shared,
            )
        for request in self._requests.values():
            if request.handler_name == endpoint.name:
                request._attach(endpoint)
                request._kick(endpoint.uid)
        for subscription in self._subscriptions:
            subscription.push(endpoint.name)

    def register_embedded(self, handler: sdk.Handler[Any]) -> Endpoint:
        self._embedded[handler.name] = handler
        endpoint = Endpoint(handler.name, "embedded", EndpointKind.EMBEDDED, handler.shared)
        self.register(endpoint)
        return endpoint

    def _remove(self, uid: str) -> None:
        endpoint = self._endpoints.pop(uid, None)
        if endpoint is None:
            return
        for request in self._requests.values():
            request._detach(uid)
        logger.info("removed discovery handler %s", uid)

    async def registrations(self) -> AsyncGenerator[str, None]:
        """Handler names as endpoints of theirs register (see the module docstring)."""
        subscription = _Subscription()
        self._subscriptions.add(subscription)
        try:
            while True:
                await subscription.event.wait()
                subscription.event.clear()
                names, subscription.pending = list(subscription.pending), {}
                for name in names:
                    yield name
        finally:
            self._subscriptions.discard(subscription)

    # -- requests

    def request(
        self,
        key: str,
        handler_name: str,
        details_text: str,
        properties: PropertiesSource = no_properties,
    ) -> DiscoveryRequest:
        """Start discovery for ``key`` (see the module docstring)."""
        if self._closing:
            raise RuntimeError("registry is shutting down")
        current = self._requests.get(key)
        if current is not None:
            if (current.handler_name, current.details, current.properties) == (
                handler_name,
                details_text,
                properties,
            ):
                return current
            self._requests.pop(key)
            self._spawn(current._stop(), name=f"stop request {key}")
        request = DiscoveryRequest(self, key, handler_name, details_text, properties)
        self._requests[key] = request
        for endpoint in self.endpoints(handler_name):
            request._attach(endpoint)
        return request

    def get_request(self, key: str) -> DiscoveryRequest | None:
        return self._requests.get(key)

    async def stop_request(self, key: str) -> None:
        request = self._requests.pop(key, None)
        if request is not None:
            await request._stop()

    async def _close(self) -> None:
        self._closing = True
        for key in list(self._requests):
            await self.stop_request(key)

    # -- the Registration service

    async def _register_rpc(
        self,
        message: discovery_pb2.RegisterDiscoveryHandlerRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> discovery_pb2.Empty:
        try:
            endpoint = endpoint_from_request(message, self.policy)
            if endpoint.kind is EndpointKind.UDS and not await asyncio.to_thread(
                check_socket, endpoint.endpoint
            ):
                # Akri's handlers bind just after registering: dialling waits for the socket.
                logger.info(
                    "discovery handler %s registered before its socket exists; "
                    "waiting up to %gs for it when dialling",
                    endpoint.uid,
                    self.settings.socket_wait,
                )
        except admission.Refused as e:
            logger.warning("refused a discovery handler registration: %s", e)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        if endpoint.uid not in self._endpoints:
            limit = self.settings.max_endpoints
            same_name = sum(1 for e in self._endpoints.values() if e.name == endpoint.name)
            per_name = self.settings.max_endpoints_per_name
            refusal = None
            if len(self._endpoints) >= limit:
                refusal = f"endpoint: {limit} discovery handler endpoints are registered already"
            elif same_name >= per_name:
                refusal = (
                    f"name: {same_name} endpoints of {endpoint.name!r} are registered already; "
                    f"at most {per_name}"
                )
            if refusal is not None:
                logger.warning("refused discovery handler %r: %s", endpoint.uid, refusal)
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
        self.register(endpoint)
        return discovery_pb2.Empty()


@contextlib.asynccontextmanager
async def running(settings: RegistrySettings) -> AsyncGenerator[Registry, None]:
    """Serve ``v0.Registration`` on ``<directory>/agent-registration.sock`` (stale socket
    replaced) and own every discovery stream until the block exits."""
    try:
        async with _serving(settings) as registry:
            yield registry
    except BaseExceptionGroup as group:
        # Streams never raise, so a group holds only the caller's own exception: re-raise it
        # unwrapped so callers see their error, not a TaskGroup artefact.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


@contextlib.asynccontextmanager
async def _serving(settings: RegistrySettings) -> AsyncGenerator[Registry, None]:
    server: grpc.aio.Server | None = None
    bound: grpcserving.BoundSocket | None = None
    async with asyncio.TaskGroup() as tg:
        registry = Registry(settings, tg)
        try:
            if settings.directory is not None:
                path = (settings.directory / sdk.REGISTRATION_SOCKET).absolute()
                grpcserving.prepare_unix_socket(path)
                server = grpc.aio.server()
                server.add_generic_rpc_handlers(
                    (wire.registration_service(registry._register_rpc),)
                )
                staged = grpcserving.add_unix_port(server, path)
                try:
                    await server.start()
                    # Only now is the socket ours to remove (an unusable one belongs to no one).
                    bound = staged.publish(settings.socket_mode)
                finally:
                    staged.discard()
                logger.info(
                    "discovery handler registration served on %s (mode %o)",
                    path,
                    settings.socket_mode,
                )
            yield registry
        finally:
            try:
                if server is not None:
                    await grpcserving.stop(server, 1.0)
            finally:
                if bound is not None:
                    bound.remove()
                await registry._close()
