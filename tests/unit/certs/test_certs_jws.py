"""Join-token discovery decisions (``yurthub.certs.jws``), checked against the simulated
cluster's independent bootstrapsigner (``yurthub.testing.sim.bootstraptokens``)."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from yurthub.certs import jws
from yurthub.testing.sim import bootstraptokens, pki

TOKEN = jws.Token("abcdef", "0123456789abcdef")


@pytest.fixture(scope="module")
def authority() -> pki.Authority:
    return pki.Authority.create("cluster-ca")


def _pin(authority: pki.Authority) -> str:
    spki = authority.cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def _cluster_info(authority: pki.Authority, *, token: jws.Token = TOKEN) -> dict[str, Any]:
    content = bootstraptokens.cluster_info_kubeconfig("https://10.0.0.1:6443", authority.cert_pem)
    return {
        "data": {
            "kubeconfig": content,
            f"jws-kubeconfig-{token.id}": bootstraptokens.sign_detached(
                content, token.id, token.secret
            ),
        }
    }


@pytest.mark.parametrize(
    "text", ["abcdef.0123456789abcdef", " abcdef.0123456789abcdef\n", "000000.aaaaaaaaaaaaaaaa"]
)
def test_parse_token(text: str) -> None:
    token = jws.parse_token(text)
    assert str(token) == text.strip()
    assert token.secret not in repr(token)


@pytest.mark.parametrize(
    "text",
    ["", "abcdef", "ABCDEF.0123456789abcdef", "abcde.0123456789abcdef", "abcdef:0123456789abcdef"],
)
def test_parse_token_refuses(text: str) -> None:
    with pytest.raises(jws.DiscoveryError, match="not of the form"):
        jws.parse_token(text)


def test_parse_pins() -> None:
    hexa = "a" * 64
    assert jws.parse_pins([f"SHA256:{hexa.upper()}", "", f"sha256:{hexa}"]) == (f"sha256:{hexa}",)
    for bad in ("md5:" + hexa, hexa, "sha256:" + "a" * 63, "sha256:" + "g" * 64):
        with pytest.raises(jws.DiscoveryError):
            jws.parse_pins([bad])


def test_cluster_info_verified(authority: pki.Authority) -> None:
    info = jws.cluster_info(
        _cluster_info(authority), TOKEN, [_pin(authority)], skip_ca_verification=False
    )
    assert info.ca_pem == authority.cert_pem
    assert info.server == "https://10.0.0.1:6443"
    assert jws.pin(authority.cert) == _pin(authority)


def test_wrong_secret(authority: pki.Authority) -> None:
    wrong = jws.Token(TOKEN.id, "ffffffffffffffff")
    with pytest.raises(jws.DiscoveryError, match="does not verify"):
        jws.cluster_info(
            _cluster_info(authority), wrong, [_pin(authority)], skip_ca_verification=False
        )


def test_unknown_token_id(authority: pki.Authority) -> None:
    other = jws.Token("zzzzzz", TOKEN.secret)
    with pytest.raises(jws.DiscoveryError, match="not signed for token id 'zzzzzz'"):
        jws.cluster_info(
            _cluster_info(authority), other, [_pin(authority)], skip_ca_verification=False
        )


def test_pin_mismatch(authority: pki.Authority) -> None:
    with pytest.raises(jws.DiscoveryError, match="matches none"):
        jws.cluster_info(
            _cluster_info(authority), TOKEN, ["sha256:" + "0" * 64], skip_ca_verification=False
        )


def test_no_pin_needs_the_unsafe_flag(authority: pki.Authority) -> None:
    with pytest.raises(jws.DiscoveryError, match="discovery-token-ca-cert-hash"):
        jws.cluster_info(_cluster_info(authority), TOKEN, [], skip_ca_verification=False)
    info = jws.cluster_info(_cluster_info(authority), TOKEN, [], skip_ca_verification=True)
    assert info.ca_pem == authority.cert_pem


def test_changed_content_fails(authority: pki.Authority) -> None:
    cm = _cluster_info(authority)
    cm["data"]["kubeconfig"] = cm["data"]["kubeconfig"].replace("10.0.0.1", "10.6.6.6")
    with pytest.raises(jws.DiscoveryError, match="does not verify"):
        jws.cluster_info(cm, TOKEN, [_pin(authority)], skip_ca_verification=False)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.mark.parametrize(
    ("header", "match"),
    [
        (b'{"alg":"none","kid":"abcdef"}', "HS256"),
        (b'{"alg":"RS256","kid":"abcdef"}', "HS256"),
        (b'{"alg":"HS256","kid":"other1"}', "another token id"),
        (b'{"alg":"HS256"}', "another token id"),
    ],
)
def test_header_must_be_hs256_with_the_token_id(header: bytes, match: str) -> None:
    with pytest.raises(jws.DiscoveryError, match=match):
        jws.verify_detached(f"{_b64(header)}..{_b64(b'x' * 32)}", "content", TOKEN)


@pytest.mark.parametrize("detached", ["", "a.b.c", "a..", "!!..!!", "a.b"])
def test_malformed_signature(detached: str) -> None:
    with pytest.raises(jws.DiscoveryError):
        jws.verify_detached(detached, "content", TOKEN)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (None, "no data"),
        ({}, "no kubeconfig"),
        ({"kubeconfig": ": not yaml ["}, "not signed"),
    ],
)
def test_bad_configmaps(data: Any, match: str) -> None:
    with pytest.raises(jws.DiscoveryError, match=match):
        jws.cluster_info({"data": data}, TOKEN, [], skip_ca_verification=True)


def test_kubeconfig_without_ca() -> None:
    content = "clusters:\n- cluster: {server: https://x}\n  name: ''\n"
    cm = {
        "data": {
            "kubeconfig": content,
            "jws-kubeconfig-abcdef": bootstraptokens.sign_detached(content, TOKEN.id, TOKEN.secret),
        }
    }
    with pytest.raises(jws.DiscoveryError, match="certificate-authority-data"):
        jws.cluster_info(cm, TOKEN, [], skip_ca_verification=True)


def test_a_deeply_nested_cluster_info_is_a_discovery_error() -> None:
    """Issue 27 item 6: the signed kubeconfig is YAML; nesting no longer recurses unbounded."""
    content = "clusters: " + "[" * 5_000 + "]" * 5_000
    signature = bootstraptokens.sign_detached(content, TOKEN.id, TOKEN.secret)
    found = {"data": {"kubeconfig": content, f"jws-kubeconfig-{TOKEN.id}": signature}}
    with pytest.raises(jws.DiscoveryError, match=r"not YAML: .*nested deeper than 200 levels"):
        jws.cluster_info(found, TOKEN, [], skip_ca_verification=True)


def test_a_deeply_nested_signature_header_is_a_discovery_error(authority: pki.Authority) -> None:
    """Read before anything is verified: json's parser recursed (a ``RecursionError``)."""
    found = _cluster_info(authority)
    header = base64.urlsafe_b64encode(b"[" * 2_000 + b"]" * 2_000).rstrip(b"=").decode()
    found["data"][f"jws-kubeconfig-{TOKEN.id}"] = f"{header}..AAAA"
    with pytest.raises(jws.DiscoveryError, match="not valid base64/JSON"):
        jws.cluster_info(found, TOKEN, [_pin(authority)], skip_ca_verification=False)
