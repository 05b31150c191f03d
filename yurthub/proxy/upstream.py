"""The hub's one HTTP client towards apiservers: a bounded connection pool plus its identity.

One ``Upstream`` per hub (never module-level). Both the remote proxy and the heartbeat prober
use it, so a probe sees the same TLS setup and pool as real traffic.

Dangers: every open watch holds a pooled connection until it ends, so ``pool_limit`` bounds
concurrent watches; the aiohttp client keeps connections per (host, port, ssl context), so the
Bearer-token requests (bare TLS context) never reuse a connection that presented the hub's client
certificate.
"""

from __future__ import annotations

import ssl

import aiohttp

from yurthub import kubeconfigs, settings


class Upstream:
    def __init__(self, upstream: settings.UpstreamSettings, identity: kubeconfigs.Identity) -> None:
        self.settings = upstream
        self.identity = identity
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=self.settings.pool_limit,
            limit_per_host=self.settings.pool_limit_per_host,
            keepalive_timeout=self.settings.keepalive_timeout,
            enable_cleanup_closed=False,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            # The proxy sets per-request timeouts; no session-wide total for watches.
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.settings.connect_timeout),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("upstream client is not started")
        return self._session

    def ssl_for(self, server: str, *, own_identity: bool) -> ssl.SSLContext | bool:
        """TLS context for ``server``: False for a loopback ``http://`` server."""
        if server.startswith("http://"):
            return False
        return self.identity.with_identity if own_identity else self.identity.bare

    def identity_headers(self) -> dict[str, str]:
        return self.identity.auth_headers()
