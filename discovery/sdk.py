"""The discovery-handler SDK: what a handler implements, and everything around it.

A handler implements :class:`Handler`: a ``name``, a ``shared`` flag, ``parse_details`` (raise
:class:`DetailsError` naming the bad field) and one async generator, ``discover``, that yields
the *complete* device list whenever it changes. The SDK does the rest:

* :func:`serve` runs it as an Akri-compatible discovery handler: serves ``v0.DiscoveryHandler``
  on ``$DISCOVERY_HANDLERS_DIRECTORY/<name>.sock`` (a stale socket is replaced) or on TCP
  ``$POD_IP:10000``, registers with ``agent-registration.sock``, keeps retrying while the
  agent is away, and re-registers promptly when the agent restarts (the registration socket
  is replaced) or drops a stream. Cancelling :func:`serve` stops the server and removes the
  socket, if the path still is the socket it bound (never one another process put there).
* :func:`device_lists` is the same stream in-process: the agent's registry consumes embedded
  handlers through it, and ``edgehub discover`` through :func:`discover_once`.
* :func:`load` finds handlers through the entry-point group ``edgehub.discovery_handlers``;
  each entry point names a :data:`HandlerFactory` taking :class:`HandlerOptions`.

Invariants:
  * Details are validated before a stream starts: invalid ones end the call with
    ``INVALID_ARGUMENT`` and a message naming the field; nothing is streamed.
  * A stream never sends the same list twice in a row, and lists are sorted by device id.
  * Per stream at most one list waits to be written: lists are full snapshots, so a slow
    reader gets the newest one and older unsent ones are dropped (never queued without bound).

Danger: a handler's ``discover`` runs once per open stream (one per Configuration that uses
it); expensive probing should be cheap to repeat or shared by the handler itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import ipaddress
import logging
import math
from collections.abc import AsyncGenerator, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

import grpc
import grpc.aio

from discovery import details, devices, grpcserving, handlers, wire
from discovery.proto import discovery_pb2

logger = logging.getLogger(__name__)

DetailsError = details.DetailsError

ENTRY_POINT_GROUP = "edgehub.discovery_handlers"
REGISTRATION_SOCKET = "agent-registration.sock"
DISCOVERY_PORT = 10000
SOCKET_MODE = 0o660
"""Mode of a handler's socket: the agent (root, or the same user/group) dials it."""

DetailsT = TypeVar("DetailsT")


class Handler(Protocol[DetailsT]):
    """What a discovery handler implements."""

    @property
    def name(self) -> str:
        """Handler name that Configurations use (``discoveryHandler.name``), e.g. ``udev``."""
        ...

    @property
    def shared(self) -> bool:
        """Whether its devices can be seen by several nodes (IP cameras) or by one (USB)."""
        ...

    def parse_details(self, text: str) -> DetailsT:
        """Parse and validate ``discoveryDetails``; raise :class:`DetailsError` naming the field."""
        ...

    def discover(
        self, details: DetailsT, properties: Mapping[str, bytes]
    ) -> AsyncGenerator[list[devices.Device], None]:
        """Yield the complete device list at start and whenever it changes; run until closed."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class HandlerOptions:
    """What a :data:`HandlerFactory` gets to build a handler."""

    environ: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Environment of the handler (its Akri-compatible variables, e.g.
    ``DEBUG_ECHO_INSTANCES_SHARED``), passed explicitly so tests and embedding control it."""
    interval: float | None = None
    """Seconds between polls for handlers that poll; ``None`` keeps the handler's default."""

    def poll_interval(self, variable: str, default: float) -> float:
        """Seconds between polls: ``interval`` if given, else ``$variable``, else ``default``."""
        if self.interval is not None:
            return _positive_seconds(self.interval, "the poll interval")
        return env_seconds(self.environ, variable, default)


def env_seconds(environ: Mapping[str, str], variable: str, default: float) -> float:
    """A positive, finite number of seconds from ``environ[variable]`` (``default`` if unset);
    ``ValueError`` naming the variable otherwise."""
    raw = environ.get(variable)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError as e:
        raise ValueError(f"{variable} must be a number of seconds, got {raw!r}") from e
    return _positive_seconds(value, variable)


def _positive_seconds(value: float, what: str) -> float:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be a positive number of seconds, got {value:g}")
    return value


