"""ServiceAccount JWTs verified without the apiserver: signature, issuer, expiry, audience.

PURE: tokens, key sets and times in, a verdict out; nothing is fetched here.

What is accepted (and why):

- compact JWS with ``alg`` RS256/384/512 or ES256/384/512 (what kube-apiserver signs with, RSA
  or ECDSA keys), verified with the issuer's key named by ``kid`` (any key of the right type
  when the token names none). ``none``, HMAC and every other algorithm are refused: the
  algorithm comes from the token, so allowing HS256 would let anyone who knows a public key
  forge tokens;
- ``iss`` equal to the issuer the keys came from; ``sub`` ``system:serviceaccount:<ns>:<name>``;
- ``exp`` present and in the future: tokens without one (legacy Secret-based tokens, issuer
  ``kubernetes/serviceaccount``) are refused, as nothing would ever end them offline;
- ``nbf``/``iat`` not more than ``LEEWAY`` in the future (clock skew between the apiserver and
  the node);
- ``aud`` sharing a value with the API audiences (the apiserver accepts a token only for those).

Objects a token is bound to (pod, secret, node) cannot be checked offline: a token stays
usable until it expires even if its pod is gone. That is the offline model (THREAT_MODEL.md).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

LEEWAY = 60.0
"""Seconds a token's ``nbf``/``iat`` may lie ahead of the local clock."""
MAX_TOKEN_BYTES = 16 << 10
SA_PREFIX = "system:serviceaccount:"

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey

_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "256": hashes.SHA256,
    "384": hashes.SHA384,
    "512": hashes.SHA512,
}
_CURVES = {"P-256": (ec.SECP256R1, 32), "P-384": (ec.SECP384R1, 48), "P-521": (ec.SECP521R1, 66)}


class TokenError(ValueError):
    """The token is not acceptable; the message says why (never the token itself)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Parsed:
    header: Mapping[str, Any]
    claims: Mapping[str, Any]
    signing_input: bytes
    signature: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class ServiceAccount:
    subject: str
    """``system:serviceaccount:<ns>:<name>``."""
    namespace: str
    name: str
    expires: float
    """``exp`` (unix seconds)."""


def _unb64(text: str) -> bytes:
    if not text or "=" in text:
        raise binascii.Error("bad base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def parse(token: str) -> Parsed:
    if len(token) > MAX_TOKEN_BYTES:
        raise TokenError("token too large")
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenError("not a JWT")
    try:
        # orjson: its parser stops at 1,024 levels (json's recursed: nested claims were a
        # RecursionError, a 500, for any client that sends a token).
        header = orjson.loads(_unb64(parts[0]))
        claims = orjson.loads(_unb64(parts[1]))
        signature = _unb64(parts[2])
    except (binascii.Error, ValueError) as e:
        raise TokenError("not a JWT (bad encoding)") from e
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise TokenError("not a JWT (header or claims not objects)")
    return Parsed(header, claims, f"{parts[0]}.{parts[1]}".encode("ascii"), signature)


def _int_b64(value: Any) -> int:
    if not isinstance(value, str):
        raise ValueError("not a string")
    return int.from_bytes(_unb64(value), "big")


def public_keys(jwks: Mapping[str, Any]) -> dict[str, PublicKey]:
    """``kid -> key`` of a JWK set; keys of unknown types or unusable for signatures are left
    out (a set may also hold encryption keys). Keys without a ``kid`` get ``#<index>``."""
    keys: dict[str, PublicKey] = {}
    entries = jwks.get("keys")
    if not isinstance(entries, list):
        return keys
    for index, jwk in enumerate(entries):
        if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
            continue
        kid = str(jwk.get("kid") or f"#{index}")
        try:
            if jwk.get("kty") == "RSA":
                keys[kid] = rsa.RSAPublicNumbers(
                    _int_b64(jwk["e"]), _int_b64(jwk["n"])
                ).public_key()
            elif jwk.get("kty") == "EC" and jwk.get("crv") in _CURVES:
                curve, _ = _CURVES[str(jwk["crv"])]
                numbers = ec.EllipticCurvePublicNumbers(
                    _int_b64(jwk["x"]), _int_b64(jwk["y"]), curve()
                )
                keys[kid] = numbers.public_key()
        except (KeyError, ValueError, binascii.Error):
            continue
    return keys


def _verify_with(key: PublicKey, alg: str, parsed: Parsed) -> bool:
    digest = _HASHES[alg[2:]]()
    try:
        if alg.startswith("RS") and isinstance(key, rsa.RSAPublicKey):
            key.verify(parsed.signature, parsed.signing_input, padding.PKCS1v15(), digest)
            return True
        if alg.startswith("ES") and isinstance(key, ec.EllipticCurvePublicKey):
            size = (key.curve.key_size + 7) // 8
            if len(parsed.signature) != 2 * size:
                return False
            r = int.from_bytes(parsed.signature[:size], "big")
            s = int.from_bytes(parsed.signature[size:], "big")
            key.verify(encode_dss_signature(r, s), parsed.signing_input, ec.ECDSA(digest))
            return True
    except InvalidSignature:
        return False
    return False


class UnknownKey(TokenError):
    """The token names a key the set does not hold (the issuer may have rotated: refetch)."""


def verify_signature(parsed: Parsed, keys: Mapping[str, PublicKey]) -> None:
    alg = parsed.header.get("alg")
    if not isinstance(alg, str) or alg[:2] not in ("RS", "ES") or alg[2:] not in _HASHES:
        raise TokenError(f"signature algorithm {alg!r} is not accepted")
    kid = parsed.header.get("kid")
    if isinstance(kid, str) and kid:
        key = keys.get(kid)
        if key is None:
            raise UnknownKey(f"the token's key id {kid!r} is not among the issuer's keys")
        candidates: Iterable[PublicKey] = (key,)
    else:
        candidates = keys.values()
    if not any(_verify_with(k, alg, parsed) for k in candidates):
        raise TokenError("the token's signature does not verify")


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenError(f"claim {name!r} is not a number")
    return float(value)


def check_claims(
    claims: Mapping[str, Any],
    *,
    issuers: Iterable[str],
    audiences: Iterable[str],
    now: float,
    leeway: float = LEEWAY,
) -> ServiceAccount:
    if claims.get("iss") not in set(issuers):
        raise TokenError("the token's issuer is not the cluster's ServiceAccount issuer")
    expires = _number(claims, "exp")
    if expires is None:
        raise TokenError("the token has no expiry (a legacy token): not accepted offline")
    if now >= expires:
        raise TokenError("the token has expired")
    for name in ("nbf", "iat"):
        when = _number(claims, name)
        if when is not None and when > now + leeway:
            raise TokenError(f"the token's {name} lies in the future (clock skew?)")
    aud = claims.get("aud")
    token_audiences = (
        {aud} if isinstance(aud, str) else set(aud) if isinstance(aud, list) else set()
    )
    if not token_audiences & set(audiences):
        raise TokenError("the token is not meant for this cluster's API (audience)")
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject.startswith(SA_PREFIX):
        raise TokenError("the token is not a ServiceAccount's")
    namespace, sep, name = subject[len(SA_PREFIX) :].partition(":")
    if not sep or not namespace or not name or ":" in name:
        raise TokenError("the token's ServiceAccount subject is malformed")
    return ServiceAccount(subject, namespace, name, expires)
