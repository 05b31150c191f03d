"""Patch application: merge, strategic merge (built-in merge keys and directives), JSON patch."""

from __future__ import annotations

from typing import Any

import pytest

from yurthub.testing.sim import errors, patching

POD: dict[str, Any] = {
    "metadata": {"name": "p", "labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
    "spec": {
        "containers": [
            {
                "name": "app",
                "image": "app:1",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "ports": [{"containerPort": 80, "name": "http"}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            },
            {"name": "side", "image": "side:1"},
        ],
        "tolerations": [{"key": "k1"}],
    },
    "status": {"conditions": [{"type": "Ready", "status": "False"}]},
}


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"a": None}, {"b": 2}),
        ({"c": {"d": 1}}, {"a": 1, "b": 2, "c": {"d": 1}}),
        ({"a": [1, 2]}, {"a": [1, 2], "b": 2}),
        ({"b": {"x": None}}, {"a": 1, "b": {}}),
    ],
)
def test_merge_patch_rfc7386(patch: dict[str, Any], expected: dict[str, Any]) -> None:
    assert patching.merge_patch({"a": 1, "b": 2}, patch) == expected


def _smp(patch: dict[str, Any], kind: str = "Pod") -> Any:
    return patching.strategic_merge_patch(kind, POD, patch)


def test_smp_merges_containers_by_name_and_env_by_name() -> None:
    out = _smp(
        {
            "spec": {
                "containers": [
                    {"name": "app", "image": "app:2", "env": [{"name": "B", "value": "3"}]}
                ]
            }
        }
    )
    app, side = out["spec"]["containers"]
    assert app["image"] == "app:2"
    assert app["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}]
    assert app["ports"] == [{"containerPort": 80, "name": "http"}]
    assert side == {"name": "side", "image": "side:1"}
    assert POD["spec"]["containers"][0]["image"] == "app:1", "input must not be mutated"


def test_smp_new_element_appended_and_atomic_list_replaced() -> None:
    out = _smp(
        {"spec": {"containers": [{"name": "new", "image": "n"}], "tolerations": [{"key": "k2"}]}}
    )
    assert [c["name"] for c in out["spec"]["containers"]] == ["app", "side", "new"]
    assert out["spec"]["tolerations"] == [{"key": "k2"}]


def test_smp_delete_directive_and_conditions_by_type() -> None:
    out = _smp(
        {
            "spec": {"containers": [{"name": "side", "$patch": "delete"}]},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "Init", "status": "True"},
                ]
            },
        }
    )
    assert [c["name"] for c in out["spec"]["containers"]] == ["app"]
    assert out["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "Init", "status": "True"},
    ]


def test_smp_ports_by_container_port_and_service_ports_by_port() -> None:
    out = _smp(
        {"spec": {"containers": [{"name": "app", "ports": [{"containerPort": 80, "name": "web"}]}]}}
    )
    assert out["spec"]["containers"][0]["ports"] == [{"containerPort": 80, "name": "web"}]
    svc = {"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}}
    merged = patching.strategic_merge_patch(
        "Service", svc, {"spec": {"ports": [{"port": 443, "name": "https"}]}}
    )
    assert merged["spec"]["ports"] == [
        {"port": 80, "targetPort": 8080},
        {"port": 443, "name": "https"},
    ]


def test_smp_set_element_order_and_primitive_list_directives() -> None:
    out = _smp(
        {
            "metadata": {"finalizers": ["y"], "$deleteFromPrimitiveList/finalizers": ["x"]},
            "spec": {"$setElementOrder/containers": [{"name": "side"}, {"name": "app"}]},
        }
    )
    assert out["metadata"]["finalizers"] == ["y"]
    assert [c["name"] for c in out["spec"]["containers"]] == ["side", "app"]


def test_smp_replace_directives_and_null_deletes() -> None:
    out = _smp({"metadata": {"labels": {"$patch": "replace", "c": "3"}}, "status": None})
    assert out["metadata"]["labels"] == {"c": "3"}
    assert "status" not in out
    out = _smp({"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "o"}]}})
    assert out["spec"]["containers"] == [{"name": "only", "image": "o"}]


def test_smp_element_without_merge_key_is_invalid() -> None:
    with pytest.raises(errors.ApiError) as e:
        _smp({"spec": {"containers": [{"image": "x"}]}})
    assert e.value.code == 422


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        ([{"op": "add", "path": "/b", "value": 2}], {"a": [1, 2], "o": {"k": "v"}, "b": 2}),
        ([{"op": "add", "path": "/a/-", "value": 3}], {"a": [1, 2, 3], "o": {"k": "v"}}),
        ([{"op": "add", "path": "/a/0", "value": 0}], {"a": [0, 1, 2], "o": {"k": "v"}}),
        ([{"op": "remove", "path": "/a/1"}], {"a": [1], "o": {"k": "v"}}),
        ([{"op": "replace", "path": "/o/k", "value": "w"}], {"a": [1, 2], "o": {"k": "w"}}),
        ([{"op": "move", "from": "/o/k", "path": "/k"}], {"a": [1, 2], "o": {}, "k": "v"}),
        ([{"op": "copy", "from": "/a", "path": "/c"}], {"a": [1, 2], "o": {"k": "v"}, "c": [1, 2]}),
        ([{"op": "test", "path": "/o/k", "value": "v"}], {"a": [1, 2], "o": {"k": "v"}}),
        ([{"op": "add", "path": "/o/a~1b", "value": 1}], {"a": [1, 2], "o": {"k": "v", "a/b": 1}}),
    ],
)
def test_json_patch_rfc6902(ops: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    assert patching.json_patch({"a": [1, 2], "o": {"k": "v"}}, ops) == expected


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        ([{"op": "test", "path": "/o/k", "value": "x"}], 422),
        ([{"op": "remove", "path": "/missing"}], 422),
        ([{"op": "replace", "path": "/a/9", "value": 1}], 422),
        ([{"op": "frobnicate", "path": "/a"}], 400),
        ([{"path": "/a"}], 400),
        ({"op": "add"}, 400),
        ([{"op": "add", "path": "a", "value": 1}], 400),
    ],
)
def test_json_patch_errors(ops: Any, code: int) -> None:
    with pytest.raises(errors.ApiError) as e:
        patching.json_patch({"a": [1, 2], "o": {"k": "v"}}, ops)
    assert e.value.code == code