HandlerFactory = Callable[[HandlerOptions], Handler[Any]]


class HandlerNotFoundError(LookupError):
    """No installed entry point provides a handler of that name."""


def available() -> list[str]:
    """Names of the installed handlers (built-in and third-party), sorted."""
    # ``import importlib`` alone does not load the ``metadata`` submodule: import it by name.
    from importlib import metadata  # lazily, as in ``load``: it costs ~2 MB RSS

    names = {ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    return sorted(names | set(handlers.BUILTIN))


def load(name: str, options: HandlerOptions) -> Handler[Any]:
    """Build the handler ``name``: a built-in, else one from the entry-point group."""
    factory: HandlerFactory
    if name in handlers.BUILTIN:
        module_name, _, attribute = handlers.BUILTIN[name].partition(":")
        factory = getattr(importlib.import_module(module_name), attribute)
        return factory(options)
    from importlib import metadata  # only for third-party handlers: it costs ~2 MB RSS

    for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP, name=name):
        factory = entry_point.load()
        return factory(options)
    known = ", ".join(available()) or "none installed"
    raise HandlerNotFoundError(f"unknown discovery handler {name!r} (available: {known})")


# --------------------------------------------------------------------------- in-process use


def _sorted(found: list[devices.Device]) -> list[devices.Device]:
    return sorted(found, key=lambda d: d.id)


async def device_lists(
    handler: Handler[DetailsT], parsed: DetailsT, properties: Mapping[str, bytes]
) -> AsyncGenerator[list[devices.Device], None]:
    """The handler's lists, sorted by id, without consecutive duplicates."""
    previous: list[devices.Device] | None = None
    async with contextlib.aclosing(handler.discover(parsed, properties)) as lists:
        async for found in lists:
            current = _sorted(found)
            if current != previous:
                previous = current
                yield current


def details_warnings(parsed: object) -> tuple[str, ...]:
    """What parsing the details warned about (unknown keys, ignored as Akri ignores them);
    a handler's parsed details carry it as ``warnings`` (``discovery.details.warnings_of``)."""
    found = getattr(parsed, "warnings", ())
    return tuple(w for w in found if isinstance(w, str)) if isinstance(found, tuple) else ()


async def discover_once(
    handler: Handler[Any], text: str, properties: Mapping[str, bytes]
) -> list[devices.Device]:
    """Validate ``text`` and return the handler's first device list.

    Raises :class:`DetailsError` for bad details; callers bound the wait with
    ``asyncio.timeout`` (a handler may take its discovery timeout before the first list).
    """
    parsed = handler.parse_details(text)
    async with contextlib.aclosing(device_lists(handler, parsed, properties)) as lists:
        async for found in lists:
            return found
    return []


# --------------------------------------------------------------------------- serving


@dataclasses.dataclass(frozen=True, slots=True)
class ServeSettings:
    """How :func:`serve` exposes a handler and finds the agent."""

    directory: Path
    """``DISCOVERY_HANDLERS_DIRECTORY``: holds ``agent-registration.sock`` and our socket."""
    pod_ip: str | None = None
    """``POD_IP``: when set, serve on TCP ``<pod_ip>:<port>`` and register a NETWORK endpoint."""
    port: int = DISCOVERY_PORT
    """TCP port with ``pod_ip`` (Akri uses 10000); 0 picks a free one."""
    socket_path: Path | None = None
    """Our UDS path; default ``<directory>/<name>.sock`` (override to run two of one name)."""
    registration_retry: float = 10.0
    """Seconds between registration attempts while the agent is unreachable (Akri: 10 s).
    A new agent socket appearing cuts the wait short."""
    registration_timeout: float = 5.0
    """Deadline of one RegisterDiscoveryHandler call."""
    watch_interval: float = 0.25
    """How often the registration socket is checked for replacement (agent restart)."""
    shutdown_grace: float = 0.2
    """Seconds open streams get at shutdown. Discover streams never end by themselves, so
    this only lets a list being written go out."""
    max_streams: int = 64
    """Concurrent Discover calls (one per Configuration using this handler)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a served handler listens, as registered with the agent."""

    address: str
    """The registered endpoint: a socket path (UDS) or ``http://ip:port`` (NETWORK)."""
    network: bool
    socket_path: Path | None
    staged: grpcserving.StagedSocket | None = dataclasses.field(
        default=None, repr=False, compare=False
    )


