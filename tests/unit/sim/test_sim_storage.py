"""Storage semantics: resourceVersions, conflicts, paging snapshots, watch history, finalizers,
garbage collection, namespace deletion, CRDs. Synchronous State calls, no sockets."""

from __future__ import annotations

from typing import Any

import pytest

from yurthub.cache import selectors
from yurthub.testing.sim import errors, paging, storage


def _state(**kwargs: Any) -> storage.State:
    state = storage.State(**kwargs)
    state.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    return state


def _cm(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "data": {"k": "v"},
    }


def test_one_global_counter_and_server_fields() -> None:
    state = _state()
    before = state.resource_version
    a = state.create(_cm("a"))
    b = state.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "l", "namespace": "default"},
        }
    )
    assert int(a["metadata"]["resourceVersion"]) > before
    assert int(b["metadata"]["resourceVersion"]) == int(a["metadata"]["resourceVersion"]) + 1
    assert a["metadata"]["uid"] and a["metadata"]["creationTimestamp"].endswith("Z")
    assert "generation" not in a["metadata"]
    named = state.create({**_cm(""), "metadata": {"generateName": "gen-", "namespace": "default"}})
    assert named["metadata"]["name"].startswith("gen-") and len(named["metadata"]["name"]) == 9


def test_create_conflicts_and_missing_namespace() -> None:
    state = _state()
    state.create(_cm("a"))
    with pytest.raises(errors.ApiError) as e:
        state.create(_cm("a"))
    assert (e.value.code, e.value.reason) == (409, "AlreadyExists")
    with pytest.raises(errors.ApiError) as e:
        state.create({**_cm("b"), "metadata": {"name": "b", "namespace": "nope"}})
    assert e.value.code == 404 and 'namespaces "nope" not found' in str(e.value)
    with pytest.raises(errors.ApiError) as e:
        state.create(_cm("Bad_Name"))
    assert e.value.code == 422


def test_stale_update_is_409_and_noop_update_keeps_rv() -> None:
    state = _state()
    cm = state.create(_cm("a"))
    fresh = dict(cm, data={"k": "w"})
    updated = state.update(fresh)
    assert int(updated["metadata"]["resourceVersion"]) > int(cm["metadata"]["resourceVersion"])
    with pytest.raises(errors.ApiError) as e:
        state.update(dict(cm, data={"k": "stale"}))
    assert (e.value.code, e.value.reason) == (409, "Conflict")
    rv = state.resource_version
    again = state.update(updated)
    assert again["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]
    assert state.resource_version == rv


def test_generation_bumps_on_spec_change_only() -> None:
    state = _state()
    deploy = state.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "default"},
            "spec": {
                "replicas": 1,
                "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
            },
        }
    )
    assert deploy["metadata"]["generation"] == 1
    deploy["metadata"]["labels"] = {"x": "y"}
    deploy = state.update(deploy)
    assert deploy["metadata"]["generation"] == 1
    deploy["spec"]["replicas"] = 3
    assert state.update(deploy)["metadata"]["generation"] == 2


def test_paging_is_a_consistent_snapshot_and_expires() -> None:
    state = _state(history_size=50)
    for i in range(10):
        state.create(_cm(f"cm-{i:02d}"))
    rt = state.resolve("configmaps")
    flt = storage.Filter("default")
    first = state.list_objects(rt, flt, limit=4)
    assert [s.meta["name"] for s in first.items] == ["cm-00", "cm-01", "cm-02", "cm-03"]
    # Also kube-root-ca.crt, which every namespace gets.
    assert first.continue_token and first.remaining == 7
    state.delete("configmaps", "default", "cm-05")
    state.create(_cm("cm-04a"))
    second = state.list_objects(rt, flt, limit=4, continue_token=first.continue_token)
    assert [s.meta["name"] for s in second.items] == ["cm-04", "cm-05", "cm-06", "cm-07"]
    assert second.rv == first.rv
    third = state.list_objects(rt, flt, limit=4, continue_token=second.continue_token)
    assert [s.meta["name"] for s in third.items] == ["cm-08", "cm-09", "kube-root-ca.crt"]
    assert third.continue_token is None
    with pytest.raises(errors.ApiError) as e:
        state.list_objects(rt, flt, resource_version="5", continue_token=first.continue_token)
    assert e.value.code == 400
    state.set_history_size(1)
    for i in range(3):
        state.create(_cm(f"late-{i}"))
    with pytest.raises(errors.ApiError) as e:
        state.list_objects(rt, flt, limit=4, continue_token=first.continue_token)
    assert e.value.code == 410
    with pytest.raises(errors.ApiError):
        state.list_objects(rt, flt, continue_token=paging.encode(1, ("x", "y"))[:-2])


