"""A network partition you can switch at run time: a TCP proxy between the hub and an apiserver.

Put it between a hub and a simulated apiserver (``--server-addr`` = ``partition.url``) and
switch ``await partition.set_mode(...)`` while traffic flows::

    async with partition.Partition("127.0.0.1", sim_port) as link:
        ... hub(server_addr=link.url) ...
        await link.set_mode(partition.Mode.BLACKHOLE)

Modes (what a client of the proxy sees):

- ``pass``: bytes flow both ways untouched.
- ``refuse``: the listener is closed (new connections: ECONNREFUSED, the apiserver process is
  gone) and existing connections are reset.
- ``blackhole``: new connections are accepted and never answered; existing ones stall in both
  directions (nothing is read, so TCP backpressure builds as on a dead route). Leaving the mode
  delivers what was held, like TCP retransmission after a route comes back; except what a
  side sent before it reset its connection (an abortive close, ``SO_LINGER`` 0): a sender's
  reset ends its retransmissions, so on a real route those bytes never arrive.
- ``reset``: existing connections are reset (RST via ``SO_LINGER`` 0); new ones are reset right
  after accept.
- ``latency``: each chunk waits ``latency`` seconds before it is forwarded, per direction.
- ``flap``: alternates ``pass`` and ``blackhole`` every ``interval`` seconds (pass first).

Invariants: only loopback upstreams (this is a test tool; it must not become a relay to
anywhere). Every connection handler is tracked and ended by ``stop``; no task outlives it.
Memory is bounded: a pump holds at most one chunk while stalled.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import ipaddress
import logging
import math
import socket
import struct
import time
from types import TracebackType

from yurthub import listening
from yurthub.testing import ports

logger = logging.getLogger(__name__)

CHUNK = 64 << 10


class Mode(enum.StrEnum):
    PASS = "pass"
    REFUSE = "refuse"
    BLACKHOLE = "blackhole"
    RESET = "reset"
    LATENCY = "latency"
    FLAP = "flap"


def require_loopback(host: str) -> None:
    """Raise ``ValueError`` unless ``host`` is a loopback address (or ``localhost``)."""
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise ValueError(
        f"{host!r} is not a loopback address; the partition proxy relays only to loopback"
    )


def _check_timing(latency: float, interval: float) -> None:
    """Raise ``ValueError`` for timings the pumps cannot use (a zero or negative flap period
    would divide by zero or spin)."""
    if not (math.isfinite(latency) and latency >= 0):
        raise ValueError(f"latency must be a number of seconds >= 0, not {latency!r}")
    if not (math.isfinite(interval) and interval > 0):
        raise ValueError(f"the flap interval must be a number of seconds > 0, not {interval!r}")


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST instead of FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Stopped(Exception):
    """The partition is stopping: end this connection."""


class _Conn:
    __slots__ = ("client", "upstream")

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None

    def reset(self) -> None:
        _reset(self.client)
        if self.upstream is not None:
            _reset(self.upstream)


class Partition:
    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        mode: Mode = Mode.PASS,
        latency: float = 0.2,
        interval: float = 1.0,
    ) -> None:
        require_loopback(upstream_host)
        require_loopback(listen_host)
        _check_timing(latency, interval)
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.listen_host = listen_host
        self.port = listen_port
        self._mode = mode
        self.latency = latency
        self.interval = interval
        self._flap_started = time.monotonic()
        self._changed = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._hold: ports.PortHold | None = None
        self._conns: set[_Conn] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._stopping = False
        self.accepted = 0
        """Connections accepted so far (tests assert reconnect counts with it)."""
        self.bytes_down = 0
        """Bytes relayed from the upstream to the clients (what crossed the link inwards)."""
        self.bytes_up = 0
        """Bytes relayed from the clients to the upstream."""

    # --- life cycle --------------------------------------------------------------------------

    async def start(self) -> None:
        self._stopping = False
        self._reserve()
        if self._mode is not Mode.REFUSE:
            await self._listen()

    async def stop(self) -> None:
        """Close the listener and end every connection (reset) and its handler."""
        self._stopping = True
        await self._unlisten()
        if self._hold is not None:
            self._hold.close()
            self._hold = None
        for conn in list(self._conns):
            conn.reset()
        self._wake()
        handlers = list(self._handlers)
        if handlers:
            # Handlers end on their own once their sockets are gone; cancelling them would make
            # asyncio (3.11) log the CancelledError from its connection callback.
            _, pending = await asyncio.wait(handlers, timeout=2.0)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def __aenter__(self) -> Partition:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.listen_host}:{self.port}"

    @property
    def address(self) -> str:
        return f"{self.listen_host}:{self.port}"

    # --- modes --------------------------------------------------------------------------------

    @property
    def mode(self) -> Mode:
        return self._mode

    async def set_mode(
        self, mode: Mode | str, *, latency: float | None = None, interval: float | None = None
    ) -> None:
        """Switch now; ``ValueError`` (nothing changed) for an unknown mode or a bad timing."""
        mode = Mode(mode)
        latency = self.latency if latency is None else latency
        interval = self.interval if interval is None else interval
        _check_timing(latency, interval)
        self.latency, self.interval = latency, interval
        previous, self._mode = self._mode, mode
        logger.info("partition %s: %s -> %s", self.address, previous, mode)
        if mode is Mode.FLAP:
            self._flap_started = time.monotonic()
        if mode in (Mode.REFUSE, Mode.RESET):
            for conn in list(self._conns):
                conn.reset()
        if mode is Mode.REFUSE:
            await self._unlisten()
        elif self._server is None:
            await self._listen()
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def effective(self) -> Mode:
        """The mode in force right now (``flap`` resolves to pass or blackhole)."""
        if self._mode is not Mode.FLAP:
            return self._mode
        phase = int((time.monotonic() - self._flap_started) / self.interval)
        return Mode.PASS if phase % 2 == 0 else Mode.BLACKHOLE

    def _next_flip(self) -> float | None:
        if self._mode is not Mode.FLAP:
            return None
        elapsed = time.monotonic() - self._flap_started
        return self.interval - (elapsed % self.interval) + 0.001

    async def _gate(self) -> Mode:
        """Wait while blackholed; the mode to forward under. Raises ``_Stopped`` at stop."""
        while True:
            if self._stopping:
                raise _Stopped
            mode = self.effective()
            if mode is not Mode.BLACKHOLE:
                return mode
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._next_flip()):
                    await changed.wait()

    # --- serving ------------------------------------------------------------------------------

    def _reserve(self) -> None:
        """Hold the port for the partition's whole life, listening or not: ``refuse`` closes
        the listener, and a free port may be taken by any outgoing connection as its local
        port, after which the heal could not listen on it again (``ports.PortHold``)."""
        if self._hold is None:
            self._hold = ports.PortHold(self.listen_host, self.port)
            self.port = self._hold.port

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, self.listen_host, self.port, reuse_address=True, reuse_port=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _unlisten(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await listening.close_server(server)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        conn = _Conn(writer)
        self._conns.add(conn)
        self.accepted += 1
        try:
            await self._serve(conn, reader, writer)
        except asyncio.CancelledError:
            conn.reset()
            raise
        except (OSError, asyncio.IncompleteReadError, _Stopped):
            conn.reset()
        finally:
            self._conns.discard(conn)
            self._handlers.discard(task)
            for w in (writer, conn.upstream):
                if w is not None and not w.is_closing():
                    w.close()

    async def _serve(
        self, conn: _Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if self._mode in (Mode.RESET, Mode.REFUSE):
            conn.reset()
            return
        await self._gate()
        up_reader, up_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        conn.upstream = up_writer
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._pump(reader, up_writer, down=False), name="partition-to-upstream")
            tg.create_task(self._pump(up_reader, writer, down=True), name="partition-to-client")

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, down: bool
    ) -> None:
        try:
            while True:
                await self._gate()
                data = await reader.read(CHUNK)
                if not data:
                    if writer.can_write_eof() and not writer.is_closing():
                        writer.write_eof()
                    return
                mode = await self._gate()
                if isinstance(reader.exception(), ConnectionResetError):
                    # The sender reset while its bytes were held: a reset drops what TCP had
                    # not delivered yet, so they are never delivered.
                    raise ConnectionResetError("the sender reset the connection")
                if mode is Mode.LATENCY:
                    await asyncio.sleep(self.latency)
                    mode = await self._gate()
                writer.write(data)
                if down:
                    self.bytes_down += len(data)
                else:
                    self.bytes_up += len(data)
                await writer.drain()
        except (ConnectionError, OSError, _Stopped):
            # The other side reset, a mode switch aborted the transports, or we stop: end both.
            writer.transport.abort()
