"""The hub assembled: listeners, health, routing; start, phased stop.

- Proxy listener ``--bind-proxy-address:--proxy-port`` (HTTP, 10261): aiohttp's low-level server
  with one handler (``routing.Router.handle``), handler cancellation on client disconnect, and
  the connection-level hardening of ``listening`` (``Status`` answers to protocol errors, the
  header-read timeout, the connection cap).
- Hub server ``--bind-address:--serve-port`` (10267): ``serverapi`` (``/v1/healthz``,
  ``/v1/readyz`` naming what is not ready, ``/metrics`` of this hub's own registry, and for
  loopback callers only ``POST|PUT /v1/token``, ``GET /v1/status``: JSON for ``edgehub status``
  from ``status`` with the sections the assembly adds in ``status_sections``: the cache,
  discovery, outages; ``GET /v1/outages``: the outage history, ``outages.recording``) and
  YurtHub's OTA API (``ota``: ``GET /pods``, ``POST
  /openyurt.io/v1/namespaces/{ns}/pods/{pod}/upgrade`` and ``.../imagepull``, loopback callers
  only). It names files and subjects, never a key or a token.
- Metrics listener ``--metrics-bind-address:--metrics-port`` (10266), only when an address is
  given: ``GET /metrics`` and nothing else (no probes, status, token or OTA), so a scraper off
  the node (the chart's pod annotations) reaches the metrics without the hub server's other
  endpoints. Its ``Host`` check accepts that address (any IP literal for 0.0.0.0) and loopback.
- HTTPS proxy ``<dummy IP or --bind-proxy-address>:--proxy-secure-port`` (10268): the same
  router over TLS with the hub's serving certificate, started once the certificate manager has
  one (rotations swap it in place); callers must authenticate (``proxy/identifying``).
- With ``--enable-dummy-if`` the dummy interface is made before any listener binds, and the
  plain proxy also listens on the dummy IP.
- The hub's own socket (``listening.OwnSocket``, a Unix socket in a private directory that
  only this process may use): the same router, for the hub's own clients (``own_route``: the
  config, filter-input and pool followers, the multiplexer's feeders, the discovery
  documents). What arrives there is the hub's own (readiness gate, in-flight limits) and holds
  none of the proxy port's ``--proxy-max-connections``; a request's headers never are.
- Every listener closes a connection idle for ``--proxy-idle-timeout-seconds`` between two
  requests (aiohttp's default kept one 3,630 s).

Usage (tests, the demo, the CLI)::

    hub = server.Hub(settings, tee=None, local=None)
    await hub.start()          # listeners bound; health probing started
    hub.proxy_url, hub.server_url
    await hub.stop()           # phased: stop accepting, own loops, end watches, drain, close

``start`` and ``stop`` must be awaited by the same task: it owns the hub's TaskGroup, whose tasks
are the health checker, the identity follower (``Upstream.follow_identity``: rotated
certificates and token files are picked up while running), the certificate manager
(``certs.manager``) when the hub requests its own certificates, the outage record's saver and
its Event poster (``outage-record``, ``outage-events``: ``outages``), the ServiceAccount issuer keys
(``authn.issuers``), the dummy interface keeper and the secure listener's start.

The cache plugs in through ``tee`` / ``local`` (``proxy/seams.py``) and ``hub.on_lease``, the
response filters through ``filters``, the pool multiplexer through ``pool``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine
from typing import Any

import aiohttp
import orjson
from aiohttp import web, web_request

from yurthub import (
    apiresources,
    balancing,
    dummyif,
    following,
    health,
    kubeconfigs,
    labels,
    listening,
    metrics,
    ota,
    readiness,
    serverapi,
    settings,
)
from yurthub.authn import issuers, verifying
from yurthub.certs import apiclient, listing, manager, sealedkeys
from yurthub.outages import history, posting, recording
from yurthub.proxy import hosts, identifying, remote, routing, seams, upstream

log = logging.getLogger(__name__)


class Hub:
    def __init__(
        self,
        hub_settings: settings.HubSettings,
        *,
        tee: seams.Tee | None = None,
        local: seams.LocalAnswerer | None = None,
        identity: kubeconfigs.Identity | None = None,
        filters: seams.ResponseFilter | None = None,
        pool: seams.PoolServer | None = None,
        offline_writes: seams.OfflineWrites | None = None,
        outage_history: history.History | None = None,
        identity_seal: sealedkeys.Seal = sealedkeys.PLAIN,
    ) -> None:
        """``identity``: use this one (fixed) instead of loading ``--kubeconfig``.
        ``offline_writes``: posted after a heal by a hub task (``offline-events``).
        ``outage_history``: where outages are recorded (the cache directory's; None: in
        memory, for as long as the hub runs).
        ``identity_seal``: how the hub's private keys are kept (sealed under the node's data
        key: ``certs.sealedkeys``; the assembly derives it from the cache's key ring).
        ``filters``: the response filters (``yurthub.filters.runtime``); their inputs join the
        readiness conditions (``filter-inputs``)."""
        self.settings = hub_settings
        components = (
            *hub_settings.cache.cache_agents,
            f"multiplexer-proxy-{hub_settings.node_name}",
        )
        self.metrics = metrics.Metrics(labels.Bounds(components))
        self._api = serverapi.ServerApi(self)
        self.readiness = readiness.Readiness()
        self._tee = tee
        self._local = local
        self._filters = filters
        self._pool = pool
        self._offline_writes = offline_writes
        self._identity = identity
        self._stack = contextlib.AsyncExitStack()
        self._tasks: list[asyncio.Task[None]] = []
        self._own_loops: list[asyncio.Task[None]] = []
        """The tasks of ``_tasks`` that ``stop`` ends before the drain."""
        self._proxy_runner: web.BaseRunner | None = None
        self._secure_runner: web.BaseRunner | None = None
        self._server_runner: web.AppRunner | None = None
        self._metrics_runner: web.AppRunner | None = None
        self._own_runner: web.BaseRunner | None = None
        self._own_socket: listening.OwnSocket | None = None
        self.own_route = following.ProxyRoute("")
        """How the hub's own clients reach the proxy (the own socket, once listening)."""
        self.proxy_url = ""
        self.secure_url = ""
        """``https://host:port`` once the secure proxy listens."""
        self.server_url = ""
        self.metrics_url = ""
        """The metrics-only listener's base URL; "" without ``--metrics-bind-address``."""
        self.identity_seal = identity_seal
        self.certs = (
            manager.CertManager(hub_settings, seal=identity_seal)
            if hub_settings.certs.source.manages_certificates and identity is None
            else None
        )
        self.issuer_keys = issuers.IssuerKeys(
            hub_settings.authn.issuer_keys_file,
            refresh_interval=hub_settings.authn.issuer_keys_refresh,
        )
        self.verifier = verifying.TokenVerifier(
            self.issuer_keys, api_audiences=hub_settings.authn.api_audiences
        )
        listen = hub_settings.listen
        self.dummy = (
            dummyif.DummyInterface(
                listen.dummy_if_name, listen.dummy_if_ip, recheck=listen.dummy_if_recheck
            )
            if listen.enable_dummy_if
            else None
        )
        self.health: health.HealthChecker | None = None
        self.status_sections: dict[str, StatusSection] = {}
        """More of ``/v1/status``: name -> coroutine function giving that section (the cache,
        the in-process discovery agent). One that fails shows its error, not a 500."""
        self.started_at = time.time()
        self.metrics.registry.register(metrics.CertificateExpiry(self.certificate_expiry))
        self.outages = recording.Recorder(
            outage_history,
            self.metrics,
            save_interval=hub_settings.outage_save_interval,
            flap_window=hub_settings.outage_flap_window,
        )
        """The outage record (``outages``): ``GET /v1/outages``, the Node Event after each."""
        self.metrics.registry.register(metrics.OngoingOutage(self.outages.ongoing_seconds))
        self.verifier.offline.on_mint = self.outages.token
        self.status_sections["outages"] = self.outages.status
        self.router: routing.Router | None = None
        self.remote: remote.RemoteProxy | None = None
        self.upstream: upstream.Upstream | None = None
        self.cached_pods: ota.PodsSource | None = None
        """``GET /pods``: the Pods kubelet read through the hub (the cache plugs it in; None:
        listed from the apiserver)."""
        self.static_pods: ota.StaticPodUpgrader = ota.ManifestWriter(hub_settings.static_pod_path)
        """How an OTA upgrade installs a YurtStaticSet's new manifest."""
        self.ota: ota.OtaApi | None = None
        self._stopping = False

    # --- wiring for the cache engineer's runtime ---

    @property
    def on_lease(self) -> seams.LeaseCallback | None:
        return self.health.on_lease if self.health else self._pending_on_lease

    @on_lease.setter
    def on_lease(self, callback: seams.LeaseCallback | None) -> None:
        self._pending_on_lease = callback
        if self.health is not None:
            self.health.on_lease = callback

    _pending_on_lease: seams.LeaseCallback | None = None

    # --- life cycle ---

    async def start(self) -> None:
        s = self.settings
        loop = asyncio.get_running_loop()
        if self.certs is not None:
            await self.certs.prepare()
        policy = trust_policy(s.upstream)
        identity, followed = await self._initial_identity(policy)
        where = f"kubeconfig {followed}" if followed is not None else "the hub's identity"
        if any(server.startswith("https://") for server in s.upstream.servers):
            warning = kubeconfigs.trust_warning(identity.trust, where)
            if warning:
                log.warning("%s", warning)
        client = upstream.Upstream(
            s.upstream,
            identity,
            kubeconfig=followed,
            trust=policy,
            key_passwords=self.identity_seal.candidates(),
            renewed_by_hub=self.certs is not None and self.certs.source.requests_client_certificate,
        )
        await client.start()
        self.upstream = client
        self._stack.push_async_callback(client.close)
        for warning in hosts.exposure_warnings(s.listen):
            log.warning("%s", warning)
        self.health = health.HealthChecker(s, client, self.metrics)
        self.health.on_lease = self._pending_on_lease
        await self.outages.open()
        self._stack.push_async_callback(self.outages.close)
        if self._offline_writes is not None:
            self.outages.journal_dropped = self._offline_writes.dropped
        self.health.on_failure.append(self.outages.failure)
        self.health.on_cloud.append(self.outages.cloud)
        certs = self.certs
        if certs is not None and certs.source.requests_client_certificate:
            self.health.identity_pending = lambda: (
                "" if certs.client_pair is not None else certs.client_problem or "joining"
            )
        self.remote = remote.RemoteProxy(client, s.proxy, self.metrics, self._tee, self._filters)
        checker = self.health
        # A silent link: slow answers get their server probed at once, and a server declared
        # unhealthy loses its requests in flight (reads go to the cache, watches re-watch).
        self.remote.on_slow = checker.report_slow
        self.remote.on_strain = checker.strain
        self.remote.on_heard = checker.heard
        checker.on_unhealthy.append(self.remote.abandon)
        first_probe = f"probing {', '.join(s.upstream.servers)} for the first time"
        probed = checker.initial_probe_done
        self.readiness.add("initial-health-probe", lambda: "" if probed.is_set() else first_probe)
        self.readiness.add("not-stopping", lambda: "shutting down" if self._stopping else "")
        if self._filters is not None:
            self.readiness.add("filter-inputs", self._filters.not_read)
        if self.certs is not None:
            self.certs.on_client_pair.append(self._reload_identity)
            self.readiness.add("client-certificate", self.certs.client_readiness)
            self.readiness.add(
                "client-certificate-expiry", self.certs.client_expiry_readiness, gates_proxy=False
            )
            self.readiness.add(
                "serving-certificate", self.certs.serving_readiness, gates_proxy=False
            )
        await loop.run_in_executor(None, self.issuer_keys.load)
        self.router = routing.Router(
            hub=s,
            balancer=balancing.Balancer(s.upstream.servers, s.upstream.lb_mode),
            checker=checker,
            proxy=self.remote,
            ready=self.readiness,
            collectors=self.metrics,
            local=self._local,
            identifier=identifying.Identifier(s.node_name, self.verifier),
            pool=self._pool,
            outages=self.outages,
        )
        tg = await self._stack.enter_async_context(asyncio.TaskGroup())

        def task(coro: Coroutine[Any, Any, None], name: str, *, own_loop: bool = True) -> None:
            """``own_loop``: one of the hub's own loops, stopped before the drain (``stop``);
            False: one the requests still being answered need (health, the outage record,
            the dummy interface), stopped after it."""
            made = tg.create_task(coro, name=name)
            self._tasks.append(made)
            if own_loop:
                self._own_loops.append(made)

        task(checker.run(), "health-checker", own_loop=False)

        def first_healthy() -> str | None:
            return next((u for u in checker.servers if checker.is_healthy(u)), None)

        task(self.outages.run(), "outage-record", own_loop=False)
        task(
            posting.Poster(
                self.outages,
                client,
                first_healthy,
                node_name=s.node_name,
                spread=s.cache.offline_event_spread,
                timeout=max(s.heartbeat.timeout, 5.0),
                poll=s.heartbeat.interval,
            ).run(),
            "outage-events",
        )
        if self._offline_writes is not None:
            task(
                self._offline_writes.replay(client, first_healthy),
                "offline-events",
            )
        task(client.follow_identity(), "identity-follower")
        task(self.issuer_keys.run(self._fetch_as_hub, self._cloud_reachable), "issuer-keys")
        if self.certs is not None:
            task(self.certs.run(), "certificate-manager")
        balancer = balancing.Balancer(s.upstream.servers, settings.LbMode.PRIORITY)
        task(
            apiresources.follow(
                client, lambda: balancer.pick(checker.is_healthy), self.metrics.bounds
            ),
            "discovery-for-metric-labels",
        )
        try:
            if self.dummy is not None:
                await self.dummy.ensure()
                self._stack.push_async_callback(self.dummy.remove)
                task(self.dummy.run(), "dummy-interface", own_loop=False)
            await self._start_listeners()
            if self.certs is not None and s.listen.proxy_secure_port is not None:
                task(self._serve_secure(), "secure-listener")
            elif s.listen.proxy_secure_port is not None:
                # Accepted (YurtHub's flag) but nothing to serve it with: say so, once.
                log.info(
                    "the secure proxy (--proxy-secure-port %s) is not served: with --kubeconfig "
                    "the hub has no serving certificate (it requests one when it joins with "
                    "--join-token, --bootstrap-file or kubelet's certificate)",
                    s.listen.proxy_secure_port,
                )
        except BaseException:
            await self._abort_start()
            raise

    async def _initial_identity(
        self, policy: kubeconfigs.TrustPolicy
    ) -> tuple[kubeconfigs.Identity, Any]:
        """(identity, kubeconfig to follow or None)."""
        if self._identity is not None:
            return self._identity, None
        s = self.settings
        path = s.upstream.kubeconfig
        if path is None and self.certs is not None:
            path = self.certs.identity_kubeconfig
        if path is None:
            log.warning(
                "no --kubeconfig and no bootstrap (--join-token, --bootstrap-file): the hub has "
                "no identity of its own; requests without a Bearer token and the node-lease "
                "heartbeat go out anonymous"
            )
            return kubeconfigs.anonymous(s.upstream.servers, policy), None
        loop = asyncio.get_running_loop()
        try:
            identity = await loop.run_in_executor(
                None, kubeconfigs.load, path, policy, self.identity_seal.candidates()
            )
            return identity, path
        except kubeconfigs.KubeconfigError as e:
            if self.certs is None:
                raise
            # Not written yet (first bootstrap) or not loadable: the upstream identity follows
            # the file and switches as soon as the certificate manager has written a good one.
            log.info("no usable hub identity yet (%s); waiting for the certificate manager", e)
            return _no_identity_yet(), path

    async def _reload_identity(self) -> None:
        """The certificate manager wrote a new client pair: use it now, and re-probe servers
        that refused the old identity (or none) instead of waiting for the next tick."""
        reloaded = self.upstream is not None and await self.upstream.check_identity()
        if reloaded and self.health is not None:
            self.health.probe_soon()

    async def _cloud_reachable(self) -> None:
        """Until some apiserver is healthy (the issuer keys are fetched then)."""
        checker = self.health
        assert checker is not None
        await checker.initial_probe_done.wait()
        while not checker.any_healthy():  # noqa: ASYNC110 (health has no event to wait on)
            await asyncio.sleep(1.0)

    async def _fetch_as_hub(self, path: str) -> dict[str, Any]:
        """GET ``path`` from a healthy apiserver with the hub's own identity."""
        client, checker = self.upstream, self.health
        assert client is not None and checker is not None
        failures = []
        for server in self.settings.upstream.servers:
            if not checker.is_healthy(server):
                continue
            try:
                async with asyncio.timeout(self.settings.heartbeat.timeout * 5):
                    async with client.session.get(
                        server + path,
                        headers={
                            # The JWK set is served as application/jwk-set+json; a JSON-only
                            # Accept gets 406 from kube-apiserver.
                            "Accept": "application/json, application/jwk-set+json",
                            "User-Agent": "edgehub",
                            **client.identity_headers(),
                        },
                        ssl=client.ssl_for(server, own_identity=True),
                    ) as resp:
                        body = await apiclient.read_whole(resp.content)
                        if resp.status != 200:
                            raise RuntimeError(f"{server}{path}: HTTP {resp.status}")
            except (aiohttp.ClientError, OSError, TimeoutError, apiclient.TooLarge) as e:
                failures.append(f"{server}: {e!r}")
                continue
            decoded = orjson.loads(body)
            if not isinstance(decoded, dict):
                raise RuntimeError(f"{server}{path}: not a JSON object")
            return decoded
        raise RuntimeError("no healthy apiserver answered: " + "; ".join(failures))

    async def _abort_start(self) -> None:
        self._cancel_tasks()
        await self._cleanup_runners()
        await self._stack.aclose()
        self._api.close()

    def _proxy_server(self, *, secure: bool, own: bool = False) -> listening.ProxyServer:
        s = self.settings
        assert self.router is not None
        handle = self.router.handle

        async def handler(request: web_request.BaseRequest) -> web.StreamResponse:
            assert isinstance(request, web.Request)
            return await handle(request, secure=secure, own=own)

        return listening.ProxyServer(
            handler,
            read_header_timeout=s.proxy.read_header_timeout,
            max_connections=listening.OWN_MAX_CONNECTIONS if own else s.proxy.max_connections,
            collectors=self.metrics,
            own_process_only=own,
            keepalive_timeout=s.proxy.idle_timeout,
            tcp_keepalive=not own,
            handler_cancellation=True,
            max_field_size=s.proxy.max_field_size,
            max_line_size=s.proxy.max_field_size,
            access_log=None,
        )

    async def _start_listeners(self) -> None:
        s = self.settings
        self._proxy_runner = web.ServerRunner(
            self._proxy_server(secure=False), shutdown_timeout=0.5
        )
        await self._proxy_runner.setup()
        site = web.TCPSite(
            self._proxy_runner, s.listen.bind_proxy_address, s.listen.proxy_port, backlog=1024
        )
        await site.start()
        self.proxy_url = _url_of(self._proxy_runner)
        if self.dummy is not None and s.listen.dummy_if_ip != s.listen.bind_proxy_address:
            await web.TCPSite(
                self._proxy_runner, s.listen.dummy_if_ip, s.listen.proxy_port, backlog=1024
            ).start()

        own = await asyncio.get_running_loop().run_in_executor(None, listening.OwnSocket)
        self._own_socket = own
        self._own_runner = web.ServerRunner(
            self._proxy_server(secure=False, own=True), shutdown_timeout=0.5
        )
        await self._own_runner.setup()
        await web.UnixSite(self._own_runner, own.path).start()
        checker = self.health
        assert checker is not None  # made by start() before the listeners
        self.own_route = following.ProxyRoute(
            "http://localhost", own.path, cloud_healthy=checker.any_healthy, pace=self.settings.pace
        )

        app = web.Application(middlewares=[self._api.only_known_hosts], client_max_size=64 << 10)
        self._api.add_routes(app.router)
        assert self.upstream is not None and self.health is not None
        self.ota = ota.OtaApi(
            s, self.upstream, self.health, pods=self.cached_pods, upgrader=self.static_pods
        )
        self.ota.add_routes(app.router)
        self._server_runner = web.AppRunner(
            app, access_log=None, shutdown_timeout=0.5, keepalive_timeout=s.proxy.idle_timeout
        )
        await self._server_runner.setup()
        await web.TCPSite(self._server_runner, s.listen.bind_address, s.listen.serve_port).start()
        self.server_url = _url_of(self._server_runner)
        log.info("hub proxy listening on %s, hub server on %s", self.proxy_url, self.server_url)
        if s.listen.metrics_bind_address:
            await self._start_metrics_listener(s.listen)

    async def _start_metrics_listener(self, listen: settings.ListenSettings) -> None:
        accepted = hosts.AcceptedHosts([listen.metrics_bind_address])

        @web.middleware
        async def only_known_hosts(
            request: web.Request,
            handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
        ) -> web.StreamResponse:
            refused = routing.refused_host(accepted, request)
            return refused if refused is not None else await handler(request)

        app = web.Application(middlewares=[only_known_hosts], client_max_size=4 << 10)
        app.router.add_get("/metrics", self._api.metrics)
        self._metrics_runner = web.AppRunner(
            app,
            access_log=None,
            shutdown_timeout=0.5,
            keepalive_timeout=self.settings.proxy.idle_timeout,
        )
        await self._metrics_runner.setup()
        await web.TCPSite(
            self._metrics_runner, listen.metrics_bind_address, listen.metrics_port
        ).start()
        self.metrics_url = _url_of(self._metrics_runner)
        log.info("hub metrics alone on %s/metrics", self.metrics_url)

    async def _serve_secure(self) -> None:
        """Start the TLS proxy once the serving certificate exists (then return)."""
        certs = self.certs
        assert certs is not None
        if not certs.serving_ready.is_set():
            log.info("the secure proxy waits for the serving certificate")
        await certs.serving_ready.wait()
        if self._stopping:
            return
        s = self.settings
        host = s.listen.dummy_if_ip if self.dummy is not None else s.listen.bind_proxy_address
        runner = web.ServerRunner(self._proxy_server(secure=True), shutdown_timeout=0.5)
        await runner.setup()
        try:
            await web.TCPSite(
                runner,
                host,
                s.listen.proxy_secure_port,
                ssl_context=certs.serving_context,
                backlog=1024,
            ).start()
        except OSError as e:
            await runner.cleanup()
            log.error(
                "cannot serve the secure proxy on %s:%s: %s", host, s.listen.proxy_secure_port, e
            )
            return
        self._secure_runner = runner
        self.secure_url = _url_of(runner).replace("http://", "https://", 1)
        log.info("secure proxy listening on %s", self.secure_url)

    async def stop(
        self,
        grace: float | None = None,
        *,
        force: asyncio.Event | None = None,
        own_loops: Collection[asyncio.Task[Any]] = (),
    ) -> None:
        """Phased stop, as Go's ``http.Server.Shutdown`` (YurtHub's) and then some:

        1. stop accepting: the listeners close; on the proxy ports an idle keep-alive
           connection is closed at once and a busy one after its answer (no next request is
           read from it: its client's next request finds the port closed);
        2. the hub's own loops stop (they are not clients to wait for, and left running they
           would send requests again): ``own_loops`` (the assembly's followers, the pool's
           feeders) and the hub's own tasks but health, the outage record and the dummy
           interface (which the requests still being answered need);
        3. every watch ends cleanly (the upstream ones, the pool multiplexer's, the ones held
           offline): the client sees the stream end and watches again, elsewhere;
        4. the requests still being answered get ``grace`` seconds (or until ``force`` is set):
           all but watches and upgraded streams (``routing.finishes``);
        5. whatever is left is cancelled, the listeners cleaned up, the upstream pool closed.

        Steps 1-3 happen in one go (no await between them): a follower whose watch is ended
        is cancelled already, and a client whose watch is ended has no connection to send its
        next one on. A stop with nothing but watches and idle connections takes no time.
        """
        if self._stopping:
            return
        self._stopping = True
        grace = self.settings.proxy.shutdown_grace if grace is None else grace
        try:
            await self._stop_gracefully(grace, force, own_loops)
        finally:
            # Also when the above is cut short (its caller cancelled): nothing is left open.
            await self._cleanup_runners()
            self._cancel_tasks()
            await self._stack.aclose()
            self._api.close()

    async def _stop_gracefully(
        self, grace: float, force: asyncio.Event | None, own_loops: Collection[asyncio.Task[Any]]
    ) -> None:
        """``stop``'s steps 1-4."""
        ports = (self._proxy_runner, self._secure_runner)
        for runner in (*ports, self._own_runner):
            if runner is not None:
                for site in list(runner.sites):
                    await site.stop()
        for runner in ports:
            if runner is not None and isinstance(runner.server, listening.ProxyServer):
                runner.server.stop_taking_requests()
        loops = [*own_loops, *self._own_loops]
        for loop_task in loops:
            loop_task.cancel()
        if self.remote is not None:
            ended = self.remote.end_watches()
            if ended:
                log.info("ended %d open watches", ended)
        if self._local is not None:
            self._local.close()
        if self._pool is not None:
            self._pool.close()
        if loops:
            await asyncio.wait(loops, timeout=grace)
        router = self.router
        if router is not None and router.finishing:
            log.info("waiting up to %ss for %d requests in flight", grace, router.finishing)
            waiters: list[Coroutine[Any, Any, Any]] = [router.wait_finished()]
            if force is not None:
                waiters.append(force.wait())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await _first(*waiters)

    def _cancel_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def _cleanup_runners(self) -> None:
        runners = (
            self._proxy_runner,
            self._secure_runner,
            self._server_runner,
            self._own_runner,
            self._metrics_runner,
        )
        # At once: each gives its connections still busy (a watch being ended, a request past
        # the grace) up to its shutdown timeout before it cancels them.
        async with asyncio.TaskGroup() as tg:
            for runner in runners:
                if runner is not None:
                    tg.create_task(listening.close_runner(runner), name="hub-listener-cleanup")
        self._proxy_runner = self._secure_runner = self._server_runner = self._own_runner = None
        self._metrics_runner = None
        if self._own_socket is not None:
            self._own_socket.remove()
            self._own_socket = None

    def certificates(self) -> list[dict[str, Any]]:
        """The hub's certificates (``certs.listing``): subjects, files, dates and which data
        key seals each private key only."""
        client = self.upstream
        return listing.certificates(
            self.certs, client.identity if client is not None else None, time.time()
        )

    def certificate_expiry(self) -> dict[str, float]:
        """certificate name -> notAfter (Unix seconds), for the expiry metric (read from the
        scrape thread: plain attribute reads)."""
        out: dict[str, float] = {}
        for entry in self.certificates():
            if "notAfter" in entry:
                out[entry["name"]] = time.time() + entry["expiresInSeconds"]
        return out

    async def status(self) -> dict[str, Any]:
        """What ``GET /v1/status`` answers."""
        s = self.settings
        missing, warnings = self.readiness.report()
        checker = self.health
        servers = []
        for server in s.upstream.servers:
            report = checker.reports.get(server) if checker is not None else None
            servers.append(
                {
                    "url": server,
                    "healthy": checker is not None and checker.is_healthy(server),
                    "lastError": report.last_error if report else "",
                    "lastErrorTime": _iso(report.last_error_at) if report else None,
                    "lastSuccessTime": _iso(report.last_success_at) if report else None,
                }
            )
        out: dict[str, Any] = {
            "node": s.node_name,
            "startedAt": _iso(self.started_at),
            "ready": not missing,
            "notReady": missing,
            "warnings": warnings,
            "servers": servers,
            "certificates": self.certificates(),
            "pool": {
                "nodePool": s.nodepool_name or None,
                "role": "off",
                "note": "no pool-scoped resources and no --nodepool-name: no multiplexer",
            },
        }
        for name, section in self.status_sections.items():
            try:
                out[name] = await section()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.exception("status section %s failed", name)
                out[name] = {"error": f"{type(e).__name__}: {e}"}
        return out


