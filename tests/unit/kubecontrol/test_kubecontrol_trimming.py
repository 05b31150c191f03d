"""Trimming objects at ingest: each spec keeps what it says and nothing else, shared values are
one object, and a shape that would lose an object's identity is refused."""

from __future__ import annotations

import copy
import sys
from typing import Any

import pytest

from kubecontrol import trimming
from kubecontrol.trimming import DROP, INTERN, KEEP, Fields, Items, Shared

META = {"name": KEEP, "namespace": KEEP, "resourceVersion": KEEP}


def obj(**more: Any) -> dict[str, Any]:
    return {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7"}, **more}


@pytest.mark.parametrize(
    ("fields", "source", "kept"),
    [
        # only named fields; the rest dropped
        ({"metadata": META}, obj(spec={"x": 1}), obj()),
        # nested fields
        (
            {"metadata": META, "spec": {"nodeName": KEEP}},
            obj(spec={"nodeName": "n1", "containers": [{"image": "i"}]}),
            obj(spec={"nodeName": "n1"}),
        ),
        # rest=KEEP keeps everything but what is DROPped
        (
            Fields({"metadata": Fields({"managedFields": DROP}, rest=KEEP)}, rest=KEEP),
            obj(spec={"a": 1}, status={"b": 2}) | {"kind": "Pod"},
            obj(spec={"a": 1}, status={"b": 2}) | {"kind": "Pod"},
        ),
        # a mapping emptied by trimming is left out (not {}); so is a missing one
        (
            {"metadata": {**META, "annotations": {"keep/me": KEEP}}},
            obj() | {"metadata": {**obj()["metadata"], "annotations": {"other": "x"}}},
            obj(),
        ),
        (
            {"metadata": {**META, "annotations": {"keep/me": KEEP}}},
            obj() | {"metadata": {**obj()["metadata"], "annotations": {"keep/me": "v", "o": "x"}}},
            obj() | {"metadata": {**obj()["metadata"], "annotations": {"keep/me": "v"}}},
        ),
        # items: each trimmed, `where` filters, an emptied list is left out
        (
            {
                "metadata": META,
                "status": {
                    "conditions": Items(
                        {"type": KEEP, "status": KEEP}, where=lambda c: c.get("type") == "Ready"
                    )
                },
            },
            obj(
                status={
                    "conditions": [
                        {"type": "MemoryPressure", "status": "False", "reason": "r"},
                        {"type": "Ready", "status": "True", "lastHeartbeatTime": "t"},
                    ]
                }
            ),
            obj(status={"conditions": [{"type": "Ready", "status": "True"}]}),
        ),
        (
            {"metadata": META, "status": {"conditions": Items(KEEP, where=lambda c: False)}},
            obj(status={"conditions": [{"type": "Ready"}]}),
            obj(),
        ),
        # odd shapes (a string where a mapping belongs, a mapping where a list belongs) go
        (
            {"metadata": META, "spec": {"nodeName": KEEP}, "status": {"c": Items(KEEP)}},
            obj(spec="not a mapping", status={"c": {"not": "a list"}}),
            obj(),
        ),
        # falsy values are kept as they are (only empty containers made by trimming go)
        (
            {"metadata": META, "spec": {"paused": KEEP, "n": KEEP, "s": KEEP}},
            obj(spec={"paused": False, "n": 0, "s": ""}),
            obj(spec={"paused": False, "n": 0, "s": ""}),
        ),
    ],
)
def test_fields_keep_what_they_name(fields: Any, source: dict[str, Any], kept: Any) -> None:
    shape = trimming.Shape(fields)
    before = copy.deepcopy(source)
    assert shape.trim(source, trimming.Sharing()) == kept
    assert source == before  # the source is never changed


def test_interned_strings_are_one_object_across_objects() -> None:
    shape = trimming.Shape({"metadata": META, "spec": {"nodeName": INTERN}, "l": INTERN})
    # Built at run time, so the two are distinct objects before trimming.
    a = obj(spec={"nodeName": "".join(["node", "-1"])}, l={"".join(["k", "1"]): "v"})
    b = obj(spec={"nodeName": "".join(["node", "-1"])}, l={"".join(["k", "1"]): "v"})
    assert a["spec"]["nodeName"] is not b["spec"]["nodeName"]
    sharing = trimming.Sharing()
    ta, tb = shape.trim(a, sharing), shape.trim(b, sharing)
    assert ta is not None and tb is not None
    assert ta["spec"]["nodeName"] is tb["spec"]["nodeName"]
    assert ta["spec"]["nodeName"] is sys.intern("node-1")
    assert next(iter(ta["l"])) is next(iter(tb["l"]))


def test_shared_values_are_one_object_and_equal_to_the_source() -> None:
    shape = trimming.Shape({"metadata": META, "spec": {"tolerations": Shared()}})
    tolerations = [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300},
    ]
    sharing = trimming.Sharing()
    first = shape.trim(obj(spec={"tolerations": copy.deepcopy(tolerations)}), sharing)
    second = shape.trim(obj(spec={"tolerations": copy.deepcopy(tolerations)}), sharing)
    other = shape.trim(obj(spec={"tolerations": tolerations[:1]}), sharing)
    assert first is not None and second is not None and other is not None
    assert first["spec"]["tolerations"] == tolerations
    assert first["spec"]["tolerations"] is second["spec"]["tolerations"]
    assert other["spec"]["tolerations"] is not first["spec"]["tolerations"]
    assert len(sharing) == 2


