"""``otadecisions``: who may call the OTA API, which Pods it upgrades and how (YurtHub v1.7.0)."""

from __future__ import annotations

import datetime
from typing import Any

import orjson
import pytest

from yurthub import otadecisions

NODE = "edge-1"
NOW = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)


def pod(
    *,
    name: str = "ds-abc",
    node: str = NODE,
    owner: str | None = "DaemonSet",
    need: str | None = "True",
    revision: str = "rev2",
    image: dict[str, Any] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": "u1"}
    if owner is not None:
        meta["ownerReferences"] = [{"kind": owner, "name": "owner", "apiVersion": "apps/v1"}]
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    conditions: list[dict[str, Any]] = [{"type": "Ready", "status": "True"}]
    if need is not None:
        conditions.append(
            {"type": "PodNeedUpgrade", "status": need, "message": f"controllerrevision: {revision}"}
        )
    if image is not None:
        conditions.append({"type": "PodImageReady", **image})
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"conditions": conditions}}


@pytest.mark.parametrize(
    ("peer", "allowed"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.5", False),
        ("169.254.2.1", False),  # the dummy interface: reachable by pods on the node's network
        ("fe80::1%eth0", False),
        ("::ffff:10.0.0.5", False),
        ("", False),
        (None, False),
        ("not-an-ip", False),
    ],
)
def test_only_loopback_peers_may_call(peer: str | None, allowed: bool) -> None:
    assert (otadecisions.peer_refusal(peer) == "") is allowed


@pytest.mark.parametrize(
    ("path", "ota"),
    [
        ("/openyurt.io/v1/namespaces/default/pods/p/upgrade", True),
        ("/openyurt.io/v1/namespaces/default/pods/p/imagepull", True),
        ("/openyurt.io/v1/namespaces/default/pods/p", False),
        ("/api/v1/namespaces/default/pods/p", False),
        ("/pods", False),
    ],
)
def test_ota_paths(path: str, ota: bool) -> None:
    assert otadecisions.is_ota_path(path) is ota


@pytest.mark.parametrize(
    ("kwargs", "code", "words"),
    [
        ({}, None, ""),
        ({"need": None}, 403, "update status is False"),
        ({"need": "False"}, 403, "update status is False"),
        ({"node": "edge-2"}, 403, "is running on edge-2"),
        ({"deleting": True}, 403, "is deleting"),
        # Image pre-heat: when the condition is there, it must be True for the next revision.
        ({"image": {"status": "True", "message": "controllerrevision: rev2"}}, None, ""),
        ({"image": {"status": "False", "message": "controllerrevision: rev2"}}, 403, "image"),
        ({"image": {"status": "True", "message": "controllerrevision: rev1"}}, 403, "image"),
    ],
)
def test_upgrade_pre_checks(kwargs: dict[str, Any], code: int | None, words: str) -> None:
    refusal = otadecisions.upgrade_refusal(pod(**kwargs), NODE)
    if code is None:
        assert refusal is None
    else:
        assert refusal is not None and refusal.code == code and words in refusal.message


def test_imagepull_ignores_the_image_condition_but_not_the_rest() -> None:
    waiting = pod(image={"status": "False", "message": "controllerrevision: rev2"})
    assert otadecisions.imagepull_refusal(waiting, NODE) is None
    refusal = otadecisions.imagepull_refusal(pod(need="False"), NODE)
    assert refusal is not None and refusal.code == 403


