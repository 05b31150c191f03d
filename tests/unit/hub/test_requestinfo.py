"""RequestInfo table tests: reference §2.3 (k8s RequestInfo) and every pinned case of §10.3."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from yurthub import requestinfo


def classify(
    method: str, url: str, ua: str = "", accept: str = "", **extra: str
) -> requestinfo.RequestInfo:
    path, _, qs = url.partition("?")
    query = [tuple(p.split("=", 1)) if "=" in p else (p, "") for p in qs.split("&") if p]
    headers: CIMultiDict[str] = CIMultiDict()
    if ua:
        headers["User-Agent"] = ua
    if accept:
        headers["Accept"] = accept
    for k, v in extra.items():
        headers[k.replace("_", "-")] = v
    return requestinfo.classify(method, path, [(k, v) for k, v in query], headers)


# (method, url) -> (resource?, verb, group, version, namespace, resource, subresource, name)
K8S_CASES = [
    ("GET", "/api/v1/namespaces", (True, "list", "", "v1", "", "namespaces", "", "")),
    (
        "GET",
        "/api/v1/namespaces/kube-system",
        (True, "get", "", "v1", "kube-system", "namespaces", "", "kube-system"),
    ),
    (
        "PUT",
        "/api/v1/namespaces/other/finalize",
        (True, "update", "", "v1", "other", "namespaces", "finalize", "other"),
    ),
    (
        "PUT",
        "/api/v1/namespaces/other/status",
        (True, "update", "", "v1", "other", "namespaces", "status", "other"),
    ),
    ("GET", "/api/v1/pods", (True, "list", "", "v1", "", "pods", "", "")),
    ("GET", "/api/v1/pods?watch=true", (True, "watch", "", "v1", "", "pods", "", "")),
    ("GET", "/api/v1/pods?watch=1", (True, "watch", "", "v1", "", "pods", "", "")),
    ("GET", "/api/v1/pods?watch=", (True, "watch", "", "v1", "", "pods", "", "")),
    ("GET", "/api/v1/pods?watch=false", (True, "list", "", "v1", "", "pods", "", "")),
    ("GET", "/api/v1/pods?watch=0", (True, "list", "", "v1", "", "pods", "", "")),
    ("GET", "/api/v1/pods?watch=FALSE", (True, "list", "", "v1", "", "pods", "", "")),
    (
        "GET",
        "/api/v1/namespaces/default/pods/foo",
        (True, "get", "", "v1", "default", "pods", "", "foo"),
    ),
    (
        "GET",
        "/api/v1/namespaces/default/pods/foo/log",
        (True, "get", "", "v1", "default", "pods", "log", "foo"),
    ),
    (
        "HEAD",
        "/api/v1/namespaces/default/pods/foo",
        (True, "get", "", "v1", "default", "pods", "", "foo"),
    ),
    (
        "POST",
        "/api/v1/namespaces/default/pods",
        (True, "create", "", "v1", "default", "pods", "", ""),
    ),
    (
        "PATCH",
        "/api/v1/namespaces/default/pods/foo/status",
        (True, "patch", "", "v1", "default", "pods", "status", "foo"),
    ),
    (
        "DELETE",
        "/api/v1/namespaces/default/pods/foo",
        (True, "delete", "", "v1", "default", "pods", "", "foo"),
    ),
    (
        "DELETE",
        "/api/v1/namespaces/default/pods",
        (True, "deletecollection", "", "v1", "default", "pods", "", ""),
    ),
    (
        "GET",
        "/api/v1/watch/namespaces/default/pods",
        (True, "watch", "", "v1", "default", "pods", "", ""),
    ),
    (
        "GET",
        "/api/v1/watch/namespaces/default/pods/foo",
        (True, "watch", "", "v1", "default", "pods", "", "foo"),
    ),
    (
        "GET",
        "/api/v1/proxy/namespaces/default/pods/foo/some/path",
        (True, "proxy", "", "v1", "default", "pods", "", "foo"),
    ),
    (
        "GET",
        "/apis/apps/v1/namespaces/default/deployments/web/scale",
        (True, "get", "apps", "v1", "default", "deployments", "scale", "web"),
    ),
    (
        "GET",
        "/apis/stable.example.com/v1/crontabs",
        (True, "list", "stable.example.com", "v1", "", "crontabs", "", ""),
    ),
    (
        "GET",
        "/api/v1/namespaces/default/pods?fieldSelector=metadata.name=nginx",
        (True, "list", "", "v1", "default", "pods", "", "nginx"),
    ),
    (
        "GET",
        "/api/v1/namespaces/default/pods?watch=true&fieldSelector=metadata.name==nginx",
        (True, "watch", "", "v1", "default", "pods", "", "nginx"),
    ),
    (
        "GET",
        "/api/v1/pods?fieldSelector=metadata.name!=nginx",
        (True, "list", "", "v1", "", "pods", "", ""),
    ),
    (
        # not a valid path segment name: the name stays empty
        "GET",
        "/api/v1/pods?fieldSelector=metadata.name=a/b",
        (True, "list", "", "v1", "", "pods", "", ""),
    ),
    # non-resource requests: verb is the lower-cased method
    ("GET", "/healthz", (False, "get", "", "", "", "", "", "")),
    ("GET", "/version", (False, "get", "", "", "", "", "", "")),
    ("GET", "/api", (False, "get", "", "", "", "", "", "")),
    ("GET", "/api/v1", (False, "get", "", "", "", "", "", "")),
    ("GET", "/apis/apps/v1", (False, "get", "", "", "", "", "", "")),
    ("POST", "/apis/apps", (False, "post", "", "", "", "", "", "")),
    ("GET", "/other/v1/pods", (False, "get", "", "", "", "", "", "")),
]


@pytest.mark.parametrize(("method", "url", "want"), K8S_CASES)
def test_k8s_request_info(method: str, url: str, want: tuple[object, ...]) -> None:
    info = classify(method, url)
    got = (
        info.is_resource_request,
        info.verb,
        info.group,
        info.version,
        info.namespace,
        info.resource,
        info.subresource,
        info.name,
    )
    assert got == want


def test_unknown_method_on_resource_path_is_not_a_known_verb() -> None:
    assert not classify("OPTIONS", "/api/v1/pods").is_known_verb
    assert classify("OPTIONS", "/healthz").is_known_verb


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/watch",
        "/api/v1/proxy",
        "/api/v1/pods?timeoutSeconds=abc",
        "/api/v1/pods?timeoutSeconds=-1",
        "/api/v1/pods?labelSelector=a%%%",
        "/api/v1/pods?labelSelector=a in (b",
        "/api/v1/pods?fieldSelector=novalue",
        "/api/v1/pods/x?timeout=5x",
        "/api/v1/pods?watch=1&timeoutSeconds=" + "9" * 400,  # no float holds it
        "/api/v1/pods?limit=9223372036854775808",  # int64 overflow
        "/api/v1/pods/x?timeout=" + "9" * 400 + "h",
    ],
)
def test_bad_requests(url: str) -> None:
    with pytest.raises(requestinfo.BadRequestError):
        classify("GET", url)


# §10.3 (:157) partial object metadata
PM_LIST = (
    "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
)
PM_GET = PM_LIST.replace("PartialObjectMetadataList", "PartialObjectMetadata")


def test_partial_object_metadata() -> None:
    assert classify("GET", "/api/v1/nodes/mynode", "kubelet").partial_object_metadata is None
    pm = classify("GET", "/api/v1/nodes", "flanneld", PM_LIST).partial_object_metadata
    assert pm == requestinfo.PartialObjectMetadata("PartialObjectMetadataList", "meta.k8s.io", "v1")
    pm = classify("GET", "/api/v1/nodes/x", "flanneld", PM_GET).partial_object_metadata
    assert pm == requestinfo.PartialObjectMetadata("PartialObjectMetadata", "meta.k8s.io", "v1")
    # wrong group -> not partial
    bad = "application/json;as=PartialObjectMetadata;g=example.com;v=v1"
    assert classify("GET", "/api/v1/nodes/x", "x", bad).partial_object_metadata is None


# §10.3 (:238) content type
@pytest.mark.parametrize(
    ("method", "url", "accept", "want"),
    [
        ("GET", "/api/v1/nodes/mynode", "application/json", "application/json"),
        ("GET", "/healthz", "application/vnd.kubernetes.protobuf", ""),
        ("POST", "/api/v1/nodes/mynode", "", ""),
        ("GET", "/api/v1/nodes", PM_LIST, "application/vnd.kubernetes.protobuf"),
        ("GET", "/api/v1/nodes", "Application/JSON; charset=utf-8, */*", "application/json"),
    ],
)
def test_content_type(method: str, url: str, accept: str, want: str) -> None:
    assert classify(method, url, "kubelet", accept).content_type == want


# §10.3 (:303) component
@pytest.mark.parametrize(
    ("method", "url", "ua", "component", "user_agent"),
    [
        ("GET", "/api/v1/nodes/mynode", "kubelet123", "kubelet123", "kubelet123"),
        ("GET", "/api/v1/nodes/mynode", "flanneld/0.11.0", "flanneld", "flanneld/0.11.0"),
        ("GET", "/api/v1/nodes/mynode", "Kubelet/v1.32 (linux/amd64)", "kubelet", None),
        ("POST", "/healthz", "kubelet", "", "kubelet"),
        # kubemark's hollow components are kubelet and kube-proxy under another name
        ("GET", "/api/v1/nodes/n", "hollow-kubelet", "kubelet", "hollow-kubelet"),
        ("GET", "/api/v1/services", "hollow-proxy/v1", "kube-proxy", "hollow-proxy/v1"),
        ("GET", "/api/v1/services", "hollow-proxyx", "hollow-proxyx", "hollow-proxyx"),
        ("GET", "/api/v1/nodes/mynode", "", "", ""),
    ],
)
def test_component(method: str, url: str, ua: str, component: str, user_agent: str | None) -> None:
    info = classify(method, url, ua)
    assert info.component == component
    if user_agent is not None:
        assert info.user_agent == user_agent


# §10.3 (:366) timeouts
@pytest.mark.parametrize(
    ("url", "deadline"),
    [
        ("/api/v1/pods?resourceVersion=1&timeoutSeconds=5&watch=true", 20.0),
        ("/api/v1/pods?resourceVersion=1&watch=true", None),
        ("/api/v1/pods?resourceVersion=1&timeoutSeconds=5", 3.0),
        ("/api/v1/pods?timeoutSeconds=2", None),
        ("/api/v1/pods", None),
        ("/api/v1/namespaces/default/pods/nginx?resourceVersion=1&timeout=5s", 3.0),
        ("/api/v1/namespaces/default/pods/nginx?timeout=1m30s", 88.0),
        ("/api/v1/namespaces/default/pods/nginx?timeout=1500ms", None),
        ("/api/v1/namespaces/default/pods/nginx", None),
        # kubectl --request-timeout sends timeout= on lists too; the shorter bound wins.
        ("/api/v1/pods?timeout=10s", 8.0),
        ("/api/v1/pods?timeout=10s&timeoutSeconds=5", 3.0),
        ("/api/v1/pods?timeout=0s", None),
        # Streams have no bound of the client's: logs, exec, proxies.
        ("/api/v1/namespaces/default/pods/nginx/log?follow=true&timeout=10s", None),
        ("/api/v1/namespaces/default/pods/nginx/proxy/x?timeout=10s", None),
    ],
)
def test_deadlines(url: str, deadline: float | None) -> None:
    assert classify("GET", url).deadline == deadline


def test_watch_parameters() -> None:
    info = classify(
        "GET", "/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion=42&timeoutSeconds=9"
    )
    assert info.is_watch and info.allow_watch_bookmarks
    assert info.resource_version == "42" and info.timeout_seconds == 9


# §10.3 (:460) selectors
@pytest.mark.parametrize(
    ("query", "want"),
    [
        ("", ""),
        ("fieldSelector=metadata.name=test", ""),
        ("fieldSelector=spec.nodeName=test", "spec.nodeName=test"),
        ("labelSelector=foo=bar", "foo=bar"),
        ("labelSelector=foo=bar&fieldSelector=spec.nodeName=test", "foo=bar&spec.nodeName=test"),
        # canonical forms: sorted terms, == -> = for fields, sorted set values
        (
            "fieldSelector=status.phase==Running,spec.nodeName=n1",
            "spec.nodeName=n1,status.phase=Running",
        ),
        ("labelSelector=b=2,a in (z,y),!c", "a in (y,z),b=2,!c"),
    ],
)
def test_list_selector(query: str, want: str) -> None:
    info = classify("GET", f"/api/v1/namespaces/default/pods?{query}")
    assert info.list_selector == want


# §10.3 (:714) / §10.1 TestIsListRequestWithNameFieldSelector
@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("fieldSelector=metadata.name=test", True),
        ("fieldSelector=spec.nodeName=test", False),
        ("labelSelector=foo=bar", False),
        ("labelSelector=foo=bar&fieldSelector=metadata.name=test", True),
        ("labelSelector=foo=bar&fieldSelector=spec.nodeName=test", False),
    ],
)
def test_metadata_name_field_selector(query: str, named: bool) -> None:
    info = classify("GET", f"/api/v1/namespaces/default/pods?{query}")
    assert (info.name == "test") is named
    assert info.verb == "list"


def test_field_selector_escapes() -> None:
    info = classify("GET", r"/api/v1/pods?fieldSelector=spec.y!=c\=d,spec.x=a\,b")
    assert info.list_selector == r"spec.x=a\,b,spec.y!=c\=d"
    named = classify("GET", r"/api/v1/pods?fieldSelector=metadata.name=a\,b")
    assert (named.name, named.list_selector) == ("a,b", "")


@pytest.mark.parametrize(
    ("method", "url", "deadline"),
    [
        ("POST", "/api/v1/namespaces/d/configmaps?timeout=10s", 10.0),
        ("PATCH", "/api/v1/namespaces/d/configmaps/x?timeout=1500ms", 1.5),
        ("DELETE", "/api/v1/namespaces/d/configmaps/x", None),
    ],
)
def test_mutations_get_the_clients_whole_timeout(
    method: str, url: str, deadline: float | None
) -> None:
    # No cache to fall back to: no margin taken off.
    assert classify(method, url).deadline == deadline


@pytest.mark.parametrize(
    ("method", "url", "long_running"),
    [
        ("GET", "/api/v1/pods?watch=true", True),
        ("GET", "/api/v1/namespaces/d/pods/p/log", True),
        ("POST", "/api/v1/namespaces/d/pods/p/exec", True),
        ("GET", "/api/v1/namespaces/d/services/s/proxy/x", True),
        ("GET", "/api/v1/proxy/namespaces/d/services/s", True),
        ("GET", "/api/v1/pods", False),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n", False),
    ],
)
def test_long_running_requests(method: str, url: str, long_running: bool) -> None:
    assert classify(method, url).is_long_running is long_running


def test_watch_with_timeout_zero_has_no_hub_deadline() -> None:
    # The apiserver reads timeoutSeconds=0 as "not given": the hub must not cut it at 15 s.
    assert classify("GET", "/api/v1/pods?watch=true&timeoutSeconds=0").deadline is None
    assert classify("GET", "/api/v1/pods?watch=true&timeoutSeconds=5").deadline == 20


def test_upgrade_detection() -> None:
    info = classify(
        "POST",
        "/api/v1/namespaces/default/pods/p/exec?command=ls",
        Connection="Upgrade",
        Upgrade="websocket",
    )
    assert info.is_upgrade and info.subresource == "exec" and info.verb == "create"
    assert not classify("GET", "/api/v1/pods", Connection="keep-alive").is_upgrade


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5s", 5.0), ("1m30s", 90.0), ("500ms", 0.5), ("1h", 3600.0), ("0", 0.0), ("-2s", -2.0)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert requestinfo.parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "s", "5x", "1m5"])
def test_bad_go_durations(text: str) -> None:
    with pytest.raises(requestinfo.BadRequestError):
        requestinfo.parse_go_duration(text)


def test_describe_has_no_headers() -> None:
    info = classify("GET", "/api/v1/namespaces/default/services?watch=true", Authorization="x")
    assert info.describe() == "watch services for /api/v1/namespaces/default/services"


def test_undecodable_user_agent_and_path_become_replacement_chars() -> None:
    raw_ua = b"kub\xffelet/\xfe".decode("utf-8", "surrogateescape")
    info = classify("GET", "/api/v1/namespaces/d\udcff/pods", raw_ua)
    assert info.component == "kub\ufffdelet"
    assert info.namespace == "d\ufffd"
    info.user_agent.encode("utf-8")  # no surrogates left


# §10.3 (proxy/util:63) pool scope, services + endpointslices configured, node "foo"
@pytest.mark.parametrize(
    ("ua", "url", "want"),
    [
        ("kubelet", "/api/v1/services", (True, False)),
        ("flanneld/0.11.0", "/api/v1/nodes/mynode", (False, False)),
        ("multiplexer-proxy-foo", "/api/v1/services", (True, True)),
        ("kube-proxy", "/apis/discovery.k8s.io/v1/endpointslices?watch=1", (True, False)),
        ("kube-proxy", "/api/v1/namespaces/default/services/kubernetes", (False, False)),
    ],
)
def test_pool_scope(ua: str, url: str, want: tuple[bool, bool]) -> None:
    info = classify("GET", url, ua)
    assert requestinfo.pool_scope(info, requestinfo.DEFAULT_POOL_SCOPE_RESOURCES, "foo") == want


def test_list_paging_parameters() -> None:
    from multidict import CIMultiDict

    first = requestinfo.classify("GET", "/api/v1/pods", {"limit": "500"}, CIMultiDict())
    assert (first.limit, first.list_continue) == (500, None)
    later = requestinfo.classify(
        "GET", "/api/v1/pods", {"limit": "500", "continue": "abc"}, CIMultiDict()
    )
    assert (later.limit, later.list_continue) == (500, "abc")
    repeated = requestinfo.classify(
        "GET", "/api/v1/pods", [("continue", "abc"), ("continue", "xyz")], CIMultiDict()
    )
    assert repeated.list_continue == "abc"  # the first value, as for every other parameter
    with pytest.raises(requestinfo.BadRequestError):
        requestinfo.classify("GET", "/api/v1/pods", {"limit": "-1"}, CIMultiDict())
