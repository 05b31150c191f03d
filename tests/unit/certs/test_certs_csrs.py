"""CSR shapes, SAN lists, the signer's answer read and checked (``yurthub.certs.csrs``)."""

from __future__ import annotations

import base64
import datetime
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from yurthub.certs import csrs
from yurthub.testing.sim import pki

NOW = datetime.datetime.now(datetime.UTC)


def test_client_shape() -> None:
    shape = csrs.client_shape("edge-1", ["openyurt:tenant:t1", "system:nodes"])
    assert shape.common_name == "system:node:edge-1"
    assert shape.organizations == ("openyurt:yurthub", "system:nodes", "openyurt:tenant:t1")
    assert shape.signer == "kubernetes.io/kube-apiserver-client"
    assert shape.usages == ("digital signature", "client auth")
    assert not shape.dns_names and not shape.ip_addresses


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        (
            {
                "cluster_ip": "10.96.0.1",
                "dummy_ip": "169.254.2.1",
                "bind_addresses": ("127.0.0.1", "127.0.0.1"),
                "node_ip": "192.0.2.7",
            },
            ("10.96.0.1", "169.254.2.1", "127.0.0.1", "192.0.2.7"),
        ),
        # Unspecified and empty addresses are nobody's destination; IPv6 is normalised.
        (
            {
                "cluster_ip": "",
                "dummy_ip": "169.254.2.1",
                "bind_addresses": ("0.0.0.0", "::"),
                "node_ip": "fd00:0::1",
            },
            ("169.254.2.1", "fd00::1"),
        ),
        (
            {"cluster_ip": "None", "dummy_ip": "", "bind_addresses": (), "node_ip": ""},
            (),
        ),
    ],
)
def test_serving_names(kwargs: dict[str, Any], expected: tuple[str, ...]) -> None:
    assert csrs.serving_names(**kwargs) == expected


def test_serving_shape_and_request() -> None:
    shape = csrs.serving_shape("edge-1", ("10.96.0.1", "169.254.2.1"))
    assert shape.signer == "kubernetes.io/kubelet-serving"
    assert shape.organizations == ("system:nodes",)
    assert shape.usages == ("digital signature", "server auth")
    key = csrs.new_key()
    request = x509.load_pem_x509_csr(csrs.request_pem(shape, key))
    assert request.is_signature_valid
    subject = request.subject
    assert [a.value for a in subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == [
        "system:node:edge-1"
    ]
    assert [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:nodes"
    ]
    san = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == [
        "10.96.0.1",
        "169.254.2.1",
    ]


@pytest.mark.parametrize("expiration", [0, 600])
def test_csr_object(expiration: int) -> None:
    shape = csrs.client_shape("n")
    obj = csrs.csr_object(shape, b"PEM", expiration)
    assert obj["metadata"] == {"generateName": "csr-"}
    spec = obj["spec"]
    assert base64.b64decode(spec["request"]) == b"PEM"
    assert spec["signerName"] == csrs.CLIENT_SIGNER
    assert spec["usages"] == ["digital signature", "client auth"]
    assert spec.get("expirationSeconds", 0) == expiration


def _cond(kind: str, status: str = "True", reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


CERT_B64 = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()


@pytest.mark.parametrize(
    ("status", "phase", "reason"),
    [
        ({}, csrs.Phase.PENDING, ""),
        ({"conditions": [_cond("Approved")]}, csrs.Phase.PENDING, ""),
        (
            {"conditions": [_cond("Approved")], "certificate": CERT_B64},
            csrs.Phase.ISSUED,
            "",
        ),
        (
            {"conditions": [_cond("Denied", reason="NotOurs", message="bad CN")]},
            csrs.Phase.DENIED,
            "NotOurs: bad CN",
        ),
        # A denial wins over a certificate the signer raced in.
        (
            {"conditions": [_cond("Approved"), _cond("Denied")], "certificate": CERT_B64},
            csrs.Phase.DENIED,
            "denied",
        ),
        (
            {"conditions": [_cond("Failed", reason="SignerValidationFailure")]},
            csrs.Phase.FAILED,
            "SignerValidationFailure",
        ),
        # A condition whose status is False does not count.
        ({"conditions": [_cond("Denied", status="False")]}, csrs.Phase.PENDING, ""),
        ({"certificate": "%%%"}, csrs.Phase.FAILED, "status.certificate is not base64"),
        ("garbage", csrs.Phase.PENDING, ""),
    ],
)
def test_outcome(status: Any, phase: csrs.Phase, reason: str) -> None:
    result = csrs.outcome({"status": status})
    assert result.phase is phase
    assert result.reason == reason


@pytest.fixture(scope="module")
def authority() -> pki.Authority:
    return pki.Authority.create("test-ca")


def _signed(authority: pki.Authority, shape: csrs.Shape, key: Any, usages: list[str]) -> bytes:
    return authority.sign_request(csrs.request_pem(shape, key), usages=usages)


def test_issued_accepts_the_right_certificate(authority: pki.Authority) -> None:
    shape = csrs.client_shape("edge-1")
    key = csrs.new_key()
    leaf = csrs.issued(shape, key, _signed(authority, shape, key, ["client auth"]), NOW)
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in eku
    pair = csrs.pair_pem(leaf.public_bytes(serialization.Encoding.PEM), key)
    assert b"BEGIN CERTIFICATE" in pair and b"BEGIN EC PRIVATE KEY" in pair


def test_issued_refuses_another_key(authority: pki.Authority) -> None:
    shape = csrs.client_shape("edge-1")
    cert = _signed(authority, shape, csrs.new_key(), ["client auth"])
    with pytest.raises(csrs.IssuedError, match="another key"):
        csrs.issued(shape, csrs.new_key(), cert, NOW)


def test_issued_refuses_another_subject(authority: pki.Authority) -> None:
    key = csrs.new_key()
    cert = _signed(authority, csrs.client_shape("edge-2"), key, ["client auth"])
    with pytest.raises(csrs.IssuedError, match="system:node:edge-1"):
        csrs.issued(csrs.client_shape("edge-1"), key, cert, NOW)


def test_issued_refuses_a_missing_usage(authority: pki.Authority) -> None:
    shape = csrs.serving_shape("edge-1", ())
    key = csrs.new_key()
    cert = _signed(authority, shape, key, ["client auth"])
    with pytest.raises(csrs.IssuedError, match="server auth"):
        csrs.issued(shape, key, cert, NOW)


def test_issued_refuses_expired_and_garbage(authority: pki.Authority) -> None:
    shape = csrs.client_shape("edge-1")
    key = csrs.new_key()
    cert = _signed(authority, shape, key, ["client auth"])
    with pytest.raises(csrs.IssuedError, match="expired"):
        csrs.issued(shape, key, cert, NOW + datetime.timedelta(days=400))
    with pytest.raises(csrs.IssuedError, match="not PEM"):
        csrs.issued(shape, key, b"-----BEGIN CERTIFICATE-----\nAAAA", NOW)