def test_list_resource_version_semantics() -> None:
    state = _state()
    for i in range(5):
        state.create(_cm(f"c{i}"))
    rt = state.resolve("configmaps")
    whole = state.list_objects(rt, storage.Filter("default"), resource_version="0", limit=2)
    assert len(whole.items) >= 5 and whole.continue_token is None, (
        "RV=0 ignores limit (watch cache)"
    )
    latest = state.list_objects(rt, storage.Filter("default"), resource_version="", limit=2)
    assert len(latest.items) == 2 and latest.continue_token
    rv = state.resource_version
    state.delete("configmaps", "default", "c0")
    exact = state.list_objects(
        rt, storage.Filter("default"), resource_version=str(rv), resource_version_match="Exact"
    )
    assert "c0" in [s.meta["name"] for s in exact.items] and exact.rv == rv
    with pytest.raises(errors.ApiError) as e:
        state.list_objects(rt, storage.Filter("default"), resource_version=str(rv + 100))
    assert e.value.code == 504


def test_watch_replays_history_and_expires_old_versions() -> None:
    state = _state(history_size=5)
    rt = state.resolve("configmaps")
    start_rv = state.resource_version
    state.create(_cm("a"))
    state.create(_cm("b"))
    start = state.watch(rt, storage.Filter("default"), resource_version=str(start_rv))
    assert [(k, s.meta["name"]) for k, s in start.initial] == [("ADDED", "a"), ("ADDED", "b")]
    state.unwatch(start.watcher)
    for i in range(10):
        state.create(_cm(f"x{i}"))
    with pytest.raises(errors.ApiError) as e:
        state.watch(rt, storage.Filter("default"), resource_version=str(start_rv))
    assert e.value.code == 410 and "too old resource version" in str(e.value)
    fresh = state.watch(rt, storage.Filter("default"), resource_version="")
    assert len(fresh.initial) == 13  # the synthetic ADDEDs of "get state and start at most recent"


async def test_watch_selector_turns_modified_into_added_and_deleted() -> None:
    state = _state()
    rt = state.resolve("configmaps")
    flt = storage.Filter("default", selectors.parse_labels("team=a"))
    start = state.watch(rt, flt, resource_version=str(state.resource_version))
    cm = state.create(_cm("c", team="b"))
    cm["metadata"]["labels"] = {"team": "a"}
    cm = state.update(cm)
    cm["metadata"]["labels"] = {"team": "b"}
    state.update(cm)
    seen = [await start.watcher.next() for _ in range(2)]
    assert [kind for kind, _ in seen] == ["ADDED", "DELETED"]
    state.unwatch(start.watcher)


def test_finalizers_hold_deletion_until_removed() -> None:
    state = _state()
    cm = _cm("f")
    cm["metadata"]["finalizers"] = ["example.com/hold"]
    state.create(cm)
    kept = state.delete("configmaps", "default", "f")
    assert kept is not None and kept["metadata"]["deletionTimestamp"]
    kept["metadata"]["finalizers"] = []
    state.update(kept)
    with pytest.raises(errors.ApiError) as e:
        state.get("configmaps", "default", "f")
    assert e.value.code == 404
    types = [e.type for e in state.history_events() if e.key == ("default", "f")]
    assert types == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]


def _owned(name: str, owner: dict[str, Any]) -> dict[str, Any]:
    cm = _cm(name)
    cm["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
        }
    ]
    return cm


def test_garbage_collection_by_owner_uid_and_orphaning() -> None:
    state = _state()
    owner = state.create(_cm("owner"))
    state.create(_owned("child", owner))
    grandchild_owner = state.get("configmaps", "default", "child")
    state.create(_owned("grandchild", grandchild_owner))
    state.delete("configmaps", "default", "owner")
    names = {c["metadata"]["name"] for c in state.list("configmaps", "default")}
    assert not {"owner", "child", "grandchild"} & names
    owner = state.create(_cm("owner2"))
    state.create(_owned("kept", owner))
    state.delete("configmaps", "default", "owner2", propagation="Orphan")
    assert "ownerReferences" not in state.get("configmaps", "default", "kept")["metadata"]
    dangling = _owned("dangling", owner)
    state.create(dangling)
    with pytest.raises(errors.ApiError):
        state.get("configmaps", "default", "dangling")


