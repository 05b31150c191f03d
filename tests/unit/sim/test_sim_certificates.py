"""The simulator's CSR rules match the real apiserver's validation and kube-controller-manager's
signer checks (tables; the HTTP path is in tests/integration/sim/test_sim_csr.py)."""

from __future__ import annotations

import base64
from typing import Any

import csr_support as cs
import pytest

from yurthub.testing.sim import certificates, errors

CLIENT_USAGES = ["digital signature", "key encipherment", "client auth"]
SERVING_USAGES = ["digital signature", "server auth"]


def approved(reason: str = "AutoApproved") -> dict[str, Any]:
    return {"type": "Approved", "status": "True", "reason": reason, "message": "ok"}


def denied() -> dict[str, Any]:
    return {"type": "Denied", "status": "True", "reason": "No", "message": "no"}


def a_csr(**spec: Any) -> dict[str, Any]:
    obj = cs.csr("x", cs.hub_client_request("n1"), cs.CLIENT_SIGNER, CLIENT_USAGES)
    obj["spec"].update(spec)
    return obj


def test_a_well_formed_csr_is_accepted() -> None:
    certificates.validate_create(a_csr())


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"usages": []}, "spec.usages: Required value"),
        ({"usages": ["client auth", "client auth"]}, "Duplicate value"),
        ({"usages": ["client auth", "flying"]}, 'Unsupported value: "flying"'),
        ({"signerName": ""}, "spec.signerName: Required value"),
        ({"signerName": "kubernetes.io/legacy-unknown"}, "legacy signerName"),
        ({"signerName": "no-slash"}, "fully qualified"),
        ({"expirationSeconds": 599}, "less than 600 seconds"),
        ({"request": "bm90IGEgcmVxdWVzdA=="}, "spec.request: Invalid value"),
        ({"request": "%%%"}, "spec.request: Invalid value"),
    ],
)
def test_create_refusals(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(errors.ApiError) as caught:
        certificates.validate_create(a_csr(**spec))
    assert caught.value.code == 422 and message in str(caught.value)


def test_a_tampered_request_signature_is_refused() -> None:
    pem = bytearray(cs.hub_client_request("n1"))
    der = base64.b64decode(b"".join(bytes(pem).splitlines()[1:-1]))
    tampered = der[:-10] + bytes(b ^ 0xFF for b in der[-10:])
    lines = base64.encodebytes(tampered).replace(b"\n", b"")
    bad = (
        b"-----BEGIN CERTIFICATE REQUEST-----\n" + lines + b"\n-----END CERTIFICATE REQUEST-----\n"
    )
    with pytest.raises(errors.ApiError, match=r"spec\.request"):
        certificates.validate_create(a_csr(request=base64.b64encode(bad).decode()))


def with_conditions(*conditions: dict[str, Any], cert: str = "") -> dict[str, Any]:
    obj = a_csr()
    obj["status"] = {"conditions": list(conditions)}
    if cert:
        obj["status"]["certificate"] = cert
    return obj


@pytest.mark.parametrize(
    ("old", "new", "subresource", "message"),
    [
        (with_conditions(), with_conditions(approved()), "approval", None),
        (with_conditions(), with_conditions(denied()), "approval", None),
        (
            with_conditions(),
            with_conditions(approved(), denied()),
            "approval",
            "mutually exclusive",
        ),
        (with_conditions(approved()), with_conditions(), "approval", "may not remove"),
        (with_conditions(approved()), with_conditions(denied()), "approval", "may not remove"),
        (with_conditions(), with_conditions(approved(), approved()), "approval", "Duplicate"),
        (
            with_conditions(),
            with_conditions({"type": "Approved", "status": "False"}),
            "approval",
            "Unsupported value",
        ),
        (with_conditions(), with_conditions({"type": "Approved"}), "approval", "Required value"),
        # Only the approval subresource decides.
        (with_conditions(), with_conditions(approved()), "status", "may not add"),
        (with_conditions(), with_conditions(approved()), None, "may not add"),
        (
            with_conditions(approved()),
            with_conditions(approved("Other")),
            "status",
            "may not modify",
        ),
        # The signer sets the certificate once, through status.
        (with_conditions(approved()), with_conditions(approved(), cert="Y2VydA=="), "status", None),
        (
            with_conditions(approved()),
            with_conditions(approved(), cert="Y2VydA=="),
            "approval",
            "may not set",
        ),
        (
            with_conditions(approved(), cert="Y2VydA=="),
            with_conditions(approved(), cert="b3RoZXI="),
            "status",
            "may not modify existing",
        ),
        # A Failed condition cannot be taken back either.
        (
            with_conditions(approved(), {"type": "Failed", "status": "True"}),
            with_conditions(approved()),
            "status",
            "may not remove",
        ),
    ],
)
def test_update_rules(
    old: dict[str, Any], new: dict[str, Any], subresource: str | None, message: str | None
) -> None:
    if message is None:
        certificates.validate_update(old, new, subresource)
        return
    with pytest.raises(errors.ApiError) as caught:
        certificates.validate_update(old, new, subresource)
    assert caught.value.code == 422 and message in str(caught.value)


def test_condition_timestamps_are_filled_and_transitions_kept() -> None:
    old = with_conditions({**approved(), "lastTransitionTime": "2020-01-01T00:00:00Z"})
    new = with_conditions(approved(), {"type": "Failed", "status": "True"})
    certificates.stamp_conditions(old, new, "2025-01-01T00:00:00Z")
    kept, fresh = new["status"]["conditions"]
    assert kept["lastTransitionTime"] == "2020-01-01T00:00:00Z"
    assert kept["lastUpdateTime"] == fresh["lastTransitionTime"] == "2025-01-01T00:00:00Z"


def parsed(pem: bytes) -> Any:
    return certificates.parse_request({"request": base64.b64encode(pem).decode()})


@pytest.mark.parametrize(
    ("signer", "pem", "usages", "problem"),
    [
        (cs.CLIENT_SIGNER, cs.hub_client_request("n1"), CLIENT_USAGES, None),
        (cs.CLIENT_SIGNER, cs.hub_client_request("n1"), ["client auth"], None),
        (
            cs.CLIENT_SIGNER,
            cs.hub_client_request("n1"),
            ["server auth", "client auth"],
            "invalid usage",
        ),
        (cs.CLIENT_SIGNER, cs.hub_client_request("n1"), ["digital signature"], "missing required"),
        (cs.SERVING_SIGNER, cs.hub_serving_request("n1"), SERVING_USAGES, None),
        (
            cs.SERVING_SIGNER,
            cs.hub_serving_request("n1"),
            ["digital signature", "key encipherment", "server auth"],
            None,
        ),
        (cs.SERVING_SIGNER, cs.hub_serving_request("n1"), ["server auth"], "usages did not match"),
        (cs.SERVING_SIGNER, cs.hub_client_request("n1"), SERVING_USAGES, "organization"),
        (
            cs.SERVING_SIGNER,
            cs.request_pem("system:node:n1", ["system:nodes"]),
            SERVING_USAGES,
            "DNS or IP",
        ),
        (
            cs.SERVING_SIGNER,
            cs.request_pem("system:node:n1", ["system:nodes"], dns=["a"], uris=["spiffe://x/y"]),
            SERVING_USAGES,
            "URI",
        ),
        (
            cs.SERVING_SIGNER,
            cs.request_pem("node:n1", ["system:nodes"], dns=["a"]),
            SERVING_USAGES,
            "common name",
        ),
        (
            cs.KUBELET_CLIENT_SIGNER,
            cs.request_pem("system:node:n1", ["system:nodes"]),
            ["digital signature", "client auth"],
            None,
        ),
        (
            cs.KUBELET_CLIENT_SIGNER,
            cs.request_pem("system:node:n1", ["system:nodes"], ips=["192.0.2.1"]),
            ["digital signature", "client auth"],
            "IP",
        ),
        ("example.com/custom", cs.request_pem("anything"), ["signing"], None),
    ],
)
def test_signer_checks(signer: str, pem: bytes, usages: list[str], problem: str | None) -> None:
    got = certificates.signer_problem(signer, parsed(pem), usages)
    assert (got is None) if problem is None else (got is not None and problem in got), got
