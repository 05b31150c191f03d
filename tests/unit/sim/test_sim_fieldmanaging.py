"""Server-side apply field ownership (sim/fieldmanaging.py): field sets, FieldsV1, compare,
merge, apply conflicts and pruning, update ownership. Expected values are what
kube-apiserver 1.37 answers (tests/e2e/cluster/test_ownership_real.py checks the HTTP side)."""

from __future__ import annotations

from typing import Any

import pytest

from yurthub.testing.sim import errors
from yurthub.testing.sim import fieldmanaging as fm

INSTANCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "capacity": {"type": "integer"},
                "nodes": {
                    "type": "array",
                    "x-kubernetes-list-type": "set",
                    "items": {"type": "string"},
                },
                "deviceUsage": {
                    "type": "object",
                    "x-kubernetes-map-type": "granular",
                    "additionalProperties": {"type": "string"},
                },
                "tags": {"type": "array", "items": {"type": "string"}},
                "opaque": {"type": "object", "x-kubernetes-map-type": "atomic"},
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["port", "protocol"],
                    "items": {
                        "type": "object",
                        "properties": {
                            "port": {"type": "integer"},
                            "protocol": {"type": "string", "default": "TCP"},
                            "name": {"type": "string"},
                        },
                    },
                },
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        }
    },
}
CR = fm.shape_for("Instance", INSTANCE_SCHEMA, custom=True)
POD = fm.shape_for("Pod", None, custom=False)
NOW = 1_800_000_000.0


def _p(*elements: str) -> fm.Path:
    return tuple(elements)


@pytest.mark.parametrize(
    ("obj", "fields"),
    [
        ({"spec": {"capacity": 1}}, {"f:spec": {"f:capacity": {}}}),
        ({"spec": {}}, {"f:spec": {}}),
        ({"spec": {"nodes": ["a", "b"]}}, {"f:spec": {"f:nodes": {'v:"a"': {}, 'v:"b"': {}}}}),
        ({"spec": {"nodes": []}}, {}),
        ({"spec": {"deviceUsage": {"s0": "n"}}}, {"f:spec": {"f:deviceUsage": {"f:s0": {}}}}),
        ({"spec": {"tags": ["x"]}}, {"f:spec": {"f:tags": {}}}),
        ({"spec": {"tags": []}}, {"f:spec": {"f:tags": {}}}),
        ({"spec": {"opaque": {"a": {"b": 1}}}}, {"f:spec": {"f:opaque": {}}}),
        (
            {"spec": {"ports": [{"port": 80, "name": "http"}]}},
            {
                "f:spec": {
                    "f:ports": {
                        'k:{"port":80,"protocol":"TCP"}': {".": {}, "f:name": {}, "f:port": {}}
                    }
                }
            },
        ),
        (
            {"spec": {"extra": {"deep": {"x": 1}}}},
            {"f:spec": {"f:extra": {"f:deep": {".": {}, "f:x": {}}}}},
        ),
        (
            {"metadata": {"name": "n", "labels": {"a": "b"}, "finalizers": ["f"]}},
            {"f:metadata": {"f:finalizers": {'v:"f"': {}}, "f:labels": {"f:a": {}}}},
        ),
    ],
)
def test_applied_field_sets(obj: dict[str, Any], fields: dict[str, Any]) -> None:
    writer = fm.Writer("m", fm.APPLY, "akri.sh/v0")
    done = fm.apply(CR, None, {"apiVersion": "akri.sh/v0", **obj}, [], writer, NOW)
    assert fm.encode(done.managed) == (
        [
            {
                "manager": "m",
                "operation": "Apply",
                "apiVersion": "akri.sh/v0",
                "time": "2027-01-15T08:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": fields,
            }
        ]
        if fields
        else []
    )


def test_builtin_lists_by_merge_key() -> None:
    pod = {
        "spec": {
            "containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 80}]}],
            "tolerations": [{"key": "k"}],
        }
    }
    assert fm.encode_set(fm.field_set(POD, pod)) == {
        "f:spec": {
            "f:containers": {
                'k:{"name":"c"}': {
                    ".": {},
                    "f:image": {},
                    "f:name": {},
                    "f:ports": {
                        'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}
                    },
                }
            },
            "f:tolerations": {},
        }
    }