ServeError = grpcserving.ServeError
"""The handler could not start serving (bad socket path, unusable directory, address in use)."""


class _Latest:
    """A one-slot mailbox: ``put`` replaces the unsent value; ``take`` waits for one."""

    def __init__(self) -> None:
        self._value: list[devices.Device] | None = None
        self._finished = False
        self._error: BaseException | None = None
        self._changed = asyncio.Event()

    def put(self, value: list[devices.Device]) -> None:
        self._value = value
        self._changed.set()

    def finish(self, error: BaseException | None) -> None:
        self._finished = True
        self._error = error
        self._changed.set()

    async def take(self) -> list[devices.Device] | None:
        """The newest unsent list, or ``None`` once the producer finished (see ``error``)."""
        while True:
            if self._value is not None:
                value, self._value = self._value, None
                return value
            if self._finished:
                return None
            self._changed.clear()
            await self._changed.wait()

    @property
    def error(self) -> BaseException | None:
        return self._error


class _DiscoveryServicer:
    """``v0.DiscoveryHandler/Discover`` for one handler (served via ``wire``)."""

    def __init__(self, handler: Handler[Any], stream_dropped: asyncio.Event) -> None:
        self._handler = handler
        self._stream_dropped = stream_dropped
        self.closing = False

    async def Discover(
        self, request: discovery_pb2.DiscoverRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        name = self._handler.name
        try:
            parsed = self._handler.parse_details(request.discovery_details)
        except DetailsError as e:
            logger.warning("rejecting Discover for %s: invalid discoveryDetails: %s", name, e)
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"invalid discoveryDetails for {name}: {e}"
            )
        for warning in details_warnings(parsed):
            logger.warning("discoveryDetails for %s: %s", name, warning)
        properties = wire.properties_from_request(request)
        logger.info("Discover stream opened for %s", name)
        mailbox = _Latest()
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._produce(parsed, properties, mailbox), name=f"discover {name}")
                sent: list[devices.Device] | None = None
                while (found := await mailbox.take()) is not None:
                    if found != sent:
                        await context.write(wire.response(found))
                        sent = found
        except asyncio.CancelledError:
            if not self.closing:
                # The agent went away or dropped this request. Re-registering is idempotent
                # and is how we notice an agent restart without waiting for a poll tick.
                logger.info("Discover stream for %s closed by the agent", name)
                self._stream_dropped.set()
            raise
        if mailbox.error is not None:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"{name} discovery failed: {mailbox.error}"
            )
        logger.info("Discover stream for %s ended by the handler", name)

    async def _produce(self, parsed: Any, properties: Mapping[str, bytes], out: _Latest) -> None:
        error: BaseException | None = None
        try:
            async for found in device_lists(self._handler, parsed, properties):
                out.put(found)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            # A handler bug must end this stream with a status, not kill the process: the
            # agent retries with back-off.
            logger.exception("%s discovery failed", self._handler.name)
            error = e
        out.finish(error)


def _bind(server: grpc.aio.Server, name: str, settings: ServeSettings) -> Endpoint:
    if settings.pod_ip:
        try:
            ip = ipaddress.ip_address(settings.pod_ip)
        except ValueError as e:
            raise ServeError(f"POD_IP {settings.pod_ip!r} is not an IP address") from e
        host = f"[{ip}]" if ip.version == 6 else str(ip)
        try:
            port = server.add_insecure_port(f"{host}:{settings.port}")
        except RuntimeError as e:
            raise ServeError(f"cannot listen on {host}:{settings.port}: {e}") from e
        if port == 0:
            raise ServeError(f"cannot listen on {host}:{settings.port}")
        return Endpoint(f"http://{host}:{port}", network=True, socket_path=None)
    path = (settings.socket_path or settings.directory / f"{name}.sock").absolute()
    directory = settings.directory.absolute()
    if path.parent != directory:
        # The agent accepts only sockets directly in its handlers directory.
        raise ServeError(f"socket {path} must be directly in {directory}")
    grpcserving.prepare_unix_socket(path)
    staged = grpcserving.add_unix_port(server, path)
    return Endpoint(str(path), network=False, socket_path=path, staged=staged)