def test_shared_tells_dicts_lists_and_scalars_apart() -> None:
    sharing = trimming.Sharing()
    values: list[Any] = [{}, [], {"a": [1]}, {"a": {"1": 1}}, [[1]], [{"1": 1}], 1, True, None]
    shared = [sharing.share(copy.deepcopy(v)) for v in values]
    assert shared == values
    assert [type(s) for s in shared] == [type(v) for v in values]
    # Equal in Python, not in JSON: never one shared object.
    flags = [sharing.share({"controller": v}) for v in (True, 1, 1.0)]
    assert [type(f["controller"]) for f in flags] == [bool, int, float]


def test_the_memo_is_bounded() -> None:
    sharing = trimming.Sharing(max_entries=3)
    for n in range(10):
        sharing.share({"n": n})
        assert len(sharing) <= 3
    # A value seen before the memo started over is still an equal (if new) object.
    assert sharing.share({"n": 0}) == {"n": 0}
    with pytest.raises(ValueError):
        trimming.Sharing(max_entries=0)


def test_keep_refuses_whole_objects() -> None:
    shape = trimming.Shape(
        trimming.WITHOUT_MANAGED_FIELDS.fields, keep=lambda o: o.get("kind") == "Pod"
    )
    assert shape.trim({"kind": "Node", "metadata": {"name": "n"}}, trimming.Sharing()) is None
    pod = {"kind": "Pod", "metadata": {"name": "p", "managedFields": [{"manager": "kubectl"}]}}
    assert shape.trim(pod, trimming.Sharing()) == {"kind": "Pod", "metadata": {"name": "p"}}


@pytest.mark.parametrize(
    "fields",
    [
        {"spec": KEEP},  # no metadata at all
        {"metadata": {"name": KEEP, "namespace": KEEP}},  # no resourceVersion
        {"metadata": {"name": KEEP, "namespace": KEEP, "resourceVersion": DROP}},
        {"metadata": INTERN},
    ],
)
def test_a_shape_must_keep_the_identity(fields: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        trimming.Shape(fields)


def test_whole_metadata_and_rest_keep_are_accepted() -> None:
    trimming.Shape({"metadata": KEEP})
    trimming.Shape(Fields({}, rest=KEEP))
    trimming.Shape({"metadata": Fields({"managedFields": DROP}, rest=KEEP)})