def test_fieldsv1_round_trip_and_order() -> None:
    paths = {
        _p("f:spec"),
        _p("f:spec", "f:b"),
        _p("f:spec", "f:a"),
        _p("f:spec", 'k:{"name":"x"}'),
        _p("f:spec", 'k:{"name":"x"}', "f:name"),
        _p("f:spec", 'v:"z"'),
    }
    encoded = fm.encode_set(paths)
    assert list(encoded["f:spec"]) == [".", "f:a", "f:b", 'k:{"name":"x"}', 'v:"z"']
    assert encoded["f:spec"]['k:{"name":"x"}'] == {".": {}, "f:name": {}}
    assert fm.decode_set(encoded) == paths
    with pytest.raises(ValueError):
        fm.decode_set({"x:bad": {}})
    with pytest.raises(ValueError):
        fm.decode_set([])


@pytest.mark.parametrize(
    ("path", "printed"),
    [
        (_p("f:spec", "f:deviceUsage", "f:s0"), ".spec.deviceUsage.s0"),
        (_p("f:spec", 'k:{"name":"c"}', "f:image"), '.spec[name="c"].image'),
        (_p("f:spec", 'k:{"port":80,"protocol":"TCP"}'), '.spec[port=80,protocol="TCP"]'),
        (_p("f:metadata", "f:finalizers", 'v:"a/b"'), '.metadata.finalizers[="a/b"]'),
    ],
)
def test_paths_print_as_the_apiserver_does(path: fm.Path, printed: str) -> None:
    assert fm.describe(path) == printed


def test_compare_marks_new_maps_and_lists() -> None:
    old = {"spec": {"capacity": 1, "nodes": ["a"], "tags": ["x"]}}
    new = {"spec": {"capacity": 2, "nodes": ["b"], "deviceUsage": {"s": ""}}}
    cmp = fm.compare(CR, old, new)
    assert cmp.added == {
        _p("f:spec", "f:nodes", 'v:"b"'),
        _p("f:spec", "f:deviceUsage"),
        _p("f:spec", "f:deviceUsage", "f:s"),
    }
    assert cmp.modified == {_p("f:spec", "f:capacity")}
    assert cmp.removed == {_p("f:spec", "f:nodes", 'v:"a"'), _p("f:spec", "f:tags")}


@pytest.mark.parametrize(
    ("live", "config", "merged"),
    [
        ({"spec": {"nodes": ["n1", "n2"]}}, {"spec": {"nodes": ["n2", "n3"]}}, ["n1", "n2", "n3"]),
        ({"spec": {"nodes": ["n1"]}}, {"spec": {"nodes": ["n0", "n1"]}}, ["n0", "n1"]),
        ({"spec": {"tags": ["a", "b"]}}, {"spec": {"tags": ["c"]}}, ["c"]),
    ],
)
def test_merge_lists(live: Any, config: Any, merged: list[str]) -> None:
    out = fm.merge(CR, live, config)
    assert out["spec"].get("nodes", out["spec"].get("tags")) == merged


def test_merge_associative_items_and_nulls() -> None:
    live = {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}],
            "x": 1,
        },
    }
    config = {"spec": {"containers": [{"name": "b", "image": "b:2"}], "x": None}}
    assert fm.merge(POD, live, config) == {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}]},
    }
    assert fm.merge(POD, None, {"spec": {"a": None, "b": 1}}) == {"spec": {"b": 1}}


def _slot(value: str) -> dict[str, Any]:
    return {"apiVersion": "akri.sh/v0", "kind": "Instance", "spec": {"deviceUsage": {"s0": value}}}


