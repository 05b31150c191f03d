"""Remote proxy: stream one request to an apiserver and its answer back, chunk by chunk.

Invariants:
- Bodies are never read whole: the request body is handed to the client library as a stream,
  the response is copied with ``iter_any`` and each chunk written (and so flushed: aiohttp's
  writer puts it on the transport at once) before the next read. A watch event reaches the
  client as soon as its bytes arrive. ``write`` awaits the drain past the writer's high-water
  mark, so a slow client slows the upstream read (TCP backpressure), never memory.
- A 2xx response is offered to the ``Tee``; its sink sees exactly the bytes the upstream sent,
  and gets exactly one of ``finish`` / ``abort``. A tee that raises loses that response (logged)
  and the client still gets all of it.
- A 2xx response is offered to the ``ResponseFilter`` too; with a transform the client gets
  what the transform makes of each chunk (the response filters), the tee still the upstream's
  bytes. A transform that raises ends the answer as an upstream breaking mid-body does.
- ``UpstreamUnavailable`` is raised only before anything was sent to the client, so the router
  may still answer from the cache or another backend. ``retryable`` says sending it again
  cannot do harm: nothing reached the apiserver (connect failed, or a stale pooled connection
  on a body-less request), or a read whose server went silent.
- Upstream breaking mid-body: a watch ends cleanly (final chunk), the client re-watches; any
  other response has its connection closed so the client sees a truncated body, not a lie.
- A silent link: every exchange is tracked per server (``_Exchange``). One without response
  headers after ``header_deadline`` reports its server slow (health probes it at once). When
  health declares a server unhealthy, ``abandon`` ends every exchange to it through its own
  deadline scope: a get/list without headers yet is retried elsewhere or answered from the
  cache (``UpstreamUnavailable``, retryable), a watch ends cleanly so its client re-watches
  (locally), any other request is answered 504 (its effect unknown), a body in progress is cut.
  Requests that are not long-running also have their upstream idle time bounded
  (``idle_timeout``, aiohttp's ``sock_read``).

- A GET watch with the hub's own identity to an apiserver that speaks HTTP/2 goes as a
  stream over the hub's shared
  connections (``h2upstream``, ``_send_h2``); its response is relayed as any other (the same
  reads, ends and errors). Everything else, and every watch to a server that does not, goes
  over aiohttp's HTTP/1.1 pool. ``abandon`` also aborts the server's HTTP/2 connections.

Dangers: ``handler_cancellation`` is on, so a client going away cancels the handler inside
``write``/``iter_any``; cleanup therefore lives in ``finally`` blocks and re-raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable, Iterable, Iterator

import aiohttp
import yarl
from aiohttp import web

from yurthub import metrics, probing, requestinfo, settings
from yurthub.proxy import h2upstream, headers, seams, upstream

log = logging.getLogger(__name__)

_IDEMPOTENT_NO_BODY = frozenset({"GET", "HEAD", "OPTIONS"})

Answer = aiohttp.ClientResponse | h2upstream.Response
"""An upstream's answer being relayed: over HTTP/1.1 (aiohttp) or an HTTP/2 stream."""


class UpstreamUnavailable(Exception):
    """Nothing was sent to the client; the backend could not be used."""

    def __init__(self, server: str, why: str, *, retryable: bool, timed_out: bool = False) -> None:
        super().__init__(f"{server}: {why}")
        self.server = server
        self.why = why
        self.retryable = retryable
        self.timed_out = timed_out
        """No answer in time (a deadline, an idle bound, a server gone silent): a 504."""


class _Exchange:
    """One proxied request to one server, from send to the end of its body."""

    __slots__ = ("abandoned", "info", "late", "scope", "server", "waiting")

    def __init__(self, server: str, info: requestinfo.RequestInfo) -> None:
        self.server = server
        self.info = info
        self.scope: asyncio.Timeout | None = None
        self.abandoned = False
        self.waiting: asyncio.TimerHandle | None = None
        """The header-deadline timer while no response headers have come."""
        self.late = False
        """Its server was reported slow before the headers came (``on_slow``)."""

    def got_headers(self) -> None:
        if self.waiting is not None:
            self.waiting.cancel()
            self.waiting = None

    def abandon(self) -> None:
        """End it now through its deadline scope (the handler sees a ``TimeoutError``)."""
        if self.abandoned or self.scope is None:
            return
        self.abandoned = True
        self.scope.reschedule(asyncio.get_running_loop().time())


