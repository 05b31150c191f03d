"""A simulated kube-apiserver for tests and demos: real TLS, real HTTP, real watch streams.

The real ``kubectl`` and the official ``kubernetes`` / ``kubernetes_asyncio``
clients talk to it as to a small cluster. Usage::

    async with simapiserver.SimApiserver(workdir=tmp_path) as sim:
        subprocess.run(["kubectl", "--kubeconfig", sim.kubeconfig_path, "get", "pods"])
        sim.state.create({...})           # mutate the cluster directly; watches see it
        sim.append_log("default", "web-...", "web", "hello")

Identity and trust: the CA, the admin token and ServiceAccount signing key live in
the ``State``, so ``SimApiserver(state=first.state)`` is a second apiserver of the
same cluster (one etcd): same objects, same watch events, same CA. Every
authenticated user may do everything; there is no RBAC.

Lifecycle: ``start()`` binds (port 0 picks one) and writes ``ca.crt``,
``server.crt``/``server.key`` and the admin ``kubeconfig`` into ``workdir``;
``stop()`` closes listeners and every open watch/log/exec stream at once and
keeps the state, so ``start()`` again serves the same cluster on the SAME port
(tests use this to restart an apiserver under a hub).

Dangers: keys and tokens are written to ``workdir`` (mode 0600); never point it at
a shared directory. Binding anywhere but loopback exposes a cluster that
anybody holding the CA-signed certs or tokens may change.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import pathlib
import secrets
import shutil
import socket
import ssl
import tempfile
import threading
from collections.abc import Callable, Coroutine, Iterable
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

from aiohttp import web

from yurthub import listening
from yurthub.testing.sim import (
    auditing,
    auth,
    context,
    handlers,
    kubeconfigs,
    pki,
    seeding,
    storage,
    throttling,
)

__all__ = ["SimApiserver", "SimApiserverThread", "State"]

log = logging.getLogger(__name__)

State = storage.State
ADMIN_USER = auth.ADMIN_USER
ADMIN_GROUPS = auth.ADMIN_GROUPS
# Seconds stop() lets in-flight plain requests finish before cancelling them.
SHUTDOWN_GRACE = 1.0
T = TypeVar("T")


def _bind(host: str, port: int) -> socket.socket:
    info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(info[0], socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if info[0] == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    try:
        sock.bind(info[4])
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.setblocking(False)
    return sock


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class SimApiserver:
    """One simulated apiserver over a (possibly shared) ``State``."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: str = "demo",
        insecure_port: int | None = None,
        workdir: str | os.PathLike[str] | None = None,
        state: storage.State | None = None,
        *,
        bookmark_interval: float = 60.0,
        history_size: int = storage.DEFAULT_HISTORY_SIZE,
        default_watch_timeout: float = 1800.0,
        serving_names: Iterable[str] = (),
        simulate_kubelets: bool = True,
    ) -> None:
        """``seed`` is ``demo``, ``none`` or ``scale:N``; it only applies to a new state.

        ``insecure_port``: also serve plain HTTP there (0 picks a port), no auth.
        ``bookmark_interval``: seconds between BOOKMARKs on idle watches that ask for them.
        ``history_size``: watch events kept for resuming (older resourceVersions get 410).
        ``simulate_kubelets``: new pods are scheduled and become Running at once
        (``sim.podlifecycle``); off, they stay Pending as with no nodes at all.
        """
        self.host = host
        self._requested_port = port
        self._requested_insecure = insecure_port
        self._seed = seeding.parse(seed)
        self._own_state = state is None
        self.state: storage.State = (
            state
            if state is not None
            else storage.State(history_size=history_size, simulate_kubelets=simulate_kubelets)
        )
        self._seeded = not self._own_state
        self._own_workdir = workdir is None
        self.workdir = pathlib.Path(
            workdir if workdir is not None else tempfile.mkdtemp(prefix="simapiserver-")
        )
        self._serving_names = tuple(serving_names)
        self._ctx = context.ServerContext(
            self.state,
            bookmark_interval=bookmark_interval,
            default_watch_timeout=default_watch_timeout,
        )
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._insecure_port: int | None = None

    # --- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def start(self) -> None:
        if self._runner is not None:
            return
        if not self._seeded:
            seeding.apply(self.state, self._seed)
            self._seeded = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        sock = _bind(self.host, self._port if self._port is not None else self._requested_port)
        insecure_sock = None
        try:
            if self._requested_insecure is not None:
                insecure_sock = _bind(
                    self.host,
                    self._insecure_port
                    if self._insecure_port is not None
                    else self._requested_insecure,
                )
        except OSError:
            sock.close()
            raise
        self._port = sock.getsockname()[1]
        if insecure_sock is not None:
            self._insecure_port = insecure_sock.getsockname()[1]
        self._ctx.server_address = f"{_url_host(self.host)}:{self._port}"
        ssl_context = self._ssl_context()
        runner = web.AppRunner(
            handlers.build_app(self._ctx),
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=SHUTDOWN_GRACE,
        )
        await runner.setup()
        try:
            await web.SockSite(runner, sock, ssl_context=ssl_context).start()
            if insecure_sock is not None:
                await web.SockSite(runner, insecure_sock).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.state.ensure_cluster_info(self.url)
        self._write_admin_kubeconfig()
        log.info("simulated apiserver serving on %s", self.url)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is None:
            return
        # Long-lived streams would hold shutdown up: end them now, clients see EOF.
        self._ctx.close_watchers("the apiserver is shutting down")
        self._ctx.cancel_streams()
        await listening.close_runner(runner)
        # Idle keep-alive clients would hold TLS connections open until they hang up.
        self._ctx.abort_connections()
        await asyncio.sleep(0)
        if self._own_workdir and self._own_state:
            # Files are rewritten by the next start(); a throwaway dir is not left behind.
            shutil.rmtree(self.workdir, ignore_errors=True)
        log.info("simulated apiserver on port %s stopped", self._port)

    # --- addresses and credentials ----------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the simulated apiserver has not been started")
        return self._port

    @property
    def url(self) -> str:
        return f"https://{_url_host(self.host)}:{self.port}"

    @property
    def insecure_url(self) -> str | None:
        if self._insecure_port is None:
            return None
        return f"http://{_url_host(self.host)}:{self._insecure_port}"

    @property
    def ca_pem(self) -> bytes:
        return self.state.authority.cert_pem

    @property
    def ca_path(self) -> pathlib.Path:
        return self.workdir / "ca.crt"

    @property
    def admin_token(self) -> str:
        return self.state.admin_token

    @property
    def kubeconfig_path(self) -> pathlib.Path:
        return self.workdir / "kubeconfig"

    def _ssl_context(self) -> ssl.SSLContext:
        names = [
            *self._serving_names,
            self.host,
            *(n for n in ("localhost", "127.0.0.1", "::1") if n != self.host),
        ]
        cert_pem, key_pem = self.state.authority.issue_serving([*names, *pki.DEFAULT_SERVING_NAMES])
        cert_path, key_path = self.workdir / "server.crt", self.workdir / "server.key"
        _write(cert_path, cert_pem)
        _write(key_path, key_pem)
        _write(self.ca_path, self.ca_pem)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert_path, key_path)
        ctx.load_verify_locations(cadata=self.ca_pem.decode())
        # Client certificates are optional: a bearer token is the other way in.
        ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx

    def _write_admin_kubeconfig(self) -> None:
        self.write_kubeconfig(
            self.kubeconfig_path, user=ADMIN_USER, groups=ADMIN_GROUPS, auth="cert"
        )

    def issue_client_cert(self, cn: str, orgs: Iterable[str] = ()) -> tuple[bytes, bytes]:
        """(PEM cert, PEM key) for user ``cn`` in groups ``orgs``, signed by the sim CA."""
        return self.state.authority.issue_client(cn, orgs)

    def issue_token(self, user: str, groups: Iterable[str] = ()) -> str:
        """A static bearer token for ``user`` (as a ``--token-auth-file`` line would give)."""
        token = secrets.token_urlsafe(24)
        self.state.static_tokens[token] = auth.User(user, (*groups, auth.AUTHENTICATED))
        return token

    def service_account_token(
        self, namespace: str, name: str, *, expiration_seconds: int = 3600
    ) -> str:
        """A ServiceAccount JWT, as the TokenRequest API would issue (the SA must exist)."""
        sa = self.state.get("serviceaccounts", namespace, name)
        token, _ = self.state.tokens.issue(
            auth.ServiceAccountRef(namespace, name, str(sa["metadata"]["uid"])),
            expiration_seconds=expiration_seconds,
        )
        return token

    def write_kubeconfig(
        self,
        path: str | os.PathLike[str],
        user: str = "system:node:edge-node-1",
        groups: Iterable[str] = ("system:nodes",),
        auth: Literal["cert", "token"] = "cert",
        *,
        server: str | None = None,
    ) -> pathlib.Path:
        """Write a kubeconfig for ``user`` (client cert, or a static token) with the CA embedded.

        ``server`` overrides the URL (e.g. a hub in front of the sim).
        """
        groups = tuple(groups)
        target = pathlib.Path(path)
        if auth == "cert":
            cert, key = self.issue_client_cert(user, groups)
            text = kubeconfigs.render(
                server=server or self.url, ca_pem=self.ca_pem, user=user, cert_pem=cert, key_pem=key
            )
        elif auth == "token":
            token = self.admin_token if user == ADMIN_USER else self.issue_token(user, groups)
            text = kubeconfigs.render(
                server=server or self.url, ca_pem=self.ca_pem, user=user, token=token
            )
        else:
            raise ValueError(f"auth must be 'cert' or 'token', not {auth!r}")
        return kubeconfigs.write(target, text)

    def client_ssl_context(
        self, user: str = ADMIN_USER, groups: Iterable[str] = ADMIN_GROUPS
    ) -> ssl.SSLContext:
        """An SSLContext trusting the sim CA and presenting a client cert for ``user``."""
        cert, key = self.issue_client_cert(user, groups)
        directory = self.workdir / "clients"
        directory.mkdir(parents=True, exist_ok=True)
        stem = secrets.token_hex(4)
        cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
        _write(cert_path, cert)
        _write(key_path, key)
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        ctx.load_cert_chain(cert_path, key_path)
        return ctx

    # --- cluster conveniences ---------------------------------------------------------------

    def audit_log(self) -> list[auditing.Record]:
        """Requests this apiserver answered, oldest first (bounded; see ``clear_audit_log``).

        Each record has user, groups, verb, group/version/resource/subresource,
        namespace, name, path, HTTP code and User-Agent; ``record.rbac`` gives the
        (verb, apiGroup, resource) an RBAC rule must allow.
        """
        return self._ctx.audit.records()

    def open_watches(self) -> dict[str, int]:
        """Watch requests open now, by resource (plural), e.g. ``{"services": 2}``."""
        counts: dict[str, int] = {}
        for watcher in self._ctx.watchers:
            resource = watcher.storage[1]
            counts[resource] = counts.get(resource, 0) + 1
        return counts

    def clear_audit_log(self) -> None:
        self._ctx.audit.clear()

    def throttle(
        self,
        *,
        verbs: Iterable[str] = (),
        resources: Iterable[str] = (),
        user_agents: Iterable[str] = (),
        users: Iterable[str] = (),
        count: int | None = None,
        retry_after: int = 1,
        as_status: bool = False,
    ) -> throttling.Throttle:
        """Answer 429 Too Many Requests, as API Priority and Fairness does (``Retry-After``,
        the ``X-Kubernetes-PF-*`` headers, its plain-text body; ``as_status``: a
        ``TooManyRequests`` Status instead, as a restarting apiserver's watch cache answers),
        to the resource requests matching every given filter (verbs, resource names,
        User-Agent prefixes, user names; none given: any), ``count`` times or until
        ``unthrottle``. The returned ``Throttle`` counts what it refused (``refused``)."""
        rule = throttling.Throttle(
            verbs=frozenset(verbs),
            resources=frozenset(resources),
            user_agents=tuple(user_agents),
            users=frozenset(users),
            count=count,
            retry_after=retry_after,
            as_status=as_status,
        )
        self._ctx.throttles.append(rule)
        return rule

    def unthrottle(self, rule: throttling.Throttle | None = None) -> None:
        """Stop ``rule`` (None: every throttle)."""
        if rule is None:
            self._ctx.throttles.clear()
        elif rule in self._ctx.throttles:
            self._ctx.throttles.remove(rule)

    def append_log(self, namespace: str, pod: str, container: str, line: str) -> None:
        """Add a container log line; ``logs -f`` followers receive it at once."""
        self.state.logs.append(namespace, pod, container, line)

    @property
    def bookmark_interval(self) -> float:
        return self._ctx.bookmark_interval

    @bookmark_interval.setter
    def bookmark_interval(self, seconds: float) -> None:
        self._ctx.bookmark_interval = seconds


