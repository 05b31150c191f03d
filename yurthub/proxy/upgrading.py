"""Upgrade passthrough (exec/attach/port-forward over SPDY or WebSocket): raw byte pumps.

The hub does not speak SPDY or the WebSocket channel protocol; it only has to get the upgrade
handshake to the apiserver and then copy bytes both ways until either side closes:

1. open a TCP (TLS) connection to the backend and write the request head ourselves, keeping
   ``Connection: Upgrade``/``Upgrade`` and the protocol headers, with the same identity rule as
   ordinary requests;
2. read the response head (bounded). Not 101: relay it as an ordinary response (Status errors
   such as 403 must reach kubectl). 101: answer the client 101 with the upstream's headers;
3. take the client connection over from aiohttp (``set_parser`` feeds a bounded buffer, as
   aiohttp's own WebSocket support does with its reader) and pump both directions; when one
   direction ends the other is cancelled and both connections are closed.

Backpressure both ways: the client buffer pauses the client transport past its limit, and each
write awaits ``drain``. Dangers: aiohttp's ``set_parser`` is typed for its WebSocket reader; the
object passed here implements the two methods it calls (``feed_data``, ``feed_eof``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import ssl
import urllib.parse
from typing import Any, cast

from aiohttp import web

from yurthub import requestinfo
from yurthub.proxy import headers, remote

log = logging.getLogger(__name__)

_MAX_HEAD = 65536
_MAX_ERROR_BODY = 1 << 20
_PUMP_CHUNK = 65536


class _RawFeed:
    """Client bytes of an upgraded connection, bounded.

    aiohttp calls ``feed_data``/``feed_eof`` once a parser is set on the connection. Past
    ``_HIGH`` buffered bytes the client transport stops reading (TCP backpressure), and resumes
    when the pump has taken the buffer below ``_LOW``. (aiohttp's own ``StreamReader`` cannot be
    used here: its flow control pauses the HTTP parser, which is idle on an upgraded
    connection.)
    """

    _HIGH = 4 * _PUMP_CHUNK
    _LOW = _PUMP_CHUNK

    def __init__(self, transport: asyncio.Transport | None) -> None:
        self._transport = transport
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._eof = False
        self._paused = False
        self._ready = asyncio.Event()

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        if data:
            self._chunks.append(data)
            self._size += len(data)
            self._ready.set()
            if self._size > self._HIGH and not self._paused and self._transport is not None:
                self._paused = True
                self._transport.pause_reading()
        return False, b""

    def feed_eof(self) -> None:
        self._eof = True
        self._ready.set()

    async def read(self) -> bytes:
        """The next buffered bytes; b"" at EOF."""
        while not self._chunks:
            if self._eof:
                return b""
            self._ready.clear()
            await self._ready.wait()
        data = self._chunks.popleft()
        self._size -= len(data)
        if self._paused and self._size < self._LOW and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        return data


async def forward(
    proxy: remote.RemoteProxy,
    request: web.Request,
    info: requestinfo.RequestInfo,
    server: str,
) -> web.StreamResponse:
    out_headers, own_identity = proxy.outgoing_headers(request, info, upgrade=True)
    ssl_ctx = proxy.client.ssl_for(server, own_identity=own_identity)
    connect_timeout = proxy.client.settings.connect_timeout
    parsed = urllib.parse.urlsplit(server)
    host = parsed.hostname or ""
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        async with asyncio.timeout(connect_timeout):
            reader, writer = await asyncio.open_connection(
                host,
                port,
                ssl=ssl_ctx if parsed.scheme == "https" and ssl_ctx else None,
                server_hostname=host if parsed.scheme == "https" else None,
                limit=_MAX_HEAD,
            )
    except (OSError, TimeoutError, ssl.SSLError) as e:
        raise remote.UpstreamUnavailable(server, f"upgrade connect: {e!r}", retryable=True) from e
    try:
        netloc = parsed.netloc
        head = [f"{request.method} {request.rel_url.raw_path_qs} HTTP/1.1", f"Host: {netloc}"]
        head.extend(f"{name}: {value}" for name, value in out_headers)
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        try:
            status, reason, resp_headers = await _read_head(reader)
        except (OSError, asyncio.IncompleteReadError, ValueError) as e:
            raise remote.UpstreamUnavailable(server, f"upgrade head: {e!r}", retryable=False) from e
        if status != 101:
            return await _relay_refusal(request, reader, status, reason, resp_headers)
        resp = web.StreamResponse(status=101, reason=reason)
        for name, value in headers.response_headers(resp_headers, upgrade=True):
            resp.headers.add(name, value)
        resp.force_close()
        await resp.prepare(request)
        await _pump(request, resp, reader, writer)
        return resp
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, str, list[tuple[str, str]]]:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError as e:
        raise ValueError("upstream response head too large") from e
    lines = raw.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise ValueError(f"bad status line {lines[0][:80]!r}")
    resp_headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ValueError("bad header line")
        resp_headers.append((name.strip(), value.strip()))
    return int(code), reason, resp_headers


async def _relay_refusal(
    request: web.Request,
    reader: asyncio.StreamReader,
    status: int,
    reason: str,
    resp_headers: list[tuple[str, str]],
) -> web.StreamResponse:
    """A non-101 answer to an upgrade: a small error body, relayed (bounded) and the end."""
    lower = {name.lower(): value for name, value in resp_headers}
    if "chunked" in lower.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    elif lower.get("content-length", "").isdigit():
        body = await reader.readexactly(min(int(lower["content-length"]), _MAX_ERROR_BODY))
    else:
        body = await reader.read(_MAX_ERROR_BODY)
    resp = web.Response(status=status, reason=reason, body=body)
    for name, value in headers.response_headers(resp_headers):
        if name.lower() != "content-length":
            resp.headers.add(name, value)
    return resp


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while len(body) < _MAX_ERROR_BODY:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            break
        body += await reader.readexactly(size)
        await reader.readexactly(2)
    return bytes(body)


async def _pump(
    request: web.Request,
    resp: web.StreamResponse,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    feed = _RawFeed(request.transport)
    request.protocol.set_parser(cast(Any, feed))

    async def client_to_upstream() -> None:
        while True:
            data = await feed.read()
            if not data:
                break
            up_writer.write(data)
            await up_writer.drain()
        with contextlib.suppress(OSError):
            if up_writer.can_write_eof():
                up_writer.write_eof()

    async def upstream_to_client() -> None:
        while True:
            data = await up_reader.read(_PUMP_CHUNK)
            if not data:
                break
            await resp.write(data)

    done = asyncio.Event()

    async def guarded(coro: Any) -> None:
        try:
            await coro
        except (OSError, ConnectionError, ssl.SSLError) as e:
            log.debug("upgrade pump ended: %r", e)
        finally:
            done.set()

    async with asyncio.TaskGroup() as tg:
        to_up = tg.create_task(guarded(client_to_upstream()), name="upgrade client->upstream")
        to_client = tg.create_task(guarded(upstream_to_client()), name="upgrade upstream->client")
        await done.wait()
        # Either side ending ends the session (exec/attach have no half-close semantics that
        # kubectl relies on through a proxy; the apiserver closes after the process exits).
        if to_client.done():
            to_up.cancel()
        else:
            # The client finished sending: give the apiserver's remaining output a moment.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await asyncio.shield(to_client)
            to_client.cancel()
