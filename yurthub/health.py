"""Cloud health: a node-lease heartbeat per apiserver, the kubelet liveness gate, suspects.

Reference ``yurthub-behaviour.md`` §5.1, with one addition:

- One ``ProbeState`` per ``--server-addr`` URL. The first probe round (all servers at once)
  decides the initial state: success -> healthy at once, failure -> unhealthy. Afterwards a
  failed probe makes a server unhealthy at once; ``healthy_threshold`` consecutive successes
  make it healthy again.
- Slow is not gone (beyond YurtHub's three attempts, which it keeps): a probe of a server in
  use tries a renewal that got no answer (a timeout, a reset) up to ``failed_retry`` times
  before it fails (``probing.retry_unanswered``; a refusal, no route, a refused handshake fail at
  once: nothing listens), and a renewal that timed out while the server's answers to the
  proxy kept arriving (``heard``, fed by the remote proxy with every chunk) counts as
  alive, not failed (``probing.alive_meanwhile``, ``node_yurthub_heartbeat_slow_alive_total``): an
  apiserver busy with a whole fleet coming back at once answers late, and declaring it gone
  would end every watch and send them all back moments later (in a fleet of 30 hubs healed at
  once, hubs that gave up at one 2 s timeout went offline 248 times in a minute). A silent link
  carries nothing, so it is noticed after ``failed_retry`` timeouts (6 s by default).
- Every ``interval`` seconds servers are probed one by one from a rotating start and the round
  stops at the first success, as YurtHub does (normally one probe per tick, servers alternating).
- Beyond YurtHub: while a server is unhealthy it is probed more often than that
  (``probing.recovery_delay``: 1 s doubling to ``interval``, jittered; to
  ``probing.RECOVERY_CAP``, 2 s, while it gives no answer at all: a dead route costs a connect
  attempt, so however long the outage, a healed link is seen within about 2 s), and a success
  of an unhealthy server is followed at once by the rest of the ``healthy_threshold`` probes
  (each a real lease round trip): a healed link is trusted again within seconds, not two
  heartbeats later. While no server is
  healthy, a probe waits up to ``interval`` for its answer, not ``timeout``
  (``probing.answer_bound``): after a fleet-wide heal the apiserver answers late. A probe
  waiting on a dead route then goes through when the route is back (its SYN is retransmitted,
  a held handshake delivered): a heal is still seen within seconds. So does a probe's first
  attempt for two intervals after the heal, and for two intervals after the server's last
  answer that showed strain (``strain``: a proxied answer after the header deadline, a 429,
  503 or 504, a renewal answered after the timeout): an apiserver that stops answering for a
  few seconds under the fleet's reconnections is not declared gone again, however long the
  storm lasts. A request that got no answer at all is no sign of strain (a cut holds it).
- A probe renews ``kube-node-lease/<node>`` through that server with the hub's identity, over
  the upstream's lane for probes (``upstream.Upstream.probes``: its own connections, never
  queued behind the proxy's, kubelet's heartbeat requests included, reset when abandoned):
  PUT on top of the last lease that server returned, a base kept only while the last renewal
  was answered (an unanswered PUT may have been applied); a missing base is fetched (created
  if absent);
  a conflict (or another HTTP error) drops the base and retries, up to ``failed_retry`` attempts
  with 0.2/0.4/0.8 s backoff.
  A 429 (API Priority and Fairness pushing back) proves the server is up: it is not retried,
  and it keeps the server as it was. A healthy server stays healthy (going offline under load,
  then back all at once, would feed the storm the apiserver is refusing); an unhealthy one
  stays unhealthy until a renewal is accepted (trusting it would send the node's clients back
  to the apiserver that is refusing, with every other hub healed at the same moment). The
  refused PUT's base is kept: APF refuses before any handler runs.
  The renewed Lease goes to ``on_lease`` (the cache stores it as kubelet's).
- Kubelet liveness gate: the router calls ``renew_kubelet_lease`` on every kubelet lease request;
  once kubelet has been silent for ``kubelet_health_grace_period`` probes fail without contacting
  the server, so the node goes NotReady in the cloud when kubelet dies. Open before kubelet's
  first lease request.
- A probe whose credentials are rejected (HTTP 401, a refused TLS handshake) asks the upstream
  client to re-check the hub's identity files at once and, if a rotated identity was loaded,
  retries with it: kubelet rotating the certificate under the hub never costs a probe.
- Beyond YurtHub: ``report_transport_error(server)`` marks a healthy server *suspect* (skipped by
  the balancer) and wakes the prober to probe it at once. Success clears the suspicion (a
  one-off network blip costs nothing); failure makes it unhealthy. A dead apiserver is left
  within one probe instead of a heartbeat interval. ``report_slow(server)`` (a request
  got no response headers within ``header_deadline``) probes it at once too, without skipping
  it meanwhile: a silent link (blackhole, a stopped apiserver) is noticed in about
  ``header_deadline`` + ``failed_retry`` x ``timeout`` whenever traffic is in flight.
- ``on_unhealthy`` callbacks run when a server turns unhealthy: the remote proxy then answers
  the reads in flight to it from the cache and ends its watches (``remote.RemoteProxy.abandon``).
- Outages (``outages.recording``): ``on_cloud`` callbacks are told, after the first probe round
  and then on every change, whether any server's probe state is healthy (suspects still
  count: a blip the probe clears is no outage); ``on_failure`` callbacks get every failed
  probe with its cause (``outages.causes``) and words.
- What an operator sees: the first probe's outcome per server, every health transition and the
  first failure reason (and each new one) of a server are logged at INFO in words
  (``cannot reach https://10.0.0.1:6443: connection refused``, ``unreachable.describe``), not
  once per probe; each server's last error and last success are kept for ``/v1/status`` and
  ``/v1/readyz`` (``reached_any``: whether any server has ever answered).

All HTTP calls are bounded by ``heartbeat.timeout``; the loop runs as one named task owned by
the hub's TaskGroup and exits only by cancellation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import orjson

from yurthub import metrics, pacing, probing, settings, unreachable
from yurthub.outages import causes
from yurthub.proxy import seams, upstream

log = logging.getLogger(__name__)

CONFLICT_BACKOFF = (0.2, 0.4, 0.8)
_MAX_LEASE_BYTES = 1 << 20
USER_AGENT = "edgehub-heartbeat"
SLOW_PROBE_GAP = 2.0
"""Seconds after a probe found a slow apiserver alive during which further slow reports wait."""


class _ProbeFailed(unreachable.HttpRefusal):
    pass


class _CredentialsRejected(_ProbeFailed):
    """HTTP 401: the apiserver did not accept the hub's identity."""