def test_namespace_deletion_removes_contents_and_waits_for_finalizers() -> None:
    state = _state()
    state.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    assert state.get("serviceaccounts", "team", "default")
    assert "ca.crt" in state.get("configmaps", "team", "kube-root-ca.crt")["data"]
    held = _cm("held")
    held["metadata"].update(namespace="team", finalizers=["x/y"])
    state.create(held)
    state.create({**_cm("plain"), "metadata": {"name": "plain", "namespace": "team"}})
    terminating = state.delete("namespaces", None, "team")
    assert terminating is not None and terminating["status"]["phase"] == "Terminating"
    assert [c["metadata"]["name"] for c in state.list("configmaps", "team")] == ["held"]
    with pytest.raises(errors.ApiError) as e:
        state.create({**_cm("new"), "metadata": {"name": "new", "namespace": "team"}})
    assert e.value.code == 403
    obj = state.get("configmaps", "team", "held")
    obj["metadata"]["finalizers"] = []
    state.update(obj)
    with pytest.raises(errors.ApiError):
        state.get("namespaces", None, "team")


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"size": {"type": "integer", "default": 3}},
                            },
                            "status": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                        },
                    }
                },
            },
            {"name": "v1beta1", "served": True, "storage": False},
        ],
    },
}


def test_crd_lifecycle_defaults_prunes_and_stops_serving() -> None:
    state = _state()
    crd = state.create(CRD)
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert state.registry.get("example.com", "v1", "widgets") is not None
    widget = state.create(
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w", "namespace": "default"},
            "spec": {"color": "red"},
        }
    )
    assert widget["spec"] == {"size": 3}, "defaulted and pruned"
    assert widget["metadata"]["generation"] == 1
    beta = state.get(state.registry.get("example.com", "v1beta1", "widgets"), "default", "w")  # type: ignore[arg-type]
    assert beta["apiVersion"] == "example.com/v1beta1"
    state.delete("customresourcedefinitions", None, "widgets.example.com")
    assert state.registry.get("example.com", "v1", "widgets") is None
    with pytest.raises(errors.ApiError) as e:
        state.create({**CRD, "metadata": {"name": "wrong.example.com"}})
    assert e.value.code == 422


def test_events_k8s_io_shares_core_storage() -> None:
    state = _state()
    state.create(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "e1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "p"},
            "message": "hello",
            "reason": "Started",
        }
    )
    rt = state.registry.get("events.k8s.io", "v1", "events")
    assert rt is not None
    converted = state.get(rt, "default", "e1")
    assert converted["apiVersion"] == "events.k8s.io/v1"
    assert converted["note"] == "hello" and converted["regarding"] == {"kind": "Pod", "name": "p"}


@pytest.mark.parametrize(
    ("mode", "outcome"),
    [("Strict", "error"), ("Warn", "warned"), (None, "warned"), ("Ignore", "silent")],
)
def test_field_validation_of_pruned_fields(mode: str | None, outcome: str) -> None:
    state = _state()
    state.create(CRD)
    rt = state.registry.get("example.com", "v1", "widgets")
    assert rt is not None
    warnings: list[str] = []
    body = {"metadata": {"name": "w"}, "spec": {"size": 1, "typo": True}}
    if outcome == "error":
        with pytest.raises(errors.ApiError) as e:
            state.create_object(
                rt, body, namespace="default", field_validation=mode, warnings=warnings
            )
        assert e.value.code == 400 and 'unknown field "spec.typo"' in str(e.value)
        return
    stored = state.create_object(
        rt, body, namespace="default", field_validation=mode, warnings=warnings
    )
    assert stored.obj["spec"] == {"size": 1}
    assert warnings == (['unknown field "spec.typo"'] if outcome == "warned" else [])


def _node(name: str, *, ready: bool = True, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"podCIDR": "10.244.7.0/24"},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "addresses": [{"type": "InternalIP", "address": "127.0.9.9"}],
        },
    }


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i"}], **spec},
    }


def test_simulated_kubelets_schedule_and_start_pods() -> None:
    state = _state()
    state.create(_node("n-ready", pool="a"))
    state.create(_node("n-down", ready=False, pool="b"))
    created = state.create(_pod("p1"))
    assert created["status"]["phase"] == "Pending", "the create answer is the Pending pod"
    running = state.get("pods", "default", "p1")
    assert running["spec"]["nodeName"] == "n-ready" and running["status"]["phase"] == "Running"
    assert running["status"]["podIP"].startswith("10.244.7.")
    assert running["status"]["containerStatuses"][0]["ready"] is True
    types = [e.type for e in state.history_events() if e.key == ("default", "p1")]
    assert types == ["ADDED", "MODIFIED", "MODIFIED"]
    state.create(_pod("p2", nodeSelector={"pool": "b"}))
    pending = state.get("pods", "default", "p2")
    assert pending["status"]["phase"] == "Pending"
    assert pending["status"]["conditions"][0]["reason"] == "Unschedulable"
    state.create(_pod("p3", nodeName="n-down"))
    assert state.get("pods", "default", "p3")["status"]["phase"] == "Pending"
    quiet = _state(simulate_kubelets=False)
    quiet.create(_node("n"))
    quiet.create(_pod("p"))
    assert "nodeName" not in quiet.get("pods", "default", "p")["spec"]