def test_apply_conflicts_and_force() -> None:
    a = fm.Writer("dp-a", fm.APPLY, "akri.sh/v0")
    b = fm.Writer("dp-b", fm.APPLY, "akri.sh/v0")
    first = fm.apply(CR, {"spec": {"deviceUsage": {"s0": ""}}}, _slot("a"), [], a, NOW)
    with pytest.raises(errors.ApiError) as e:
        fm.apply(CR, first.obj, _slot("b"), first.managed, b, NOW)
    assert e.value.code == 409 and e.value.reason == "Conflict"
    assert e.value.status["message"] == (
        'Apply failed with 1 conflict: conflict with "dp-a": .spec.deviceUsage.s0'
    )
    shared = fm.apply(CR, first.obj, _slot("a"), first.managed, b, NOW + 5)
    assert not shared.changed and {m.manager for m in shared.managed} == {"dp-a", "dp-b"}
    forced = fm.apply(
        CR, first.obj, _slot("b"), first.managed, fm.Writer("dp-b", fm.APPLY, "v", force=True), NOW
    )
    assert forced.obj["spec"]["deviceUsage"] == {"s0": "b"}
    assert [m.manager for m in forced.managed] == ["dp-b"]


def test_conflicts_with_several_managers_are_listed_by_manager() -> None:
    live = {"spec": {"capacity": 1, "deviceUsage": {"s0": "", "s1": ""}}}
    creator = fm.update(CR, None, live, [], fm.Writer("probe", fm.UPDATE, "akri.sh/v0"), NOW)
    other = fm.Entry("other", fm.APPLY, "akri.sh/v0", "", None, {_p("f:spec", "f:tags")})
    config = {"spec": {"capacity": 5, "deviceUsage": {"s0": "x", "s1": "x"}, "tags": ["t"]}}
    with pytest.raises(errors.ApiError) as e:
        fm.apply(
            CR,
            {**live, "spec": {**live["spec"], "tags": ["u"]}},
            config,
            [*creator, other],
            fm.Writer("new", fm.APPLY, "akri.sh/v0"),
            NOW,
        )
    assert e.value.status["message"] == (
        "Apply failed with 4 conflicts: "
        'conflicts with "other":\n- .spec.tags\n'
        'conflicts with "probe" using akri.sh/v0:\n'
        "- .spec.capacity\n- .spec.deviceUsage.s0\n- .spec.deviceUsage.s1"
    )
    causes = e.value.status["details"]["causes"]  # type: ignore[typeddict-item]
    assert causes[0] == {
        "reason": "FieldManagerConflict",
        "message": 'conflict with "other"',
        "field": ".spec.tags",
    }


def test_reapply_prunes_what_only_it_owned() -> None:
    a = fm.Writer("a", fm.APPLY, "akri.sh/v0")
    c = fm.Writer("c", fm.APPLY, "akri.sh/v0")
    both = {"spec": {"deviceUsage": {"s0": "x", "s9": "x"}, "nodes": ["n1", "n2"]}}
    first = fm.apply(CR, {}, both, [], a, NOW)
    shared = fm.apply(CR, first.obj, {"spec": {"deviceUsage": {"s0": "x"}}}, first.managed, c, NOW)
    again = fm.apply(CR, shared.obj, {"spec": {"nodes": ["n2"]}}, shared.managed, a, NOW)
    assert again.obj == {"spec": {"deviceUsage": {"s0": "x"}, "nodes": ["n2"]}}
    assert fm.encode_set(next(m for m in again.managed if m.manager == "a").fields) == {
        "f:spec": {"f:nodes": {'v:"n2"': {}}}
    }


def test_reapply_removes_whole_associative_items() -> None:
    w = fm.Writer("kubectl", fm.APPLY, "v1")
    env = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    pod = {"spec": {"containers": [{"name": "c", "env": env}]}}
    first = fm.apply(POD, None, pod, [], w, NOW)
    smaller = {"spec": {"containers": [{"name": "c", "env": env[:1]}]}}
    again = fm.apply(POD, first.obj, smaller, first.managed, w, NOW)
    assert again.obj["spec"]["containers"][0]["env"] == env[:1]