PATIENT_CONNECT_TIMEOUT = 10.0
"""Seconds kubelet's heartbeat requests (the lane: its Lease and its Node), the hub's own
requests (its pool feeders' watches, its loops) and every watch or other long-running request
may take to connect (TCP and TLS), whatever the upstream's ``connect_timeout`` (3 s) says:
kubelet's own heartbeat client waits that long itself (the smaller of its node status period
and the lease duration, 10 s by default), the hub's loops only retry, and a client whose
watch failed only watches again (client-go itself waits 10 s for a TLS handshake). After a
kube-apiserver restart in a fleet of 30 nodes, watches connecting for 3 s at most were
11,000 abandoned handshakes in two minutes. After a fleet-wide heal the apiserver shakes
hands with thousands of connections at once: at 3 s kubelet's node status PATCHes failed
with "connect timed out" for two of its 10 s ticks, and the leaders' pool watches came back
18-23 s after the heal, while a handshake would have been done in a few seconds; each
failure was one more handshake for the apiserver. A dead server is no reason for a short
bound: health declares it unhealthy and ends the requests still connecting to it
(``abandon``), and they go elsewhere."""


def over_h2(
    info: requestinfo.RequestInfo, method: str, *, own_identity: bool, lane: bool, body: object
) -> bool:
    """Whether a request may go as a stream over the hub's HTTP/2 connections (when its server
    speaks HTTP/2). PURE. Only a GET watch with the hub's own identity: a request with a
    client's token shares no connection with others, since kube-apiserver closes an HTTP/2
    connection that carried an unauthenticated request (its rapid-reset defence), and a process
    on the node sending bad tokens would end every other watch on it; kubelet's heartbeat lane
    keeps its own connections."""
    return info.is_watch and own_identity and not lane and body is None and method == "GET"


