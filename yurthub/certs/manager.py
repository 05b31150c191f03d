"""The certificate manager: the hub's client and serving certificates, obtained and kept fresh.

One ``CertManager`` per hub (``server.Hub`` owns it; nothing module-level). ``prepare`` runs at
start, before the listeners: it loads what ``--root-dir`` holds. ``run`` is one task (in the
hub's TaskGroup) with two loops:

- **client** (join-token, bootstrap-file and existing modes): while the current client pair is
  valid, sleep until its renewal deadline (jittered 70-90 %, ``renewal``); then request a new
  one with the current certificate (a renewal: the requester is the node itself), or, when
  there is none or it has expired, with the bootstrap credentials (``--bootstrap-file``, or
  ``bootstrap-hub.conf`` written by join-token discovery). The new pair is written crash-safely
  (``pemfiles``), ``yurthub.conf`` names it, and the hub's upstream identity is told to reload
  at once (it would also notice within 10 s by itself).
- **serving**: once the hub has a client identity (its own pair, or kubelet's in
  ``kubeletcertificate`` mode), the same for the serving certificate of port 10268; the TLS
  context is updated in place, so new handshakes get the new certificate and open connections
  are untouched.

Failure: every failed attempt (token refused, CA pin mismatch, CSR denied or never approved,
apiserver unreachable, a file that does not load, a signer answer that does not fit) is one log
line and a capped back-off (``renewal.backoff``); ``/v1/readyz`` shows the last problem. The
files in use are never touched by a failed attempt: existing certificates keep working until
replaced. An expired client certificate at start means bootstrap credentials are used again
(re-bootstrap); without any (existing mode), ``POST /v1/token`` with a new join token is the way
out, and the hub keeps serving from its cache meanwhile.

Readiness: the proxy's gate needs a client identity (a loaded pair, even an expired one: offline
the cache can still answer); ``/v1/readyz`` also reports a missing serving certificate.

Sealed keys (``sealedkeys``, given as ``seal``): every key is written sealed under the node's
data key; a pair read in plaintext (an older hub's, YurtHub's adopted files) or under an older
data key is sealed again in place at once (``pemfiles.reseal``: its plaintext files removed
securely). A sealed key that does not open here (the data key was started anew: a copy from
another node) is one log line and a fresh start: the certificate is requested again with the
bootstrap credentials. When the key source gives no key now (``Seal.unavailable``), nothing is
requested or written (no CSR is made whose key could not be kept), and ``/v1/readyz`` says why.

Dangers: private keys exist in memory between key generation and the write, and on disk only in
0600 files under ``pki/``, sealed unless the key source is ``none``. Never log key material,
tokens or the bootstrap kubeconfig.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import ipaddress
import logging
import os
import pathlib
import random
import ssl
from collections.abc import Awaitable, Callable

from cryptography import x509

from yurthub import kubeconfigs, settings
from yurthub.certs import (
    apiclient,
    bootstrapping,
    csrs,
    hubconfigs,
    jws,
    layout,
    modes,
    pemfiles,
    renewal,
    sealedkeys,
    signing,
)

log = logging.getLogger(__name__)

KUBERNETES_SERVICE_PATH = "/api/v1/namespaces/default/services/kubernetes"
RECHECK = 60.0
"""Seconds between looks at the files even when nothing is due (someone may replace them)."""

Listener = Callable[[], Awaitable[None]]


class NoCredentials(Exception):
    """Nothing to authenticate a CSR with (message says what would help)."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class CertManager:
    def __init__(
        self,
        hub: settings.HubSettings,
        *,
        seal: sealedkeys.Seal = sealedkeys.PLAIN,
        draw: Callable[[], float] = random.random,
        clock: Callable[[], datetime.datetime] = _now,
    ) -> None:
        self._hub = hub
        self.seal = seal
        """How the private keys are kept on disk (``sealedkeys``)."""
        self.settings = hub.certs
        self.source = hub.certs.source
        self.layout = layout.Layout(hub.certs.root_dir)
        self._draw = draw
        self._clock = clock
        self._draws: dict[pathlib.Path, float] = {}
        self.client_pair: pemfiles.Pair | None = None
        self.serving_pair: pemfiles.Pair | None = None
        self.client_problem = "" if not self.source.requests_client_certificate else "starting"
        self.serving_problem = "starting"
        self.pending_csr = {csrs.Kind.CLIENT: "", csrs.Kind.SERVING: ""}
        self.serving_context: ssl.SSLContext | None = None
        self.serving_ready = asyncio.Event()
        self.client_ready = asyncio.Event()
        self.on_client_pair: list[Listener] = []
        self.rotations = {csrs.Kind.CLIENT: 0, csrs.Kind.SERVING: 0}
        self._wake_client = asyncio.Event()
        self._wake_serving = asyncio.Event()
        self._token: jws.Token | None = (
            jws.parse_token(hub.certs.join_token) if hub.certs.join_token else None
        )
        self._pins = jws.parse_pins(hub.certs.ca_cert_hashes)
        self._cluster_ip = ""
        self._said: set[str] = set()
        self._swept: set[str] = set()
        """Pairs (``client``, ``serving``) whose plaintext leftovers were looked for."""
        # What the operator allowed beyond a kubeconfig's own CA, as for the hub's identity.
        self._trust = kubeconfigs.TrustPolicy(
            allow_insecure=hub.upstream.allow_insecure_tls,
            allow_system_store=hub.upstream.allow_system_trust_store,
        )

    # --- what the hub reads ----------------------------------------------------------------------

    @property
    def identity_kubeconfig(self) -> pathlib.Path | None:
        """The kubeconfig the hub's upstream identity follows."""
        if self.source is modes.Source.KUBELET:
            return self.settings.kubelet_kubeconfig
        if self.source.requests_client_certificate:
            return self.layout.hub_kubeconfig
        return None

    def client_readiness(self) -> str:
        """Empty when the hub has a client identity, even an expired one (offline the cache
        still answers with it); else what is missing. The proxy's gate."""
        if self.source is modes.Source.KUBELET:
            return ""
        if self.client_pair is not None:
            return ""
        csr = self.pending_csr[csrs.Kind.CLIENT]
        waiting = f" (waiting for CSR {csr})" if csr else ""
        return f"no client certificate yet{waiting}: {self.client_problem}"

    def client_expiry_readiness(self) -> str:
        """Empty unless the client certificate has expired (reported, not a gate)."""
        pair = self.client_pair
        if pair is None or self._usable(pair):
            return ""
        csr = self.pending_csr[csrs.Kind.CLIENT]
        waiting = f" (waiting for CSR {csr})" if csr else ""
        until = f"{pair.validity.not_after:%Y-%m-%dT%H:%M:%SZ}"
        return f"the client certificate expired at {until}{waiting}: {self.client_problem}"

    def holds_older_keys(self) -> bool:
        """Whether a pair in use is sealed under a data key older than the current one (its
        re-sealing failed): that data key must be kept."""
        pairs = (self.client_pair, self.serving_pair)
        return any(p is not None and p.sealed and p.key_id != self.seal.current for p in pairs)

    def serving_readiness(self) -> str:
        if self.serving_pair is not None:
            return ""
        csr = self.pending_csr[csrs.Kind.SERVING]
        waiting = f" (waiting for CSR {csr})" if csr else ""
        return f"no serving certificate yet{waiting}: {self.serving_problem}"

    # --- start -----------------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Load what ``--root-dir`` holds (blocking work in the executor)."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._prepare_files)
        if self.source.requests_client_certificate:
            self.client_pair = await self._load(self.layout.client_pair, "client")
            if self.client_pair is not None:
                await loop.run_in_executor(None, self._write_hub_kubeconfig_if_needed)
                self.client_ready.set()
        elif self.source is modes.Source.KUBELET:
            await self._adopt_kubelet_ca()
        pair = await self._load(self.layout.serving_pair, "serving")
        if pair is not None and self._usable(pair):
            self._use_serving(pair)

    def _prepare_files(self) -> None:
        pemfiles.ensure_dir(self.settings.root_dir, 0o755)
        pemfiles.ensure_dir(self.layout.pki)
        for directory in (self.settings.root_dir, self.layout.pki):
            pemfiles.remove_orphans(directory)

    async def _load(self, path: pathlib.Path, what: str) -> pemfiles.Pair | None:
        loop = asyncio.get_running_loop()
        try:
            pair = await loop.run_in_executor(None, pemfiles.load_pair, path, self.seal)
        except FileNotFoundError:
            return None
        except pemfiles.SealedKeyError as e:
            if e.foreign:
                # A node whose data key was started anew (one line said so) meets keys sealed
                # under the old one: expected, so INFO; otherwise this is the line.
                self._once(
                    f"{what}:{e}",
                    logging.INFO if self.seal.reset else logging.ERROR,
                    "%s certificate not usable, requesting a new one: %s",
                    what,
                    e,
                )
            else:
                # The key source gives no key: the line that said so is the error; readyz
                # names it too (the renewal refuses to start, ``_check_seal``).
                log.debug("%s certificate not usable: %s", what, e)
            return None
        except pemfiles.PairError as e:
            self._once(
                f"{what}:{e}",
                logging.ERROR,
                "%s certificate not usable, requesting a new one: %s",
                what,
                e,
            )
            return None
        if sealedkeys.stale(pair.key_id, self.seal):
            pair = await self._reseal(pair, what)
        elif pair.sealed and what not in self._swept:
            await self._sweep(pair, what)
        standing = renewal.standing(pair.validity, self._renew_at(pair), self._clock())
        if standing is renewal.Standing.EXPIRED:
            self._once(
                f"{what}-expired:{pair.target}",
                logging.WARNING,
                "the %s certificate %s has expired: requesting a new one",
                what,
                pair.describe(),
            )
        elif standing is renewal.Standing.NOT_YET_VALID:
            self._once(
                f"{what}-skew:{pair.target}",
                logging.WARNING,
                "the %s certificate %s is not valid yet by this node's clock (%s): clock skew? "
                "Local TLS clients will refuse it until then",
                what,
                pair.describe(),
                f"{self._clock():%Y-%m-%dT%H:%M:%SZ}",
            )
        return pair

    async def _sweep(self, pair: pemfiles.Pair, what: str) -> None:
        """Once per start, with the pair sealed: remove the plaintext key files a re-seal
        killed before its last step left behind (``pemfiles.remove_plaintext``)."""
        self._swept.add(what)
        prefix = layout.CLIENT_PREFIX if what == "client" else layout.SERVING_PREFIX
        loop = asyncio.get_running_loop()
        try:
            removed = await loop.run_in_executor(
                None, pemfiles.remove_plaintext, self.layout.pki, prefix, pair.target.name
            )
        except OSError as e:
            self._once(
                f"{what}-sweep:{e}",
                logging.WARNING,
                "cannot remove the plaintext %s key files left in %s: %s",
                what,
                self.layout.pki,
                e,
            )
            return
        if removed:
            log.info(
                "%s private key: %d plaintext file(s) an interrupted sealing left removed securely",
                what,
                len(removed),
            )

    async def _reseal(self, pair: pemfiles.Pair, what: str) -> pemfiles.Pair:
        """``pair`` written again sealed under the current data key (its plaintext removed);
        ``pair`` itself when that fails (one warning: it keeps working as it is)."""
        prefix = layout.CLIENT_PREFIX if what == "client" else layout.SERVING_PREFIX
        loop = asyncio.get_running_loop()
        try:
            new = await loop.run_in_executor(
                None, pemfiles.reseal, self.layout.pki, prefix, pair, self.seal, self._clock()
            )
        except (OSError, pemfiles.PairError, ValueError) as e:
            self._once(
                f"{what}-reseal:{e}",
                logging.WARNING,
                "cannot seal the %s private key in %s: %s",
                what,
                pair.target,
                e,
            )
            return pair
        log.info(
            "%s private key %s under data key %d (%s)",
            what,
            "re-sealed" if pair.sealed else "sealed",
            self.seal.current,
            "the older files removed" if pair.sealed else "its plaintext files removed securely",
        )
        return new

    async def _adopt_kubelet_ca(self) -> None:
        """kubeletcertificate mode: the cluster CA comes from kubelet's kubeconfig."""
        loop = asyncio.get_running_loop()
        try:
            identity = await loop.run_in_executor(
                None, kubeconfigs.load, self.settings.kubelet_kubeconfig, self._trust
            )
        except kubeconfigs.KubeconfigError as e:
            self.serving_problem = str(e)
            log.error("kubelet's kubeconfig is not usable yet: %s", e)
            return
        if identity.ca_pem:
            await loop.run_in_executor(None, self._write_ca, identity.ca_pem)
        self.client_ready.set()

    # --- the loops -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Until cancelled: keep both certificates fresh."""
        async with asyncio.TaskGroup() as tg:
            if self.source.requests_client_certificate:
                tg.create_task(self._client_loop(), name="certs-client")
            if self.source.manages_certificates:
                tg.create_task(self._serving_loop(), name="certs-serving")

    async def _client_loop(self) -> None:
        attempt = 0
        while True:
            pair = await self._load(self.layout.client_pair, "client")
            if pair is not None:
                self.client_pair = pair
                self.client_ready.set()
                if self._usable(pair) and not self._due(pair):
                    self.client_problem = ""
                    await self._sleep_until(self._renew_at(pair), self._wake_client)
                    continue
            attempt = await self._renewing(
                functools.partial(self._renew_client, pair),
                csrs.Kind.CLIENT,
                self._wake_client,
                attempt,
            )

    async def _serving_loop(self) -> None:
        attempt = 0
        while not self.client_ready.is_set():
            if self.source is modes.Source.KUBELET:
                await self._adopt_kubelet_ca()
                if self.client_ready.is_set():
                    break
                attempt += 1
                await self._sleep(self._backoff(attempt), self._wake_serving)
            else:
                await self.client_ready.wait()
        attempt = 0
        while True:
            pair = await self._load(self.layout.serving_pair, "serving")
            if pair is not None:
                fresh = self.serving_pair is None or pair.target != self.serving_pair.target
                if fresh and self._usable(pair):
                    self._use_serving(pair)
                if self._usable(pair) and not self._due(pair) and self._names_fit(pair):
                    self.serving_problem = ""
                    await self._sleep_until(self._renew_at(pair), self._wake_serving)
                    continue
            if not self._has_valid_client_identity():
                self.serving_problem = "waiting for a valid client certificate (the requester)"
                await self._sleep(RECHECK, self._wake_serving)
                continue
            attempt = await self._renewing(
                self._renew_serving, csrs.Kind.SERVING, self._wake_serving, attempt
            )

    async def _renewing(
        self,
        renew: Callable[[], Awaitable[None]],
        kind: csrs.Kind,
        wake: asyncio.Event,
        attempt: int,
    ) -> int:
        """One renewal try; a failure is reported and waited out with back-off. The number of
        failures in a row comes back (0 after a success)."""
        try:
            await renew()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            attempt += 1
            delay = self._backoff(attempt)
            self._failed(kind, _describe(e), delay)
            await self._sleep(delay, wake)
            return attempt
        return 0

    def _has_valid_client_identity(self) -> bool:
        if self.source is modes.Source.KUBELET:
            return True  # kubelet keeps its own certificate fresh
        pair = self.client_pair
        return pair is not None and self._usable(pair)

    def _failed(self, kind: csrs.Kind, problem: str, delay: float) -> None:
        """One ERROR line per distinct problem (repeats at DEBUG: a long outage must not
        flood the log); ``/v1/readyz`` always shows the latest."""
        previous = self.client_problem if kind is csrs.Kind.CLIENT else self.serving_problem
        if kind is csrs.Kind.CLIENT:
            self.client_problem = problem
        else:
            self.serving_problem = problem
        level = logging.DEBUG if problem == previous else logging.ERROR
        if level == logging.ERROR and self.seal.unavailable:
            level = logging.WARNING  # the key source's error line came first
        log.log(
            level,
            "%s certificate: %s; retrying with back-off (next in %.1fs, at most %.0fs)",
            kind.value,
            problem,
            delay,
            self.settings.retry_cap,
        )

    # --- one renewal -----------------------------------------------------------------------------

    async def _renew_client(self, pair: pemfiles.Pair | None) -> None:
        self._check_seal()
        shape = csrs.client_shape(self._hub.node_name, self.settings.organizations)
        renewing = pair is not None and self._usable(pair)
        async with await self._client_credentials(pair if renewing else None) as client:
            pem = await self._obtain(client, shape, csrs.Kind.CLIENT)
        loop = asyncio.get_running_loop()
        new = await loop.run_in_executor(None, self._store_client, pem)
        self.client_pair = new
        self.client_problem = ""
        self.rotations[csrs.Kind.CLIENT] += 1
        log.info("client certificate %s: %s", "renewed" if renewing else "obtained", new.describe())
        self.client_ready.set()
        self._wake_serving.set()  # it may have been waiting for a valid requester
        for listener in self.on_client_pair:
            await listener()

    async def _renew_serving(self) -> None:
        self._check_seal()
        async with await self._hub_identity_client() as client:
            if not self._cluster_ip:
                service = await client.get(KUBERNETES_SERVICE_PATH)
                self._cluster_ip = str((service.get("spec") or {}).get("clusterIP") or "")
            shape = csrs.serving_shape(self._hub.node_name, self._wanted_ips())
            pem = await self._obtain(client, shape, csrs.Kind.SERVING)
        loop = asyncio.get_running_loop()
        new = await loop.run_in_executor(None, self._store_serving, pem)
        self._use_serving(new)
        self.serving_problem = ""
        self.rotations[csrs.Kind.SERVING] += 1
        log.info("serving certificate obtained: %s", new.describe())

    def _check_seal(self) -> None:
        """Before anything is asked of the cluster: no CSR whose key could not be kept (and
        never a plaintext key instead)."""
        if self.seal.unavailable:
            raise NoCredentials(
                f"the hub's private keys are sealed by --cache-key-source, which gives no key"
                f" now: {self.seal.unavailable}"
            )

    async def _obtain(self, client: apiclient.Client, shape: csrs.Shape, kind: csrs.Kind) -> bytes:
        self._check_seal()
        key = csrs.new_key()

        def created(name: str) -> None:
            self.pending_csr[kind] = name

        try:
            cert, _ = await signing.obtain(
                client,
                shape,
                key,
                expiration_seconds=self.settings.expiration_seconds,
                wait_timeout=self.settings.csr_wait_timeout,
                on_created=created,
            )
        finally:
            self.pending_csr[kind] = ""
        return sealedkeys.pair_pem(cert, key, self.seal)

    def _store_client(self, pem: bytes) -> pemfiles.Pair:
        pemfiles.write_pair(self.layout.pki, layout.CLIENT_PREFIX, pem, self._clock())
        pair = pemfiles.load_pair(self.layout.client_pair, self.seal)
        self._write_hub_kubeconfig_if_needed()
        return pair

    def _store_serving(self, pem: bytes) -> pemfiles.Pair:
        pemfiles.write_pair(self.layout.pki, layout.SERVING_PREFIX, pem, self._clock())
        return pemfiles.load_pair(self.layout.serving_pair, self.seal)

    def _write_hub_kubeconfig_if_needed(self) -> None:
        """``yurthub.conf`` naming our pair and a server of ``--server-addr`` (an OpenYurt
        node's file is kept when it does; the upstream identity uses only its credentials)."""
        path = self.layout.hub_kubeconfig
        with contextlib.suppress(kubeconfigs.KubeconfigError):
            current = kubeconfigs.load(path, self._trust, self.seal.candidates())
            hosts = {_host(s) for s in self._hub.upstream.servers}
            names_pair = any(
                os.path.realpath(f.path) == os.path.realpath(self.layout.client_pair)
                or f.path == self.layout.client_pair
                for f in current.files
            )
            if _host(current.server) in hosts and names_pair:
                return
        text = hubconfigs.hub_kubeconfig(
            self._hub.upstream.servers[0], self.layout.ca_cert, self.layout.client_pair
        )
        pemfiles.write_atomic(path, text.encode(), 0o600)

    def _write_ca(self, ca_pem: bytes) -> None:
        try:
            if pemfiles.read_small(self.layout.ca_cert) == ca_pem:
                return
        except OSError:
            pass
        pemfiles.write_atomic(self.layout.ca_cert, ca_pem, 0o644)

    # --- credentials -----------------------------------------------------------------------------

    async def _client_credentials(self, pair: pemfiles.Pair | None) -> apiclient.Client:
        """A client to send the client CSR with: the current certificate when it is valid (a
        renewal), else bootstrap credentials."""
        servers = self._hub.upstream.servers
        loop = asyncio.get_running_loop()
        if pair is not None:
            ctx = await loop.run_in_executor(None, self._pair_context, pair)
            return apiclient.Client(servers, ctx)
        if self.source is modes.Source.BOOTSTRAP_FILE:
            assert self.settings.bootstrap_file is not None
            identity = await loop.run_in_executor(
                None, kubeconfigs.load, self.settings.bootstrap_file, self._trust
            )
            if identity.ca_pem:
                await loop.run_in_executor(None, self._write_ca, identity.ca_pem)
            return apiclient.Client(
                servers, identity.with_identity, headers=identity.auth_headers()
            )
        token = self._token or await loop.run_in_executor(None, self._file_token)
        if token is not None:
            await self._discover(token)
        elif not self.layout.bootstrap_kubeconfig.exists():
            where = self.settings.join_token_file
            raise NoCredentials(
                "the client certificate is missing or expired and there is no join token: "
                + (f"write one into {where}, or " if where is not None else "")
                + 'POST {"jointoken": "<id>.<secret>"} to /v1/token on the hub server'
            )
        identity = await loop.run_in_executor(
            None, kubeconfigs.load, self.layout.bootstrap_kubeconfig, self._trust
        )
        return apiclient.Client(servers, identity.with_identity, headers=identity.auth_headers())

    def _file_token(self) -> jws.Token | None:
        """``--join-token-file``, read now: None while it is not there."""
        path = self.settings.join_token_file
        if path is None:
            return None
        try:
            text = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            raise NoCredentials(f"--join-token-file {path}: {e}") from e
        try:
            return jws.parse_token(text)
        except jws.DiscoveryError as e:
            raise NoCredentials(f"--join-token-file {path}: {e}") from e

    async def _discover(self, token: jws.Token) -> None:
        server, info = await bootstrapping.discover(
            self._hub.upstream.servers,
            token,
            self._pins,
            skip_ca_verification=self.settings.unsafe_skip_ca_verification,
        )
        text = hubconfigs.bootstrap_kubeconfig(server, info.ca_pem, str(token))
        loop = asyncio.get_running_loop()

        def write() -> None:
            self._write_ca(info.ca_pem)
            pemfiles.write_atomic(self.layout.bootstrap_kubeconfig, text.encode(), 0o600)

        await loop.run_in_executor(None, write)
        log.info(
            "join token %s verified against %s (cluster CA %s)",
            token.id,
            server,
            jws.pin(x509.load_pem_x509_certificates(info.ca_pem)[0]),
        )

    async def _hub_identity_client(self) -> apiclient.Client:
        """A client with the hub's own identity (the serving CSR's requester is the node)."""
        path = self.identity_kubeconfig
        assert path is not None
        loop = asyncio.get_running_loop()
        identity = await loop.run_in_executor(
            None, kubeconfigs.load, path, self._trust, self.seal.candidates()
        )
        return apiclient.Client(
            self._hub.upstream.servers, identity.with_identity, headers=identity.auth_headers()
        )

    def _pair_context(self, pair: pemfiles.Pair) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            ctx.load_verify_locations(cafile=str(self.layout.ca_cert))
        except (OSError, ssl.SSLError) as e:
            raise NoCredentials(f"{self.layout.ca_cert} is not usable: {e}") from e
        ctx.load_cert_chain(str(pair.target), password=pair.password)
        return ctx

    async def use_join_token(self, text: str) -> str:
        """``POST /v1/token``: verify a new join token against the cluster now (raises
        ``jws.DiscoveryError`` / ``apiclient`` errors), keep it for the next bootstrap, and
        bootstrap at once when there is no valid client certificate."""
        token = jws.parse_token(text)
        await self._discover(token)
        self._token = token
        pair = self.client_pair
        if pair is None or not self._usable(pair):
            self._wake_client.set()
            return f"join token {token.id} verified; requesting a client certificate"
        return f"join token {token.id} verified; kept for the next bootstrap"

    # --- serving TLS ---------------------------------------------------------------------------

    def _use_serving(self, pair: pemfiles.Pair) -> None:
        ctx = self.serving_context
        if ctx is None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            # HTTP/1.1 only, as YurtHub (it disables HTTP/2 on this port).
            ctx.set_alpn_protocols(["http/1.1"])
            try:
                ctx.load_verify_locations(cafile=str(self.layout.ca_cert))
                ctx.verify_mode = ssl.CERT_OPTIONAL
            except (OSError, ssl.SSLError) as e:
                log.warning(
                    "no cluster CA at %s (%s): clients on the secure port can only use Bearer "
                    "tokens",
                    self.layout.ca_cert,
                    e,
                )
        # On a live context this changes what new handshakes present; open connections keep
        # theirs. The timestamped file (not the link) so what was checked is what is served.
        ctx.load_cert_chain(str(pair.target), password=pair.password)
        self.serving_context = ctx
        self.serving_pair = pair
        self.serving_ready.set()

    def _wanted_ips(self) -> tuple[str, ...]:
        listen = self._hub.listen
        return csrs.serving_names(
            cluster_ip=self._cluster_ip,
            dummy_ip=listen.dummy_if_ip if listen.enable_dummy_if else csrs.DUMMY_IP,
            bind_addresses=(listen.bind_address, listen.bind_proxy_address),
            node_ip=self.settings.node_ip,
        )

    def _names_fit(self, pair: pemfiles.Pair) -> bool:
        """Whether the serving certificate carries every address we serve on."""
        try:
            san = pair.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
            have = {str(ip) for ip in san.value.get_values_for_type(x509.IPAddress)}
        except x509.ExtensionNotFound:
            have = set()
        wanted = set(self._wanted_ips())
        missing = wanted - have
        if missing:
            self._once(
                f"names:{pair.target}:{sorted(missing)}",
                logging.INFO,
                "the serving certificate lacks %s: requesting a new one",
                ", ".join(sorted(missing)),
            )
        return not missing

    # --- timing --------------------------------------------------------------------------------

    def _renew_at(self, pair: pemfiles.Pair) -> datetime.datetime:
        draw = self._draws.get(pair.target)
        if draw is None:
            draw = self._draws[pair.target] = min(self._draw(), 0.999999)
            if len(self._draws) > 16:
                self._draws.pop(next(iter(self._draws)))
        return renewal.deadline(
            pair.renewal_window,
            draw,
            low=self.settings.renewal_low,
            high=self.settings.renewal_high,
            renew_before=self.settings.renew_before,
        )

    def _usable(self, pair: pemfiles.Pair) -> bool:
        return self._clock() < pair.validity.not_after

    def _due(self, pair: pemfiles.Pair) -> bool:
        return self._clock() >= self._renew_at(pair)

    def _backoff(self, attempt: int) -> float:
        return renewal.backoff(
            attempt, self._draw(), base=self.settings.retry_base, cap=self.settings.retry_cap
        )

    async def _sleep_until(self, when: datetime.datetime, wake: asyncio.Event) -> None:
        delay = (when - self._clock()).total_seconds()
        await self._sleep(min(max(delay, 0.0), RECHECK), wake)

    async def _sleep(self, seconds: float, wake: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await wake.wait()
        wake.clear()

    def _once(self, key: str, level: int, message: str, *args: object) -> None:
        if key in self._said:
            return
        if len(self._said) > 256:
            self._said.clear()
        self._said.add(key)
        log.log(level, message, *args)


def _host(url: str) -> str:
    rest = url.split("://", 1)[-1]
    host = rest.rsplit(":", 1)[0] if not rest.startswith("[") else rest[1:].split("]", 1)[0]
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(host))
    return host.lower()


def _describe(error: BaseException) -> str:
    if isinstance(error, apiclient.ApiError) and error.status == 401:
        return f"{error} (the credentials were refused: expired or wrong token/certificate?)"
    if isinstance(error, apiclient.ApiError) and error.status == 403:
        return f"{error} (not allowed: RBAC for bootstrap tokens / nodes, see manifests/hub)"
    if isinstance(error, kubeconfigs.KubeconfigError):
        return str(error)
    return str(error) or type(error).__name__