def test_update_takes_changed_fields_and_drops_empty_managers() -> None:
    a = fm.Writer("a", fm.APPLY, "akri.sh/v0")
    applied = fm.apply(CR, {}, {"spec": {"capacity": 3}}, [], a, NOW)
    editor = fm.Writer("editor", fm.UPDATE, "akri.sh/v0")
    new = {"spec": {"capacity": 4}, "metadata": {"labels": {"l": "1"}, "resourceVersion": "9"}}
    entries = fm.update(CR, applied.obj, new, applied.managed, editor, NOW + 60)
    assert fm.encode(entries) == [
        {
            "manager": "editor",
            "operation": "Update",
            "apiVersion": "akri.sh/v0",
            "time": "2027-01-15T08:01:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {".": {}, "f:l": {}}},
                "f:spec": {"f:capacity": {}},
            },
        }
    ]
    unchanged = fm.update(CR, new, new, entries, fm.Writer("x", fm.UPDATE, "v"), NOW + 99)
    assert unchanged == entries, "a write that changes nothing records nobody"


def test_status_is_owned_only_through_its_subresource() -> None:
    main = fm.Writer("m", fm.UPDATE, "v1")
    status = fm.Writer("k", fm.UPDATE, "v1", subresource="status")
    new = {"spec": {"a": 1}, "status": {"b": 2}}
    assert fm.encode_set(fm.update(POD, None, new, [], main, NOW, has_status=True)[0].fields) == {
        "f:spec": {".": {}, "f:a": {}}
    }
    (entry,) = fm.update(POD, {}, new, [], status, NOW, has_status=True)
    assert fm.encode(entry and [entry])[0]["subresource"] == "status"
    assert fm.encode_set(entry.fields) == {"f:status": {".": {}, "f:b": {}}}


def test_managers_and_their_names() -> None:
    assert fm.manager_from_user_agent("kubectl/v1.37.2 (linux/amd64) kubernetes/abc") == "kubectl"
    assert fm.manager_from_user_agent(None) == ""
    fm.validate_manager("x" * 128)
    with pytest.raises(errors.ApiError) as e:
        fm.validate_manager("x" * 129)
    assert e.value.code == 422
    with pytest.raises(errors.ApiError) as e:
        fm.validate_manager("é" * 65, "CreateOptions")
    assert e.value.status["message"] == (
        'CreateOptions.meta.k8s.io "" is invalid: fieldManager: Too long: may not be more than '
        "128 bytes"
    )
    with pytest.raises(ValueError):
        fm.decode({"not": "a list"})
    assert fm.decode(None) == []


def test_update_entries_are_capped_as_the_apiserver_caps_them() -> None:
    obj: dict[str, Any] = {"spec": {}}
    entries: list[fm.Entry] = []
    for i in range(12):
        new = {"spec": {**obj["spec"], f"f{i}": i}}
        writer = fm.Writer(f"m{i:02}", fm.UPDATE, "v1")
        entries = fm.update(POD, obj, new, entries, writer, NOW + i)
        obj = new
    names = [e.manager for e in entries]
    assert len(names) == 10 and "ancient-changes" in names
    assert "m00" not in names and "m11" in names
    ancient = next(e for e in entries if e.manager == "ancient-changes")
    assert {("f:spec", "f:f0"), ("f:spec", "f:f2")} <= ancient.fields


def test_too_many_entries_are_refused() -> None:
    live: dict[str, Any] = {"spec": {"capacity": 1}}
    entries = [
        fm.Entry(f"a{i}", fm.APPLY, "v", "", None, {("f:spec", "f:capacity")})
        for i in range(fm.MAX_ENTRIES)
    ]
    with pytest.raises(errors.ApiError) as e:
        fm.apply(CR, live, live, entries, fm.Writer("one-more", fm.APPLY, "v"), NOW)
    assert e.value.code == 422


def test_a_main_resource_apply_never_conflicts_over_status() -> None:
    kubelet = fm.Writer("kubelet", fm.UPDATE, "v1", subresource="status")
    live = {"spec": {"a": 1}, "status": {"phase": "Running"}}
    entries = fm.update(POD, {"spec": {"a": 1}}, live, [], kubelet, NOW, has_status=True)
    config = {"spec": {"a": 1}, "status": {"phase": "Pending"}}
    done = fm.apply(
        POD, live, config, entries, fm.Writer("m", fm.APPLY, "v1"), NOW, has_status=True
    )
    assert {e.manager for e in done.managed} == {"kubelet", "m"}
    assert fm.encode_set(next(e for e in done.managed if e.manager == "m").fields) == {
        "f:spec": {"f:a": {}}
    }
