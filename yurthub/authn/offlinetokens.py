"""ServiceAccount tokens the hub issues itself while the cloud is away, and checks itself.

kubelet needs a token to start (or restart) a pod with a projected ServiceAccount volume; offline
the hub answers its TokenRequest (``proxy/local.py``). The token is HS256-signed with a random
key made when this object is (never a fixed key: nobody else can verify or forge one), names
the ServiceAccount of the request's URL, issuer ``edgehub-offline``, and lives
``LIFETIME`` seconds, so kubelet swaps it for a real one soon after the cloud is back (it
refreshes at 80 % of a token's life). The real apiserver rejects it, which is right.

The same object verifies it: a pod presenting it to the hub proves that kubelet (the node
identity) asked the hub for a token of that ServiceAccount, which is what the real apiserver
would have granted, so offline it reads that ServiceAccount's cache partition.

Pure apart from the key drawn at construction; the clock is passed in.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Callable, Sequence

from yurthub.authn import jwts

ISSUER = "edgehub-offline"
LIFETIME = 60


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class OfflineTokens:
    def __init__(self, audiences: Callable[[], Sequence[str]]) -> None:
        """``audiences``: the API audiences now (a TokenRequest without audiences gets them)."""
        self._key = secrets.token_bytes(32)
        self._audiences = audiences

    def mint(
        self, namespace: str, name: str, audiences: Sequence[str], now: float
    ) -> tuple[str, int]:
        """(token, expiry) for ServiceAccount ``namespace/name``."""
        issued = int(now)
        claims = {
            "iss": ISSUER,
            "sub": f"{jwts.SA_PREFIX}{namespace}:{name}",
            "aud": list(audiences) or list(self._audiences()),
            "iat": issued,
            "nbf": issued,
            "exp": issued + LIFETIME,
        }
        header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
        payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
        signing_input = f"{header}.{payload}".encode("ascii")
        signature = _b64(hmac.new(self._key, signing_input, hashlib.sha256).digest())
        return f"{header}.{payload}.{signature}", issued + LIFETIME

    def verify(self, parsed: jwts.Parsed, now: float) -> jwts.ServiceAccount:
        """A token of ours (``parsed.claims['iss'] == ISSUER``), or ``jwts.TokenError``."""
        if parsed.header.get("alg") != "HS256":
            raise jwts.TokenError("an offline token must be HS256")
        expected = hmac.new(self._key, parsed.signing_input, hashlib.sha256).digest()
        if not hmac.compare_digest(expected, parsed.signature):
            raise jwts.TokenError("not an offline token of this hub (restarted since?)")
        return jwts.check_claims(
            parsed.claims, issuers=(ISSUER,), audiences=self._audiences(), now=now
        )