StatusSection = Callable[[], Awaitable[dict[str, Any]]]


def _iso(when: float | None) -> str | None:
    if when is None:
        return None
    return datetime.datetime.fromtimestamp(when, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _no_identity_yet() -> kubeconfigs.Identity:
    """Before the first client certificate: an identity that trusts no server at all, so
    nothing goes out until the certificate manager has written ``yurthub.conf`` (with the
    cluster CA it verified)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # no CA loaded: every handshake fails
    return kubeconfigs.Identity(server="", with_identity=ctx, bare=ctx)


def trust_policy(upstream_settings: settings.UpstreamSettings) -> kubeconfigs.TrustPolicy:
    """What the hub's kubeconfig may use beyond its own CA (the CLI checks with it too)."""
    return kubeconfigs.TrustPolicy(
        allow_insecure=upstream_settings.allow_insecure_tls,
        allow_system_store=upstream_settings.allow_system_trust_store,
    )


async def _first(*aws: Any) -> None:
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(aw, name="hub-stop-wait") for aw in aws]
        done = asyncio.Event()
        for task in tasks:
            task.add_done_callback(lambda _t: done.set())
        await done.wait()
        for task in tasks:
            task.cancel()


def _url_of(runner: web.BaseRunner) -> str:
    for address in runner.addresses:
        host, port = address[0], address[1]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}"
    raise RuntimeError("listener has no address")
