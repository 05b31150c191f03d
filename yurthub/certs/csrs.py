"""The hub's two certificate signing requests: their shapes, bodies and answers.

PURE: builds and reads bytes and dicts (``cryptography`` objects are values, not I/O).

- **client** (the hub's identity towards apiservers): CN ``system:node:<node>``, O
  ``openyurt:yurthub`` + ``system:nodes`` + ``--hub-cert-organizations``; signer
  ``kubernetes.io/kube-apiserver-client``; usages digital signature + client auth.
- **serving** (port 10268): CN ``system:node:<node>``, O ``system:nodes``; signer
  ``kubernetes.io/kubelet-serving``; usages digital signature + server auth; SANs from
  ``serving_names``.

Keys are ECDSA P-256: no ``key encipherment`` usage (that is for RSA key transport), which the
kubelet-serving signer accepts. The key is made by the caller and never leaves the node: only
the PKCS#10 request (public key + names, signed by the key) is sent.

``issued`` checks what the signer sent back before it is written: a certificate for another
key, another subject, without the usage we asked for, or not yet/no longer valid is refused
(a confused or hostile signer must not be able to hand us something we then present).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import enum
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client"
SERVING_SIGNER = "kubernetes.io/kubelet-serving"
HUB_ORGANIZATION = "openyurt:yurthub"
NODES_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"
DUMMY_IP = "169.254.2.1"
SERVICE_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
CLIENT_USAGES = ("digital signature", "client auth")
SERVING_USAGES = ("digital signature", "server auth")
_EKU = {
    "client auth": ExtendedKeyUsageOID.CLIENT_AUTH,
    "server auth": ExtendedKeyUsageOID.SERVER_AUTH,
}


class Kind(enum.Enum):
    CLIENT = "client"
    SERVING = "serving"


class IssuedError(ValueError):
    """The signer's certificate does not fit the request (message says how)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Shape:
    """What one CSR asks for."""

    kind: Kind
    common_name: str
    organizations: tuple[str, ...]
    signer: str
    usages: tuple[str, ...]
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"{self.kind.value} certificate CN={self.common_name}"


def node_user(node_name: str) -> str:
    return f"{NODE_USER_PREFIX}{node_name}"


def client_shape(node_name: str, extra_organizations: Iterable[str] = ()) -> Shape:
    orgs = tuple(dict.fromkeys((HUB_ORGANIZATION, NODES_GROUP, *extra_organizations)))
    return Shape(Kind.CLIENT, node_user(node_name), orgs, CLIENT_SIGNER, CLIENT_USAGES)


def serving_names(
    *,
    cluster_ip: str,
    dummy_ip: str,
    bind_addresses: Iterable[str],
    node_ip: str,
) -> tuple[str, ...]:
    """The serving certificate's IP SANs, deduplicated in order; unspecified (``0.0.0.0``,
    ``::``) and empty addresses are left out: nobody dials them, and a signer may refuse them.
    """
    out: list[str] = []
    for raw in (cluster_ip, dummy_ip, *bind_addresses, node_ip):
        if not raw:
            continue
        try:
            ip = ipaddress.ip_address(raw)
        except ValueError:
            continue
        if ip.is_unspecified or str(ip) in out:
            continue
        out.append(str(ip))
    return tuple(out)


def serving_shape(node_name: str, ip_addresses: Iterable[str]) -> Shape:
    return Shape(
        Kind.SERVING,
        node_user(node_name),
        (NODES_GROUP,),
        SERVING_SIGNER,
        SERVING_USAGES,
        dns_names=SERVICE_NAMES,
        ip_addresses=tuple(ip_addresses),
    )


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    # "EC PRIVATE KEY" (SEC 1), as client-go writes ECDSA keys.
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def request_pem(shape: Shape, key: ec.EllipticCurvePrivateKey) -> bytes:
    """The PKCS#10 request for ``shape``, signed by ``key``."""
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in shape.organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, shape.common_name))
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attrs))
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in shape.dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in shape.ip_addresses]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    csr = builder.sign(key, hashes.SHA256())
    return csr.public_bytes(serialization.Encoding.PEM)


def csr_object(shape: Shape, request: bytes, expiration_seconds: int = 0) -> dict[str, Any]:
    """The ``CertificateSigningRequest`` to create (``generateName``: never collides)."""
    spec: dict[str, Any] = {
        "request": base64.b64encode(request).decode("ascii"),
        "signerName": shape.signer,
        "usages": list(shape.usages),
    }
    if expiration_seconds > 0:
        spec["expirationSeconds"] = expiration_seconds
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": spec,
    }


class Phase(enum.Enum):
    PENDING = "pending"
    """Not decided yet, or approved and not yet signed."""
    ISSUED = "issued"
    DENIED = "denied"
    FAILED = "failed"


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    phase: Phase
    certificate: bytes = b""
    """PEM, when issued."""
    reason: str = ""
    """Denied/Failed: the condition's reason and message."""
    approved: bool = False


def outcome(csr: Mapping[str, Any]) -> Outcome:
    """Where a CSR object stands. Denied or Failed wins over a certificate (the signer may have
    raced the denial)."""
    status = csr.get("status") or {}
    if not isinstance(status, Mapping):
        return Outcome(Phase.PENDING)
    approved = False
    for condition in status.get("conditions") or []:
        if not isinstance(condition, Mapping) or condition.get("status", "True") != "True":
            continue
        kind = condition.get("type")
        why = ": ".join(str(p) for p in (condition.get("reason"), condition.get("message")) if p)
        if kind == "Denied":
            return Outcome(Phase.DENIED, reason=why or "denied")
        if kind == "Failed":
            return Outcome(Phase.FAILED, reason=why or "failed")
        if kind == "Approved":
            approved = True
    encoded = status.get("certificate")
    if encoded:
        try:
            pem = base64.b64decode(str(encoded), validate=True)
        except ValueError:
            return Outcome(
                Phase.FAILED, reason="status.certificate is not base64", approved=approved
            )
        return Outcome(Phase.ISSUED, certificate=pem, approved=approved)
    return Outcome(Phase.PENDING, approved=approved)


def issued(
    shape: Shape,
    key: ec.EllipticCurvePrivateKey,
    certificate: bytes,
    now: datetime.datetime,
) -> x509.Certificate:
    """The leaf of ``certificate`` if it fits ``shape`` and ``key``; else ``IssuedError``."""
    try:
        chain = x509.load_pem_x509_certificates(certificate)
    except ValueError as e:
        raise IssuedError(f"the signed certificate is not PEM: {e}") from e
    leaf = chain[0]
    ours = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    theirs = leaf.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    if ours != theirs:
        raise IssuedError("the signed certificate is for another key")
    cn = [str(a.value) for a in leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if cn != [shape.common_name]:
        raise IssuedError(f"the signed certificate names {cn}, not {shape.common_name!r}")
    try:
        ekus = set(leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        ekus = set()
    for usage in shape.usages:
        oid = _EKU.get(usage)
        if oid is not None and oid not in ekus:
            raise IssuedError(f"the signed certificate lacks the {usage!r} usage")
    if leaf.not_valid_after_utc <= now:
        raise IssuedError(
            f"the signed certificate expired at {leaf.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}, "
            f"before this node's clock ({now:%Y-%m-%dT%H:%M:%SZ}): clock skew?"
        )
    return leaf


def pair_pem(certificate: bytes, key: ec.EllipticCurvePrivateKey) -> bytes:
    """Certificate chain then key, in one PEM (client-go's FileStore format)."""
    body = certificate if certificate.endswith(b"\n") else certificate + b"\n"
    return body + key_pem(key)
