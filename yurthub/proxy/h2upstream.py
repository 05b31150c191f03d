"""HTTP/2 to the apiservers for the watches the hub forwards: many streams, one connection.

aiohttp's client speaks HTTP/1.1 only, so every watch a hub forwarded held a TLS connection
of its own to kube-apiserver: 46 a node in the fleet bench (kubelet watches each ConfigMap and
Secret its pods mount, one by one), 1,389 connections for 30 nodes where their kubelets alone
hold 73 (client-go multiplexes over HTTP/2), ~459,000 extrapolated to 10,000 nodes. Each is a
socket, a TLS session and a goroutine pair in the apiserver, and after a restart or a heal a
handshake each. Over HTTP/2 a hub holds one or two.

What goes over it (``Pool.request``): GET watches with the hub's own identity (not a client's
token: kube-apiserver closes an HTTP/2 connection that carried an unauthenticated request, so a
process on the node sending bad tokens would end the other watches on it; the remote proxy
decides) to an ``https://`` server whose TLS handshake selected ``h2`` by ALPN (the
identity's ``h2_twin`` contexts offer it; the HTTP/1.1 client's contexts never do). Everything
else stays on the HTTP/1.1 pool: lists, gets and writes are
short and that pool keeps few connections. A server that does not select h2 raises ``NotH2``
and is remembered for ``NO_H2_FOR`` seconds: its watches go over HTTP/1.1 meanwhile.

Connections (``_Connection``, an asyncio protocol: no task of its own) are keyed by server and
TLS context, so a rotated identity never shares one with the old. A connection takes at most
``MAX_STREAMS`` streams (fewer if the server says so), a stream the hub reset counting for
``RESET_GRACE`` more; when every one is full a new one is opened. The watches arriving together
after a heal share one handshake: a connection being made is awaited by all of them
(``_connection``; made by the first, in its own task: when that one goes away mid-handshake the
next makes another).

Liveness, as client-go's HTTP/2 health check: a connection nothing was read from for
``READ_IDLE`` seconds is pinged, and aborted when no frame comes within ``PING_TIMEOUT``; its
streams end (their clients re-watch). ``abort_server``: health declared the server unhealthy,
its connections go at once (a blackholed link must not keep new streams waiting on a dead
connection). A connection without streams closes after ``IDLE_CLOSE`` seconds. GOAWAY ends
the connection and its streams (``h2`` reads nothing after one): watches end as at a break and
their clients watch again over a new connection; the streams the server did not take fail
retryable (nothing was processed).

Flow control: each stream's window is ``STREAM_WINDOW``; what arrives is acknowledged as the
relay takes it (``Response.content``), so a slow client holds back its own stream only, and a
connection never buffers more than its windows.

Invariant: a stream ends exactly once (end, reset, or its connection failing), and its
consumer then sees the end or a ``ServerDisconnectedError`` (what the relay already handles for
a broken HTTP/1.1 watch); a stream whose consumer goes away is reset (CANCEL).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import http
import logging
import ssl
import time
import weakref
from collections.abc import Callable, Iterable

import aiohttp
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import yarl
from multidict import CIMultiDict, CIMultiDictProxy

log = logging.getLogger(__name__)

MAX_STREAMS = 100
"""Streams a connection takes at most (the server's own limit, when lower, wins):
kube-apiserver's default is 100 (``--http2-max-streams-per-connection``)."""
STREAM_WINDOW = 1 << 20
"""Bytes a stream may have in flight before the relay took them (HTTP/2's default is 64 KiB,
which would cost a round trip every 64 KiB of a large watch event burst)."""
CONNECTION_WINDOW = 16 << 20
"""Bytes in flight over one connection, all its streams together."""
READ_IDLE = 30.0
"""Seconds without a frame read before the connection is pinged (client-go's ReadIdleTimeout)."""
PING_TIMEOUT = 15.0
"""Seconds a ping may go unanswered before the connection is taken for dead (client-go's)."""
RESET_GRACE = 1.0
"""Seconds a stream the hub reset still counts against its connection's streams: the server's
handler may still be winding down, and Go's server closes a connection whose client starts
streams faster than their handlers end (its rapid-reset defence, CVE-2023-44487), which would
end every other watch on it. A local process opening and dropping watches in a loop makes the
hub open another connection instead."""
IDLE_CLOSE = 90.0
"""Seconds a connection without streams stays open for the next watch."""
NO_H2_FOR = 300.0
"""Seconds a server that did not select h2 is spoken to over HTTP/1.1 before asking again."""

_CONNECTION_SPECIFIC = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host"}
)


