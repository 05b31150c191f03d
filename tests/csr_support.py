"""Building CertificateSigningRequests for tests: real PKCS#10 requests made with
``cryptography``, wrapped in the certificates.k8s.io/v1 JSON the apiserver takes, and the
shapes a hub (and kubelet) send."""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Iterable, Sequence
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client"
SERVING_SIGNER = "kubernetes.io/kubelet-serving"
KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
HUB_DNS = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
HUB_IPS = ("10.96.0.1", "169.254.2.1", "127.0.0.1")

Key = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def request_pem(
    cn: str,
    orgs: Sequence[str] = (),
    *,
    dns: Iterable[str] = (),
    ips: Iterable[str] = (),
    emails: Iterable[str] = (),
    uris: Iterable[str] = (),
    key: Key | None = None,
) -> bytes:
    """A signed PKCS#10 request (PEM) for this subject and these SANs."""
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    if cn:
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attributes))
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    names += [x509.RFC822Name(e) for e in emails]
    names += [x509.UniformResourceIdentifier(u) for u in uris]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    key = key or new_key()
    # Ed25519 signs the message itself: no separate digest.
    digest = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    signed = builder.sign(key, digest)
    return signed.public_bytes(serialization.Encoding.PEM)


def csr(
    name: str,
    request: bytes,
    signer: str,
    usages: Sequence[str],
    *,
    username: str = "",
    groups: Sequence[str] = (),
    conditions: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The CSR object (``username``/``groups`` as the apiserver records the requester)."""
    obj: dict[str, Any] = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {
            "request": base64.b64encode(request).decode(),
            "signerName": signer,
            "usages": list(usages),
        },
        "status": {},
    }
    if username:
        obj["spec"]["username"] = username
        obj["spec"]["groups"] = list(groups)
    if conditions:
        obj["status"]["conditions"] = list(conditions)
    return obj


def hub_client_request(node: str, extra_orgs: Sequence[str] = (), key: Key | None = None) -> bytes:
    return request_pem(
        f"system:node:{node}", ["openyurt:yurthub", "system:nodes", *extra_orgs], key=key
    )


def hub_serving_request(node: str, key: Key | None = None) -> bytes:
    return request_pem(f"system:node:{node}", ["system:nodes"], dns=HUB_DNS, ips=HUB_IPS, key=key)


def kubelet_serving_request(node: str, ip: str = "192.0.2.10") -> bytes:
    return request_pem(f"system:node:{node}", ["system:nodes"], dns=[node], ips=[ip])


def body(obj: dict[str, Any]) -> dict[str, Any]:
    """What a client POSTs: no server fields, no requester."""
    spec = {k: v for k, v in obj["spec"].items() if k not in ("username", "groups", "uid")}
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {"name": obj["metadata"]["name"]},
        "spec": spec,
    }
