"""ServiceAccount JWT checks (``authn.jwts``), the hub's offline tokens, the memoised
verifier, and the caller decision per listener (``authn.callers``)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from yurthub.authn import callers, issuers, jwts, offlinetokens, verifying

ISSUER = "https://kubernetes.default.svc.cluster.local"
NOW = 1_700_000_000.0
SA = "system:serviceaccount:kube-system:kube-proxy"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64int(value: int, size: int) -> str:
    return b64(value.to_bytes(size, "big"))


class Signer:
    """A test issuer: RSA or EC keys, tokens with the claims we choose."""

    def __init__(self, kind: str = "rsa", kid: str = "k1") -> None:
        self.kind = kind
        self.kid = kid
        self.key: Any = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            if kind == "rsa"
            else ec.generate_private_key(ec.SECP256R1())
        )

    def jwk(self) -> dict[str, Any]:
        numbers = self.key.public_key().public_numbers()
        if self.kind == "rsa":
            n = numbers.n
            return {
                "kty": "RSA",
                "kid": self.kid,
                "use": "sig",
                "alg": "RS256",
                "n": b64(n.to_bytes((n.bit_length() + 7) // 8, "big")),
                "e": b64int(numbers.e, 3),
            }
        return {
            "kty": "EC",
            "kid": self.kid,
            "crv": "P-256",
            "use": "sig",
            "x": b64int(numbers.x, 32),
            "y": b64int(numbers.y, 32),
        }

    def token(self, header: dict[str, Any] | None = None, **claims: Any) -> str:
        base = {
            "iss": ISSUER,
            "sub": SA,
            "aud": [ISSUER],
            "exp": NOW + 3600,
            "iat": NOW - 10,
            "nbf": NOW - 10,
        }
        base.update(claims)
        alg = "RS256" if self.kind == "rsa" else "ES256"
        head = {"alg": alg, "kid": self.kid, **(header or {})}
        body = {k: v for k, v in base.items() if v is not None}
        signing_input = f"{b64(json.dumps(head).encode())}.{b64(json.dumps(body).encode())}"
        if self.kind == "rsa":
            sig = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        else:
            r, s = decode_dss_signature(
                self.key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
            )
            sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{signing_input}.{b64(sig)}"


@pytest.fixture(scope="module", params=["rsa", "ec"])
def signer(request: pytest.FixtureRequest) -> Signer:
    return Signer(request.param)


def check(
    signer: Signer, token: str, audiences: tuple[str, ...] = (ISSUER,)
) -> jwts.ServiceAccount:
    parsed = jwts.parse(token)
    jwts.verify_signature(parsed, jwts.public_keys({"keys": [signer.jwk()]}))
    return jwts.check_claims(parsed.claims, issuers=(ISSUER,), audiences=audiences, now=NOW)


def test_a_good_token(signer: Signer) -> None:
    sa = check(signer, signer.token())
    assert (sa.subject, sa.namespace, sa.name, sa.expires) == (
        SA,
        "kube-system",
        "kube-proxy",
        NOW + 3600,
    )


@pytest.mark.parametrize(
    ("claims", "match"),
    [
        ({"exp": NOW - 1}, "expired"),
        ({"exp": NOW}, "expired"),
        ({"exp": None}, "no expiry"),
        ({"exp": "soon"}, "not a number"),
        ({"exp": True}, "not a number"),
        ({"iss": "kubernetes/serviceaccount"}, "issuer"),
        ({"aud": ["vault"]}, "audience"),
        ({"aud": "vault"}, "audience"),
        ({"aud": None}, "audience"),
        ({"nbf": NOW + 3600}, "nbf lies in the future"),
        ({"iat": NOW + 3600}, "iat lies in the future"),
        ({"sub": "system:node:n1"}, "not a ServiceAccount"),
        ({"sub": "system:serviceaccount:ns"}, "malformed"),
        ({"sub": "system:serviceaccount:ns:a:b"}, "malformed"),
    ],
)
def test_claims_refused(signer: Signer, claims: dict[str, Any], match: str) -> None:
    with pytest.raises(jwts.TokenError, match=match):
        check(signer, signer.token(**claims))


def test_skew_within_leeway_is_fine(signer: Signer) -> None:
    assert check(signer, signer.token(nbf=NOW + 30, iat=NOW + 30)).subject == SA


def test_string_audience_and_configured_audiences(signer: Signer) -> None:
    assert check(signer, signer.token(aud="api"), audiences=("api", "other")).name == "kube-proxy"


def test_signature_of_another_key_fails(signer: Signer) -> None:
    impostor = Signer(signer.kind, kid=signer.kid)
    with pytest.raises(jwts.TokenError, match="does not verify"):
        check(signer, impostor.token())


def test_unknown_key_id(signer: Signer) -> None:
    with pytest.raises(jwts.UnknownKey):
        check(signer, signer.token(header={"kid": "rotated"}))


def test_no_key_id_tries_every_key(signer: Signer) -> None:
    token = signer.token(header={"kid": None})
    parsed = jwts.parse(token)
    keys = jwts.public_keys({"keys": [Signer(signer.kind, "other").jwk(), signer.jwk()]})
    jwts.verify_signature(parsed, keys)


@pytest.mark.parametrize("alg", ["none", "HS256", "PS256", "EdDSA", None])
def test_algorithms_refused(signer: Signer, alg: str | None) -> None:
    with pytest.raises(jwts.TokenError, match="not accepted"):
        check(signer, signer.token(header={"alg": alg}))


def test_rsa_key_with_an_es_token_fails() -> None:
    rsa_signer, ec_signer = Signer("rsa", "k"), Signer("ec", "k")
    parsed = jwts.parse(ec_signer.token())
    with pytest.raises(jwts.TokenError, match="does not verify"):
        jwts.verify_signature(parsed, jwts.public_keys({"keys": [rsa_signer.jwk()]}))


DEEP_LISTS = b"[" * 2000 + b"]" * 2000
DEEP_OBJECTS = b'{"a":' * 1500 + b"1" + b"}" * 1500


@pytest.mark.parametrize(
    "token",
    [
        "",
        "a.b",
        "a.b.c.d",
        "!!.!!.!!",
        f"{b64(b'[]')}.{b64(b'{}')}.{b64(b'x')}",
        "x" * 20000,
        # Issue 27 item 6: nested claims or header were a RecursionError (a 500) in json.loads.
        f"{b64(b'{}')}.{b64(DEEP_LISTS)}.{b64(b'x')}",
        f"{b64(DEEP_OBJECTS)}.{b64(b'{}')}.{b64(b'x')}",
    ],
)
def test_not_jwts(token: str) -> None:
    with pytest.raises(jwts.TokenError):
        jwts.parse(token)


def test_public_keys_skips_what_it_cannot_use() -> None:
    good = Signer("ec", "good").jwk()
    keys = jwts.public_keys(
        {
            "keys": [
                good,
                {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
                {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
                {**Signer("ec", "enc").jwk(), "use": "enc"},
                {"kty": "EC", "crv": "P-192", "kid": "small", "x": "AA", "y": "AA"},
                "garbage",
            ]
        }
    )
    assert set(keys) == {"good"}
    assert jwts.public_keys({"keys": "nope"}) == {}


def test_offline_tokens_round_trip() -> None:
    tokens = offlinetokens.OfflineTokens(lambda: ("api",))
    token, expiry = tokens.mint("kube-system", "coredns", [], NOW)
    assert expiry == NOW + offlinetokens.LIFETIME
    sa = tokens.verify(jwts.parse(token), NOW + 1)
    assert sa.subject == "system:serviceaccount:kube-system:coredns"
    with pytest.raises(jwts.TokenError, match="expired"):
        tokens.verify(jwts.parse(token), NOW + offlinetokens.LIFETIME)
    other = offlinetokens.OfflineTokens(lambda: ("api",))
    with pytest.raises(jwts.TokenError, match="not an offline token of this hub"):
        other.verify(jwts.parse(token), NOW + 1)
    vault, _ = tokens.mint("kube-system", "coredns", ["vault"], NOW)
    with pytest.raises(jwts.TokenError, match="audience"):
        tokens.verify(jwts.parse(vault), NOW + 1)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def test_verifier_memo_expiry_and_key_rotation() -> None:
    signer = Signer("ec", "k1")
    keys = issuers.IssuerKeys(None)
    clock = Clock()
    verifier = verifying.TokenVerifier(keys, clock=clock, memo_size=2)
    token = signer.token(exp=NOW + 100)
    assert verifier.verify(token).reason == "the ServiceAccount issuer's keys are not known yet"
    keys._adopt(ISSUER, {"keys": [signer.jwk()]}, NOW)
    assert verifier.verify(token).account is not None  # a new key set re-checks at once
    assert verifier.audiences() == (ISSUER,)
    clock.now = NOW + 100
    assert verifier.verify(token).reason == "the token has expired"  # memo hit, expiry checked
    rotated = Signer("ec", "k2")
    clock.now = NOW
    assert "not among the issuer's keys" in verifier.verify(rotated.token()).reason
    assert keys._soon.is_set()  # a refetch was asked for
    for i in range(5):
        verifier.verify(signer.token(jti=str(i)))
    assert len(verifier._memo) == 2  # bounded
    offline, _ = verifier.offline.mint("default", "web", [], NOW)
    assert verifier.verify(offline).account is not None


def test_verifier_configured_audiences() -> None:
    signer = Signer("ec", "k1")
    keys = issuers.IssuerKeys(None)
    keys._adopt(ISSUER, {"keys": [signer.jwk()]}, NOW)
    verifier = verifying.TokenVerifier(keys, api_audiences=("api",), clock=Clock())
    assert verifier.verify(signer.token()).account is None
    assert verifier.verify(signer.token(aud=["api"])).account is not None


@pytest.mark.parametrize(
    ("secure", "bearer", "peer", "kind"),
    [
        (False, "", None, callers.Kind.NODE),
        (False, "tok", None, callers.Kind.TOKEN),
        (True, "tok", None, callers.Kind.TOKEN),
        (True, "tok", "system:node:other", callers.Kind.TOKEN),
        (True, "", None, callers.Kind.UNAUTHENTICATED),
        (True, "", "system:node:n1", callers.Kind.NODE),
        (True, "", "system:node:other", callers.Kind.FORBIDDEN),
        (True, "", "kubernetes-admin", callers.Kind.FORBIDDEN),
        (True, "", "", callers.Kind.FORBIDDEN),
    ],
)
def test_callers(secure: bool, bearer: str, peer: str | None, kind: callers.Kind) -> None:
    decision = callers.decide(secure=secure, bearer=bearer, peer_common_name=peer, node_name="n1")
    assert decision.kind is kind
    if kind in (callers.Kind.UNAUTHENTICATED, callers.Kind.FORBIDDEN):
        assert decision.message


def test_offline_tokens_name_their_pod_and_never_outlive_the_hubs_lifetime() -> None:
    tokens = offlinetokens.OfflineTokens(lambda: ("api",))
    token, expiry = tokens.mint("apps", "reader", [], NOW, lifetime=20, pod=("app", "u-1"))
    assert expiry == NOW + 20
    claims = jwts.parse(token).claims
    assert claims["kubernetes.io"] == {
        "namespace": "apps",
        "serviceaccount": {"name": "reader"},
        "pod": {"name": "app", "uid": "u-1"},
    }
    _, longest = tokens.mint("apps", "reader", [], NOW, lifetime=10_000)
    assert longest == NOW + offlinetokens.LIFETIME
