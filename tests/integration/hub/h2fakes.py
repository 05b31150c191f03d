"""An HTTP/2 server over TLS for the hub's HTTP/2 watches (``proxy/h2upstream.py``): it answers
every request 200 and keeps the stream open; the test sends what it likes on it, resets it,
sends GOAWAY, drops the connection or stops answering altogether.

Built on ``h2`` (the same library, server side): the failure modes kube-apiserver's Go server
shows only under load or at a restart, on demand. The real apiserver is used by the real-cluster
tests (``tests/e2e/cluster/test_h2_watches_real.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
import ssl

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import hyperframe.frame

from yurthub.testing.sim import pki


@dataclasses.dataclass
class Request:
    conn: int
    """The index of the connection it came on (0: the first accepted)."""
    stream_id: int
    path: str
    headers: dict[str, str]
    reset: int | None = None
    """The error code of the client's RST_STREAM, None while it has not reset it."""


class _Conn:
    def __init__(self, index: int, writer: asyncio.StreamWriter, max_streams: int | None) -> None:
        self.index = index
        self.writer = writer
        self.h2 = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self.pending: dict[int, bytearray] = {}
        self.ending: set[int] = set()
        self.h2.initiate_connection()
        if max_streams is not None:
            self.h2.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: max_streams})
        self.flush()

    def flush(self) -> None:
        for stream_id in list(self.pending):
            buffer = self.pending[stream_id]
            while buffer:
                try:
                    window = self.h2.local_flow_control_window(stream_id)
                except h2.exceptions.StreamClosedError:
                    buffer.clear()
                    break
                size = min(window, self.h2.max_outbound_frame_size, len(buffer))
                if size <= 0:
                    break
                self.h2.send_data(stream_id, bytes(buffer[:size]))
                del buffer[:size]
            if not buffer:
                del self.pending[stream_id]
                if stream_id in self.ending:
                    self.ending.discard(stream_id)
                    with contextlib.suppress(h2.exceptions.StreamClosedError):
                        self.h2.end_stream(stream_id)
        data = self.h2.data_to_send()
        if data and not self.writer.is_closing():
            self.writer.write(data)


class H2Server:
    """``alpn``: what the server selects from (without ``h2``: an HTTP/1.1-only apiserver, as
    the simulator). ``max_streams``: its MAX_CONCURRENT_STREAMS."""

    def __init__(
        self,
        workdir: pathlib.Path,
        *,
        alpn: tuple[str, ...] = ("h2", "http/1.1"),
        max_streams: int | None = None,
    ) -> None:
        authority = pki.Authority.create()
        cert, key = authority.issue_serving(["127.0.0.1", "localhost"])
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "tls.crt").write_bytes(cert)
        (workdir / "tls.key").write_bytes(key)
        self._server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._server_ctx.load_cert_chain(workdir / "tls.crt", workdir / "tls.key")
        self._server_ctx.set_alpn_protocols(list(alpn))
        self.ca_pem = authority.cert_pem
        self.max_streams = max_streams
        self.requests: list[Request] = []
        self.conns: list[_Conn] = []
        self.silent = False
        """Stop reading and writing (a blackholed link): nothing the hub sends is answered."""
        self.changed = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    def client_context(self) -> ssl.SSLContext:
        """What the hub's identity twin would be: the server's CA, offering h2."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(cadata=self.ca_pem.decode())
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        return ctx

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"https://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> H2Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._server_ctx)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for conn in self.conns:
            conn.writer.transport.abort()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    # what a test does

    def send(self, request: Request, data: bytes) -> None:
        conn = self.conns[request.conn]
        conn.pending.setdefault(request.stream_id, bytearray()).extend(data)
        conn.flush()

    def end(self, request: Request) -> None:
        conn = self.conns[request.conn]
        conn.ending.add(request.stream_id)
        conn.pending.setdefault(request.stream_id, bytearray())
        conn.flush()

    def reset(self, request: Request, code: int = h2.errors.ErrorCodes.INTERNAL_ERROR) -> None:
        conn = self.conns[request.conn]
        conn.h2.reset_stream(request.stream_id, code)
        conn.flush()

    def goaway(self, conn: int, last_stream_id: int) -> None:
        """A graceful GOAWAY, as Go's server sends at a shutdown (or ``--goaway-chance``): the
        streams up to ``last_stream_id`` go on. Written as a raw frame: ``h2`` closes its side
        at once when it sends one, and could not serve the streams it keeps."""
        c = self.conns[conn]
        c.flush()
        frame = hyperframe.frame.GoAwayFrame(stream_id=0)
        frame.last_stream_id = last_stream_id
        frame.error_code = h2.errors.ErrorCodes.NO_ERROR
        c.writer.write(frame.serialize())

    def drop(self, conn: int) -> None:
        self.conns[conn].writer.transport.abort()

    def unsent(self, request: Request) -> int:
        """Bytes of ``request``'s stream still waiting for the client's flow-control window."""
        return len(self.conns[request.conn].pending.get(request.stream_id, b""))

    async def until(self, check: object, within: float = 10.0) -> None:
        async with asyncio.timeout(within):
            while not check():  # type: ignore[operator]
                self.changed.clear()
                await self.changed.wait()

    # serving

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        ssl_object = writer.get_extra_info("ssl_object")
        try:
            if ssl_object is None or ssl_object.selected_alpn_protocol() != "h2":
                return  # an HTTP/1.1-only server would answer here; the pool never asks it
            conn = _Conn(len(self.conns), writer, self.max_streams)
            self.conns.append(conn)
            self._wake()
            while data := await reader.read(65536):
                if self.silent:
                    continue
                for event in conn.h2.receive_data(data):
                    self._on(conn, event)
                conn.flush()
                self._wake()
        except (ConnectionError, ssl.SSLError, h2.exceptions.ProtocolError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()
            self._wake()

    def _on(self, conn: _Conn, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            headers = {k.decode(): v.decode() for k, v in event.headers or ()}  # type: ignore[union-attr]
            assert event.stream_id is not None
            self.requests.append(
                Request(conn.index, event.stream_id, headers.get(":path", ""), headers)
            )
            conn.h2.send_headers(
                event.stream_id, [(b":status", b"200"), (b"content-type", b"application/json")]
            )
        elif isinstance(event, h2.events.StreamReset):
            for request in self.requests:
                if request.conn == conn.index and request.stream_id == event.stream_id:
                    request.reset = int(event.error_code or 0)

    def _wake(self) -> None:
        self.changed.set()