async def serve(
    handler: Handler[Any],
    settings: ServeSettings,
    on_ready: Callable[[Endpoint], None] | None = None,
) -> None:
    """Serve ``handler`` and keep it registered with the agent until cancelled."""
    server = grpc.aio.server(maximum_concurrent_rpcs=settings.max_streams)
    stream_dropped = asyncio.Event()
    servicer = _DiscoveryServicer(handler, stream_dropped)
    server.add_generic_rpc_handlers((wire.discovery_handler_service(servicer.Discover),))
    endpoint = _bind(server, handler.name, settings)
    bound: grpcserving.BoundSocket | None = None
    try:
        await server.start()
        if endpoint.staged is not None:
            bound = endpoint.staged.publish(SOCKET_MODE)
    finally:
        if endpoint.staged is not None:
            endpoint.staged.discard()
    logger.info("serving discovery handler %s on %s", handler.name, endpoint.address)
    try:
        if on_ready is not None:
            on_ready(endpoint)
        await _keep_registered(handler, endpoint, settings, stream_dropped)
    finally:
        servicer.closing = True
        try:
            await grpcserving.stop(server, settings.shutdown_grace)
        finally:
            if bound is not None:
                # Only the socket we bound: another process may serve this path by now.
                bound.remove()
            logger.info("discovery handler %s stopped", handler.name)


# --------------------------------------------------------------------------- registration


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


async def _register_once(
    socket_path: Path, request: discovery_pb2.RegisterDiscoveryHandlerRequest, rpc_seconds: float
) -> None:
    async with grpcserving.unix_channel(socket_path) as channel:
        await wire.register_call(channel)(request, timeout=rpc_seconds)


async def _wait_for_agent_change(
    socket_path: Path,
    known: tuple[int, int] | None,
    limit: float | None,
    poll: float,
    stream_dropped: asyncio.Event,
) -> None:
    """Return when a stream was dropped, the registration socket was replaced, or after
    ``limit`` seconds (``None``: no limit)."""
    loop = asyncio.get_running_loop()
    deadline = None if limit is None else loop.time() + limit
    while not stream_dropped.is_set():
        current = await asyncio.to_thread(_identity, socket_path)
        if current is not None and current != known:
            return
        wait = poll if deadline is None else min(poll, deadline - loop.time())
        if wait <= 0:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await stream_dropped.wait()


async def _keep_registered(
    handler: Handler[Any],
    endpoint: Endpoint,
    settings: ServeSettings,
    stream_dropped: asyncio.Event,
) -> None:
    socket_path = (settings.directory / REGISTRATION_SOCKET).absolute()
    request = wire.register_request(
        handler.name, endpoint.address, endpoint.network, handler.shared
    )
    # While a registration socket exists but does not answer (agent starting, or a stale
    # socket of a dead agent), retry sooner than the full interval: 0.5 s, 1 s, 2 s, ...
    first_retry = min(0.5, settings.registration_retry)
    quick_retry = first_retry
    logged: str | None = None
    while True:
        stream_dropped.clear()
        # Taken before the call: if the agent is replaced right after we registered, the
        # identity differs and we register again (idempotent) instead of missing the restart.
        before = await asyncio.to_thread(_identity, socket_path)
        try:
            await _register_once(socket_path, request, settings.registration_timeout)
        except grpc.aio.AioRpcError as e:
            known = await asyncio.to_thread(_identity, socket_path)
            limit = settings.registration_retry
            if known is not None:
                limit = min(limit, quick_retry)
                quick_retry = min(quick_retry * 2, settings.registration_retry)
            cause = wire.describe_failure(f"the agent at {socket_path}", e.code().name, e.details())
            # One line per distinct cause (a restarting agent, or one that resets our streams),
            # then debug: a retry that fails alike is no news.
            logger.log(
                logging.DEBUG if cause == logged else logging.WARNING,
                "registering %s with the agent failed: %s; retrying within %gs",
                handler.name,
                cause,
                limit,
            )
            logged = cause
            await _wait_for_agent_change(
                socket_path, known, limit, settings.watch_interval, stream_dropped
            )
            continue
        quick_retry = first_retry
        logged = None
        logger.info("registered %s (%s) with the agent", handler.name, endpoint.address)
        await _wait_for_agent_change(
            socket_path, before, None, settings.watch_interval, stream_dropped
        )
        logger.info("re-registering %s with the agent", handler.name)
