"""The proxy's listeners at the connection level: aiohttp's low-level server, hardened.

- Protocol-level errors (oversized or malformed heads, garbage) are answered with a Kubernetes
  ``Status`` instead of aiohttp's text page.
- Like a Go server's ``ReadHeaderTimeout``, a connection that has not sent a whole request head
  within ``read_header_timeout`` of opening (or of starting its next request) is answered 408
  and closed.
- Like Go's ``IdleTimeout``, a connection idle between two requests is closed after
  ``keepalive_timeout`` (``--proxy-idle-timeout-seconds``, passed to aiohttp's handler; its own
  default of 3,630 s let a handful of idle sockets hold the cap for an hour).
- At most ``max_connections`` open connections per listener. A new one past it first closes the
  connection idle the longest (answered, nothing of a next request received: what a client's
  pool keeps); only when none is idle is it answered 503 and closed. So idle sockets cannot
  keep kubelet's next lease renewal out. A connection that has not sent its first request is
  not idle: the header timer ends it.
- When the hub stops (``stop_taking_requests``), as Go's ``http.Server.Shutdown``: a connection
  between two requests is closed at once, one answering a request after its answer; none
  takes another request.
- ``own_process_only`` (the hub's own socket, ``OwnSocket``): a Unix socket in a directory only
  the hub's user may enter, whose every connection must come from this very process (the
  kernel's ``SO_PEERCRED``); any other is answered 403 and closed before it can send anything.
  The router treats what arrives there as the hub's own (readiness gate, fairness): nothing a
  caller can put in a request makes a request "own".

``server.Hub`` builds one ``ProxyServer`` per listener with ``routing.Router.handle`` as its
handler. Dangers: this subclasses aiohttp's ``RequestHandler`` and reads some of its private
state (``_current_request``, ``_messages``, ``_request_count``, ``_waiter``, the server's
``_connections``); an aiohttp upgrade must keep ``tests/integration/hub/test_hub_slow_clients.py``
and ``test_hub_graceful_stop.py`` passing. ``SO_PEERCRED`` is
Linux's: elsewhere the own socket refuses everyone (the hub runs on Linux).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import shutil
import socket
import struct
import tempfile
import typing
from typing import Any

from aiohttp import http_exceptions, web, web_protocol, web_request, web_server

from yurthub import metrics, statuses

log = logging.getLogger(__name__)

OWN_MAX_CONNECTIONS = 256
"""The own socket's cap (``--proxy-max-connections`` is the ports'): the hub's own clients hold
one watch per follower and per pool-scoped resource, and a few short requests."""
_UCRED = struct.Struct("3i")
"""``struct ucred``: pid, uid, gid of a Unix socket's peer."""


def raw_status(code: int, reason: str, message: str) -> bytes:
    """A whole HTTP/1.1 Status answer that closes the connection, for when no request is being
    handled (aiohttp's writer is not in use)."""
    body = statuses.encode(statuses.failure(code, message))
    head = (
        f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
    )
    return head.encode("ascii") + body


def peer_pid(transport: asyncio.BaseTransport) -> int | None:
    """The process at the other end of a Unix socket (None: not one, or not known here)."""
    option = getattr(socket, "SO_PEERCRED", None)
    sock = transport.get_extra_info("socket")
    if option is None or sock is None or sock.family != socket.AF_UNIX:
        return None
    try:
        pid, _uid, _gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, option, _UCRED.size))
    except (OSError, struct.error):
        return None
    return int(pid)


async def close_server(server: asyncio.Server) -> None:
    """Close a listener without leaking the connections it accepted in its last turn.

    ``asyncio.Server.close`` on Python 3.11 (which CI runs) drops a connection accepted in the
    same loop turn, before its transport was made, without closing its socket (the transport
    cannot attach to a closed server, and the error is swallowed): the socket lingers until the
    garbage collector finds it (a ``ResourceWarning``) and the client waits for an answer meanwhile.
    A hub's probes connect every second or two, so a server closed under them met this (a test
    failed on it). Here the listener first takes no new connection, the loop makes the
    transports of those already accepted, and only then the server closes (and with it those
    connections)."""
    _stop_accepting([server])
    await asyncio.sleep(0)
    server.close()
    await server.wait_closed()


