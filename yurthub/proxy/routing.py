"""Dispatch of one proxied request (DESIGN.md "The hub: request path", reference §2.5).

    classify -> readiness gate -> pool-scoped list/watch: the multiplexer (``seams.PoolServer``)
    -> kubelet lease / kubelet node (the node: once the cache's copy is current)
    -> healthy backend: remote (stream + tee) -> transport error on get/list: cache; on a
      watch: held from the cache, at least for the hub's back-off (``pacing.FailedWatches``)
    -> no healthy backend: cache -> 502 "no healthy backends available."

The hub's own requests are the ones that came over its own socket (``own``: the listener, not
anything in the request, says so; ``listening``): only they skip the readiness gate, and they
are never counted by the in-flight limits (``fairness.exempt``); those that are not
long-running take turns, ``OWN_SHORT_SHARE`` at a time: the hub's background work has a
bounded share of the upstream. kubelet's own Lease and Node requests go over the upstream's
heartbeat lane.

Every outcome is an HTTP answer; errors are Kubernetes ``Status`` objects. A backend that fails
with a transport error is reported to health (suspect + immediate probe) and, when nothing
reached it, the request is retried once per other healthy backend, so one dead apiserver costs
a client nothing. One that answers too late (a deadline, the idle bound) is reported slow
(probed at once, not skipped). A read whose backend was declared unhealthy while it waited
(``remote.RemoteProxy.abandon``) is retried elsewhere or answered from the cache, as offline.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import urllib.parse

import yarl
from aiohttp import web

from yurthub import (
    balancing,
    fairness,
    health,
    memo,
    metrics,
    otadecisions,
    pacing,
    readiness,
    requestinfo,
    settings,
)
from yurthub.outages import recording
from yurthub.proxy import headers, hosts, identifying, remote, responses, seams, upgrading

log = logging.getLogger(__name__)

_LOCAL_ON_ERROR_VERBS = frozenset({"get", "list"})
_MEMO_ENTRIES = 256
_MEMO_KEY_MAX = 1024
"""Classifications remembered, and the longest request (URL and headers read) remembered:
kubelet and kube-proxy repeat a few dozen; anything longer is classified every time."""
OTA_ELSEWHERE = (
    "the OTA API (upgrade, imagepull) is served on this node's hub server port "
    "(--bind-address:--serve-port, 127.0.0.1:10267), not on the proxy"
)
OWN_SHORT_SHARE = 8
"""The hub's own requests that are not long-running (its loops' lists, the discovery documents,
the offline Events posted after a heal) in flight at once; more wait their turn. Its loops never
need more, and after a heal they never hold more of the upstream, or of the apiserver, than
this while the node's own clients reconnect (kubelet's heartbeat has a lane of its own,
``upstream.Upstream.lane``). Its watches (long-running) are not counted: a handful, held."""
HEAL_USER_AGENT = "edgehub/heal"
"""The User-Agent of the hub's read of its node at a heal (``Router._current_node``)."""
NODE_BODY_LIMIT = 4 << 20
"""The largest Node (JSON) the hub reads at a heal: etcd's 1.5 MiB object limit, as JSON."""
SOURCE = web.ResponseKey("source", str)
"""Key on a response (aiohttp responses are mappings) naming where its answer came from
(``metrics.SOURCES``); unmarked answers are the hub's own. A typed key: aiohttp warns about a
plain string key (once per process, after the answer was written)."""


