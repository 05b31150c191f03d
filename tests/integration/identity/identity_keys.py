"""Helpers for the sealed-key tests: a certificate with its key, and a scan of directories for
any plaintext form of a private key (a unique module name: several test directories have a
conftest)."""

from __future__ import annotations

import base64
import datetime
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def pair(serial: int, cn: str = "system:node:n") -> tuple[bytes, ec.EllipticCurvePrivateKey]:
    """A self-signed certificate (PEM) valid for an hour, and its ECDSA key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), key


def needles(key: object) -> list[bytes]:
    """Every form a plaintext copy of ``key`` takes on disk: DER (PKCS#8, SEC 1), the private
    scalar, and each line of their PEM bodies."""
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    nothing = serialization.NoEncryption()
    der = serialization.Encoding.DER
    ders = [
        key.private_bytes(der, serialization.PrivateFormat.PKCS8, nothing),
        key.private_bytes(der, serialization.PrivateFormat.TraditionalOpenSSL, nothing),
    ]
    out = [*ders, key.private_numbers().private_value.to_bytes(32, "big")]
    for body in (base64.b64encode(d) for d in ders):
        out += [body[i : i + 64] for i in range(0, len(body) - 63, 64)]
    return out


def leaks(roots: list[pathlib.Path], found: list[bytes]) -> list[str]:
    """The files under ``roots`` holding any of ``found`` (at least one file must be there)."""
    files = [p for root in roots for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    assert files, f"nothing under {roots}"
    return [f"{f}" for f in files for n in found if n in f.read_bytes()]
