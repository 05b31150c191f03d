"""Offline answers that must not pretend: decisions only the apiserver can make, paths it alone
serves. Before: a SubjectAccessReview or TokenReview created offline got a 201 echo (a review
with no decision), an eviction a 201 as if it had happened, and a non-resource request a bare
"no healthy backends" that said nothing of the cache.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from cache_edge import Edge, edge_node


@pytest.fixture
async def edge(tmp_path: pathlib.Path) -> Any:
    async with edge_node(tmp_path) as node:
        await node.cut()
        yield node


REVIEWS = [
    (
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": "system:node:x", "resourceAttributes": {"verb": "get"}},
        },
    ),
    (
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "t"}},
    ),
    (
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}},
        },
    ),
    (
        "/apis/authorization.k8s.io/v1/namespaces/default/localsubjectaccessreviews",
        {"apiVersion": "authorization.k8s.io/v1", "kind": "LocalSubjectAccessReview", "spec": {}},
    ),
    (
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest"},
    ),
    (
        "/api/v1/namespaces/default/pods/web-0/eviction",
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-0"}},
    ),
]


NON_RESOURCE = [
    ("GET", "/healthz"),
    ("GET", "/livez"),
    ("GET", "/openapi/v2"),
    ("GET", "/metrics"),
    ("POST", "/api"),
    ("GET", "/logs/"),
]


async def test_decisions_of_the_apiserver_are_not_faked_offline(edge: Edge) -> None:
    for path, body in REVIEWS:
        for ua in ("kubelet/v1.32.4", "kubectl/v1.32.4"):
            status, answer, headers = await edge.request("POST", path, body=body, ua=ua)
            assert status == 503, (path, status, answer)
            assert answer["kind"] == "Status" and answer["reason"] == "ServiceUnavailable"
            assert "only the apiserver" in answer["message"] and headers.get("Retry-After")


async def test_non_resource_requests_offline_get_a_status_naming_why(edge: Edge) -> None:
    for method, path in NON_RESOURCE:
        status, answer, _ = await edge.request(method, path, ua="kubectl/v1.32.4")
        assert status == 503, (path, status, answer)
        assert answer["kind"] == "Status" and answer["code"] == 503
        assert "unreachable" in answer["message"] and path.rstrip("/") in answer["message"]


async def test_ordinary_creates_keep_yurthubs_echo(edge: Edge) -> None:
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "ev-2", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "x", "namespace": "default"},
    }
    status, echoed, _ = await edge.request("POST", "/api/v1/namespaces/default/events", body=event)
    assert status == 201 and echoed == event