class Router:
    def __init__(
        self,
        *,
        hub: settings.HubSettings,
        balancer: balancing.Balancer,
        checker: health.HealthChecker,
        proxy: remote.RemoteProxy,
        ready: readiness.Readiness,
        collectors: metrics.Metrics,
        local: seams.LocalAnswerer | None,
        identifier: identifying.Identifier | None = None,
        pool: seams.PoolServer | None = None,
        outages: recording.Recorder | None = None,
    ) -> None:
        """``identifier``: who the caller is (``proxy/identifying``); None treats every request
        as the node's own and caches Bearer answers under the component (tests only).
        ``outages``: told of every request answered during an outage."""
        self._settings = hub
        self._outages = outages
        self.pool = pool
        self._balancer = balancer
        self._health = checker
        self._remote = proxy
        self._ready = ready
        self._metrics = collectors
        self.local = local
        self._identifier = identifier
        self._own_multiplexer_ua = f"multiplexer-proxy-{hub.node_name}"
        listen = hub.listen
        binds = [listen.bind_proxy_address, listen.bind_address]
        if listen.enable_dummy_if:
            binds.append(listen.dummy_if_ip)  # the plain proxy listens there too
        self.hosts = hosts.AcceptedHosts(binds, listen.accept_hosts)
        proxy_settings = hub.proxy
        self.admission = fairness.Admission(
            fairness.Limits(
                in_flight=proxy_settings.max_in_flight,
                long_running=proxy_settings.max_long_running,
                in_flight_per_client=proxy_settings.max_in_flight_per_client,
                long_running_per_client=proxy_settings.max_long_running_per_client,
            )
        )
        self.in_flight = 0
        """Every request in the handler, exempt ones too."""
        self.finishing = 0
        """The requests in the handler a graceful stop lets finish (``finishes``)."""
        self._own_short = asyncio.Semaphore(OWN_SHORT_SHARE)
        self._finished = asyncio.Event()
        self._finished.set()
        self._classified: memo.BoundedMemo[tuple[str, ...], requestinfo.RequestInfo] = (
            memo.BoundedMemo(_MEMO_ENTRIES)
        )
        self._node_current = False
        """Whether the cache's copy of this node has come from the cloud since the hub started
        and since the last outage: only then is kubelet's ``get node`` answered from it (its
        watch keeps it current from there). After an outage the copy is what the cloud said
        before the cut, not what the node lifecycle controller wrote meanwhile (Ready
        Unknown): kubelet, reading its own old status back, would see nothing to report and
        stay NotReady until its node watch had brought the change to the cache."""
        self._node_read_lock = asyncio.Lock()
        self._node_read: tuple[int, bytes | None] = (-1, None)
        """The last read of this node at a heal: the heal it was for (``_heals``), its answer."""
        self._heals = 0
        """Times the cloud came back since the hub started."""
        self._failed_watches = pacing.FailedWatches(hub.pace)
        """How long a client watch every apiserver failed is held from the cache."""
        checker.on_cloud.append(self._cloud_changed)

    def _cloud_changed(self, up: bool) -> None:
        if not up:
            self._node_current = False
        else:
            self._heals += 1

    async def wait_finished(self) -> None:
        """Until no request a graceful stop waits for is in the handler (``finishing`` 0)."""
        await self._finished.wait()

    async def handle(
        self, request: web.Request, *, secure: bool = False, own: bool = False
    ) -> web.StreamResponse:
        """One proxied request; ``secure``: it came in on the TLS port (10268), where callers
        must authenticate; ``own``: over the hub's own socket, from the hub's own clients.

        During an outage every answer is counted in its record, the hub's own refusals too
        (a foreign host's 403, a bad request's 400, 405, the TLS port's 401 and 403, a 429 over
        the in-flight limits); one that ended without an answer is ``aborted``."""
        outages = self._outages
        outage = outages.begin_request() if outages is not None else None
        if outage is None or outages is None:
            return await self._handle(request, secure, own, None)
        seen = _Seen()
        code = 0
        source = "hub"
        try:
            resp = await self._handle(request, secure, own, seen)
            code = resp.status
            source = resp.get(SOURCE, "hub")
            return resp
        finally:
            outages.answered(outage, self._outage_key(request, seen.info), source, code)

    def _outage_key(
        self, request: web.BaseRequest, info: requestinfo.RequestInfo | None
    ) -> tuple[str, str, str]:
        """(component, verb, resource[/subresource]) of a request, bounded as the metrics'
        labels; one refused before it was classified: its User-Agent's component, its method
        and no resource."""
        bounds = self._metrics.bounds
        if info is None:
            component = requestinfo.component_of(request.headers.get("User-Agent", ""))
            return bounds.component(component), bounds.verb(request.method.lower()), ""
        resource = bounds.resource(info.resource)
        if info.subresource:
            resource = f"{resource}/{bounds.subresource(info.subresource)}"
        return bounds.component(info.component), bounds.verb(info.verb), resource

    async def _handle(
        self, request: web.Request, secure: bool, own: bool, seen: _Seen | None
    ) -> web.StreamResponse:
        """``handle``; ``seen``: told what the request was, once classified (an outage's)."""
        started = time.perf_counter()
        # The DNS-rebinding guard is for the plain port, which authenticates nobody. The TLS
        # port's callers prove who they are, and pods name it as kubernetes.default.svc, the
        # Service's ClusterIP or the dummy IP; no browser reaches the own socket.
        foreign = None if secure or own else refused_host(self.hosts, request)
        if foreign is not None:
            return foreign
        if request.path.startswith("/openyurt.io/") and otadecisions.is_ota_path(request.path):
            # Node-local actions (delete or patch this node's Pods): never forwarded anywhere.
            return responses.status(404, OTA_ELSEWHERE)
        try:
            info = self._classify(request)
        except requestinfo.BadRequestError as e:
            return responses.status(400, str(e))
        if seen is not None:
            seen.info = info
        if not info.is_known_verb:
            return responses.status(
                405,
                f"the server does not allow this method on the requested resource: "
                f"{request.method}",
            )
        if self._identifier is not None:
            identified = self._identifier.identify(request, info, secure=secure)
            if isinstance(identified, web.Response):
                return identified
            info = identified
            if seen is not None:
                seen.info = info
        long_running = info.is_long_running
        client = fairness.client_key(
            info, headers.bearer_token(request.headers.get("Authorization", ""))
        )
        counted = not fairness.exempt(info, self._settings.node_name, own=own)
        if counted:
            refused = self.admission.admit(client, long_running)
            if refused is not None:
                return self._busy(info, refused)
        collectors = self._metrics
        in_flight = None
        if info.is_resource_request:
            in_flight = collectors.child(
                collectors.in_flight_requests, *collectors.request_labels(info)
            )
            in_flight.inc()
        collectors.in_flight_requests_total.inc()
        self.in_flight += 1
        waited = finishes(info)
        if waited:
            self.finishing += 1
            self._finished.clear()
        code = 0
        source = "hub"
        try:
            if own and not long_running:
                async with self._own_short:
                    resp = await self._route(request, info, own, heartbeat=False)
            else:
                resp = await self._route(request, info, own, heartbeat=not counted and not own)
            code = resp.status
            source = resp.get(SOURCE, "hub")
            return resp
        finally:
            bounds = collectors.bounds
            component, verb = bounds.component(info.component), bounds.verb(info.verb)
            collectors.child(collectors.answers, source, component, verb).inc()
            if source == "cloud" and (info.verb == "list" or info.send_initial_events):
                collectors.child(
                    collectors.cloud_lists, component, bounds.resource(info.resource)
                ).inc()
            if counted:
                self.admission.release(client, long_running)
            self.in_flight -= 1
            if waited:
                self.finishing -= 1
                if self.finishing == 0:
                    self._finished.set()
            collectors.in_flight_requests_total.dec()
            if in_flight is not None:
                in_flight.dec()
            collectors.child(
                collectors.request_duration, *collectors.duration_labels(info, code)
            ).observe(time.perf_counter() - started)

    def _classify(self, request: web.BaseRequest) -> requestinfo.RequestInfo:
        """``requestinfo.classify``, remembered for the URLs and headers that repeat."""
        h = request.headers
        key = (
            request.method,
            request.raw_path,
            h.get("User-Agent", ""),
            h.get("Accept", ""),
            h.get("Connection", ""),
            h.get("Content-Type", ""),
            h.get("Upgrade", ""),
        )  # everything classify reads
        info = self._classified.get(key)
        if info is None:
            info = requestinfo.classify(
                request.method, request.path, request.query.items(), request.headers
            )
            if sum(map(len, key)) <= _MEMO_KEY_MAX:
                self._classified.put(key, info)
        return info

    def _busy(self, info: requestinfo.RequestInfo, reason: str) -> web.Response:
        collectors = self._metrics
        collectors.child(
            collectors.rejected_requests, reason, collectors.bounds.component(info.component)
        ).inc()
        what = "long-running requests (watches, logs, exec)" if "long" in reason else "requests"
        whose = "this client's" if reason.startswith("client") else "the hub's"
        busy = responses.status(429, f"too many {what} in flight ({whose} limit), retry later")
        busy.headers["Retry-After"] = "1"
        return busy

    async def _route(
        self, request: web.Request, info: requestinfo.RequestInfo, own: bool, *, heartbeat: bool
    ) -> web.StreamResponse:
        """``heartbeat``: kubelet's own Lease or Node request (``fairness.exempt``): forwarded
        over the upstream's heartbeat lane."""
        # The hub's own clients must get through before it is ready (they are what makes it
        # ready); everyone else, the embedded agent too, waits (before the first probe it got
        # 404s from an empty cache). A ``yurthub/...`` User-Agent is no way past it.
        if not own:
            missing = self._ready.not_ready()
            if missing:
                return responses.status(503, f"hub is not ready: {', '.join(missing)}")
        if heals_at_once(
            info, self._settings.node_name, own=own, multiplexer_ua=self._own_multiplexer_ua
        ):
            request[seams.HEAL_AT_ONCE] = True
        if heals_with_current(info, self._settings.node_name, own=own):
            request[seams.HEAL_CURRENT] = self._current_node

        if self.pool is not None:
            # Pool-scoped list/watch (services, endpointslices) from memory; the multiplexer's
            # own upstream requests (and what it does not hold) take the ordinary path below.
            answer = await self.pool.answer(request, info)
            if answer is not None:
                answer[SOURCE] = "pool"
                return answer

        if info.component == "kubelet" and info.resource == "leases":
            self._health.renew_kubelet_lease()
            answer = await self._local(request, info, seams.LocalReason.KUBELET_LEASE)
            if answer is not None:
                return answer
        elif (
            info.component == "kubelet"
            and info.resource == "nodes"
            and info.verb == "get"
            and not info.subresource
        ):
            if self._node_current:
                answer = await self._local(request, info, seams.LocalReason.KUBELET_NODE)
                if answer is not None:
                    return answer
            answered = await self._remote_or_local(request, info, heartbeat, patient=own)
            # Only this node's own copy: any process on the node may say it is kubelet and
            # read another node, which proves nothing about this one's copy.
            own_node = info.name == self._settings.node_name
            if own_node and answered.status == 200 and answered.get(SOURCE) == "cloud":
                self._node_current = True
            return answered

        return await self._remote_or_local(request, info, heartbeat, patient=own)

    async def _current_node(self) -> bytes | None:
        """This node's Node as the cloud has it now (JSON), read with the hub's identity over
        the heartbeat lane (``seams.HEAL_CURRENT``); None when no healthy apiserver gave it
        within two heartbeat timeouts. One read a heal, one at a time: every held watch that
        ends at the same heal takes its answer (any process on the node may hold watches that
        ask, and the lane is kubelet's heartbeat's)."""
        async with self._node_read_lock:
            heal = self._heals
            read_for, body = self._node_read
            if read_for == heal:
                return body
            body = await self._read_node()
            self._node_read = (heal, body)
            return body

    async def _read_node(self) -> bytes | None:
        server = self._balancer.pick(self._health.is_healthy)
        if server is None:
            return None
        path = "/api/v1/nodes/" + urllib.parse.quote(self._settings.node_name, safe="")
        status, body = await self._remote.client.call_as_hub(
            server,
            "GET",
            path,
            data=None,
            headers={"Accept": "application/json", "User-Agent": HEAL_USER_AGENT},
            within=2 * self._settings.heartbeat.timeout,
            limit=NODE_BODY_LIMIT,
            lane=True,
        )
        if status != 200 or not body:
            log.debug("could not read this node from %s at the heal (HTTP %s)", server, status)
            return None
        return body

    async def _remote_or_local(
        self,
        request: web.Request,
        info: requestinfo.RequestInfo,
        heartbeat: bool = False,
        *,
        patient: bool = False,
    ) -> web.StreamResponse:
        tried: set[str] = set()
        last: remote.UpstreamUnavailable | None = None
        while True:
            server = self._balancer.pick(self._health.is_healthy, exclude=frozenset(tried))
            if server is None:
                break
            target = None
            if info.user_agent == self._own_multiplexer_ua:
                # node_yurthub_target_for_multiplexer_requests_collector (reference §8.4).
                target = self._metrics.child(
                    self._metrics.target_for_multiplexer_requests,
                    *self._metrics.request_labels(info),
                    server.split("://", 1)[-1],
                )
                target.inc()
            try:
                if info.is_upgrade:
                    answered = await upgrading.forward(self._remote, request, info, server)
                else:
                    answered = await self._remote.forward(
                        request, info, server, lane=heartbeat, patient=patient
                    )
                answered[SOURCE] = "cloud"
                return answered
            except remote.UpstreamUnavailable as e:
                log.info("%s via %s failed: %s", info.describe(), server, e)
                if e.timed_out:
                    self._health.report_slow(server)
                else:
                    self._health.report_transport_error(server)
                tried.add(server)
                last = e
                if e.retryable:
                    continue
                if info.verb in _LOCAL_ON_ERROR_VERBS:
                    answer = await self._local(request, info, seams.LocalReason.UPSTREAM_ERROR)
                    if answer is not None:
                        return answer
                return _failed(e)
            finally:
                if target is not None:
                    target.dec()

        # Nothing answered: offline, unless a backend still counts as healthy (it only failed
        # this request; the cache may answer a read, else the failure is the answer).
        offline = not tried or not self._health.any_healthy()
        reason = seams.LocalReason.OFFLINE if offline else seams.LocalReason.UPSTREAM_ERROR
        answer = await self._local(request, info, reason)
        if answer is not None:
            return answer
        if last is not None and not offline:
            return _failed(last)
        return responses.status(502, responses.NO_HEALTHY_BACKENDS)

    async def _local(
        self, request: web.Request, info: requestinfo.RequestInfo, reason: seams.LocalReason
    ) -> web.StreamResponse | None:
        if self.local is None:
            return None
        if (
            reason is seams.LocalReason.UPSTREAM_ERROR
            and info.verb == "watch"
            and not request.get(seams.HEAL_AT_ONCE, False)
        ):
            # The client would be back within the heal spread, asking a failing apiserver
            # for one more connection: the hub backs off for it (``pacing.FailedWatches``).
            request[seams.HOLD_AT_LEAST] = self._failed_watches.failed(
                asyncio.get_running_loop().time(), random.random()
            )
        answer = await self.local.answer(request, info, reason=reason.value)
        if answer is not None:
            answer[SOURCE] = "cache"
        return answer


