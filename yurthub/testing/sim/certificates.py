"""CertificateSigningRequest rules of the real apiserver and of kube-controller-manager's signers.

Pure functions over the CSR JSON, raising ``errors.ApiError`` (422) as the apiserver does:

* ``validate_create``: ``spec.request`` is a PEM certificate request with a valid signature,
  ``spec.usages`` are given, known and not repeated, ``spec.signerName`` is a qualified name,
  ``spec.expirationSeconds`` is at least 600.
* ``validate_update``: conditions are well formed (Approved/Denied/Failed only ``True``,
  Approved and Denied mutually exclusive, one condition per type), Approved/Denied/Failed are
  never removed, only the ``approval`` subresource adds or changes Approved/Denied, and the
  certificate is set (once) only through ``status``. The spec never changes after create.
* ``stamp_conditions``: the server fills a condition's ``lastUpdateTime`` and
  ``lastTransitionTime`` when the client left them out.
* ``signer_problem``: what kube-controller-manager's signer checks before it signs an approved
  request for the three built-in signers (an approved request that fails gets a ``Failed``
  condition, reason ``SignerValidationFailure``, and no certificate).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

from yurthub.testing.sim import errors

KIND = "CertificateSigningRequest"
GROUP = "certificates.k8s.io"
STORAGE = (GROUP, "certificatesigningrequests")
KUBE_APISERVER_CLIENT = "kubernetes.io/kube-apiserver-client"
KUBE_APISERVER_CLIENT_KUBELET = "kubernetes.io/kube-apiserver-client-kubelet"
KUBELET_SERVING = "kubernetes.io/kubelet-serving"
KNOWN_USAGES = frozenset(
    {
        "signing",
        "digital signature",
        "content commitment",
        "key encipherment",
        "key agreement",
        "data encipherment",
        "cert sign",
        "crl sign",
        "encipher only",
        "decipher only",
        "any",
        "server auth",
        "client auth",
        "code signing",
        "email protection",
        "s/mime",
        "ipsec end system",
        "ipsec tunnel",
        "ipsec user",
        "timestamping",
        "ocsp signing",
        "microsoft sgc",
        "netscape sgc",
    }
)
TRUE_ONLY = ("Approved", "Denied", "Failed")
_SIGNER_NAME = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+/[^/\s]+$"
)


def _invalid(name: str, message: str) -> errors.ApiError:
    return errors.invalid(KIND, name, message, GROUP)


def parse_request(spec: Mapping[str, Any]) -> x509.CertificateSigningRequest:
    """``spec.request`` (base64 of PEM in JSON) as a certificate request; ValueError if not."""
    raw = spec.get("request")
    if not isinstance(raw, str) or not raw:
        raise ValueError("PEM block type must be CERTIFICATE REQUEST")
    try:
        pem = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError("the request is not base64") from e
    if b"-----BEGIN CERTIFICATE REQUEST-----" not in pem:
        raise ValueError("PEM block type must be CERTIFICATE REQUEST")
    try:
        return x509.load_pem_x509_csr(pem)
    except ValueError as e:
        raise ValueError(f"cannot parse the certificate request: {e}") from e


def validate_create(obj: Mapping[str, Any]) -> None:
    name = str((obj.get("metadata") or {}).get("name") or "")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise _invalid(name, "spec: Required value")
    problems: list[str] = []
    try:
        request = parse_request(spec)
        if not request.is_signature_valid:
            problems.append("spec.request: Invalid value: x509: signature is invalid")
    except ValueError as e:
        problems.append(f"spec.request: Invalid value: {e}")
    usages = spec.get("usages")
    if not isinstance(usages, list) or not usages:
        problems.append("spec.usages: Required value")
    else:
        seen: set[str] = set()
        for number, usage in enumerate(usages):
            if usage not in KNOWN_USAGES:
                problems.append(f'spec.usages[{number}]: Unsupported value: "{usage}"')
            elif usage in seen:
                problems.append(f'spec.usages[{number}]: Duplicate value: "{usage}"')
            seen.add(str(usage))
    signer = spec.get("signerName")
    if not isinstance(signer, str) or not signer:
        problems.append("spec.signerName: Required value")
    elif signer == "kubernetes.io/legacy-unknown":
        problems.append(
            f'spec.signerName: Invalid value: "{signer}": the legacy signerName is not allowed '
            "via this API version"
        )
    elif not _SIGNER_NAME.match(signer):
        problems.append(
            f'spec.signerName: Invalid value: "{signer}": must be a fully qualified domain and '
            "path of the form 'example.com/signer-name'"
        )
    expiration = spec.get("expirationSeconds")
    if expiration is not None and (not isinstance(expiration, int) or expiration < 600):
        problems.append(
            f"spec.expirationSeconds: Invalid value: {expiration}: may not specify a duration "
            "less than 600 seconds (10 minutes)"
        )
    if problems:
        raise _invalid(name, _join(problems))


def _conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return [c for c in conditions or () if isinstance(c, Mapping)]


def _of_type(obj: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    return [c for c in _conditions(obj) if c.get("type") == kind]


def _semantic(condition: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(condition.get(f) for f in ("type", "status", "reason", "message"))


def validate_update(
    old: Mapping[str, Any], new: Mapping[str, Any], subresource: str | None
) -> None:
    """Refuse what the apiserver refuses on PUT (``subresource`` None, status or approval)."""
    name = str((old.get("metadata") or {}).get("name") or "")
    problems: list[str] = []
    path = "status.conditions"
    seen: set[Any] = set()
    approved = denied = False
    old_types = [c.get("type") for c in _conditions(old)]
    tolerate_duplicates = len(old_types) != len(set(old_types))
    for number, condition in enumerate(_conditions(new)):
        kind, status = condition.get("type"), condition.get("status")
        if not kind:
            problems.append(f"{path}[{number}].type: Required value")
        if not status:
            problems.append(f"{path}[{number}].status: Required value")
        elif status not in (("True",) if kind in TRUE_ONLY else ("True", "False", "Unknown")):
            problems.append(f'{path}[{number}].status: Unsupported value: "{status}"')
        if kind == "Approved":
            approved = True
            if denied:
                problems.append(
                    f'{path}[{number}].type: Invalid value: "Approved": Approved and Denied '
                    "conditions are mutually exclusive"
                )
        elif kind == "Denied":
            denied = True
            if approved:
                problems.append(
                    f'{path}[{number}].type: Invalid value: "Denied": Approved and Denied '
                    "conditions are mutually exclusive"
                )
        if kind in seen and not tolerate_duplicates:
            problems.append(f'{path}[{number}].type: Duplicate value: "{kind}"')
        seen.add(kind)
    for kind in TRUE_ONLY:
        if len(_of_type(new, kind)) < len(_of_type(old, kind)):
            problems.append(
                f'{path}: Forbidden: updates may not remove a condition of type "{kind}"'
            )
    if subresource != "approval":
        for kind in ("Approved", "Denied"):
            before, after = _of_type(old, kind), _of_type(new, kind)
            if len(after) > len(before):
                problems.append(
                    f'{path}: Forbidden: updates may not add a condition of type "{kind}"'
                )
            elif len(after) == len(before) and list(map(_semantic, after)) != list(
                map(_semantic, before)
            ):
                problems.append(
                    f'{path}: Forbidden: updates may not modify a condition of type "{kind}"'
                )
    old_cert = (old.get("status") or {}).get("certificate")
    new_cert = (new.get("status") or {}).get("certificate")
    if (old_cert or None) != (new_cert or None):
        if subresource != "status":
            problems.append(
                "status.certificate: Forbidden: updates may not set certificate content"
            )
        elif old_cert:
            problems.append(
                "status.certificate: Forbidden: updates may not modify existing certificate content"
            )
    if problems:
        raise _invalid(name, _join(problems))


def stamp_conditions(old: Mapping[str, Any], new: dict[str, Any], now: str) -> None:
    """Fill the timestamps a client left out, as the apiserver's CSR strategies do."""
    before = {c.get("type"): c for c in _conditions(old)}
    for condition in _conditions(new):
        if not isinstance(condition, dict):
            continue
        if not condition.get("lastUpdateTime"):
            condition["lastUpdateTime"] = now
        if not condition.get("lastTransitionTime"):
            previous = before.get(condition.get("type"))
            same = previous is not None and previous.get("status") == condition.get("status")
            kept = previous.get("lastTransitionTime") if same and previous is not None else None
            condition["lastTransitionTime"] = kept or now