def _write(path: pathlib.Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


class SimApiserverThread:
    """A ``SimApiserver`` running on its own event loop in a background thread.

    For synchronous code: ``subprocess.run(["kubectl", ...])``, the sync ``kubernetes``
    client or a blocking test would otherwise stall the loop the sim answers on.
    ``call(fn, *args)`` runs ``fn`` on the sim's loop (``State`` is not thread-safe)::

        with SimApiserverThread(workdir=tmp_path) as sim:
            subprocess.run(["kubectl", "--kubeconfig", str(sim.kubeconfig_path), "get", "pods"])
            sim.call(sim.state.create, {...})
    """

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._sim: SimApiserver | None = None

    @property
    def sim(self) -> SimApiserver:
        if self._sim is None:
            raise RuntimeError("the simulated apiserver thread has not been started")
        return self._sim

    def __getattr__(self, name: str) -> Any:
        # url, port, kubeconfig_path, write_kubeconfig, state, ... of the running sim.
        return getattr(self.sim, name)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> None:
        loop = asyncio.new_event_loop()
        ready: concurrent.futures.Future[SimApiserver] = concurrent.futures.Future()

        def run() -> None:
            asyncio.set_event_loop(loop)

            async def boot() -> None:
                try:
                    sim = SimApiserver(**self._kwargs)
                    await sim.start()
                except BaseException as e:
                    ready.set_exception(e)
                    raise
                ready.set_result(sim)

            try:
                loop.run_until_complete(boot())
            except BaseException:
                loop.close()
                return
            loop.run_forever()
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            # Closed transports finish closing on the next iterations; a closed loop would
            # leave them (and their sockets) for the garbage collector to complain about.
            loop.run_until_complete(asyncio.sleep(0.05))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="simapiserver", daemon=True)
        self._thread.start()
        self._sim = ready.result(timeout=60)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a plain function on the sim's loop thread and return its result."""
        assert self._loop is not None

        async def invoke() -> T:
            return fn(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(invoke(), self._loop).result(timeout=60)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the sim's loop (e.g. ``sim.stop()`` / ``sim.start()``)."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=60)

    def close(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if self._sim is not None:
            self.run(self._sim.stop())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        self._loop = self._thread = None