def heals_at_once(
    info: requestinfo.RequestInfo, node_name: str, *, own: bool, multiplexer_ua: str
) -> bool:
    """Whether a watch held open offline ends as soon as the cloud is healthy again
    (``seams.HEAL_AT_ONCE``), not at a random moment within the heal spread. PURE.

    - The hub's own pool feeders (over its own socket, with its multiplexer User-Agent): one
      reader a resource per pool leader, and every follower waits for it.
    - kubelet's watch of its own Node (``heals_with_current``)."""
    if own:
        return info.user_agent == multiplexer_ua
    return heals_with_current(info, node_name, own=own)


def heals_with_current(info: requestinfo.RequestInfo, node_name: str, *, own: bool) -> bool:
    """Whether a watch held open offline gets its object as the cloud has it now, as one
    MODIFIED event, before it ends at the heal (``seams.HEAL_CURRENT``). PURE.

    kubelet's watch of its own Node (``metadata.name=<node>``): at each status tick kubelet
    compares its status with its node informer, not the apiserver (only a retry reads the
    apiserver). Until the informer has the Unknown the node lifecycle controller wrote during
    the outage, it still says Ready, kubelet reports nothing and the node stays NotReady for
    one more tick (10 s): in the 22:12 fleet run 11 of 30 nodes turned Ready only at their
    second tick after the heal; at 22:21, with the watch ending at the heal, kubelet's new
    watch still took 1.4-5.5 s to start on an apiserver taking 1,300 at once. One object a
    node, fetched once a heal. A caller on the node claiming to be kubelet gains this node's
    Node, which it may read through the hub anyway, and an earlier end."""
    fields = info.field_selector.replace(" ", "")
    return (
        not own
        and info.component == "kubelet"
        and info.verb == "watch"
        and info.resource == "nodes"
        and not info.group
        and fields in (f"metadata.name={node_name}", f"metadata.name=={node_name}")
    )


