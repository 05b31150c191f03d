"""Cache keys: YurtHub's scheme (reference §1.4), exactness for hostile names, round trips."""

from __future__ import annotations

import pytest

from yurthub.cache import keys

POD = keys.Scope("kubelet", "pods", "v1")
NODE = keys.Scope("kubelet", "nodes", "v1")
NS = keys.Scope("kubelet", "namespaces", "v1")
CRON = keys.Scope("controller", "foos", "v1alpha1", "bars.extension.io")
PARTIAL_CRD = keys.Scope(
    "kubelet", "customresourcedefinitions", "v1", "apiextensions.k8s.io", partial="v1"
)


@pytest.mark.parametrize(
    ("scope", "namespace", "name", "expected"),
    [
        (POD, "kube-system", "kube-proxy-xx", "kubelet/pods.v1.core/kube-system/kube-proxy-xx"),
        (NODE, "", "edge-worker", "kubelet/nodes.v1.core/edge-worker"),
        (NS, "kube-system", "kube-system", "kubelet/namespaces.v1.core/kube-system"),
        (
            CRON,
            "kube-system",
            "foobar",
            "controller/foos.v1alpha1.bars.extension.io/kube-system/foobar",
        ),
        (
            PARTIAL_CRD,
            "",
            "nodepools.apps.openyurt.io",
            "kubelet/partialobjectmetadatas.v1.meta.k8s.io/"
            "customresourcedefinitions.v1.apiextensions.k8s.io/nodepools.apps.openyurt.io",
        ),
    ],
)
def test_object_keys_follow_yurthub_scheme(
    scope: keys.Scope, namespace: str, name: str, expected: str
) -> None:
    key = keys.object_key(scope, namespace, name)
    assert str(key) == expected
    assert keys.parse_object_key(expected) == key


@pytest.mark.parametrize(
    "name",
    [
        "a/b",
        "..",
        "../../etc/passwd",
        "%2F",
        "a%2Fb",
        "ü-名前",
        "x?y",
        "semi;colon",
        "tab\there",
        ".",
    ],
)
def test_hostile_names_stay_one_exact_segment(name: str) -> None:
    key = keys.object_key(POD, "default", name)
    text = str(key)
    assert text.count("/") == 3, text
    assert "\t" not in text
    assert keys.parse_object_key(text) == key
    # Distinct names never share a key.
    assert str(keys.object_key(POD, "default", name + "x")) != text


def test_escaped_and_unescaped_forms_differ() -> None:
    assert str(keys.object_key(POD, "d", "a/b")) != str(keys.object_key(POD, "d", "a%2Fb"))


def test_lone_surrogate_round_trips() -> None:
    key = keys.object_key(POD, "d", "bad\udcff")
    assert keys.parse_object_key(str(key)) == key
    str(key).encode("utf-8")  # storable as SQLite text


@pytest.mark.parametrize(
    ("list_key", "expected"),
    [
        (keys.list_key(POD, "", "", ""), "kubelet/pods.v1.core?"),
        (
            keys.list_key(POD, "", "", "spec.nodeName=n1"),
            "kubelet/pods.v1.core?fieldSelector=spec.nodeName%3Dn1",
        ),
        (
            keys.list_key(POD, "default", "app=x,tier in (a,b)", ""),
            "kubelet/pods.v1.core/default?labelSelector=app%3Dx%2Ctier%20in%20%28a%2Cb%29",
        ),
        (keys.list_key(NS, "kube-system", "", ""), "kubelet/namespaces.v1.core?"),
    ],
)
def test_list_keys(list_key: keys.ListKey, expected: str) -> None:
    assert str(list_key) == expected
    assert keys.parse_list_key(expected) == list_key
    assert keys.is_list_key(expected)


def test_list_keys_with_different_selectors_differ() -> None:
    a = keys.list_key(POD, "test2", "foo=bar1", "")
    b = keys.list_key(POD, "test2", "foo=bar2", "")
    assert str(a) != str(b)


@pytest.mark.parametrize(
    ("path", "profile", "expected"),
    [
        ("/version", "", "/version"),
        ("/apis/discovery.k8s.io/v1", "", "/apis/discovery.k8s.io/v1"),
        (
            "/api",
            "as=APIGroupDiscoveryList;g=apidiscovery.k8s.io;v=v2",
            "/api;as=APIGroupDiscoveryList%3Bg=apidiscovery.k8s.io%3Bv=v2",
        ),
    ],
)
def test_nonresource_keys(path: str, profile: str, expected: str) -> None:
    key = keys.nonresource_key(path, profile)
    assert key == expected
    assert keys.is_nonresource_key(key)
    assert not keys.is_list_key(key)


@pytest.mark.parametrize(
    "bad",
    ["kubelet", "kubelet/pods", "kubelet/pods.v1.core/a/b/c", "/version", "kubelet/pods.v1.core?"],
)
def test_bad_object_keys_are_refused(bad: str) -> None:
    with pytest.raises(keys.BadKey):
        keys.parse_object_key(bad)


def test_cluster_scoped_resource_cannot_take_two_segments_for_namespaces() -> None:
    with pytest.raises(keys.BadKey):
        keys.parse_object_key("kubelet/namespaces.v1.core/a/b")
