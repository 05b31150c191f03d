"""CSRs on the simulated apiserver's wire, as a real apiserver + controller-manager answer them:
the requester recorded from the credentials, 422 for invalid requests and approvals, 409 for
a stale approval, signing only what the built-in signer accepts (else a Failed condition)."""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import csr_support as cs
import pytest
from cryptography import x509

from yurthub.testing import simapiserver

CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"


@pytest.fixture
async def node(sim_apiserver: simapiserver.SimApiserver) -> AsyncIterator[aiohttp.ClientSession]:
    """A client authenticated as node n1 (client certificate, group system:nodes)."""
    token = sim_apiserver.issue_token("system:node:n1", ["system:nodes"])
    connector = aiohttp.TCPConnector(
        ssl=ssl.create_default_context(cadata=sim_apiserver.ca_pem.decode())
    )
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(
        sim_apiserver.url, headers=headers, connector=connector
    ) as session:
        yield session


async def send(
    session: aiohttp.ClientSession, method: str, path: str, body: Any
) -> tuple[int, dict[str, Any]]:
    async with session.request(method, path, json=body) as resp:
        return resp.status, await resp.json(content_type=None)


def condition(kind: str) -> dict[str, str]:
    return {"type": kind, "status": "True", "reason": "Test", "message": "by the test"}


async def test_requester_recorded_and_bad_requests_refused(node: aiohttp.ClientSession) -> None:
    obj = cs.csr(
        "c1",
        cs.hub_client_request("n1"),
        cs.CLIENT_SIGNER,
        ["digital signature", "client auth"],
        username="system:admin",  # a client cannot claim someone else
        groups=["system:masters"],
    )
    status, created = await send(node, "POST", CSRS, obj)
    assert status == 201, created
    assert created["spec"]["username"] == "system:node:n1"
    assert "system:masters" not in created["spec"]["groups"]
    assert "system:nodes" in created["spec"]["groups"]
    no_usages = cs.body(cs.csr("c2", cs.hub_client_request("n1"), cs.CLIENT_SIGNER, []))
    status, answer = await send(node, "POST", CSRS, no_usages)
    assert (status, answer["reason"]) == (422, "Invalid") and "spec.usages" in answer["message"]
    garbage = cs.body(cs.csr("c3", b"not a request", cs.CLIENT_SIGNER, ["client auth"]))
    status, answer = await send(node, "POST", CSRS, garbage)
    assert status == 422 and "spec.request" in answer["message"]


async def test_approval_rules_conflicts_and_signing(node: aiohttp.ClientSession) -> None:
    good = cs.csr(
        "good",
        cs.hub_serving_request("n1"),
        cs.SERVING_SIGNER,
        ["digital signature", "server auth"],
    )
    status, created = await send(node, "POST", CSRS, cs.body(good))
    assert status == 201
    both = {**created, "status": {"conditions": [condition("Approved"), condition("Denied")]}}
    status, answer = await send(node, "PUT", f"{CSRS}/good/approval", both)
    assert status == 422 and "mutually exclusive" in answer["message"]
    via_status = {**created, "status": {"conditions": [condition("Approved")]}}
    status, answer = await send(node, "PUT", f"{CSRS}/good/status", via_status)
    assert status == 422 and "may not add" in answer["message"]
    stale = {**created, "status": {"conditions": [condition("Approved")]}}
    stale["metadata"] = {**created["metadata"], "resourceVersion": "1"}
    status, answer = await send(node, "PUT", f"{CSRS}/good/approval", stale)
    assert (status, answer["reason"]) == (409, "Conflict")
    status, approved = await send(node, "PUT", f"{CSRS}/good/approval", via_status)
    assert status == 200, approved
    (stamped,) = approved["status"]["conditions"]
    assert stamped["lastUpdateTime"] and stamped["lastTransitionTime"]
    async with node.get(f"{CSRS}/good") as resp:
        signed = await resp.json()
    cert = x509.load_pem_x509_certificate(base64.b64decode(signed["status"]["certificate"]))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == set(cs.HUB_DNS)
    # Once approved it stays approved: the approval cannot be withdrawn or turned into a denial.
    signed["status"]["conditions"] = [condition("Denied")]
    status, answer = await send(node, "PUT", f"{CSRS}/good/approval", signed)
    assert status == 422 and "may not remove" in answer["message"]


async def test_approved_but_unsignable_gets_a_failed_condition(node: aiohttp.ClientSession) -> None:
    # A serving request with a URI SAN: the kubelet-serving signer refuses it.
    pem = cs.request_pem("system:node:n1", ["system:nodes"], dns=["n1"], uris=["spiffe://a/b"])
    obj = cs.csr("uri", pem, cs.SERVING_SIGNER, ["digital signature", "server auth"])
    status, created = await send(node, "POST", CSRS, cs.body(obj))
    assert status == 201
    created["status"] = {"conditions": [condition("Approved")]}
    status, _ = await send(node, "PUT", f"{CSRS}/uri/approval", created)
    assert status == 200
    async with node.get(f"{CSRS}/uri") as resp:
        final = await resp.json()
    assert "certificate" not in final["status"]
    failed = [c for c in final["status"]["conditions"] if c["type"] == "Failed"]
    assert failed[0]["reason"] == "SignerValidationFailure"
    assert "URI" in failed[0]["message"]
