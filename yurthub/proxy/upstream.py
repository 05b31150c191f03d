"""The hub's one HTTP client towards apiservers: a bounded connection pool plus its identity.

One ``Upstream`` per hub (never module-level). Both the remote proxy and the heartbeat prober
use it, so a probe sees the same TLS setup and pool as real traffic.

Identity rotation (``follow_identity``, run as one task by the hub when its identity comes from
a kubeconfig: ``--kubeconfig``, kubelet's, or the ``yurthub.conf`` the certificate manager
writes, which may not exist yet at start: the identity is then anonymous until it does): every
``identity_check_interval`` seconds (10 s, YurtHub's transport manager)
the files the identity was read from are stat'ed in the executor (``kubeconfigs.changed``).
A failure that may be the apiserver refusing the hub's own credentials (HTTP 401, a TLS error,
see ``is_tls_failure`` for how TLS 1.3 shows a refused certificate) wakes the check at once, at
most once per ``MIN_RECHECK_GAP``. A change is loaded in the executor and, if it loads, swapped
in: new requests read ``identity`` / ``ssl_for`` / ``identity_headers`` afresh, so they use it
at once. Pooled connections are keyed by the ``SSLContext`` object, so no new request can reuse
a connection that presented the old certificate; the connector closes those idle ones at once
and closes busy ones (an open watch) when their exchange ends instead of pooling them. A new
file that does not load (half-written, unparsable, key not matching the certificate, an empty
token file, an already expired certificate) leaves the working identity in place; it is logged
once and tried again at every check until it loads.

Requests that carry their own Bearer token use the ``bare`` context, which a certificate
rotation leaves untouched (``kubeconfigs.carry_over``).

The heartbeat lane (``lane``): a second, small pool (``LANE_PER_SERVER`` connections per
apiserver) for kubelet's own heartbeat requests the proxy forwards (its Lease and its Node:
get, update, patch; ``fairness.exempt``). After a heal every watch, list and relist of the
node's clients and of the hub's own loops opens its connection at once; none of them can take
the lane's slots, so a lease renewal never waits for a connection behind them. The health
prober's renewals have a pool of their own (``probes``, ``PROBE_PER_SERVER`` connections per
apiserver) that nothing the proxy forwards can use: the proxy authenticates nobody, so any
process on the node can send "kubelet's" node PATCHes, and a few whose bodies never finish
would otherwise hold every lane connection, the probes would time out waiting for one and the
hub would go offline. The lanes' sockets close abortively (``SO_LINGER`` 0: a reset, the unsent
bytes dropped): a renewal the hub gave up on (a link gone silent) is never delivered when the
route comes back, minutes later, with a stale resourceVersion: the apiserver counted such late
PUTs as 504s (their client gone) and the hub's next renewal on top of its own base as a 409.

Watches to an apiserver that speaks HTTP/2 go over the ``h2`` pool instead
(``proxy/h2upstream.py``: many streams a connection; ``h2_context``/``watch_h2``), with the
identity's ALPN twins of the same contexts, retired with them; a 401 or a refused handshake
there wakes the identity check as here.

Dangers: every open watch over HTTP/1.1 holds a pooled connection until it ends, so
``pool_limit`` bounds concurrent watches; the aiohttp client keeps connections per (host,
port, ssl context), so the Bearer-token requests (bare TLS context) never reuse a connection
that presented the hub's client certificate. ``_RotatingConnector`` relies on two aiohttp
connector internals (``_conns``, ``_release``); ``tests/integration/hub/
test_hub_identity_rotation.py`` pins that behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import pathlib
import socket
import ssl
import struct
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import aiohttp
import yarl
from aiohttp import client_proto, client_reqrep

from yurthub import kubeconfigs, settings
from yurthub.proxy import h2upstream

log = logging.getLogger(__name__)

MIN_RECHECK_GAP = 1.0
"""Auth failures wake the check at most this often: a burst of 401s costs one stat round."""


LANE_PER_SERVER = 4
"""Connections of the heartbeat lane per apiserver: kubelet's lease, its node get and its
status patch (kubelet sends them one at a time), and one to spare."""
PROBE_PER_SERVER = 2
"""Connections of the prober's own lane per apiserver: it renews through one server at a time
(a GET, then a PUT); a second while the first closes."""


def abortive_socket(addr_info: tuple[Any, ...]) -> socket.socket:
    """A TCP socket whose close is a reset (``SO_LINGER`` on, 0 s): bytes not yet acknowledged
    are dropped, never delivered later (aiohttp's ``socket_factory``)."""
    family, type_, proto = addr_info[0], addr_info[1], addr_info[2]
    sock = socket.socket(family=family, type=type_, proto=proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return sock


class _RotatingConnector(aiohttp.TCPConnector):
    """A ``TCPConnector`` that can retire a TLS context: its idle connections are closed at
    once, its busy ones when released (never pooled again)."""

    def __init__(self, upstream: settings.UpstreamSettings, *, lane: int = 0) -> None:
        """``lane``: connections per server of a heartbeat lane (0: the main pool)."""
        servers = max(1, len(upstream.servers))
        super().__init__(
            limit=lane * servers if lane else upstream.pool_limit,
            limit_per_host=lane if lane else upstream.pool_limit_per_host,
            keepalive_timeout=upstream.keepalive_timeout,
            enable_cleanup_closed=False,
            socket_factory=abortive_socket if lane else None,
        )
        self._retired: weakref.WeakSet[ssl.SSLContext] = weakref.WeakSet()
        self._abortive = bool(lane)
        """Close by aborting: a TLS connection's graceful close waits for the peer's
        close_notify (30 s on a silent link) before the socket goes, and the bytes it holds
        would still be delivered if the route came back meanwhile."""

    def retire(self, context: ssl.SSLContext) -> int:
        """Stop pooling connections made with ``context``; returns how many idle ones closed."""
        self._retired.add(context)
        closed = 0
        for key in [k for k in self._conns if k.ssl is context]:
            for protocol, _ in self._conns.pop(key):
                protocol.close()
                closed += 1
        return closed

    def _release(
        self,
        key: client_reqrep.ConnectionKey,
        protocol: client_proto.ResponseHandler,
        *,
        should_close: bool = False,
    ) -> None:
        retired = isinstance(key.ssl, ssl.SSLContext) and key.ssl in self._retired
        if self._abortive and (should_close or retired or protocol.should_close):
            protocol.abort()
        super()._release(key, protocol, should_close=should_close or retired)


def is_tls_failure(error: BaseException) -> bool:
    """Whether ``error`` (or what it was raised from) may be the apiserver refusing our TLS
    credentials, or a server we cannot verify.

    With TLS 1.3 the server checks the client certificate after the client considers the
    handshake done, so an expired or unknown certificate shows up only as the server closing
    the connection without an answer (``ServerDisconnectedError``, no SSL error attached). That
    is also what a stale keep-alive connection looks like; a false alarm costs one stat round.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError | aiohttp.ClientSSLError):
            return True
        if isinstance(current, aiohttp.ServerDisconnectedError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


class Upstream:
    def __init__(
        self,
        upstream: settings.UpstreamSettings,
        identity: kubeconfigs.Identity,
        *,
        kubeconfig: pathlib.Path | None = None,
        trust: kubeconfigs.TrustPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        renewed_by_hub: bool = False,
        key_passwords: Sequence[bytes] = (),
    ) -> None:
        """``kubeconfig``: where ``identity`` came from; ``follow_identity`` reloads it from
        there. ``None``: the identity is fixed. ``renewed_by_hub``: the hub's certificate
        manager renews it (short-lived certificates are "expiring" all their life: that is
        logged at DEBUG; an expired one still warns). ``key_passwords``: what opens the hub's
        sealed client key (``certs.sealedkeys``) on each reload."""
        self.settings = upstream
        self.identity = identity
        self.reloads = 0
        """Identities swapped in since start (tests and logs)."""
        self._kubeconfig = kubeconfig
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._connector: _RotatingConnector | None = None
        self._lane: aiohttp.ClientSession | None = None
        self._lane_connector: _RotatingConnector | None = None
        self._probes: aiohttp.ClientSession | None = None
        self._probe_connector: _RotatingConnector | None = None
        self._h2: h2upstream.Pool | None = None
        self._recheck = asyncio.Event()
        self._check_lock = asyncio.Lock()
        self._rejected = ""
        self._expiry = kubeconfigs.Expiry.VALID
        self.trust_policy = trust or kubeconfigs.TrustPolicy()
        """What a reloaded kubeconfig may use beyond its own CA: the rule it was loaded by."""
        self._renewed_by_hub = renewed_by_hub
        self._key_passwords = tuple(key_passwords)

    async def start(self) -> None:
        self._connector = _RotatingConnector(self.settings)
        self._session = self._new_session(self._connector)
        self._lane_connector = _RotatingConnector(self.settings, lane=LANE_PER_SERVER)
        self._lane = self._new_session(self._lane_connector)
        self._probe_connector = _RotatingConnector(self.settings, lane=PROBE_PER_SERVER)
        self._probes = self._new_session(self._probe_connector)
        if self.settings.http2_watches:
            self._h2 = h2upstream.Pool()
        self._note_expiry(announce=True)

    def _new_session(self, connector: _RotatingConnector) -> aiohttp.ClientSession:
        # Only a rotatable identity pays for the per-request hook (a middleware: about 3 us a
        # request, where aiohttp's trace signals cost about 15 us).
        middlewares = (self._notice_rejection,) if self._kubeconfig is not None else ()
        return aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            # The proxy sets per-request timeouts; no session-wide total for watches.
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.settings.connect_timeout),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
            middlewares=middlewares,
        )

    async def close(self) -> None:
        for session in (self._session, self._lane, self._probes):
            if session is not None:
                await session.close()
        self._session = self._lane = self._probes = None
        self._connector = self._lane_connector = self._probe_connector = None
        if self._h2 is not None:
            await self._h2.close()
            self._h2 = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("upstream client is not started")
        return self._session

    @property
    def lane(self) -> aiohttp.ClientSession:
        """The heartbeat lane for kubelet's requests (see the module docstring)."""
        if self._lane is None:
            raise RuntimeError("upstream client is not started")
        return self._lane

    @property
    def probes(self) -> aiohttp.ClientSession:
        """The health prober's own lane (see the module docstring): nothing the proxy
        forwards uses it."""
        if self._probes is None:
            raise RuntimeError("upstream client is not started")
        return self._probes

    def ssl_for(self, server: str, *, own_identity: bool) -> ssl.SSLContext | bool:
        """TLS context for ``server``: False for a loopback ``http://`` server."""
        if server.startswith("http://"):
            return False
        return self.identity.with_identity if own_identity else self.identity.bare

    def identity_headers(self) -> dict[str, str]:
        return self.identity.auth_headers()

    # --- HTTP/2 watches ---

    def h2_context(self, server: str, *, own_identity: bool) -> ssl.SSLContext | None:
        """The TLS context to send a watch to ``server`` with over HTTP/2; None: send it over
        HTTP/1.1 (HTTP/2 off, plain http, a server that did not select h2 lately, an identity
        without ALPN twins)."""
        if self._h2 is None or not self._h2.speaks_h2(server):
            return None
        context = self.ssl_for(server, own_identity=own_identity)
        if not isinstance(context, ssl.SSLContext):
            return None
        return self.identity.h2_twin(context)

    async def watch_h2(
        self,
        server: str,
        context: ssl.SSLContext,
        method: str,
        url: yarl.URL,
        headers: Sequence[tuple[str, str]],
        *,
        connect_timeout: float,
    ) -> h2upstream.Response:
        """``h2upstream.Pool.request``; a refused handshake or a 401 to the hub's own
        credentials wakes the identity check (``_notice_rejection``'s work for HTTP/1.1)."""
        if self._h2 is None:
            raise h2upstream.NotH2(server)
        try:
            response = await self._h2.request(
                server, context, method, url, headers, connect_timeout=connect_timeout
            )
        except h2upstream.H2Unavailable as e:
            if is_tls_failure(e):
                self.recheck_soon(f"{e.why} from {server}")
            raise
        if response.status == 401 and self._own_credentials(dict(headers)):
            self.recheck_soon(f"HTTP 401 from {server}")
        return response

    def h2_abort(self, server: str) -> int:
        """``server`` was declared unhealthy: its HTTP/2 connections end at once."""
        return 0 if self._h2 is None else self._h2.abort_server(server)

    def h2_connections(self) -> int:
        return 0 if self._h2 is None else self._h2.connections()

    async def call_as_hub(
        self,
        server: str,
        method: str,
        path: str,
        *,
        data: bytes | None,
        headers: Mapping[str, str],
        within: float,
        limit: int,
        lane: bool = False,
    ) -> tuple[int, bytes | None]:
        """One request of the hub's own (not proxied) to ``server`` with the hub's identity,
        no redirects, within ``within`` seconds: ``(status, body)``, the body None when it is
        larger than ``limit``; ``(0, b"")`` when no answer came (logged at DEBUG). ``lane``:
        over the heartbeat lane (a read kubelet's heartbeat waits for), not the shared pool.

        asyncio.timeout, not aiohttp's total timeout: when the hub stops a caller in the same
        loop iteration as aiohttp's own timer fires, aiohttp turns the cancellation into a
        TimeoutError (seen under load), and a caller that swallowed it would keep the hub's
        TaskGroup from ever finishing. asyncio.timeout lets an outside cancel through."""
        try:
            async with (
                asyncio.timeout(within),
                (self.lane if lane else self.session).request(
                    method,
                    server + path,
                    data=data,
                    headers={**headers, **self.identity_headers()},
                    ssl=self.ssl_for(server, own_identity=True),
                    allow_redirects=False,
                ) as resp,
            ):
                body = bytearray()
                async for chunk in resp.content.iter_chunked(65536):
                    body += chunk
                    if len(body) > limit:
                        return resp.status, None
                return resp.status, bytes(body)
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            log.debug("%s %s via %s failed: %s", method, path, server, e or type(e).__name__)
            return 0, b""

    # --- identity rotation ---

    def recheck_soon(self, why: str) -> None:
        """Check the identity's files now (rate-limited): an upstream rejected our credentials."""
        if self._kubeconfig is None or self._recheck.is_set():
            return
        log.debug("re-checking the hub identity at once: %s", why)
        self._recheck.set()

    async def follow_identity(self) -> None:
        """Until cancelled: reload the identity when its files change. Owned by the hub's
        TaskGroup; a failing check is logged and costs nothing else."""
        if self._kubeconfig is None:
            return
        last = self._clock()
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.identity_check_interval):
                    await self._recheck.wait()
            gap = MIN_RECHECK_GAP - (self._clock() - last)
            if gap > 0 and self._recheck.is_set():
                await asyncio.sleep(gap)
            self._recheck.clear()
            last = self._clock()
            try:
                await self.check_identity()
            except asyncio.CancelledError:
                raise
            except Exception:
                # A bug here must not end the task: the hub would lose rotation silently.
                log.exception("checking the hub identity failed unexpectedly")

    async def check_identity(self) -> bool:
        """Reload the identity if its files changed; True when a new one is now in use."""
        if self._kubeconfig is None:
            return False
        async with self._check_lock:
            loop = asyncio.get_running_loop()
            current = self.identity
            if not current.files:
                # No identity yet (the certificate manager has not written yurthub.conf):
                # nothing to complain about until the file exists.
                if not await loop.run_in_executor(None, self._kubeconfig.exists):
                    return False
            elif not await loop.run_in_executor(None, kubeconfigs.changed, current.files):
                self._note_expiry()
                return False
            try:
                candidate = await loop.run_in_executor(
                    None,
                    kubeconfigs.load,
                    self._kubeconfig,
                    self.trust_policy,
                    self._key_passwords,
                )
                candidate = self._acceptable(current, candidate)
            except kubeconfigs.KubeconfigError as e:
                self._reject(str(e))
                self._note_expiry()
                return False
            self._rejected = ""
            self._use(kubeconfigs.carry_over(current, candidate))
            return True

    def _acceptable(
        self, current: kubeconfigs.Identity, candidate: kubeconfigs.Identity
    ) -> kubeconfigs.Identity:
        now = datetime.datetime.now(datetime.UTC)
        expired = kubeconfigs.Expiry.EXPIRED
        if (
            kubeconfigs.expiry(candidate.not_after, now) is expired
            and kubeconfigs.expiry(current.not_after, now) is not expired
        ):
            raise kubeconfigs.KubeconfigError(
                f"kubeconfig {self._kubeconfig}: the new client certificate "
                f"(CN={candidate.subject!r}) expired at {candidate.not_after}"
            )
        return candidate

    def _reject(self, error: str) -> None:
        if error == self._rejected:
            log.debug("new hub credentials still not usable: %s", error)
            return
        self._rejected = error
        log.error(
            "new hub credentials are not usable, keeping the current identity (%s); "
            "retrying every %gs: %s",
            self.identity.describe(),
            self.settings.identity_check_interval,
            error,
        )

    def _use(self, new: kubeconfigs.Identity) -> None:
        old, self.identity = self.identity, new
        self.reloads += 1
        closed = 0
        for connector in (self._connector, self._lane_connector, self._probe_connector):
            if connector is None:
                continue
            for context in {old.with_identity, old.bare} - {new.with_identity, new.bare}:
                closed += connector.retire(context)
        if self._h2 is not None:
            twins = {old.with_identity_h2, old.bare_h2} - {new.with_identity_h2, new.bare_h2}
            for twin in twins:
                if twin is not None:
                    self._h2.retire(twin)
        log.info(
            "hub identity reloaded from %s: %s (closed %d idle connections of the old one)",
            self._kubeconfig,
            new.describe(),
            closed,
        )
        warning = kubeconfigs.trust_warning(new.trust, f"kubeconfig {self._kubeconfig}")
        if warning:
            log.warning("%s", warning)
        self._note_expiry(announce=True)

    def _note_expiry(self, *, announce: bool = False) -> None:
        """Warn when the client certificate expires within a day or has expired: on load, and
        when a running identity crosses into either state."""
        identity = self.identity
        state = kubeconfigs.expiry(identity.not_after, datetime.datetime.now(datetime.UTC))
        if state is not kubeconfigs.Expiry.VALID and (announce or state is not self._expiry):
            expired = state is kubeconfigs.Expiry.EXPIRED
            log.log(
                logging.WARNING if expired or not self._renewed_by_hub else logging.DEBUG,
                "the hub's client certificate (CN=%r) %s at %s; %s",
                identity.subject,
                "has expired" if state is kubeconfigs.Expiry.EXPIRED else "expires",
                identity.not_after,
                "it is reloaded as soon as its file is rotated"
                if self._kubeconfig is not None
                else "restart the hub with a new one",
            )
        self._expiry = state

    async def _notice_rejection(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        """Client middleware: a request the apiserver may have refused for our credentials
        wakes the identity check."""
        try:
            response = await handler(request)
        except Exception as e:
            if is_tls_failure(e):
                self.recheck_soon(f"{type(e).__name__} from {request.url.host}")
            raise
        if response.status == 401 and self._own_credentials(request.headers):
            self.recheck_soon(f"HTTP 401 from {request.url.host}")
        return response

    def _own_credentials(self, headers: Mapping[str, str]) -> bool:
        """Whether a request went out with the hub's credentials, not a client's token."""
        auth = headers.get("Authorization", "")
        return not auth or auth == self.identity.auth_headers().get("Authorization")
