"""Cacheability (reference §10.1 TestCanCacheFor, minus the first-list-wins conflict)."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from yurthub import requestinfo
from yurthub.cache import agents, cacheability

AGENTS = agents.Agents.build(node_name="node1")


def info(method: str, path: str, ua: str = "kubelet", accept: str = "") -> requestinfo.RequestInfo:
    url_path, _, query = path.partition("?")
    pairs = [tuple(p.split("=", 1)) for p in query.split("&") if p]
    headers = CIMultiDict({"User-Agent": ua})
    if accept:
        headers["Accept"] = accept
    return requestinfo.classify(method, url_path, [(k, v) for k, v in pairs], headers)


@pytest.mark.parametrize(
    ("method", "path", "ua", "expected"),
    [
        ("GET", "/api/v1/nodes/mynode", "", False),
        ("GET", "/api/v1/nodes/mynode", "kubelet-test", False),
        ("GET", "/api/v1/nodes/mynode", "kubelet", True),
        ("POST", "/api/v1/nodes/mynode", "flanneld", True),
        ("PUT", "/api/v1/nodes/mynode", "coredns", True),
        ("PATCH", "/api/v1/nodes/mynode", "kube-proxy", True),
        ("HEAD", "/api/v1/nodes/mynode", "yurttunnel-agent", True),
        ("GET", "/healthz", "kubelet", False),
        ("DELETE", "/api/v1/nodes/mynode", "kubelet", False),
        ("DELETE", "/api/v1/namespaces/default/pods", "kubelet", False),
        ("GET", "/api/v1/proxy/namespaces/default/pods/test", "kubelet", False),
        ("GET", "/api/v1/namespaces/default/pods/test/status", "kubelet", True),
        ("GET", "/api/v1/namespaces/default/pods/test/proxy", "kubelet", False),
        ("GET", "/api/v1/namespaces/default/pods/test/log", "kubelet", False),
        ("POST", "/api/v1/namespaces/default/serviceaccounts/sa/token", "kubelet", False),
        ("POST", "/apis/certificates.k8s.io/v1/certificatesigningrequests", "kubelet", False),
        ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", "kubelet", False),
        ("POST", "/apis/authentication.k8s.io/v1/tokenreviews", "kubelet", False),
        ("GET", "/api/v1/nodes/mynode", "kubelet/v1.0", True),
        ("GET", "/api/v1/services", "multiplexer-proxy-node1", True),
        ("GET", "/api/v1/services", "multiplexer-proxy-node2", False),
        ("GET", "/api/v1/services", "yurthub/v1.7.0-abcdef0", True),
    ],
)
def test_can_cache_for(method: str, path: str, ua: str, expected: bool) -> None:
    assert cacheability.is_cacheable_request(info(method, path, ua), AGENTS.allows) is expected


def test_same_resource_with_different_selectors_is_cacheable_both_times() -> None:
    # YurtHub refuses the second one (first list wins); our list records keep both.
    first = info("GET", "/api/v1/namespaces/test2/secrets?labelSelector=foo=bar1")
    second = info("GET", "/api/v1/configmaps?labelSelector=foo=bar2")
    assert cacheability.is_cacheable_request(first, AGENTS.allows)
    assert cacheability.is_cacheable_request(second, AGENTS.allows)


@pytest.mark.parametrize(
    ("configured", "ua", "expected"),
    [
        (("*",), "lc", True),
        (("*", "xxx"), "lc", True),
        (("xxx",), "lc", False),
        (("xxx",), "xxx", True),
    ],
)
def test_wildcard_and_extra_agents(configured: tuple[str, ...], ua: str, expected: bool) -> None:
    agent_set = agents.Agents.build(node_name="node1", extra=configured)
    assert (
        cacheability.is_cacheable_request(info("GET", "/api/v1/nodes/x", ua), agent_set.allows)
        is expected
    )


@pytest.mark.parametrize(
    ("content_type", "representation", "version"),
    [
        ("application/json", cacheability.Representation.OBJECT, ""),
        ("application/json;charset=utf-8", cacheability.Representation.OBJECT, ""),
        ("application/json;as=Table;v=v1;g=meta.k8s.io", cacheability.Representation.TABLE, ""),
        (
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            cacheability.Representation.PARTIAL,
            "v1",
        ),
        ("application/vnd.kubernetes.protobuf", cacheability.Representation.OTHER, ""),
        ("application/yaml", cacheability.Representation.OTHER, ""),
        ("", cacheability.Representation.OTHER, ""),
        ("application/json;as=Other;g=meta.k8s.io;v=v1", cacheability.Representation.OTHER, ""),
    ],
)
def test_classify_media(
    content_type: str, representation: cacheability.Representation, version: str
) -> None:
    media = cacheability.classify_media(content_type)
    assert (media.representation, media.partial_version) == (representation, version)


@pytest.mark.parametrize(
    ("accept", "representation"),
    [
        ("", cacheability.Representation.OBJECT),
        (
            "application/vnd.kubernetes.protobuf,application/json",
            cacheability.Representation.OBJECT,
        ),
        (
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
            cacheability.Representation.TABLE,
        ),
        (
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
            cacheability.Representation.PARTIAL,
        ),
        ("application/vnd.kubernetes.protobuf", cacheability.Representation.OTHER),
    ],
)
def test_requested_media(accept: str, representation: cacheability.Representation) -> None:
    request = info("GET", "/api/v1/nodes", accept=accept)
    assert cacheability.requested_media(request).representation is representation
