"""Authentication for the simulated apiserver: who is calling (there is no authorization).

Four ways in, as a real apiserver has them:

- a client certificate signed by the sim CA: CN is the user name, each O a group;
- the static admin bearer token (``State.admin_token``), and static tokens the
  test toolkit registers per user (like ``--token-auth-file``);
- a ServiceAccount token issued through ``serviceaccounts/<name>/token``: a JWT
  (ES256) whose ``sub`` is ``system:serviceaccount:<ns>:<name>``; it is accepted
  while unexpired and while that ServiceAccount (same uid) still exists; the issuer's
  discovery document and public key are served at ``/.well-known/openid-configuration`` and
  ``/openid/v1/jwks`` (``TokenIssuer.jwks``);
- a bootstrap token (``bootstraptokens``).

Every authenticated user may do everything: the sim has no RBAC. Requests on
the optional insecure port are treated as the admin.

Dangers: tokens are credentials; never log them or put them in an error message.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMIN_USER = "kubernetes-admin"
ADMIN_GROUPS = ("system:masters",)
AUTHENTICATED = "system:authenticated"


@dataclasses.dataclass(frozen=True, slots=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)

    def as_user_info(self) -> dict[str, Any]:
        """The ``UserInfo`` shape of SelfSubjectReview / TokenReview."""
        info: dict[str, Any] = {"username": self.name, "groups": list(self.groups)}
        if self.uid:
            info["uid"] = self.uid
        if self.extra:
            info["extra"] = {k: list(v) for k, v in self.extra.items()}
        return info


ADMIN = User(ADMIN_USER, (*ADMIN_GROUPS, AUTHENTICATED))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclasses.dataclass(frozen=True, slots=True)
class ServiceAccountRef:
    namespace: str
    name: str
    uid: str


class TokenIssuer:
    """Signs and verifies ServiceAccount JWTs with one ES256 key per cluster state."""

    def __init__(self) -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        public = self._key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.key_id = _b64(hashlib.sha256(public).digest())

    def issue(
        self,
        sa: ServiceAccountRef,
        *,
        audiences: Sequence[str] = (ISSUER,),
        expiration_seconds: int = 3600,
        now: float | None = None,
    ) -> tuple[str, int]:
        """A token for ``sa`` and its expiry (unix seconds)."""
        issued = int(now if now is not None else time.time())
        expiry = issued + expiration_seconds
        header = {"alg": "ES256", "kid": self.key_id}
        claims = {
            "aud": list(audiences) or [ISSUER],
            "exp": expiry,
            "iat": issued,
            "iss": ISSUER,
            "jti": secrets.token_hex(8),
            "nbf": issued,
            "sub": f"system:serviceaccount:{sa.namespace}:{sa.name}",
            "kubernetes.io": {
                "namespace": sa.namespace,
                "serviceaccount": {"name": sa.name, "uid": sa.uid},
            },
        }
        signing_input = f"{_b64(orjson.dumps(header))}.{_b64(orjson.dumps(claims))}"
        der = self._key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{signing_input}.{_b64(signature)}", expiry

    def jwks(self) -> dict[str, Any]:
        """The public key as the apiserver's ``/openid/v1/jwks`` serves it."""
        numbers = self._key.public_key().public_numbers()
        return {
            "keys": [
                {
                    "use": "sig",
                    "kty": "EC",
                    "kid": self.key_id,
                    "crv": "P-256",
                    "alg": "ES256",
                    "x": _b64(numbers.x.to_bytes(32, "big")),
                    "y": _b64(numbers.y.to_bytes(32, "big")),
                }
            ]
        }

    def verify(self, token: str, *, now: float | None = None) -> dict[str, Any] | None:
        """The claims of a valid, unexpired token of ours; ``None`` otherwise."""
        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            signature = _unb64(parts[2])
            claims = orjson.loads(_unb64(parts[1]))
        except (binascii.Error, ValueError, orjson.JSONDecodeError):
            return None
        if len(signature) != 64 or not isinstance(claims, dict):
            return None
        der = encode_dss_signature(
            int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
        )
        try:
            self._key.public_key().verify(
                der, f"{parts[0]}.{parts[1]}".encode(), ec.ECDSA(hashes.SHA256())
            )
        except InvalidSignature:
            return None
        current = now if now is not None else time.time()
        exp = claims.get("exp")
        if not isinstance(exp, int) or exp <= current:
            return None
        return claims


# Looks up a ServiceAccount's uid, or None when it no longer exists.
ServiceAccountLookup = Callable[[str, str], str | None]


def authenticate(
    *,
    authorization: str | None,
    peer_subject: tuple[str, Sequence[str]] | None,
    admin_token: str,
    issuer: TokenIssuer,
    lookup_sa: ServiceAccountLookup,
    static_tokens: Mapping[str, User] | None = None,
    bootstrap: Callable[[str], User | None] | None = None,
) -> User | None:
    """The user behind a request, or ``None`` (the caller answers 401).

    ``bootstrap``: looks up a bootstrap token (``bootstraptokens``).

    ``peer_subject`` is (CN, [O...]) of a client certificate the TLS layer already
    verified against the sim CA.
    """
    if peer_subject is not None and peer_subject[0]:
        cn, orgs = peer_subject
        return User(cn, (*orgs, AUTHENTICATED))
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    if secrets.compare_digest(token.encode(), admin_token.encode()):
        return ADMIN
    if static_tokens and token in static_tokens:
        return static_tokens[token]
    if bootstrap is not None:
        user = bootstrap(token)
        if user is not None:
            return user
    return user_for_token(token, issuer=issuer, lookup_sa=lookup_sa)


def user_for_token(
    token: str, *, issuer: TokenIssuer, lookup_sa: ServiceAccountLookup
) -> User | None:
    claims = issuer.verify(token)
    if claims is None:
        return None
    k8s = claims.get("kubernetes.io") or {}
    namespace = str(k8s.get("namespace", ""))
    sa = k8s.get("serviceaccount") or {}
    name, uid = str(sa.get("name", "")), str(sa.get("uid", ""))
    current_uid = lookup_sa(namespace, name)
    if current_uid is None or (uid and current_uid != uid):
        return None
    return User(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
        uid=uid,
    )