@pytest.mark.parametrize(
    ("name", "owner", "expected"),
    [
        ("ds-abc", "DaemonSet", otadecisions.Kind("DaemonSet")),
        ("coredns-edge-1", "Node", otadecisions.Kind("Node", "coredns")),
        ("my-set-edge-1", "Node", otadecisions.Kind("Node", "my-set")),
        ("coredns-edge-2", "Node", 500),  # not this node's mirror pod name
        ("-edge-1", "Node", 500),
        ("rs-abc", "ReplicaSet", 400),
        ("bare", None, 400),
    ],
)
def test_upgrade_kind_by_first_owner(
    name: str, owner: str | None, expected: otadecisions.Kind | int
) -> None:
    found = otadecisions.upgrade_kind(pod(name=name, owner=owner), NODE)
    if isinstance(expected, int):
        assert isinstance(found, otadecisions.Refusal) and found.code == expected
    else:
        assert found == expected


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"hub": "apiVersion: v1\nkind: Pod\n"},
            otadecisions.Manifest("hub", "apiVersion: v1\nkind: Pod\n"),
        ),
        ({}, "0 manifests"),
        ({"a": "x", "b": "y"}, "2 manifests"),
        ({"hub": "  "}, "empty manifest"),
        ({".hidden": "x"}, "plain file name"),
        ({"../etc/passwd": "x"}, "plain file name"),
    ],
)
def test_manifest_of_a_configmap(data: dict[str, str], expected: object) -> None:
    found = otadecisions.manifest({"metadata": {"name": "yurt-static-set-hub"}, "data": data})
    if isinstance(expected, str):
        assert isinstance(found, str) and expected in found
    else:
        assert found == expected


def test_manifest_paths_hide_everything_but_the_live_manifest() -> None:
    paths = otadecisions.manifest_paths("/etc/kubernetes/manifests/", "hub")
    assert paths.live == "/etc/kubernetes/manifests/hub.yaml"
    assert paths.staging == "/etc/kubernetes/manifests/.hub.yaml.upgrading"
    assert paths.backup == "/etc/kubernetes/manifests/.hub.yaml.bak"


def test_imagepull_patch_adds_the_condition_and_keeps_the_others() -> None:
    patch = otadecisions.imagepull_patch(pod(), NOW)
    conditions = patch["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["Ready", "PodNeedUpgrade", "PodImageReady"]
    assert conditions[-1] == {
        "type": "PodImageReady",
        "status": "False",
        "message": "controllerrevision: rev2",
        "lastProbeTime": None,
        "lastTransitionTime": "2026-12-01T12:00:00Z",
    }


@pytest.mark.parametrize(
    ("old_status", "transition"),
    [("False", "2026-01-01T00:00:00Z"), ("True", "2026-12-01T12:00:00Z")],
)
def test_imagepull_patch_replaces_the_condition(old_status: str, transition: str) -> None:
    old = {
        "status": old_status,
        "message": "controllerrevision: rev1",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    conditions = otadecisions.imagepull_patch(pod(image=old), NOW)["status"]["conditions"]
    image = [c for c in conditions if c["type"] == "PodImageReady"]
    assert len(image) == 1
    assert image[0]["message"] == "controllerrevision: rev2"
    assert image[0]["lastTransitionTime"] == transition


def test_pod_list_is_a_v1_podlist() -> None:
    items = [orjson.dumps(pod(name="a")), orjson.dumps(pod(name="b"))]
    decoded = orjson.loads(otadecisions.pod_list(items))
    assert decoded["kind"] == "PodList" and decoded["apiVersion"] == "v1"
    assert [p["metadata"]["name"] for p in decoded["items"]] == ["a", "b"]
    assert orjson.loads(otadecisions.pod_list([]))["items"] == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("kind: Pod\nmetadata:\n  name: hub\n  namespace: kube-system\n", ""),
        ("kind: Pod\nmetadata:\n  name: hub\n", "is of static pod default/hub, not"),
        (
            "kind: Pod\nmetadata:\n  name: apiserver\n  namespace: kube-system\n",
            "kube-system/apiserver",
        ),
        ("kind: Pod\nmetadata: [1]\n", "is not a Pod manifest with metadata"),
        ("- a\n- b\n", "is not a Pod manifest with metadata"),
        ("a: [\n", "is not YAML"),
        ("a: 1\n---\nb: 2\n", "is not YAML"),
    ],
)
def test_a_manifest_is_of_the_static_pod_the_upgrade_names(text: str, problem: str) -> None:
    found = otadecisions.manifest_pod_problem(text, "kube-system", "hub", "hub.yaml")
    assert (found == "") if not problem else (problem in found and found.startswith("hub.yaml"))


def test_the_refusal_names_the_api_it_guards() -> None:
    assert otadecisions.peer_refusal("10.0.0.5", "/v1/token") == (
        "/v1/token answers callers on this node only (loopback), not 10.0.0.5"
    )
    assert "the OTA API" in otadecisions.peer_refusal(None)
