"""The ServiceAccount issuer's public keys: fetched while online, kept for offline.

``IssuerKeys.run`` (one task, owned by the hub) asks an apiserver, with the hub's own
identity, for ``/.well-known/openid-configuration`` (the issuer) and ``/openid/v1/jwks`` (the
keys) at start, every ``refresh_interval`` seconds, and soon after a token names a key we do
not hold (the issuer rotated keys), at most every ``min_gap`` seconds. Each good answer replaces
the set and is written to ``path`` (atomically, 0644: public keys), so a hub restarted while
the cloud is away verifies tokens with what it last saw.

The hub's identity needs the ``system:service-account-issuer-discovery`` ClusterRole for this
(Kubernetes binds it to ServiceAccounts only; ``manifests/hub/rbac.yaml`` binds it to the
hubs). Without it, tokens are still forwarded online, but their answers are not cached and
offline they get 401 (one warning names the missing permission).

Dangers: a JWK set from the network decides which tokens the hub accepts offline; it is only
ever fetched from ``--server-addr`` over the verified TLS the hub uses for everything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import pathlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from yurthub.authn import jwts

log = logging.getLogger(__name__)

DISCOVERY_PATH = "/.well-known/openid-configuration"
JWKS_PATH = "/openid/v1/jwks"
MAX_FILE_BYTES = 1 << 20

Fetch = Callable[[str], Awaitable[dict[str, Any]]]
"""GET a path from a healthy apiserver as the hub; the decoded JSON object, or raise."""


@dataclasses.dataclass(frozen=True, slots=True)
class KeySet:
    issuer: str
    keys: dict[str, jwts.PublicKey]
    document: dict[str, Any]
    """The JWK set as fetched (what is persisted)."""
    fetched_at: float
    version: int


class IssuerKeys:
    def __init__(
        self,
        path: pathlib.Path | None,
        *,
        refresh_interval: float = 3600.0,
        min_gap: float = 30.0,
        retry: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.current: KeySet | None = None
        self._refresh_interval = refresh_interval
        self._min_gap = min_gap
        self._retry = retry
        self._clock = clock
        self._soon = asyncio.Event()
        self._last_attempt = float("-inf")
        self._last_error = ""
        self._version = 0

    @property
    def issuer(self) -> str:
        return self.current.issuer if self.current is not None else ""

    @property
    def version(self) -> int:
        return self._version

    def _adopt(self, issuer: str, document: dict[str, Any], fetched_at: float) -> KeySet:
        keys = jwts.public_keys(document)
        if not issuer or not keys:
            raise ValueError("no issuer or no usable signing key in the JWK set")
        self._version += 1
        self.current = KeySet(issuer, keys, document, fetched_at, self._version)
        return self.current

    def load(self) -> None:
        """Read the persisted set (blocking; at start, through an executor). A missing file
        is normal on a new node; a broken one is logged and ignored."""
        if self.path is None:
            return
        try:
            with open(self.path, "rb") as f:
                raw = f.read(MAX_FILE_BYTES + 1)
            doc = json.loads(raw)
            self._adopt(str(doc["issuer"]), dict(doc["jwks"]), float(doc.get("fetchedAt", 0)))
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("ignoring the saved ServiceAccount issuer keys in %s: %s", self.path, e)
            return
        log.info(
            "loaded %d ServiceAccount issuer key(s) of %s saved at %s",
            len(self.current.keys) if self.current else 0,
            self.issuer,
            time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.current.fetched_at if self.current else 0)
            ),
        )

    def _save(self, keyset: KeySet) -> None:
        if self.path is None:
            return
        body = json.dumps(
            {"issuer": keyset.issuer, "jwks": keyset.document, "fetchedAt": keyset.fetched_at}
        ).encode()
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            log.warning(
                "cannot save the ServiceAccount issuer keys to %s (offline verification after a "
                "restart will wait for the cloud): %s",
                self.path,
                e,
            )

    def refresh_soon(self) -> None:
        """A token named a key we do not hold: refetch (rate-limited)."""
        self._soon.set()

    async def refresh(self, fetch: Fetch) -> KeySet:
        self._last_attempt = self._clock()
        discovery = await fetch(DISCOVERY_PATH)
        issuer = discovery.get("issuer")
        if not isinstance(issuer, str) or not issuer:
            raise ValueError(f"{DISCOVERY_PATH} names no issuer")
        document = await fetch(JWKS_PATH)
        previous = self.current
        keyset = self._adopt(issuer, document, self._clock())
        if previous is None or previous.document != document or previous.issuer != issuer:
            log.info(
                "ServiceAccount issuer %s: %d signing key(s) (%s)",
                issuer,
                len(keyset.keys),
                ", ".join(sorted(keyset.keys)),
            )
            await asyncio.get_running_loop().run_in_executor(None, self._save, keyset)
        return keyset

    async def run(self, fetch: Fetch, ready: Callable[[], Awaitable[None]] | None = None) -> None:
        """Until cancelled. ``ready``: awaited first (the hub has an identity and a healthy
        apiserver)."""
        if ready is not None:
            await ready()
        while True:
            wait = self._refresh_interval
            try:
                await self.refresh(fetch)
                self._last_error = ""
            except asyncio.CancelledError:
                raise
            except Exception as e:
                wait = self._retry
                message = str(e) or type(e).__name__
                if message != self._last_error:
                    self._last_error = message
                    log.warning(
                        "cannot fetch the ServiceAccount issuer keys (pods' tokens are forwarded "
                        "but not cached until this works; the hub needs the "
                        "system:service-account-issuer-discovery ClusterRole): %s",
                        message,
                    )
            self._soon.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._soon.wait()
            gap = self._min_gap - (self._clock() - self._last_attempt)
            if gap > 0:
                await asyncio.sleep(gap)