async def close_runner(runner: web.BaseRunner) -> None:
    """``runner.cleanup()``, each of its sites' listeners first closed as ``close_server`` does.
    Reads aiohttp's private ``BaseSite._server`` (an upgrade must keep
    ``tests/integration/hub/test_hub_listener_close.py`` passing)."""
    listening = [getattr(site, "_server", None) for site in runner.sites]
    _stop_accepting([server for server in listening if isinstance(server, asyncio.Server)])
    await asyncio.sleep(0)
    await runner.cleanup()


def _stop_accepting(servers: list[asyncio.Server]) -> None:
    """Take no new connection on ``servers``' listening sockets (the loop stops watching them);
    connections already accepted get their transports at the loop's next turn."""
    loop = asyncio.get_running_loop()
    for server in servers:
        for sock in server.sockets:
            if sock.fileno() >= 0:
                loop.remove_reader(sock.fileno())


class OwnSocket:
    """Where the hub's own clients reach its proxy: ``<tmp>/edgehub-own-<pid>-<random>/
    proxy.sock``, the directory made by ``mkdtemp`` (0700: only the hub's user may even reach the
    socket); ``remove`` once the listener is closed. A fresh directory per hub, so two hubs in
    one process (tests) never meet. A hub killed with SIGKILL cannot remove its own: the next
    hub started removes those of processes that no longer run (by the pid in the name; only its
    user's; not while their socket still listens: a hub in another PID namespace), so they never
    pile up. Blocking (a directory listing): create it off the loop."""

    PREFIX = "edgehub-own-"

    def __init__(self) -> None:
        parent = pathlib.Path(tempfile.gettempdir())
        _remove_stale(parent, self.PREFIX)
        self.directory = pathlib.Path(
            tempfile.mkdtemp(prefix=f"{self.PREFIX}{os.getpid()}-", dir=parent)
        )
        self.path = str(self.directory / "proxy.sock")

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def _remove_stale(parent: pathlib.Path, prefix: str) -> None:
    """Remove ``<prefix><pid>-*`` directories of this user whose process is gone (and whose
    socket no longer listens)."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        pid_text = entry.name.removeprefix(prefix).split("-", 1)[0]
        if not entry.name.startswith(prefix) or not pid_text.isdigit():
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat().st_uid != os.getuid():
                continue
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            if not _listens(os.path.join(entry.path, "proxy.sock")):
                shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            continue  # alive under another user, or unreadable: not ours to judge


def _listens(path: str) -> bool:
    """Something accepts connections on Unix socket ``path``: a hub whose pid does not run
    here may run in another PID namespace sharing the temporary directory."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