class RemoteProxy:
    def __init__(
        self,
        client: upstream.Upstream,
        proxy: settings.ProxySettings,
        collectors: metrics.Metrics,
        tee: seams.Tee | None,
        filters: seams.ResponseFilter | None = None,
    ) -> None:
        self.client = client
        self._settings = proxy
        self._metrics = collectors
        self.tee = tee
        self.filters = filters
        self._watches: set[Answer] = set()
        self._exchanges: dict[str, set[_Exchange]] = {}
        self._closing = False
        self.on_slow: Callable[[str], object] | None = None
        """Called with a server that left a request without response headers past
        ``header_deadline`` (health probes it at once)."""
        self.on_heard: Callable[[str], object] = _nobody
        """Called with a server whenever bytes of its answers arrive (response headers, each
        chunk of a body): health takes it as proof of life when a heartbeat times out."""
        self.on_strain: Callable[[str], object] = _nobody
        """Called with a server whose answer shows it under strain: response headers after
        ``header_deadline`` or a status of ``probing.STRAIN_STATUSES`` (health's prober then
        waits longer before declaring it gone: ``probing.answer_bound``)."""
        connect = client.settings.connect_timeout
        self._idle = aiohttp.ClientTimeout(
            total=None, sock_connect=connect, sock_read=client.settings.idle_timeout
        )
        patient = max(connect, PATIENT_CONNECT_TIMEOUT)
        self._patient_connect = patient
        self._patient_idle = aiohttp.ClientTimeout(
            total=None, sock_connect=patient, sock_read=client.settings.idle_timeout
        )
        self._streaming = aiohttp.ClientTimeout(total=None, sock_connect=patient)

    def end_watches(self) -> int:
        """Shutdown phase: end every open watch cleanly (its relay meets the closed upstream
        at once and ends the client's stream with its final chunk); new ones are refused, and
        one still waiting for its response headers ends as soon as they come. Returns count."""
        self._closing = True
        count = len(self._watches)
        for response in list(self._watches):
            response.close()
        return count

    def abandon(self, server: str) -> int:
        """``server`` was declared unhealthy: end every exchange in flight to it (see the module
        docstring for what each kind gets). Returns how many."""
        exchanges = list(self._exchanges.get(server, ()))
        for exchange in exchanges:
            exchange.abandon()
        # Its HTTP/2 connections too: a new watch must not wait on one the cut left dead.
        self.client.h2_abort(server)
        if exchanges:
            log.info("%s is unhealthy: ended %d requests in flight to it", server, len(exchanges))
        return len(exchanges)

    def upstream_url(self, server: str, request: web.Request) -> yarl.URL:
        return yarl.URL(server + request.rel_url.raw_path_qs, encoded=True)

    def outgoing_headers(
        self, request: web.Request, info: requestinfo.RequestInfo, *, upgrade: bool = False
    ) -> tuple[list[headers.Header], bool]:
        """(headers, own_identity) for the upstream request."""
        own_identity = not headers.bearer_token(request.headers.get("Authorization", ""))
        out = headers.request_headers(
            request.headers.items(),
            upgrade=upgrade,
            own_identity=own_identity,
            accept=headers.upstream_accept(info),
        )
        if own_identity:
            out.extend(self.client.identity_headers().items())
        return out, own_identity

    async def forward(
        self,
        request: web.Request,
        info: requestinfo.RequestInfo,
        server: str,
        *,
        lane: bool = False,
        patient: bool = False,
    ) -> web.StreamResponse:
        """``lane``: send it over the upstream's heartbeat lane (kubelet's own Lease and Node
        requests, ``fairness.exempt``); ``lane`` or ``patient`` (the hub's own requests): its
        connection may take ``PATIENT_CONNECT_TIMEOUT``."""
        if info.is_watch and self._closing:
            raise UpstreamUnavailable(server, "hub is shutting down", retryable=False)
        out_headers, own_identity = self.outgoing_headers(request, info)
        data = None
        if request.body_exists:
            data = request.content
            if request.content_length is not None:
                out_headers.append(("Content-Length", str(request.content_length)))
        started: list[web.StreamResponse] = []
        exchange = _Exchange(server, info)
        same_server = self._exchanges.setdefault(server, set())
        same_server.add(exchange)
        self._wait_for_headers(exchange)
        try:
            # The request deadline (see requestinfo) covers the whole exchange; ``abandon``
            # ends it early through the same scope.
            async with asyncio.timeout(info.deadline) as scope:
                exchange.scope = scope
                try:
                    up = await self._send(
                        request, info, server, out_headers, data, own_identity, lane, patient
                    )
                finally:
                    exchange.got_headers()
                self.on_heard(server)
                if exchange.late or up.status in probing.STRAIN_STATUSES:
                    self.on_strain(server)
                with self._tracked(up, info, server):
                    return await self._relay(request, info, up, started, server)
        except TimeoutError as e:
            if not started:
                raise self._unanswered(exchange, request, data) from e
            resp = started[0]
            if exchange.abandoned:
                log.info("%s: %s became unhealthy mid-answer", info.describe(), server)
            else:
                log.info("%s hit its deadline of %ss", info.describe(), info.deadline)
            if info.is_watch:
                with contextlib.suppress(ConnectionError):
                    await resp.write_eof()
            elif request.transport is not None:
                request.transport.close()
            return resp
        finally:
            exchange.got_headers()
            same_server.discard(exchange)
            if not same_server and self._exchanges.get(server) is same_server:
                del self._exchanges[server]

    def _wait_for_headers(self, exchange: _Exchange) -> None:
        """Report the server slow every ``header_deadline`` until the headers come (health
        ignores reports right after a probe found the server alive: a later one still counts)."""

        def late() -> None:
            exchange.waiting = None
            exchange.late = True
            if self.on_slow is not None:
                self.on_slow(exchange.server)
            self._wait_for_headers(exchange)

        loop = asyncio.get_running_loop()
        exchange.waiting = loop.call_later(self.client.settings.header_deadline, late)

    def _unanswered(
        self, exchange: _Exchange, request: web.Request, data: object
    ) -> UpstreamUnavailable:
        """What a request that got no response headers before its scope ended is."""
        server = exchange.server
        if not exchange.abandoned:
            return UpstreamUnavailable(server, "deadline exceeded", retryable=False, timed_out=True)
        # Its server went silent: a read is sent elsewhere or answered from the cache; for
        # anything else nobody knows whether it was applied.
        read = request.method in _IDEMPOTENT_NO_BODY and data is None
        return UpstreamUnavailable(
            server, "the server became unhealthy", retryable=read, timed_out=True
        )

    async def _send(
        self,
        request: web.Request,
        info: requestinfo.RequestInfo,
        server: str,
        out_headers: list[headers.Header],
        data: object,
        own_identity: bool,
        lane: bool = False,
        patient: bool = False,
    ) -> Answer:
        if over_h2(info, request.method, own_identity=own_identity, lane=lane, body=data):
            context = self.client.h2_context(server, own_identity=True)
            if context is not None:
                answer = await self._send_h2(request, server, context, out_headers)
                if answer is not None:
                    return answer
        session = self.client.lane if lane else self.client.session
        try:
            return await session.request(
                request.method,
                self.upstream_url(server, request),
                headers=out_headers,
                data=data,
                ssl=self.client.ssl_for(server, own_identity=own_identity),
                allow_redirects=False,
                auto_decompress=False,
                read_bufsize=self._settings.chunk_size,
                timeout=self._timeout(info.is_long_running, patient=lane or patient),
            )
        except aiohttp.ConnectionTimeoutError as e:
            # TCP and TLS not done within the connect timeout: nothing was sent, so anything may
            # be sent again. Slow (the server is probed at once), not gone: after a heal an
            # apiserver shaking hands with a fleet's connections answers late. (aiohttp makes
            # this a ServerTimeoutError too: it must be caught first.)
            raise UpstreamUnavailable(
                server, "connect (TCP and TLS) timed out", retryable=True, timed_out=True
            ) from e
        except aiohttp.ServerTimeoutError as e:
            # No headers within the idle bound on a connection that is still up: sending a
            # read again (elsewhere, or the cache answering) is safe.
            read = request.method in _IDEMPOTENT_NO_BODY and data is None
            raise UpstreamUnavailable(
                server, "no answer within the idle bound", retryable=read, timed_out=True
            ) from e
        except aiohttp.ClientConnectorError as e:
            raise UpstreamUnavailable(server, f"connect: {e.os_error}", retryable=True) from e
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
            # A pooled keep-alive connection the apiserver closed: safe to resend a body-less
            # idempotent request; anything with a body may have been partly consumed.
            retryable = request.method in _IDEMPOTENT_NO_BODY and data is None
            raise UpstreamUnavailable(server, repr(e), retryable=retryable) from e
        except aiohttp.ClientError as e:
            raise UpstreamUnavailable(server, repr(e), retryable=False) from e

    async def _send_h2(
        self,
        request: web.Request,
        server: str,
        context: ssl.SSLContext,
        out_headers: list[headers.Header],
    ) -> h2upstream.Response | None:
        """The watch as a stream over the hub's HTTP/2 connections to ``server``; None when the
        server turned out not to speak HTTP/2 (send it over HTTP/1.1)."""
        try:
            return await self.client.watch_h2(
                server,
                context,
                request.method,
                self.upstream_url(server, request),
                out_headers,
                connect_timeout=self._patient_connect,
            )
        except h2upstream.NotH2:
            return None
        except h2upstream.H2Unavailable as e:
            raise UpstreamUnavailable(
                server, e.why, retryable=e.retryable, timed_out=e.timed_out
            ) from e

    def _timeout(self, long_running: bool, *, patient: bool) -> aiohttp.ClientTimeout:
        """A watch or a log stream may be silent for long; anything else may not. Any
        long-running request connects patiently (``PATIENT_CONNECT_TIMEOUT``): failing it
        sooner only sends its client back for one more handshake."""
        if long_running:
            return self._streaming
        return self._patient_idle if patient else self._idle

    def _transform(self, info: requestinfo.RequestInfo, up: Answer) -> seams.BodyTransform | None:
        if self.filters is None or not 200 <= up.status < 300:
            return None
        try:
            return self.filters.open(info, up.status, up.headers)
        except Exception:
            log.exception("the filters could not take %s; passing it unfiltered", info.describe())
            return None

    @contextlib.contextmanager
    def _tracked(self, up: Answer, info: requestinfo.RequestInfo, server: str) -> Iterator[None]:
        watch = info.is_watch
        if watch:
            self._watches.add(up)
            if self._closing:
                # Its headers came after ``end_watches``: it ends now, like the others (its
                # first read meets the closed connection and the relay ends the stream).
                up.close()
        # node_yurthub_closable_conns_collector: upstream exchanges open per server (host:port).
        conns = self._metrics.child(self._metrics.closable_conns, server.split("://", 1)[-1])
        conns.inc()
        try:
            yield
        finally:
            conns.dec()
            if watch:
                self._watches.discard(up)
            up.release()

    async def _relay(
        self,
        request: web.Request,
        info: requestinfo.RequestInfo,
        up: Answer,
        started: list[web.StreamResponse],
        server: str,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(status=up.status, reason=up.reason)
        heard = self.on_heard
        out = _Out(resp, whole=not info.is_long_running and up.content.is_eof())
        transform = self._transform(info, up)
        out_headers = headers.response_headers(up.headers.items())
        if transform is not None:
            out_headers = transform.response_headers(out_headers)
        for name, value in out_headers:
            resp.headers.add(name, value)
        sink = None
        if self.tee is not None and 200 <= up.status < 300:
            try:
                sink = self.tee.open(info, up.status, up.headers)
            except Exception:
                log.exception("the cache could not take %s; proxying it uncached", info.describe())
        traffic = 0
        try:
            await resp.prepare(request)
            started.append(resp)
            chunks = up.content.iter_any().__aiter__()
            while True:
                # Only the upstream read is guarded here: a failed write to the client raises
                # ConnectionResetError (aiohttp's also subclasses ClientConnectionError) and
                # is handled below as "client went away".
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as e:
                    if sink is not None:
                        sink.abort("upstream broke mid-body")
                        sink = None
                    if info.is_watch:
                        # Upstream closed mid-stream (or the hub ended the watch): a clean
                        # end makes the client re-watch; nothing to tell it beyond that.
                        log.debug("watch %s ended by upstream: %r", info.path, e)
                        break
                    log.warning("upstream broke mid-body for %s: %r", info.describe(), e)
                    await out.cut(request)
                    return resp
                heard(server)
                if transform is None:
                    await out.write(chunk)
                elif not await _write_filtered(out, transform.feed(chunk), info):
                    if sink is not None:
                        sink.abort("filter broke mid-body")
                        sink = None
                    if info.is_watch:
                        transform = None  # end the watch cleanly; the client re-watches
                        break
                    await out.cut(request)
                    return resp
                traffic += len(chunk)
                if sink is not None:
                    try:
                        sink.feed(chunk)
                    except Exception:
                        # A cache bug must cost the cache this response, never the client.
                        log.exception("the cache failed on %s; not caching it", info.describe())
                        sink.abort("tee failed")
                        sink = None
            if sink is not None and info.is_watch and self._closing:
                sink.abort("hub shutting down")
                sink = None
            if transform is not None and not await _write_filtered(out, transform.finish(), info):
                if sink is not None:
                    sink.abort("filter broke at the end of the body")
                    sink = None
                if not info.is_watch and request.transport is not None:
                    await out.cut(request)
                    return resp
            if sink is not None:
                # Upstream's body is complete: the cache gets it before the client sees its end,
                # so a read the client makes next (offline a moment later) finds it queued.
                current, sink = sink, None
                try:
                    await current.finish()
                except Exception:
                    log.exception("the cache failed to store %s", info.describe())
            await out.end()
            return resp
        except ConnectionResetError:
            # The client went away mid-body: nothing left to answer.
            if sink is not None:
                sink.abort("client went away")
                sink = None
            return resp
        except asyncio.CancelledError:
            if sink is not None:
                sink.abort("client went away")
                sink = None
            raise
        finally:
            if sink is not None:
                sink.abort("proxy error")
            if traffic and info.is_resource_request:
                verb, resource, subresource, client = self._metrics.request_labels(info)
                self._metrics.child(
                    self._metrics.proxy_traffic, client, verb, resource, subresource
                ).inc(traffic)


class _Out:
    """Where a relayed body goes. ``whole``: the upstream body had all arrived when its headers
    were read (a small answer, within one read buffer): headers, body and the end of the body
    then leave in one write to the socket (one syscall instead of three); otherwise every chunk
    is written as it comes (a watch event, a log line, a list as it streams)."""

    __slots__ = ("_held", "_resp", "_whole")

    def __init__(self, resp: web.StreamResponse, *, whole: bool) -> None:
        self._resp = resp
        self._whole = whole
        self._held: list[bytes] = []
        if whole:
            # aiohttp's own switch (``web.Response`` sets it): headers wait for the body.
            resp._send_headers_immediately = False

    async def write(self, data: bytes) -> None:
        if self._whole:
            self._held.append(data)
        else:
            await self._resp.write(data)

    async def end(self) -> None:
        held, self._held = self._held, []
        await self._resp.write_eof(b"".join(held))

    async def cut(self, request: web.BaseRequest) -> None:
        """End the answer short (the upstream or a filter broke): what was held goes first,
        so the client sees a truncated body, as it would have without holding."""
        held, self._held = self._held, []
        try:
            if held:
                await self._resp.write(b"".join(held))
            elif self._whole and self._resp.prepared:
                self._resp._payload_writer.send_headers()  # type: ignore[union-attr]
        except ConnectionError:
            pass
        if request.transport is not None:
            request.transport.close()


async def _write_filtered(
    out: _Out, pieces: Iterable[bytes], info: requestinfo.RequestInfo
) -> bool:
    """Write what a transform yields; False when the transform raised (logged)."""
    it = iter(pieces)
    while True:
        try:
            piece = next(it)
        except StopIteration:
            return True
        except Exception:
            log.exception("the response filters broke off %s", info.describe())
            return False
        if piece:
            await out.write(piece)


def _nobody(server: str) -> None:
    """``on_heard`` when nobody listens."""
