"""The proxy's listeners at the connection level: aiohttp's low-level server, hardened.

- Protocol-level errors (oversized or malformed heads, garbage) are answered with a Kubernetes
  ``Status`` instead of aiohttp's text page.
- Like a Go server's ``ReadHeaderTimeout``, a connection that has not sent a whole request head
  within ``read_header_timeout`` of opening (or of starting its next request) is answered 408
  and closed.
- Past ``max_connections`` open connections a new one is answered 503 and closed.

``server.Hub`` builds one ``ProxyServer`` per listener with ``routing.Router.handle`` as its
handler. Dangers: this subclasses aiohttp's ``RequestHandler`` and reads some of its private
state (``_current_request``, ``_messages``, ``_request_count``); an aiohttp upgrade must keep
``tests/integration/hub/test_hub_slow_clients.py`` passing.
"""

from __future__ import annotations

import asyncio
import logging
import typing
from typing import Any

from aiohttp import http_exceptions, web, web_protocol, web_request, web_server

from yurthub import metrics, statuses

log = logging.getLogger(__name__)


def raw_status(code: int, reason: str, message: str) -> bytes:
    """A whole HTTP/1.1 Status answer that closes the connection, for when no request is being
    handled (aiohttp's writer is not in use)."""
    body = statuses.encode(statuses.failure(code, message))
    head = (
        f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
    )
    return head.encode("ascii") + body


class StatusRequestHandler(web_protocol.RequestHandler):
    """aiohttp's connection handler, answering protocol errors with a ``Status``, bounding the
    time to send a request head, and refusing connections past the cap.

    The head timer runs while the connection waits for a request (from accept, and from the
    first byte of each later one): aiohttp itself only closes such a connection at its keep-alive
    timeout (75 s), so slowloris clients held the hub's connections (and fds) that long.
    """

    _header_handle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        server = self._manager
        assert isinstance(server, ProxyServer)
        if len(server.connections) > server.max_connections:
            server.refused()
            # uvloop's transports write like asyncio's but do not subclass asyncio.Transport.
            typing.cast(asyncio.WriteTransport, transport).write(
                raw_status(503, "Service Unavailable", "too many connections to the hub")
            )
            self.force_close()
            return
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        before = self._request_count
        super().data_received(data)
        if self._request_count != before:
            self._disarm_header_timer()  # a whole head arrived
        elif self._current_request is None and not self._messages:
            self._arm_header_timer()  # the first bytes of a next request

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        if self._header_handle is None:
            server = self._manager
            assert isinstance(server, ProxyServer)
            self._header_handle = self._loop.call_later(
                server.read_header_timeout, self._header_timed_out
            )

    def _disarm_header_timer(self) -> None:
        if self._header_handle is not None:
            self._header_handle.cancel()
            self._header_handle = None

    def _header_timed_out(self) -> None:
        self._header_handle = None
        if self._current_request is not None or self._messages or self.transport is None:
            return  # a request is being handled: its time is the handler's business
        server = self._manager
        if isinstance(server, ProxyServer):
            server.timed_out()
        log.debug("no request head from %s in time: closing", self.peername)
        self.transport.write(raw_status(408, "Request Timeout", "no complete request head in time"))
        self.force_close()

    def handle_error(
        self,
        request: web_request.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:
            raise ConnectionError("response already started, cannot send an error")
        reason = None
        if status >= 500:
            log.error("error handling request: %r", exc, exc_info=exc)
            text = "internal error in the hub"
        elif isinstance(exc, http_exceptions.LineTooLong):
            status, reason = 431, "RequestHeaderFieldsTooLarge"
            text = "request header fields too large"
        else:
            log.info("bad request from %s: %s", request.remote, type(exc).__name__)
            text = f"malformed HTTP request ({type(exc).__name__ if exc else 'unparsable'})"
        body = statuses.encode(statuses.failure(status, text, reason=reason))
        resp = web.Response(status=status, body=body, content_type="application/json")
        resp.force_close()
        return resp


class ProxyServer(web_server.Server):
    def __init__(
        self,
        handler: Any,
        *,
        read_header_timeout: float,
        max_connections: int,
        collectors: metrics.Metrics,
        **kwargs: Any,
    ) -> None:
        super().__init__(handler, **kwargs)
        self.read_header_timeout = read_header_timeout
        self.max_connections = max_connections
        self._metrics = collectors

    def __call__(self) -> web_protocol.RequestHandler:
        return StatusRequestHandler(self, loop=self._loop, **self._kwargs)

    def refused(self) -> None:
        self._metrics.refused_connections.inc()

    def timed_out(self) -> None:
        self._metrics.header_timeouts.inc()

    def _make_request(
        self,
        message: Any,
        payload: Any,
        protocol: web_protocol.RequestHandler,
        writer: Any,
        task: asyncio.Task[None],
    ) -> web_request.BaseRequest:
        # web.Request (not BaseRequest) so handlers and the cache's LocalAnswerer get the type
        # they are written against; there is no URL dispatcher, so match_info stays empty.
        return web.Request(message, payload, protocol, writer, task, self._loop)