def _join(problems: Sequence[str]) -> str:
    return problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"


# --- what kube-controller-manager's signers check before signing ----------------------------


def _organizations(request: x509.CertificateSigningRequest) -> list[str]:
    return [str(a.value) for a in request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]


def _common_name(request: x509.CertificateSigningRequest) -> str:
    names = request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def _sans(request: x509.CertificateSigningRequest) -> x509.SubjectAlternativeName | None:
    try:
        return request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None


def signer_problem(
    signer: str, request: x509.CertificateSigningRequest, usages: Sequence[str]
) -> str | None:
    """Why kube-controller-manager would refuse to sign this approved request (None: it signs)."""
    wanted = set(usages)
    sans = _sans(request)
    dns = sans.get_values_for_type(x509.DNSName) if sans else []
    ips = sans.get_values_for_type(x509.IPAddress) if sans else []
    emails = sans.get_values_for_type(x509.RFC822Name) if sans else []
    uris = sans.get_values_for_type(x509.UniformResourceIdentifier) if sans else []
    if signer == KUBE_APISERVER_CLIENT:
        extra = sorted(wanted - {"digital signature", "key encipherment", "client auth"})
        if extra:
            return f"invalid usage for client certificate: {extra[0]}"
        if "client auth" not in wanted:
            return "missing required usage for client certificate: client auth"
        return None
    if signer == KUBELET_SERVING:
        if _organizations(request) != ["system:nodes"]:
            return "subject organization is not system:nodes"
        if not dns and not ips:
            return "DNS or IP subjectAltName is required"
        if emails:
            return "Email subjectAltNames are not allowed"
        if uris:
            return "URI subjectAltNames are not allowed"
        if wanted not in (
            {"digital signature", "key encipherment", "server auth"},
            {"digital signature", "server auth"},
        ):
            return "usages did not match [digital signature key encipherment server auth]"
        if not _common_name(request).startswith("system:node:"):
            return "subject common name does not begin with system:node:"
        return None
    if signer == KUBE_APISERVER_CLIENT_KUBELET:
        if _organizations(request) != ["system:nodes"]:
            return "subject organization is not system:nodes"
        if dns:
            return "DNS subjectAltNames are not allowed"
        if emails:
            return "Email subjectAltNames are not allowed"
        if ips:
            return "IP subjectAltNames are not allowed"
        if uris:
            return "URI subjectAltNames are not allowed"
        if not _common_name(request).startswith("system:node:"):
            return "subject common name does not begin with system:node:"
        if wanted not in (
            {"digital signature", "key encipherment", "client auth"},
            {"digital signature", "client auth"},
        ):
            return "usages did not match [client auth digital signature key encipherment]"
        return None
    return None
