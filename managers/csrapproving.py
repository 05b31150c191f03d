"""Which CertificateSigningRequests are the hub's, and whether to approve or deny them: pure.

``decide(csr, policy, facts)`` takes the CSR as JSON (certificates.k8s.io/v1), the operator's
``Policy`` and the ``Facts`` the controller read from the cluster, and returns ``Approve``,
``Deny(check, message)``, ``Wait(why, node)`` or ``Ignore(why)``. The controller
(``csrapprover``) only carries it out.

A CSR *claims to be the hub's* when

* its subject organizations include ``openyurt:yurthub`` (the hub's client certificate), or
* it asks the ``kubelet-serving`` signer for a name only the hub serves (a DNS SAN
  ``kubernetes.default``, ``kubernetes.default.svc`` or ``kubernetes.default.svc.<domain>``:
  the hub's HTTPS port stands in for the apiserver), or
* it asks the ``kubelet-serving`` signer for a node and was made with a bootstrap token
  (kubelet asks for its serving certificate with its own client certificate, never a token).

Everything else is not ours and is never touched (kubelet's own client and serving CSRs,
other components', any other signer), however it looks. A claimed CSR is approved when every
check passes and denied naming the first that fails (the CSR's condition ``reason`` is
``Invalid<Check>``), because nobody else will ever approve it: denying tells the hub's
operator what is wrong at once instead of leaving the request pending for a day.

The hub's shapes:

* client: signer ``kubernetes.io/kube-apiserver-client``; CN ``system:node:<node>``; O
  ``openyurt:yurthub`` and ``system:nodes`` plus extra organizations the operator allows
  (``openyurt:tenant:<namespace>`` always, as OpenYurt); usages ``client auth`` and
  ``digital signature``, optionally ``key encipherment``; no SANs.
* serving: signer ``kubernetes.io/kubelet-serving``; CN ``system:node:<node>``; O exactly
  ``system:nodes``; usages ``server auth`` and ``digital signature``, optionally ``key
  encipherment``; at least one SAN, DNS names and IP addresses only.
* requester (``spec.username``/``groups``, recorded by the apiserver, not claimed by the
  client): the node itself (``system:node:<node>`` in ``system:nodes``, the same node as the
  CN) or a bootstrap token (``system:bootstrap:<id>`` in ``system:bootstrappers``).
* key: RSA of at least 2048 bits, ECDSA on P-256/P-384/P-521, or Ed25519; the request's
  signature verifies.
* serving names (what ``yurthub/certs/csrs.py`` asks for, and nothing else): DNS
  ``kubernetes``, ``kubernetes.default``, ``kubernetes.default.svc`` and
  ``kubernetes.default.svc.<cluster domain>`` (``Policy.cluster_domain``, compared without
  case); IPs: the ClusterIPs of ``default/kubernetes``, the hubs' dummy IP
  (``Policy.dummy_ips``), loopback (the hub's ``--bind-address`` and
  ``--bind-proxy-address``, 127.0.0.1 by default: only the node itself reaches them) and the
  addresses in the ``status.addresses`` of the requesting node (``system:node:<node>``; a
  bootstrap token is no node and may name none). Any other name is denied naming it
  (``DNS:<name>``, ``IP:<address>``): ``*``, ``*.svc.cluster.local``, another host, another
  node's IP. A name that only a fact not known yet could allow is ``Wait``: the Service or
  the node not read yet (``Wait.node``/``service``: the controller reads them, only then,
  and decides again), or the node not registered yet (a hub asks before its kubelet
  registers): left pending and decided again later, never denied on a guess.

Dangers: an approved serving certificate is valid for ``kubernetes.default.svc`` and the
IPs the hub asked for, signed by the kubelet-serving CA (on kubeadm the cluster CA): a node
(or a bootstrap token holder) can present it as the apiserver to pods that reach it. That is
what the hub is for, and what the node could do to its own pods anyway; THREAT_MODEL.md says
more. A node reports its own ``status.addresses``: one that lies there gets a certificate for
the addresses it claims (as with any approver that trusts them). Organizations under
``system:`` other than ``system:nodes`` are never allowed (e.g. ``system:masters`` is
cluster-admin).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cryptography import exceptions, x509
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client"
SERVING_SIGNER = "kubernetes.io/kubelet-serving"
HUB_ORGANIZATION = "openyurt:yurthub"
NODES_GROUP = "system:nodes"
BOOTSTRAPPERS_GROUP = "system:bootstrappers"
NODE_PREFIX = "system:node:"
BOOTSTRAP_PREFIX = "system:bootstrap:"
TENANT_PREFIX = "openyurt:tenant:"
APPROVED_REASON = "AutoApproved"

CLIENT_USAGES = frozenset({"client auth", "digital signature"})
SERVING_USAGES = frozenset({"server auth", "digital signature"})
OPTIONAL_USAGES = frozenset({"key encipherment"})
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_EC_CURVES = (ec.SECP256R1, ec.SECP384R1, ec.SECP521R1)
MIN_RSA_BITS = 2048
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
DUMMY_IP = "169.254.2.1"
"""YurtHub's default ``--dummy-if-ip`` (and ours)."""
SERVICE_NAME_PREFIXES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc")


