"""ServiceAccount tokens the hub issues itself while the cloud is away, and checks itself.

kubelet needs a token to start (or restart) a pod with a projected ServiceAccount volume;
offline the hub answers its TokenRequest (``proxy/localcreates.py``). The token is
HS256-signed with a random key made when this object is (never a fixed key: nobody else can
verify or forge one), names the ServiceAccount of the request's URL and the pod it is bound
to, issuer ``edgehub-offline``, and lives at most ``LIFETIME`` seconds, so kubelet swaps it
for a real one soon after the cloud is back (it refreshes at 80 % of a token's life). The real
apiserver rejects it, which is right.

The same object verifies it: a pod presenting it to the hub proves that the node asked the
hub for a token of that ServiceAccount and the hub granted it as the apiserver would have
(``tokengranting``: only to the node, bound to a cached pod of this node running as that
account), so offline it reads that ServiceAccount's cache partition.

Pure apart from the key drawn at construction; the clock is passed in.
"""

from __future__ import annotations

import base64
import dataclasses
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


@dataclasses.dataclass(frozen=True, slots=True)
class Minted:
    """What a token was issued for (``OfflineTokens.on_mint``): never the token itself."""

    namespace: str
    service_account: str
    pod: str
    audiences: tuple[str, ...]
    issued: float
    expires: float


class OfflineTokens:
    def __init__(self, audiences: Callable[[], Sequence[str]]) -> None:
        """``audiences``: the API audiences now (a TokenRequest without audiences gets them)."""
        self._key = secrets.token_bytes(32)
        self._audiences = audiences
        self.on_mint: Callable[[Minted], None] | None = None
        """Told of every token issued (the outage record lists them)."""

    def mint(
        self,
        namespace: str,
        name: str,
        audiences: Sequence[str],
        now: float,
        *,
        lifetime: int = LIFETIME,
        pod: tuple[str, str] | None = None,
    ) -> tuple[str, int]:
        """(token, expiry) for ServiceAccount ``namespace/name``, living ``lifetime`` seconds
        (at most ``LIFETIME``); ``pod``: (name, uid) of the pod it is bound to, named in the
        ``kubernetes.io`` claim as the apiserver does. Who may have one is
        ``tokengranting``'s decision, made before."""
        issued = int(now)
        expires = issued + max(1, min(lifetime, LIFETIME))
        private: dict[str, object] = {"namespace": namespace, "serviceaccount": {"name": name}}
        if pod is not None:
            private["pod"] = {"name": pod[0], "uid": pod[1]}
        claims = {
            "iss": ISSUER,
            "sub": f"{jwts.SA_PREFIX}{namespace}:{name}",
            "aud": list(audiences) or list(self._audiences()),
            "iat": issued,
            "nbf": issued,
            "exp": expires,
            "kubernetes.io": private,
        }
        header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
        payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
        signing_input = f"{header}.{payload}".encode("ascii")
        signature = _b64(hmac.new(self._key, signing_input, hashlib.sha256).digest())
        if self.on_mint is not None:
            aud = claims["aud"]
            self.on_mint(
                Minted(
                    namespace,
                    name,
                    pod[0] if pod is not None else "",
                    tuple(aud) if isinstance(aud, list) else (),
                    float(issued),
                    float(expires),
                )
            )
        return f"{header}.{payload}.{signature}", expires

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