class StatusRequestHandler(web_protocol.RequestHandler):
    """aiohttp's connection handler, answering protocol errors with a ``Status``, bounding the
    time to send a request head, and taking part in its listener's connection accounting.

    The head timer runs while the connection waits for a request (from accept, and from the
    first byte of each later one): aiohttp itself only closes such a connection at its keep-alive
    timeout, so slowloris clients held the hub's connections (and fds) that long.
    """

    _header_handle: asyncio.TimerHandle | None = None
    counted = False
    """This connection holds one of its listener's ``max_connections``."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        server = self._manager
        assert isinstance(server, ProxyServer)
        refusal = server.admit(self, transport)
        if refusal is not None:
            # uvloop's transports write like asyncio's but do not subclass asyncio.Transport.
            typing.cast(asyncio.WriteTransport, transport).write(refusal)
            self.force_close()
            return
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        server = self._manager
        if isinstance(server, ProxyServer):
            server.busy(self)  # bytes of a request: not idle
        before = self._request_count
        super().data_received(data)
        if self._request_count != before:
            self._disarm_header_timer()  # a whole head arrived
        elif self._current_request is None and not self._messages:
            self._arm_header_timer()  # the first bytes of a next request

    async def finish_response(
        self, request: web_request.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        answered = await super().finish_response(request, resp, start_time)
        server = self._manager
        if isinstance(server, ProxyServer) and not answered[1]:
            server.answered(self)
        return answered

    def connection_lost(self, exc: BaseException | None) -> None:
        server = self._manager
        if isinstance(server, ProxyServer):
            server.release(self)
        self._disarm_header_timer()
        super().connection_lost(exc)

    def waiting_for_request(self) -> bool:
        """Idle: between two requests, nothing of the next one received (aiohttp's own
        keep-alive test: its loop waits for a message)."""
        waiter = self._waiter
        return (
            self.transport is not None
            and waiter is not None
            and not waiter.done()
            and self._current_request is None
            and not self._messages
            and self._header_handle is None
        )

    def close_idle(self) -> None:
        self.force_close()  # as aiohttp's keep-alive timer does: closed, nothing written

    def between_requests(self) -> bool:
        """No request in hand: waiting for the next one (parts of its head may have come)."""
        waiter = self._waiter
        return waiter is not None and not waiter.done() and not self._messages

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
    """One listener's connections: counted against ``max_connections``, the idle ones in the
    order they became idle (oldest first; bounded by the open connections)."""

    def __init__(
        self,
        handler: Any,
        *,
        read_header_timeout: float,
        max_connections: int,
        collectors: metrics.Metrics,
        own_process_only: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(handler, **kwargs)
        self.read_header_timeout = read_header_timeout
        self.max_connections = max_connections
        self.own_process_only = own_process_only
        self._metrics = collectors
        self.open = 0
        """Connections holding a place (admitted, not yet lost or closed for room)."""
        self._idle: dict[StatusRequestHandler, None] = {}
        self._strangers = 0

    def __call__(self) -> web_protocol.RequestHandler:
        return StatusRequestHandler(self, loop=self._loop, **self._kwargs)

    def admit(
        self, handler: StatusRequestHandler, transport: asyncio.BaseTransport
    ) -> bytes | None:
        """Count a new connection in; or what to answer it before closing it."""
        if self.own_process_only:
            pid = peer_pid(transport)
            if pid != os.getpid():
                self._strangers += 1
                say = log.warning if self._strangers == 1 else log.debug
                say("refused a connection to the hub's own socket from process %s", pid)
                return raw_status(403, "Forbidden", "this socket serves the hub's own process only")
        if self.open >= self.max_connections and not self._close_idle():
            self._metrics.refused_connections.inc()
            return raw_status(503, "Service Unavailable", "too many connections to the hub")
        self.open += 1
        handler.counted = True
        return None

    def _close_idle(self) -> bool:
        """Close the connection idle the longest (its place is free at once); False: none."""
        victim = next((h for h in self._idle if h.waiting_for_request()), None)
        if victim is None:
            return False
        self.release(victim)
        log.debug("closing the idle connection from %s for a new one", victim.peername)
        victim.close_idle()
        self._metrics.idle_connections_closed.inc()
        return True

    def answered(self, handler: StatusRequestHandler) -> None:
        """An answer was written: idle from now until the next request's first bytes."""
        if handler.counted:
            self._idle.pop(handler, None)
            self._idle[handler] = None  # newest last

    def busy(self, handler: StatusRequestHandler) -> None:
        self._idle.pop(handler, None)

    def release(self, handler: StatusRequestHandler) -> None:
        self._idle.pop(handler, None)
        if handler.counted:
            handler.counted = False
            self.open -= 1

    def stop_taking_requests(self) -> int:
        """The hub is stopping (as Go's ``http.Server.Shutdown``): no connection takes another
        request. One between requests (idle, or with part of a head) is closed now, nothing
        written; one answering a request closes after its answer. aiohttp's ``pre_shutdown``
        would leave an idle one open until the listener's cleanup. Returns how many were
        closed now."""
        closed = 0
        for handler in list(self._connections):
            if isinstance(handler, StatusRequestHandler) and handler.between_requests():
                handler.close_idle()
                closed += 1
            else:
                handler.close()
        return closed

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