@dataclasses.dataclass(frozen=True, slots=True)
class Policy:
    extra_organizations: frozenset[str] = frozenset()
    """Organizations hub client certificates may carry besides ``openyurt:yurthub`` and
    ``system:nodes`` (the hubs' ``--hub-cert-organizations``); ``openyurt:tenant:*`` always."""
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
    """The cluster's DNS domain: serving certificates may name
    ``kubernetes.default.svc.<cluster_domain>`` (the manager's ``--cluster-domain``)."""
    dummy_ips: frozenset[str] = frozenset({DUMMY_IP})
    """The hubs' dummy-interface IPs (their ``--dummy-if-ip``; the manager's
    ``--hub-dummy-if-ips``)."""

    def __post_init__(self) -> None:
        for org in self.extra_organizations:
            if org.startswith("system:"):
                raise ValueError(f"organization {org!r} is reserved: hubs may not claim it")
            if not org:
                raise ValueError("an empty organization is not allowed")
        domain = self.cluster_domain
        if len(domain) > 253 or not _NODE_NAME.match(domain):
            raise ValueError(f"cluster domain {domain!r} is not a DNS name (e.g. cluster.local)")
        normalized = set()
        for ip in self.dummy_ips:
            try:
                normalized.add(str(ipaddress.ip_address(ip)))
            except ValueError:
                raise ValueError(f"dummy IP {ip!r} is not an IP address") from None
        object.__setattr__(self, "dummy_ips", frozenset(normalized))

    @property
    def service_names(self) -> tuple[str, ...]:
        """The DNS names a hub serving certificate may carry, in the hub's order."""
        return (*SERVICE_NAME_PREFIXES, f"kubernetes.default.svc.{self.cluster_domain}")

    def allows(self, organization: str) -> bool:
        return organization in self.extra_organizations or (
            organization.startswith(TENANT_PREFIX) and len(organization) > len(TENANT_PREFIX)
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Approve:
    kind: str  # "client" or "serving"
    node: str
    message: str
    reason: str = APPROVED_REASON


@dataclasses.dataclass(frozen=True, slots=True)
class Deny:
    kind: str  # "client", "serving" or "unknown"
    check: str  # the failed check, e.g. "Usages"
    message: str

    @property
    def reason(self) -> str:
        return f"Invalid{self.check}"


@dataclasses.dataclass(frozen=True, slots=True)
class Ignore:
    why: str


@dataclasses.dataclass(frozen=True, slots=True)
class Wait:
    """Not decided yet: a name only a fact not known yet could allow."""

    why: str
    node: str = ""
    """The node whose addresses may settle it, not read yet."""
    service: bool = False
    """The ``default/kubernetes`` Service may settle it, not read yet. Neither to read: the
    facts are all in and not enough yet (the node is not registered); ask again later."""

    @property
    def reads(self) -> bool:
        return bool(self.node) or self.service


Decision = Approve | Deny | Ignore | Wait


@dataclasses.dataclass(frozen=True, slots=True)
class Facts:
    """What the cluster says about the addresses a hub may name (read by the controller)."""

    service_ips: frozenset[str] | None = None
    """The ClusterIPs of ``default/kubernetes`` (``service_ips``; empty when there is no such
    Service); None: not read."""
    nodes: Mapping[str, frozenset[str] | None] = dataclasses.field(default_factory=dict)
    """Node name -> its addresses (``node_addresses``), None when the node does not exist; a
    node absent from the mapping has not been read."""


def service_ips(service: Mapping[str, Any]) -> frozenset[str]:
    """The ClusterIPs of a Service (``spec.clusterIPs`` and ``spec.clusterIP``)."""
    spec = service.get("spec")
    if not isinstance(spec, Mapping):
        return frozenset()
    values = [spec.get("clusterIP"), *(spec.get("clusterIPs") or ())]
    return frozenset(ip for ip in map(_ip, values) if ip is not None)


def node_addresses(node: Mapping[str, Any]) -> frozenset[str]:
    """The IP addresses among a Node's ``status.addresses`` (any type), normalized."""
    status = node.get("status")
    addresses = status.get("addresses") if isinstance(status, Mapping) else None
    found = set()
    for entry in addresses if isinstance(addresses, list) else ():
        ip = _ip(entry.get("address")) if isinstance(entry, Mapping) else None
        if ip is not None:
            found.add(ip)
    return frozenset(found)


def _ip(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


class _Failed(Exception):
    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check = check
        self.message = message


class _Unknown(Exception):
    def __init__(self, wait: Wait) -> None:
        super().__init__(wait.why)
        self.wait = wait


# --- reading the CSR ---------------------------------------------------------------------------


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def decided(csr: Mapping[str, Any]) -> str | None:
    """The condition that already settled this CSR, or a certificate; None while pending."""
    status = csr.get("status")
    if not isinstance(status, Mapping):
        return None
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") in (
            "Approved",
            "Denied",
            "Failed",
        ):
            return str(condition["type"]).lower()
    return "issued" if status.get("certificate") else None


def parse_request(spec: Mapping[str, Any]) -> x509.CertificateSigningRequest | None:
    raw = spec.get("request")
    if not isinstance(raw, str):
        return None
    try:
        pem = base64.b64decode(raw, validate=True)
        return x509.load_pem_x509_csr(pem)
    except (binascii.Error, ValueError):
        return None


def _attributes(request: x509.CertificateSigningRequest, oid: x509.ObjectIdentifier) -> list[str]:
    return [str(a.value) for a in request.subject.get_attributes_for_oid(oid)]


def _sans(request: x509.CertificateSigningRequest) -> list[x509.GeneralName]:
    try:
        return list(request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound:
        return []
    except ValueError:  # a SAN extension that does not decode is not one we approve
        return [x509.OtherName(x509.ObjectIdentifier("0.0"), b"")]


def _dns_names(request: x509.CertificateSigningRequest) -> list[str]:
    return [str(n.value) for n in _sans(request) if isinstance(n, x509.DNSName)]


def _hub_service_name(name: str) -> bool:
    name = name.lower()
    return name in ("kubernetes.default", "kubernetes.default.svc") or name.startswith(
        "kubernetes.default.svc."
    )


# --- the decision ------------------------------------------------------------------------------


def decide(csr: Mapping[str, Any], policy: Policy = Policy(), facts: Facts = Facts()) -> Decision:
    settled = decided(csr)
    if settled is not None:
        return Ignore(f"already {settled}")
    spec = csr.get("spec")
    if not isinstance(spec, Mapping):
        return Ignore("no spec")
    signer = str(spec.get("signerName") or "")
    username = str(spec.get("username") or "")
    groups = _strings(spec.get("groups"))
    request = parse_request(spec)
    bootstrap = _is_bootstrap(username, groups)
    organizations = _attributes(request, NameOID.ORGANIZATION_NAME) if request else []
    if HUB_ORGANIZATION in organizations:
        kind = "client"
    elif signer == SERVING_SIGNER and (
        bootstrap or (request is not None and any(map(_hub_service_name, _dns_names(request))))
    ):
        kind = "serving"
    else:
        return Ignore("not a hub certificate request")
    try:
        if request is None:
            raise _Failed("Request", "spec.request is not a PEM certificate request")
        if kind == "client":
            node = _check_client(signer, request, spec, policy)
        else:
            node = _check_serving(signer, request, spec)
        requester = _check_requester(username, groups, node)
        _check_key(request)
        if kind == "serving":
            # Last: every other check is settled first, so waiting is only ever for this.
            _check_serving_names(request, policy, facts, _is_bootstrap(username, groups), node)
    except _Failed as failed:
        return Deny(
            kind,
            failed.check,
            f"edgehub manager denied this hub {kind} certificate request: {failed.message}",
        )
    except _Unknown as unknown:
        return unknown.wait
    what = "client" if kind == "client" else "serving"
    return Approve(
        kind,
        node,
        f"edgehub manager approved the hub {what} certificate of node {node} "
        f"(requested by {requester})",
    )


def _is_bootstrap(username: str, groups: Sequence[str]) -> bool:
    return username.startswith(BOOTSTRAP_PREFIX) and BOOTSTRAPPERS_GROUP in groups


def _node_of(request: x509.CertificateSigningRequest) -> str:
    names = _attributes(request, NameOID.COMMON_NAME)
    if len(names) != 1 or not names[0].startswith(NODE_PREFIX):
        shown = names[0] if names else ""
        raise _Failed("CommonName", f"subject CN {shown!r} is not system:node:<node name>")
    node = names[0][len(NODE_PREFIX) :]
    if len(node) > 253 or not _NODE_NAME.match(node):
        raise _Failed("CommonName", f"{node!r} in the subject CN is not a valid node name")
    return node


def _check_signer(signer: str, wanted: str, kind: str) -> None:
    if signer != wanted:
        raise _Failed(
            "SignerName", f"signerName {signer!r}: a hub {kind} certificate is signed by {wanted}"
        )


def _check_usages(spec: Mapping[str, Any], required: frozenset[str]) -> None:
    usages = _strings(spec.get("usages"))
    given = set(usages)
    if (
        not required <= given
        or not given <= required | OPTIONAL_USAGES
        or len(given) != len(usages)
    ):
        allowed = ", ".join(sorted(required))
        raise _Failed(
            "Usages",
            f"usages [{', '.join(usages)}] are not exactly {allowed} (and optionally key "
            "encipherment)",
        )


def _check_client(
    signer: str, request: x509.CertificateSigningRequest, spec: Mapping[str, Any], policy: Policy
) -> str:
    _check_signer(signer, CLIENT_SIGNER, "client")
    node = _node_of(request)
    organizations = _attributes(request, NameOID.ORGANIZATION_NAME)
    if NODES_GROUP not in organizations:
        raise _Failed("Organizations", f"organizations {organizations} lack {NODES_GROUP}")
    if len(set(organizations)) != len(organizations):
        raise _Failed("Organizations", f"organizations {organizations} repeat one")
    for org in organizations:
        if org not in (HUB_ORGANIZATION, NODES_GROUP) and not policy.allows(org):
            raise _Failed(
                "Organizations",
                f"organization {org!r} is not one hubs may claim (the manager's "
                "--hub-cert-organizations)",
            )
    if _sans(request):
        raise _Failed("SubjectAltNames", "a hub client certificate has no subjectAltNames")
    _check_usages(spec, CLIENT_USAGES)
    return node


def _check_serving(
    signer: str, request: x509.CertificateSigningRequest, spec: Mapping[str, Any]
) -> str:
    _check_signer(signer, SERVING_SIGNER, "serving")
    node = _node_of(request)
    organizations = _attributes(request, NameOID.ORGANIZATION_NAME)
    if organizations != [NODES_GROUP]:
        raise _Failed(
            "Organizations", f"organizations {organizations} are not exactly [{NODES_GROUP}]"
        )
    names = _sans(request)
    if not names:
        raise _Failed(
            "SubjectAltNames", "a hub serving certificate names at least one DNS name or IP address"
        )
    for name in names:
        if not isinstance(name, x509.DNSName | x509.IPAddress):
            raise _Failed(
                "SubjectAltNames",
                f"{_san_kind(name)} subjectAltNames are not allowed "
                "(DNS names and IP addresses only)",
            )
    _check_usages(spec, SERVING_USAGES)
    return node


def _check_serving_names(
    request: x509.CertificateSigningRequest,
    policy: Policy,
    facts: Facts,
    bootstrap: bool,
    node: str,
) -> None:
    """Every SAN is one the hub serves (module docstring); the requester is ``node`` itself
    or (``bootstrap``) a bootstrap token, which may name no node's addresses."""
    allowed_names = policy.service_names
    read_service = facts.service_ips is None
    read_node = not bootstrap and node not in facts.nodes
    unregistered = not bootstrap and not read_node and facts.nodes[node] is None
    waiting: list[str] = []  # IP SANs only a fact not known yet could allow
    for name in _sans(request):
        if isinstance(name, x509.DNSName):
            if str(name.value).lower() not in allowed_names:
                raise _Failed(
                    "SubjectAltNames",
                    f"subjectAltName DNS:{name.value} is not a name the hub serves "
                    f"({', '.join(allowed_names)}; the manager's --cluster-domain is "
                    f"{policy.cluster_domain})",
                )
            continue
        if not isinstance(name, x509.IPAddress):
            continue  # other kinds were denied by _check_serving
        value = name.value
        if not isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
            raise _Failed("SubjectAltNames", f"subjectAltName IP:{value} is a network")
        ip = str(value)
        if value.is_loopback or ip in policy.dummy_ips:
            continue
        if facts.service_ips is not None and ip in facts.service_ips:
            continue
        if not bootstrap and ip in (facts.nodes.get(node) or ()):
            continue
        if read_service or read_node or unregistered:
            waiting.append(ip)
            continue
        raise _Failed(
            "SubjectAltNames",
            f"subjectAltName IP:{ip} is not an address the hub serves on "
            f"({_allowed_ips(policy, facts, None if bootstrap else node)})",
        )
    if waiting:
        why = [
            *(["the default/kubernetes Service is not read yet"] if read_service else ()),
            *([f"node {node} is not read yet"] if read_node else ()),
            *([f"node {node} is not registered (yet)"] if unregistered else ()),
        ]
        raise _Unknown(
            Wait(
                f"subjectAltName IP:{waiting[0]} may be allowed, but {' and '.join(why)}",
                node=node if read_node else "",
                service=read_service,
            )
        )


def _allowed_ips(policy: Policy, facts: Facts, node: str | None) -> str:
    service = ", ".join(sorted(facts.service_ips or ())) or "none"
    parts = [
        f"the kubernetes Service's ClusterIPs: {service}",
        f"the hubs' dummy IPs (--hub-dummy-if-ips): {', '.join(sorted(policy.dummy_ips))}",
        "loopback",
    ]
    if node is None:
        parts.append("a bootstrap token's request names no node address")
    else:
        own = ", ".join(sorted(facts.nodes.get(node) or ())) or "none"
        parts.append(f"node {node}'s addresses: {own}")
    return "; ".join(parts)


def _san_kind(name: x509.GeneralName) -> str:
    kinds: Iterable[tuple[type, str]] = (
        (x509.RFC822Name, "email"),
        (x509.UniformResourceIdentifier, "URI"),
        (x509.DirectoryName, "directory name"),
        (x509.RegisteredID, "registered ID"),
    )
    for cls, label in kinds:
        if isinstance(name, cls):
            return label
    return "other-name"


def _check_requester(username: str, groups: Sequence[str], node: str) -> str:
    if username == f"{NODE_PREFIX}{node}" and NODES_GROUP in groups:
        return f"node {node}"
    if _is_bootstrap(username, groups):
        return f"bootstrap token {username[len(BOOTSTRAP_PREFIX) :]}"
    if username.startswith(NODE_PREFIX) and NODES_GROUP in groups:
        raise _Failed("Requester", f"{username} may not request a certificate for node {node}")
    raise _Failed(
        "Requester",
        f"requested by {username or 'nobody'}: a hub certificate is requested by its node "
        f"({NODE_PREFIX}{node} in {NODES_GROUP}) or a bootstrap token",
    )


def _check_key(request: x509.CertificateSigningRequest) -> None:
    try:
        key = request.public_key()
    except (ValueError, exceptions.UnsupportedAlgorithm) as e:
        raise _Failed("PublicKey", f"the public key cannot be read: {e}") from e
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < MIN_RSA_BITS:
            raise _Failed(
                "PublicKey",
                f"an RSA key of {key.key_size} bits is too weak (at least {MIN_RSA_BITS})",
            )
    elif isinstance(key, ec.EllipticCurvePublicKey):
        if not isinstance(key.curve, _EC_CURVES):
            raise _Failed("PublicKey", f"curve {key.curve.name} is not P-256, P-384 or P-521")
    elif not isinstance(key, ed25519.Ed25519PublicKey):
        raise _Failed("PublicKey", f"{type(key).__name__} keys are not accepted")
    try:
        valid = request.is_signature_valid
    except (ValueError, exceptions.UnsupportedAlgorithm):
        valid = False
    if not valid:
        raise _Failed("Request", "the request's signature does not verify")