class NotH2(Exception):
    """The server did not select h2: send the request over HTTP/1.1."""


class _Abandoned(Exception):
    """The request making a connection went away before it was made."""


class H2Unavailable(Exception):
    """No response headers: the request did not get an answer over HTTP/2. ``retryable``: the
    server cannot have processed it (connect failed, a refused or unprocessed stream)."""

    def __init__(self, why: str, *, retryable: bool, timed_out: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.retryable = retryable
        self.timed_out = timed_out


# --- pure parts --------------------------------------------------------------------------------


def request_headers(
    method: str, url: yarl.URL, headers: Iterable[tuple[str, str]]
) -> list[tuple[bytes, bytes]]:
    """The HTTP/2 header block for ``method`` ``url`` with ``headers`` (already the upstream's):
    pseudo-headers first, names lower-cased, the connection-specific ones dropped (HTTP/2
    forbids them; ``Host`` is ``:authority``), ``TE`` only as ``trailers``. PURE."""
    authority = url.raw_authority
    block = [
        (b":method", method.encode("ascii")),
        (b":scheme", (url.scheme or "https").encode("ascii")),
        (b":authority", authority.encode("ascii")),
        (b":path", (url.raw_path_qs or "/").encode("ascii")),
    ]
    for name, value in headers:
        lowered = name.lower()
        if lowered in _CONNECTION_SPECIFIC or lowered.startswith(":"):
            continue
        if lowered == "te" and value.strip().lower() != "trailers":
            continue
        block.append((lowered.encode("latin-1"), value.encode("latin-1")))
    return block


def response_head(block: Iterable[tuple[bytes, bytes]]) -> tuple[int, CIMultiDict[str]]:
    """(status, headers) of a response header block; status 0 when ``:status`` is missing or
    not a number. PURE."""
    status = 0
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in block:
        if name == b":status":
            with contextlib.suppress(ValueError):
                status = int(value)
        elif not name.startswith(b":"):
            out.add(name.decode("latin-1"), value.decode("latin-1"))
    return status, out


def reason(status: int) -> str:
    """The reason phrase HTTP/1.1 clients get for ``status`` (HTTP/2 carries none). PURE."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


# --- one stream and what its consumer sees ----------------------------------------------------


class _Stream:
    def __init__(self, conn: _Connection, stream_id: int) -> None:
        self.conn = conn
        self.id = stream_id
        self.head: asyncio.Future[list[tuple[bytes, bytes]]] = (
            asyncio.get_running_loop().create_future()
        )
        self.chunks: collections.deque[tuple[bytes, int]] = collections.deque()
        self.wake = asyncio.Event()
        self.ended = False
        self.error: BaseException | None = None

    def got_head(self, block: list[tuple[bytes, bytes]]) -> None:
        if not self.head.done():
            self.head.set_result(block)

    def push(self, data: bytes, flow: int) -> None:
        self.chunks.append((data, flow))
        self.wake.set()

    def end(self) -> None:
        self.ended = True
        self.wake.set()

    def fail(self, why: str, *, retryable: bool) -> None:
        """The stream ends without its end: before the headers the request fails, after them
        the body does."""
        if not self.head.done():
            self.head.set_exception(H2Unavailable(why, retryable=retryable))
            self.head.exception()  # retrieved: nobody may be waiting any more
        if self.error is None and not self.ended:
            self.error = aiohttp.ServerDisconnectedError(why)
        self.ended = True
        self.wake.set()


class Content:
    """A response body as the relay reads it (``iter_any``, ``is_eof``), acknowledged to the
    server's flow control as it is taken."""

    def __init__(self, stream: _Stream) -> None:
        self._stream = stream

    def is_eof(self) -> bool:
        return self._stream.ended and not self._stream.chunks

    def iter_any(self) -> Content:
        return self

    def __aiter__(self) -> Content:
        return self

    async def __anext__(self) -> bytes:
        stream = self._stream
        while not stream.chunks:
            if stream.ended:
                if stream.error is not None:
                    raise stream.error
                raise StopAsyncIteration
            stream.wake.clear()
            await stream.wake.wait()
        data, flow = stream.chunks.popleft()
        stream.conn.acknowledge(stream, flow)
        return data


class Response:
    """What the remote proxy relays: aiohttp's ``ClientResponse`` as far as it uses one."""

    def __init__(self, stream: _Stream, block: list[tuple[bytes, bytes]]) -> None:
        self._stream = stream
        self.status, headers = response_head(block)
        self.reason = reason(self.status)
        self.headers: CIMultiDictProxy[str] = CIMultiDictProxy(headers)
        self.content = Content(stream)

    def close(self) -> None:
        """End the stream now (a shutdown, a client gone): the relay's next read ends."""
        stream = self._stream
        stream.conn.cancel(stream)
        stream.fail("the hub closed the stream", retryable=False)

    def release(self) -> None:
        self._stream.conn.cancel(self._stream)


# --- one connection ---------------------------------------------------------------------------


class _Connection(asyncio.Protocol):
    def __init__(self, pool: Pool, key: tuple[str, int], context: ssl.SSLContext) -> None:
        self.pool = pool
        self.key = key
        self.context = context
        """Held so the key's ``id`` stays this context's while the connection lives."""
        self.h2 = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.streams: dict[int, _Stream] = {}
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.draining = False
        """No new streams (GOAWAY, a retired identity); closes when its last stream ends."""
        self._loop = asyncio.get_running_loop()
        self._last_read = self._loop.time()
        self._ping_sent: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._idle_since: float | None = self._loop.time()
        self._resets: collections.deque[float] = collections.deque()
        """When the hub reset streams lately (``RESET_GRACE``); bounded by ``MAX_STREAMS``."""
        self._early: list[bytes] | None = []
        """What arrived before ``start`` sent the client's preface (a server's SETTINGS in the
        same read as the end of a TLS 1.2 handshake): replayed by ``start``; None after it."""

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._early is not None:
            self._early.append(data)  # nothing may be answered before our preface
            return
        self._last_read = self._loop.time()
        self._ping_sent = None
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as e:
            self.fail(f"HTTP/2 protocol error from the server: {e}")
            return
        for event in events:
            self._on(event)
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(f"connection lost: {exc}" if exc else "the server closed the connection")

    def eof_received(self) -> bool | None:
        return None  # close the transport

    # what the pool and the streams call

    def start(self) -> None:
        h2c = self.h2
        h2c.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 0,
            },
        )
        h2c.initiate_connection()
        h2c.increment_flow_control_window(CONNECTION_WINDOW - 65535)
        self._flush()
        self._schedule()
        early, self._early = self._early or [], None
        for data in early:
            self.data_received(data)

    def has_room(self) -> bool:
        if self.closed or self.draining:
            return False
        limit = min(MAX_STREAMS, self.h2.remote_settings.max_concurrent_streams)
        resets = self._resets
        since = self._loop.time() - RESET_GRACE
        while resets and resets[0] < since:
            resets.popleft()
        return len(self.streams) + len(resets) < limit

    def open(self, block: list[tuple[bytes, bytes]]) -> _Stream:
        stream_id = self.h2.get_next_available_stream_id()
        self.h2.send_headers(stream_id, block, end_stream=True)
        stream = _Stream(self, stream_id)
        self.streams[stream_id] = stream
        self._idle_since = None
        self._flush()
        return stream

    def acknowledge(self, stream: _Stream, flow: int) -> None:
        """``flow`` bytes of ``stream`` were taken: hand them back to the server's windows
        (the connection's too when the stream has ended: ``h2`` does that part alone)."""
        if flow and not self.closed:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self.h2.acknowledge_received_data(flow, stream.id)
            self._flush()

    def cancel(self, stream: _Stream) -> None:
        """The consumer is done with ``stream``: what it left unread is handed back to the
        connection's window, and the stream is reset if the server has not ended it."""
        unread = sum(flow for _, flow in stream.chunks)
        stream.chunks.clear()
        if unread:
            self.acknowledge(stream, unread)
        if self.streams.pop(stream.id, None) is None:
            return
        if not self.closed:
            with contextlib.suppress(h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
                self.h2.reset_stream(stream.id, h2.errors.ErrorCodes.CANCEL)
            if len(self._resets) >= MAX_STREAMS:
                self._resets.popleft()
            self._resets.append(self._loop.time())
            self._flush()
        self._maybe_idle()

    def fail(self, why: str) -> None:
        """The connection is gone (or taken for dead): every stream ends, retryable where the
        server never answered it (a GET watch)."""
        if self.closed:
            return
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        streams, self.streams = list(self.streams.values()), {}
        for stream in streams:
            stream.fail(why, retryable=True)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()
        self.pool.forget(self)
        if streams:
            log.info("HTTP/2 connection to %s ended %d streams: %s", self.key[0], len(streams), why)

    def close_gracefully(self) -> None:
        if self.closed:
            return
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.h2.close_connection()
        self._flush()
        if self.transport is not None:
            self.transport.close()
        self.fail("closed by the hub")

    # internals

    def _on(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream.got_head(list(event.headers or ()))
        elif isinstance(event, h2.events.DataReceived):
            stream = self.streams.get(event.stream_id)
            flow = event.flow_controlled_length or 0
            if stream is None:
                # A stream we reset: its data still counts against the connection's window.
                with contextlib.suppress(h2.exceptions.ProtocolError):
                    self.h2.acknowledge_received_data(flow, event.stream_id)
            elif event.data:
                stream.push(bytes(event.data), flow)
            elif flow:
                self.acknowledge(stream, flow)
        elif isinstance(event, h2.events.StreamEnded):
            stream = self.streams.pop(event.stream_id, None)
            if stream is not None:
                stream.end()
                self._maybe_idle()
        elif isinstance(event, h2.events.StreamReset):
            stream = self.streams.pop(event.stream_id, None)
            if stream is not None:
                code = event.error_code
                # REFUSED_STREAM: the server did not process it; any GET may be sent again.
                stream.fail(f"the server reset the stream ({code!r})", retryable=True)
                self._maybe_idle()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._goaway(event.last_stream_id, event.error_code)

    def _goaway(self, last: int | None, code: object) -> None:
        """GOAWAY. The server would go on with the streams up to ``last``, but ``h2`` takes
        the connection for closed once it has one (any later frame is a protocol error): every
        stream ends here. A watch then ends as at any break, and its client watches again,
        from its resourceVersion, over a new connection; a stream the server did not take
        fails retryable."""
        last = 0 if last is None else last
        streams, self.streams = self.streams, {}
        for stream_id, stream in streams.items():
            stream.fail(f"the server is going away ({code!r})", retryable=stream_id > last)
        log.debug("%s sent GOAWAY (%r): %d streams ended", self.key[0], code, len(streams))
        self.close_gracefully()

    def _maybe_idle(self) -> None:
        if self.streams or self.closed:
            return
        if self.draining:
            self.close_gracefully()
            return
        self._idle_since = self._loop.time()

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _schedule(self) -> None:
        self._timer = self._loop.call_later(min(READ_IDLE, PING_TIMEOUT) / 3, self._tick)

    def _tick(self) -> None:
        self._timer = None
        if self.closed:
            return
        now = self._loop.time()
        if self._idle_since is not None and now - self._idle_since >= IDLE_CLOSE:
            self.close_gracefully()
            return
        if self._ping_sent is not None:
            if now - self._ping_sent >= PING_TIMEOUT:
                self.fail(f"no answer to a ping within {PING_TIMEOUT:g} s")
                return
        elif now - self._last_read >= READ_IDLE:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self.h2.ping(b"edgehub!")
            self._ping_sent = now
            self._flush()
        self._schedule()


# --- the pool ---------------------------------------------------------------------------------


class Pool:
    """The hub's HTTP/2 connections to its apiservers (one per ``Upstream``, never module-level).

    ``clock``: for ``NO_H2_FOR`` (tests)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._conns: dict[tuple[str, int], list[_Connection]] = {}
        self._connecting: dict[tuple[str, int], asyncio.Future[_Connection]] = {}
        self._no_h2: dict[str, float] = {}
        self._retired: weakref.WeakSet[ssl.SSLContext] = weakref.WeakSet()
        self._closed = False
        self.opened = 0
        """Connections opened since start (tests, logs)."""

    # what the proxy asks

    def speaks_h2(self, server: str) -> bool:
        """Whether a watch to ``server`` should try HTTP/2 now."""
        if self._closed or not server.startswith("https://"):
            return False
        until = self._no_h2.get(server)
        if until is None:
            return True
        if self._clock() >= until:
            del self._no_h2[server]
            return True
        return False

    def connections(self) -> int:
        return sum(len(conns) for conns in self._conns.values())

    async def request(
        self,
        server: str,
        context: ssl.SSLContext,
        method: str,
        url: yarl.URL,
        headers: Iterable[tuple[str, str]],
        *,
        connect_timeout: float,
    ) -> Response:
        """Send a body-less request; its response once the headers came. ``NotH2``: the server
        does not speak it (send it over HTTP/1.1); ``H2Unavailable``: no answer.
        ``connect_timeout``: for TCP and TLS, when a connection must be made (the first
        waiter's, when several wait for one)."""
        block = request_headers(method, url, headers)
        key = (server, id(context))
        for _ in range(3):
            conn = self._with_room(key) or await self._connection(
                server, key, context, connect_timeout
            )
            try:
                stream = conn.open(block)
            except (h2.exceptions.TooManyStreamsError, h2.exceptions.ProtocolError):
                # Full by the server's count (its SETTINGS came after our check), or closing:
                # no more streams on it; the next turn finds or opens another.
                conn.draining = True
                continue
            try:
                return Response(stream, await stream.head)
            except BaseException:
                conn.cancel(stream)
                raise
        raise H2Unavailable("no HTTP/2 connection took the stream", retryable=True)

    def retire(self, context: ssl.SSLContext) -> None:
        """No new streams over connections made with ``context`` (a rotated identity); they
        close when their last stream ends."""
        self._retired.add(context)
        for conns in self._conns.values():
            for conn in list(conns):
                if conn.context is context:
                    conn.draining = True
                    conn._maybe_idle()

    def abort_server(self, server: str) -> int:
        """``server`` was declared unhealthy: abort its connections; returns how many."""
        doomed = [c for key, conns in self._conns.items() if key[0] == server for c in conns]
        for conn in doomed:
            conn.fail("the server was declared unhealthy")
        return len(doomed)

    async def close(self) -> None:
        self._closed = True
        for conns in list(self._conns.values()):
            for conn in list(conns):
                conn.close_gracefully()
        self._conns.clear()

    # connections

    def forget(self, conn: _Connection) -> None:
        conns = self._conns.get(conn.key)
        if conns is not None and conn in conns:
            conns.remove(conn)
            if not conns:
                del self._conns[conn.key]

    def _with_room(self, key: tuple[str, int]) -> _Connection | None:
        for conn in self._conns.get(key, ()):
            if conn.has_room():
                return conn
        return None

    async def _connection(
        self, server: str, key: tuple[str, int], context: ssl.SSLContext, connect_timeout: float
    ) -> _Connection:
        """A new connection for ``key``: the one being made when there is one (the watches
        arriving together after a heal share its handshake), else made here."""
        if self._closed:
            raise H2Unavailable("the hub is shutting down", retryable=False)
        pending = self._connecting.get(key)
        if pending is not None:
            try:
                # Shielded: this waiter going away must not end the others' handshake.
                return await asyncio.shield(pending)
            except _Abandoned:
                pass  # its maker went away mid-handshake: make one here
        made: asyncio.Future[_Connection] = asyncio.get_running_loop().create_future()
        self._connecting[key] = made
        try:
            conn = await self._connect(server, key, context, connect_timeout)
        except Exception as e:
            made.set_exception(e)
            made.exception()  # retrieved: nobody may be waiting
            raise
        except BaseException:
            made.set_exception(_Abandoned())
            made.exception()
            raise
        finally:
            if self._connecting.get(key) is made:
                del self._connecting[key]
        made.set_result(conn)
        return conn

    async def _connect(
        self, server: str, key: tuple[str, int], context: ssl.SSLContext, connect_timeout: float
    ) -> _Connection:
        url = yarl.URL(server)
        host, port = url.host or "", url.port or 443
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(connect_timeout):
                transport, conn = await loop.create_connection(
                    lambda: _Connection(self, key, context),
                    host,
                    port,
                    ssl=context,
                    server_hostname=host,
                )
        except TimeoutError as e:
            raise H2Unavailable(
                "connect (TCP and TLS) timed out", retryable=True, timed_out=True
            ) from e
        except (OSError, ssl.SSLError) as e:
            raise H2Unavailable(f"connect: {e}", retryable=True) from e
        ssl_object = transport.get_extra_info("ssl_object")
        chosen = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        if chosen != "h2":
            transport.close()
            self._no_h2[server] = self._clock() + NO_H2_FOR
            log.info(
                "%s did not select HTTP/2 (ALPN %r): its watches go over HTTP/1.1 for %g s",
                server,
                chosen,
                NO_H2_FOR,
            )
            raise NotH2(server)
        conn.start()
        if self._closed or context in self._retired:
            conn.draining = True
        self._conns.setdefault(key, []).append(conn)
        self.opened += 1
        return conn