class _PushedBack(_ProbeFailed):
    """HTTP 429: the apiserver is up and asks to be left alone for a while (API Priority and
    Fairness, an apiserver whose watch cache is still initialising)."""

    def __init__(self, what: str, retry_after: float | None) -> None:
        super().__init__(what, 429, "too many requests")
        self.retry_after = retry_after


def _status_message(body: Mapping[str, Any]) -> str:
    message = body.get("message")
    return message if isinstance(message, str) else ""


@dataclasses.dataclass(slots=True)
class ServerReport:
    """What the hub knows of one apiserver (``/v1/status``)."""

    healthy: bool = False
    last_error: str = ""
    """Why the last failed probe failed ("" when the last probe succeeded)."""
    last_error_at: float | None = None
    """Wall-clock time of that failure."""
    last_success_at: float | None = None
    """Wall-clock time of the last successful probe."""


def _rejected_credentials(error: BaseException) -> bool:
    return isinstance(error, _CredentialsRejected) or upstream.is_tls_failure(error)


class HealthChecker:
    def __init__(
        self,
        hub: settings.HubSettings,
        client: upstream.Upstream,
        collectors: metrics.Metrics,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = hub
        self._hb = hub.heartbeat
        self._client = client
        self._metrics = collectors
        self._clock = clock
        self.servers = hub.upstream.servers
        self._states = {s: probing.ProbeState(self._hb.healthy_threshold) for s in self.servers}
        self._leases: dict[str, dict[str, Any]] = {}
        self._suspects: set[str] = set()
        self._pending: set[str] = set()
        self._slow: set[str] = set()
        self._alive_after_slow: dict[str, float] = {}
        self._wake = asyncio.Event()
        self._next = 0
        self._recovery_at: float | None = None
        """When the unhealthy servers are probed next (None: none is unhealthy)."""
        self._recovery_attempt = 0
        self._random = random.Random()
        self.reports = {s: ServerReport() for s in self.servers}
        self._logged_error: dict[str, str] = {}
        self._wall = time.time
        self.kubelet = probing.KubeletGate(self._hb.kubelet_health_grace_period)
        self.initial_probe_done = asyncio.Event()
        self.on_lease: seams.LeaseCallback | None = None
        self.identity_pending: Callable[[], str] = lambda: ""
        """Why the hub has no identity to probe with yet ("" when it has one): the certificate
        manager is still joining. Such a probe fails without contacting the server, saying so
        (not "the server's certificate is not trusted", which the placeholder would cause)."""
        self._silent: set[str] = set()
        """Servers whose last probe got no answer at all (refused, reset, timed out)."""
        self.pushbacks = 0
        """Heartbeats an apiserver answered 429 (counted as alive, never retried at once)."""
        self._pushing_back: set[str] = set()
        self.on_unhealthy: list[Callable[[str], object]] = []
        """Called (on the loop, must not block) with a server that just turned unhealthy."""
        self.on_failure: list[Callable[[str, causes.Cause, str], object]] = []
        """Called (on the loop, must not block) with every failed probe: server, cause, words."""
        self.on_cloud: list[Callable[[bool], object]] = []
        """Called (on the loop, must not block) after the first probe round and whenever it
        changes: whether any server's probe state is healthy."""
        self._cloud_up: bool | None = None
        self._healed_at: float | None = None
        """When the hub last came back online after an outage (the clock's reading)."""
        self._attempts: dict[str, int] = {}
        """The attempt (0: first) of each server's probe going on (``probing.answer_bound``)."""
        self._heard: dict[str, float | None] = dict.fromkeys(self.servers)
        """When an answer of each server last reached the proxy (``heard``)."""
        self._strained_at: dict[str, float] = {}
        """When each server last showed strain (``strain``, ``probing.answer_bound``)."""
        self.slow_alive = 0
        """Renewals that timed out while the server's answers kept arriving (kept healthy)."""
        self._slow_alive_logged: set[str] = set()
        for server in self.servers:
            self._metrics.server_healthy_status.labels(server).set(0)

    # --- queries (hot path: dict lookups only) ---

    def is_healthy(self, server: str) -> bool:
        state = self._states.get(server)
        return state is not None and state.healthy and server not in self._suspects

    def any_healthy(self) -> bool:
        return any(self.is_healthy(s) for s in self.servers)

    def reached_any(self) -> bool:
        """Whether some apiserver has answered a probe since the hub started."""
        return any(r.last_success_at is not None for r in self.reports.values())

    def last_success(self) -> float | None:
        """Wall-clock time of the last successful probe of any apiserver (None: never)."""
        times = [r.last_success_at for r in self.reports.values() if r.last_success_at is not None]
        return max(times, default=None)

    def unreachable_summary(self) -> str:
        """``https://a: connection refused; https://b: ...`` for every failing server."""
        return "; ".join(
            f"{server}: {report.last_error}"
            for server, report in self.reports.items()
            if report.last_error
        )

    def renew_kubelet_lease(self) -> None:
        self.kubelet.renew(self._clock())

    def report_transport_error(self, server: str) -> None:
        if not self.is_healthy(server):
            return
        log.warning("transport error to %s: suspect, probing it now", server)
        self._suspects.add(server)
        self._pending.add(server)
        self._wake.set()

    def heard(self, server: str) -> None:
        """Bytes of an answer from ``server`` reached the proxy (response headers, a chunk of
        a body or a watch): it is alive, whatever a lease renewal timing out meanwhile says.
        Hot path: one clock reading and a dict store."""
        if server in self._heard:
            self._heard[server] = self._clock()

    def strain(self, server: str) -> None:
        """An answer of ``server`` showed it under strain (late, or 429/503/504): for
        ``probing.PATIENCE`` intervals a probe's first attempt waits up to an interval for its
        answer. Only answers count: a request without any answer may be a cut link."""
        if server in self._heard:
            self._strained_at[server] = self._clock()

    def report_slow(self, server: str) -> None:
        """A request to ``server`` has had no response headers for a while: probe it now (it
        stays usable meanwhile: a slow list must not send every client to the cache).

        An apiserver that is merely slow makes every request report it: after a probe that
        found it alive, reports are ignored for ``SLOW_PROBE_GAP`` seconds, so a slow but live
        apiserver costs at most one lease renewal per gap."""
        if not self.is_healthy(server) or server in self._pending:
            return
        alive_at = self._alive_after_slow.get(server)
        if alive_at is not None and self._clock() - alive_at < SLOW_PROBE_GAP:
            return
        log.info("no response headers from %s in time: probing it now", server)
        self._slow.add(server)
        self._pending.add(server)
        self._wake.set()

    def probe_soon(self) -> None:
        """Probe every unhealthy server now (the hub's identity just changed: a server that
        refused the old one may accept the new)."""
        pending = {s for s in self.servers if not self.is_healthy(s)}
        if pending:
            self._pending |= pending
            self._wake.set()

    # --- the loop ---

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tasks = {
                server: tg.create_task(self._probe(server), name=f"initial-probe {server}")
                for server in self.servers
            }
        for server, task in tasks.items():
            self._record(server, task.result())
        self._schedule_recovery()
        self.initial_probe_done.set()
        self._tell_cloud()
        deadline = self._clock() + self._hb.interval
        while True:
            wake_at = deadline if self._recovery_at is None else min(deadline, self._recovery_at)
            try:
                async with asyncio.timeout(max(0.0, wake_at - self._clock())):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            if self._pending:
                await self._probe_suspects()
            if self._recovery_at is not None and self._clock() >= self._recovery_at:
                await self._probe_unhealthy()
            if self._clock() >= deadline:
                await self._tick()
                deadline = self._clock() + self._hb.interval

    async def _probe_unhealthy(self) -> None:
        """Probe every unhealthy server (each until trusted or failed), and say when next."""
        unhealthy = [s for s in self.servers if not self._states[s].healthy]
        if unhealthy:
            async with asyncio.TaskGroup() as tg:
                for server in unhealthy:
                    tg.create_task(self._probe_until_trusted(server), name=f"recovery {server}")
        self._recovery_attempt += 1
        self._schedule_recovery()

    def _schedule_recovery(self) -> None:
        if all(state.healthy for state in self._states.values()):
            self._recovery_at = None
            self._recovery_attempt = 0
            return
        silent = all(
            server in self._silent for server in self.servers if not self._states[server].healthy
        )
        delay = probing.recovery_delay(
            self._recovery_attempt, self._hb.interval, self._random.random(), silent=silent
        )
        self._recovery_at = self._clock() + delay

    async def _probe_until_trusted(self, server: str) -> bool:
        """A probe and, while it succeeds and the server is not yet healthy, the rest of the
        threshold's at once (bounded by the threshold)."""
        ok = await self._probe(server)
        self._record(server, ok)
        for _ in range(self._hb.healthy_threshold):
            if not ok or self._states[server].healthy:
                break
            ok = await self._probe(server)
            self._record(server, ok)
        return ok

    async def _probe_suspects(self) -> None:
        pending, self._pending = self._pending, set()
        async with asyncio.TaskGroup() as tg:
            tasks = {s: tg.create_task(self._probe(s), name=f"suspect-probe {s}") for s in pending}
        for server, task in tasks.items():
            self._suspects.discard(server)
            ok = task.result()
            if server in self._slow:
                self._slow.discard(server)
                if ok:
                    self._alive_after_slow[server] = self._clock()
            self._record(server, ok)

    async def _tick(self) -> None:
        count = len(self.servers)
        start = self._next
        self._next = (self._next + 1) % count
        for offset in range(count):
            server = self.servers[(start + offset) % count]
            if await self._probe_until_trusted(server):
                return

    def _record(self, server: str, ok: bool) -> None:
        report = self.reports[server]
        changed = self._states[server].record(ok)
        report.healthy = self._states[server].healthy
        if ok:
            report.last_success_at = self._wall()
            report.last_error = ""
            self._logged_error.pop(server, None)
        elif report.last_error and self._logged_error.get(server) != report.last_error:
            # The first failure of a server and each new reason, not one line per probe.
            self._logged_error[server] = report.last_error
            log.info("cannot reach %s: %s", server, report.last_error)
        if changed:
            healthy = self._states[server].healthy
            log.info("server %s is now %s", server, "healthy" if healthy else "unhealthy")
            if self.initial_probe_done.is_set():
                self._tell_cloud()
            self._metrics.server_healthy_status.labels(server).set(1 if healthy else 0)
            if not healthy:
                if self._recovery_at is None:
                    self._recovery_attempt = 0
                    self._schedule_recovery()
                for callback in self.on_unhealthy:
                    try:
                        callback(server)
                    except Exception:
                        # A bug there must not end the prober (and the hub's TaskGroup with it).
                        log.exception("unhealthy callback failed for %s", server)

    def _tell_cloud(self) -> None:
        up = any(state.healthy for state in self._states.values())
        if up is self._cloud_up:
            return
        if up and self._cloud_up is False:
            self._healed_at = self._clock()
        self._cloud_up = up
        _call_each(self.on_cloud, up)

    # --- one probe ---

    async def _probe(self, server: str) -> bool:
        if not self.kubelet.alive(self._clock()):
            log.info(
                "kubelet lease silent > %ss: not renewing the node lease via %s",
                self.kubelet.grace_period,
                server,
            )
            self._failure(
                server,
                f"not renewing the node lease: kubelet silent for more than "
                f"{self.kubelet.grace_period:g} s (--kubelet-health-grace-period)",
                causes.Cause.KUBELET,
            )
            return False
        pending = self.identity_pending()
        if pending:
            self._failure(
                server,
                f"not probed: the hub has no identity yet ({pending})",
                causes.Cause.NO_IDENTITY,
            )
            return False
        rotated = False
        attempt = 0
        while attempt < self._hb.failed_retry:
            self._attempts[server] = attempt
            used = self._client.identity
            began = self._clock()
            try:
                await self._renew(server)
                self._silent.discard(server)
                return True
            except asyncio.CancelledError:
                raise
            except _PushedBack as e:
                self._silent.discard(server)
                self._pushed_back(server, e)
                # No retry: the next renewal is a heartbeat away, beyond the Retry-After an
                # apiserver asks for (1 s).
                if self._states[server].healthy:
                    # It answered: it is up, only busy. Declaring it unhealthy would send
                    # every client to the cache and, at the next success, all of them back at
                    # once, the storm it is pushing back against.
                    return True
                # Not in use (an outage, the hub starting): up, but it does not take our
                # renewal yet, so it is not trusted yet either. Trusting it would send this
                # node's clients (and every hub's, healed at the same moment) back at once
                # to the apiserver that is refusing; the hub stays offline until a renewal
                # is accepted.
                reason = unreachable.describe(server, e, timeout=self._hb.timeout)
                self._failure(server, reason, causes.of_error(e))
                return False
            except (_ProbeFailed, aiohttp.ClientError, TimeoutError, OSError, ValueError) as e:
                cause = causes.of_error(e)
                if self._alive_meanwhile(server, cause, began):
                    # Slow, not gone: the lease got no answer in time, but the server's answers
                    # to the proxy kept arriving meanwhile (an apiserver busy with a fleet
                    # coming back at once). Declaring it gone would end every watch and send
                    # them all back a moment later, to the same busy server.
                    self._slow_but_alive(server)
                    return True
                if not rotated and _rejected_credentials(e):
                    # Rejected credentials may just be rotated ones we have not loaded yet: one
                    # extra attempt (not counted) with the reloaded identity, if there is one.
                    await self._client.check_identity()
                    if self._client.identity is not used:
                        rotated = True
                        log.info("heartbeat via %s: retrying with the rotated identity", server)
                        continue
                reason = unreachable.describe(server, e, timeout=self._answer_bound(server))
                log.debug(
                    "heartbeat via %s attempt %d/%d failed: %s",
                    server,
                    attempt + 1,
                    self._hb.failed_retry,
                    reason,
                )
                self._failure(server, reason, cause)
                if isinstance(e, _ProbeFailed):
                    self._silent.discard(server)
                else:
                    self._silent.add(server)
                    if not probing.retry_unanswered(cause, in_use=self._states[server].healthy):
                        # Nothing listens there, or the server is not in use anyway: retrying
                        # the same dead route only multiplies the detection time.
                        return False
                    if attempt + 1 < self._hb.failed_retry:
                        log.info(
                            "heartbeat via %s failed: %s (attempt %d of %d): trying again "
                            "before declaring it gone",
                            server,
                            reason,
                            attempt + 1,
                            self._hb.failed_retry,
                        )
                    attempt += 1
                    continue
                if attempt + 1 < self._hb.failed_retry:
                    await asyncio.sleep(CONFLICT_BACKOFF[min(attempt, len(CONFLICT_BACKOFF) - 1)])
                attempt += 1
            except Exception:
                # A malformed answer or a bug must cost one failed probe, never the prober task
                # (its death would take the hub's TaskGroup down with it).
                log.exception("heartbeat via %s failed unexpectedly", server)
                self._failure(
                    server,
                    "the heartbeat failed unexpectedly (see the hub's log)",
                    causes.Cause.OTHER,
                )
                return False
        return False

    def _alive_meanwhile(self, server: str, cause: causes.Cause, began: float) -> bool:
        return self._states[server].healthy and probing.alive_meanwhile(
            cause, began, self._heard.get(server)
        )

    def _slow_but_alive(self, server: str) -> None:
        self.strain(server)
        self.slow_alive += 1
        self._metrics.heartbeat_slow_alive.labels(server).inc()
        _once_per_spell(
            self._slow_alive_logged,
            server,
            "%s did not answer the heartbeat within %g s, but its answers to the proxy kept "
            "arriving meanwhile: slow, not gone; it stays in use",
            server,
            self._hb.timeout,
        )

    def _pushed_back(self, server: str, e: _PushedBack) -> None:
        self.pushbacks += 1
        self._metrics.heartbeat_pushbacks.labels(server).inc()
        _once_per_spell(
            self._pushing_back,
            server,
            "%s answered the heartbeat 429 (Retry-After %s): it is up but busy; the lease is "
            "renewed at the next heartbeat",
            server,
            "none" if e.retry_after is None else f"{e.retry_after:g}s",
        )

    def _failure(self, server: str, reason: str, cause: causes.Cause) -> None:
        report = self.reports[server]
        report.last_error = reason
        report.last_error_at = self._wall()
        _call_each(self.on_failure, server, cause, reason)

    async def _renew(self, server: str) -> None:
        node = self._settings.node_name
        duration = int(self._hb.kubelet_health_grace_period)
        path = f"/apis/coordination.k8s.io/v1/namespaces/{probing.LEASE_NAMESPACE}/leases/{node}"
        now = datetime.datetime.now(datetime.UTC)
        base = self._leases.get(server)
        if base is None:
            status, body, raw = await self._call(server, "GET", path)
            if status == 404:
                uid = await self._node_uid(server)
                lease = probing.new_lease(node, uid, duration, now)
                status, body, raw = await self._call(server, "POST", path.rsplit("/", 1)[0], lease)
                if status not in (200, 201):
                    raise _ProbeFailed("creating the node lease", status, _status_message(body))
                await self._accept(server, body, raw)
                return
            if status != 200:
                raise _ProbeFailed("reading the node lease", status, _status_message(body))
            base = body
        # Until this PUT is answered its base may be stale: one that got no answer may still
        # have been applied (the lane's reset keeps a late delivery out, but the apiserver may
        # have applied it before the answer was lost), and a renewal on top of that base would
        # be a 409. Without a base the next renewal reads the lease first.
        self._leases.pop(server, None)
        try:
            status, body, raw = await self._call(
                server, "PUT", path, probing.renewed_lease(base, node, duration, now)
            )
        except _PushedBack:
            # Refused before it was handled (APF answers before any handler runs): the lease
            # is as it was, and the next renewal is one PUT on the same base, not a GET and a
            # PUT to an apiserver that is busy.
            self._leases[server] = base
            raise
        if status == 200:
            await self._accept(server, body, raw)
            return
        raise _ProbeFailed("renewing the node lease", status, _status_message(body))

    async def _accept(self, server: str, lease: dict[str, Any], raw: bytes) -> None:
        self._leases[server] = lease
        self._pushing_back.discard(server)
        self._slow_alive_logged.discard(server)
        if self.on_lease is not None:
            try:
                await self.on_lease(server, lease, raw)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("lease callback failed")

    async def _node_uid(self, server: str) -> str:
        status, body, _ = await self._call(
            server, "GET", f"/api/v1/nodes/{self._settings.node_name}"
        )
        if status == 200:
            return str(body.get("metadata", {}).get("uid", ""))
        return ""

    def _answer_bound(self, server: str) -> float:
        """Seconds a probe call to ``server`` may take (``probing.answer_bound``)."""
        offline = self.initial_probe_done.is_set() and not any(
            state.healthy for state in self._states.values()
        )
        now = self._clock()
        since_heal = None if self._healed_at is None else now - self._healed_at
        strained_at = self._strained_at.get(server)
        return probing.answer_bound(
            self._hb.timeout,
            self._hb.interval,
            offline=offline,
            attempt=self._attempts.get(server, 0),
            since_heal=since_heal,
            since_strain=None if strained_at is None else now - strained_at,
        )

    async def _call(
        self, server: str, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any], bytes]:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        headers.update(self._client.identity_headers())
        data = None
        if body is not None:
            data = orjson.dumps(body)
            headers["Content-Type"] = "application/json"
        # asyncio.timeout, not aiohttp's total timeout: aiohttp turns a cancellation that lands
        # next to its timer into a TimeoutError, which the probe takes for a failed heartbeat
        # and retries, so a shutdown could wait forever; asyncio.timeout lets it through.
        began = self._clock()
        async with (
            asyncio.timeout(self._answer_bound(server)),
            self._client.probes.request(
                method,
                server + path,
                data=data,
                headers=headers,
                ssl=self._client.ssl_for(server, own_identity=True),
                timeout=aiohttp.ClientTimeout(total=None),
                allow_redirects=False,
            ) as resp,
        ):
            if probing.strained(resp.status, self._clock() - began, self._hb.timeout):
                self.strain(server)
            if resp.status == 401:
                raise _CredentialsRejected(
                    f"{method} {path}", 401, "the apiserver did not accept the hub's credentials"
                )
            if resp.status == 429:
                raise _PushedBack(
                    f"{method} {path}", pacing.retry_after(resp.headers.get("Retry-After"))
                )
            raw = await _read_whole(resp.content, _MAX_LEASE_BYTES)
        try:
            decoded = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            decoded = None
        if isinstance(decoded, dict):
            return resp.status, decoded, raw
        if 200 <= resp.status < 300:
            # A success must carry the object: an empty base would be PUT back, and the cache
            # would store it as kubelet's lease.
            raise _ProbeFailed(f"{method} {path}", resp.status, "the answer is not a JSON object")
        return resp.status, {}, raw


def _once_per_spell(said: set[str], server: str, message: str, *args: object) -> None:
    """Log ``message`` at INFO the first time in a spell of ``server`` (``said``, cleared by a
    renewal accepted), at DEBUG after that."""
    level = logging.DEBUG if server in said else logging.INFO
    said.add(server)
    log.log(level, message, *args)


def _call_each(callbacks: list[Callable[..., object]], *args: object) -> None:
    for callback in callbacks:
        try:
            callback(*args)
        except Exception:
            # A bug there must not end the prober (and the hub's TaskGroup with it).
            log.exception("health callback %r failed", callback)


async def _read_whole(content: aiohttp.StreamReader, limit: int) -> bytes:
    """The whole body, at most ``limit`` bytes. ``read(n)`` alone returns whatever has arrived,
    which may be the first piece of the answer only."""
    body = bytearray()
    while chunk := await content.read(65536):
        body += chunk
        if len(body) > limit:
            raise _ProbeFailed("reading the answer", 200, f"larger than {limit} bytes")
    return bytes(body)