def finishes(info: requestinfo.RequestInfo) -> bool:
    """PURE: whether a graceful stop waits for this request to finish. Not for a watch (the
    stop ends every watch cleanly and its client re-watches: nothing to wait for) nor an
    upgraded stream (exec, attach, port-forward: as Go's ``http.Server.Shutdown``, YurtHub's,
    which does not wait for hijacked connections); every other request, a log stream too, gets
    the grace period."""
    return not (info.is_watch or info.is_upgrade)


class _Seen:
    """What ``Router._handle`` found a request to be (for the outage record's key)."""

    __slots__ = ("info",)

    def __init__(self) -> None:
        self.info: requestinfo.RequestInfo | None = None


def refused_host(accepted: hosts.AcceptedHosts, request: web.BaseRequest) -> web.Response | None:
    """A 403 Status when the request names a host the hub does not answer for (``hosts``)."""
    named = [request.headers.get("Host", "")]
    target = request.raw_path
    if not target.startswith("/"):
        # absolute-form (``GET http://host/path``); "*" and CONNECT's authority-form name
        # nothing the hub serves.
        try:
            named.append(yarl.URL(target).raw_authority or target)
        except ValueError:
            named.append(target)
    for host in named:
        if not accepted.allows(host):
            shown = host if len(host) <= 100 else host[:100] + "..."
            log.info("refused a request for host %r from %s", shown, request.remote)
            return responses.status(
                403,
                f"host {shown!r} is not accepted: the hub answers for localhost, loopback and "
                "its bind addresses (and --proxy-accept-hosts)",
            )
    return None


def _failed(error: remote.UpstreamUnavailable) -> web.Response:
    if error.timed_out:
        return responses.status(
            504, f"the apiserver {error.server} did not answer in time ({error.why})"
        )
    return responses.status(502, f"error talking to the apiserver {error.server}")
