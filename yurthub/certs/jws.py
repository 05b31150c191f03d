"""Join-token discovery, kubeadm style: trust the cluster's CA without trusting the network.

PURE: strings and bytes in, verdicts out.

The ``kube-public/cluster-info`` ConfigMap is readable anonymously. It holds ``kubeconfig`` (the
cluster's server and CA) and, for every bootstrap token allowed to sign, ``jws-kubeconfig-<id>``:
a detached JWS (``<header>..<signature>``, HS256, key = the token's secret, header ``kid`` =
its id) over
that kubeconfig, kept up to date by the controller-manager's bootstrapsigner. So:

1. ``parse_token``: ``[a-z0-9]{6}.[a-z0-9]{16}``;
2. ``verify_detached``: the signature proves the ConfigMap came from someone who knows the
   token's secret (the cluster), whoever served it;
3. ``pin`` / ``check_pins``: ``--discovery-token-ca-cert-hash sha256:<hex>`` is the SHA-256 of
   the CA certificate's SubjectPublicKeyInfo (DER). It proves the CA is the one the operator
   expects even when the token leaked (a token holder could sign a kubeconfig naming their
   own CA). ``--discovery-token-unsafe-skip-ca-verification`` skips only this step.

Nothing here logs; messages never carry the token secret.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from inputbounds import nesting

TOKEN = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
PIN = re.compile(r"^sha256:([0-9a-f]{64})$")
SIGNATURE_KEY_PREFIX = "jws-kubeconfig-"
CLUSTER_INFO_NAMESPACE = "kube-public"
CLUSTER_INFO_NAME = "cluster-info"


class DiscoveryError(ValueError):
    """The cluster-info cannot be trusted or used (message says why, never the secret)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Token:
    id: str
    secret: str

    def __str__(self) -> str:
        return f"{self.id}.{self.secret}"

    def __repr__(self) -> str:  # never show the secret
        return f"Token(id={self.id!r})"


def parse_token(text: str) -> Token:
    m = TOKEN.match(text.strip())
    if m is None:
        raise DiscoveryError(
            "the join token is not of the form [a-z0-9]{6}.[a-z0-9]{16} (kubeadm token create)"
        )
    return Token(m.group(1), m.group(2))


def parse_pins(values: Iterable[str]) -> tuple[str, ...]:
    """Normalised ``sha256:<hex>`` pins (hex lower-cased); anything else is an error."""
    pins: list[str] = []
    for raw in values:
        value = raw.strip()
        if not value:
            continue
        kind, _, digest = value.partition(":")
        normal = f"{kind.lower()}:{digest.lower()}"
        if PIN.match(normal) is None:
            raise DiscoveryError(
                f"CA certificate hash {value!r} is not sha256:<64 hex digits> "
                "(kubeadm's --discovery-token-ca-cert-hash)"
            )
        pins.append(normal)
    return tuple(dict.fromkeys(pins))


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def verify_detached(detached: str, content: str, token: Token) -> None:
    """Raise ``DiscoveryError`` unless ``detached`` is ``token``'s HS256 signature of
    ``content``. The header must say HS256 and name the token's id: no ``none``, no other
    algorithm, no other key."""
    parts = detached.strip().split(".")
    if len(parts) != 3 or parts[1] != "":
        raise DiscoveryError("the cluster-info signature is not a detached JWS")
    try:
        header = orjson.loads(_b64decode(parts[0]))  # bounded (json's parser recursed)
        signature = _b64decode(parts[2])
    except (binascii.Error, ValueError) as e:
        raise DiscoveryError("the cluster-info signature is not valid base64/JSON") from e
    if not isinstance(header, dict) or header.get("alg") != "HS256":
        raise DiscoveryError("the cluster-info signature does not use HS256")
    if header.get("kid") != token.id:
        raise DiscoveryError(f"the cluster-info signature names another token id than {token.id!r}")
    payload = _b64encode(content.encode("utf-8"))
    expected = hmac.new(token.secret.encode(), f"{parts[0]}.{payload}".encode(), hashlib.sha256)
    if not hmac.compare_digest(expected.digest(), signature):
        raise DiscoveryError(
            f"the cluster-info signature for token {token.id!r} does not verify: wrong token "
            "secret, or the ConfigMap was changed"
        )


def pin(certificate: x509.Certificate) -> str:
    spki = certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return f"sha256:{hashlib.sha256(spki).hexdigest()}"


def check_pins(ca_pem: bytes, pins: Iterable[str]) -> None:
    """Raise unless some certificate of ``ca_pem`` has one of ``pins``."""
    wanted = set(pins)
    try:
        certificates = x509.load_pem_x509_certificates(ca_pem)
    except ValueError as e:
        raise DiscoveryError(f"the cluster CA in cluster-info is not PEM: {e}") from e
    found = [pin(c) for c in certificates]
    if not wanted.intersection(found):
        raise DiscoveryError(
            f"the cluster CA's public key hash {', '.join(found)} matches none of "
            f"--discovery-token-ca-cert-hash {', '.join(sorted(wanted))}: refusing this cluster"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterInfo:
    server: str
    """The server the cluster-info kubeconfig names (informational: --server-addr decides)."""
    ca_pem: bytes


def cluster_info(
    configmap: Mapping[str, Any],
    token: Token,
    pins: Iterable[str],
    *,
    skip_ca_verification: bool,
) -> ClusterInfo:
    """The verified server and CA of a ``cluster-info`` ConfigMap as fetched (unverified TLS)."""
    data = configmap.get("data")
    if not isinstance(data, Mapping):
        raise DiscoveryError("cluster-info has no data")
    content = data.get("kubeconfig")
    if not isinstance(content, str) or not content:
        raise DiscoveryError("cluster-info has no kubeconfig")
    detached = data.get(f"{SIGNATURE_KEY_PREFIX}{token.id}")
    if not isinstance(detached, str) or not detached:
        raise DiscoveryError(
            f"cluster-info is not signed for token id {token.id!r}: the token does not exist, "
            "expired, or lacks usage-bootstrap-signing"
        )
    verify_detached(detached, content, token)
    info = _parse_kubeconfig(content)
    pin_list = tuple(pins)
    if not skip_ca_verification:
        if not pin_list:
            raise DiscoveryError(
                "no --discovery-token-ca-cert-hash given (or "
                "--discovery-token-unsafe-skip-ca-verification)"
            )
        check_pins(info.ca_pem, pin_list)
    return info


def _parse_kubeconfig(content: str) -> ClusterInfo:
    try:
        doc = nesting.load_yaml(content)
    except yaml.YAMLError as e:
        raise DiscoveryError(f"the cluster-info kubeconfig is not YAML: {e}") from e
    clusters = doc.get("clusters") if isinstance(doc, dict) else None
    if not isinstance(clusters, list) or not clusters or not isinstance(clusters[0], dict):
        raise DiscoveryError("the cluster-info kubeconfig names no cluster")
    cluster = clusters[0].get("cluster")
    if not isinstance(cluster, dict):
        raise DiscoveryError("the cluster-info kubeconfig's cluster is malformed")
    ca_data = cluster.get("certificate-authority-data")
    if not ca_data:
        raise DiscoveryError("the cluster-info kubeconfig carries no certificate-authority-data")
    try:
        ca_pem = base64.b64decode(str(ca_data), validate=True)
        x509.load_pem_x509_certificates(ca_pem)
    except ValueError as e:
        raise DiscoveryError(f"the cluster CA in cluster-info is not base64 PEM: {e}") from e
    return ClusterInfo(server=str(cluster.get("server", "")), ca_pem=ca_pem)
