"""Views built offline (Table, PartialObjectMetadata) and the merge patch shown to clients."""

from __future__ import annotations

from typing import Any

import pytest

from yurthub.cache import patching, tables

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "5s"),
        (119, "119s"),
        (200, "3m20s"),
        (600, "10m"),
        (3 * 3600 + 100, "3h1m"),
        (10 * 3600, "10h"),
        (3 * 86400 + 7200, "3d2h"),
        (30 * 86400, "30d"),
        (3 * 365 * 86400, "3y"),
        (-0.5, "0s"),
        (-1, "0s"),
        (-1.9, "0s"),
        (-2, "<invalid>"),
    ],
)
def test_human_duration(seconds: float, text: str) -> None:
    assert tables.human_duration(seconds) == text


def pod(name: str, **status: Any) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": name, "creationTimestamp": "2027-01-15T07:59:00Z"},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
        "status": status,
    }


def test_pod_table_has_ready_status_restarts_age() -> None:
    waiting = {"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "restartCount": 4}
    view = tables.table(
        "pods",
        [
            pod("ok", phase="Running", containerStatuses=[{"ready": True}, {"ready": True}]),
            pod("bad", phase="Running", containerStatuses=[{"ready": True}, waiting]),
        ],
        resource_version="7",
        now=NOW,
    )
    assert [c["name"] for c in view["columnDefinitions"]] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
    ]
    assert [r["cells"] for r in view["rows"]] == [
        ["ok", "2/2", "Running", "0", "60s"],
        ["bad", "1/2", "CrashLoopBackOff", "4", "60s"],
    ]
    assert view["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert view["metadata"]["resourceVersion"] == "7"


@pytest.mark.parametrize(("include", "kind"), [("Object", "Pod"), ("None", None)])
def test_include_object(include: str, kind: str | None) -> None:
    view = tables.table("pods", [pod("x")], resource_version="1", now=NOW, include_object=include)
    assert view["rows"][0].get("object", {}).get("kind") == kind


def test_metadata_only_objects_give_name_and_age() -> None:
    partial = tables.partial(pod("x"))
    view = tables.table("pods", [partial], resource_version="1", now=NOW)
    assert [c["name"] for c in view["columnDefinitions"]] == ["Name", "Age"]
    assert view["rows"][0]["cells"] == ["x", "60s"]


WIDE = [
    {"name": n, "type": "string", "format": "", "description": "", "priority": p}
    for n, p in (("Name", 0), ("Ready", 0), ("Status", 0), ("Age", 0), ("IP", 1), ("Node", 1))
]


@pytest.mark.parametrize(
    ("obj", "stored", "cells"),
    [
        # The apiserver's row: its cells, AGE recomputed (a cached age is stale by the outage).
        (tables.partial(pod("x")), ("x", "1/2", "Running", "5d", "10.0.0.1", "n1"),
         ["x", "1/2", "Running", "60s", "10.0.0.1", "n1"]),
        # No row cached (the object came from a watch of full objects): what we can compute.
        (pod("y", phase="Pending"), None, ["y", "0/2", "Pending", "60s", "<unknown>", "<unknown>"]),
        # Metadata only, no row: the name and the age.
        (tables.partial(pod("z")), None, ["z", "<unknown>", "<unknown>", "60s", "<unknown>",
                                          "<unknown>"]),
        # A row of another column set (cached before the columns changed) is not trusted.
        (tables.partial(pod("w")), ("w", "60s"), ["w", "<unknown>", "<unknown>", "60s",
                                                  "<unknown>", "<unknown>"]),
    ],
)  # fmt: skip
def test_a_table_keeps_the_apiservers_columns(
    obj: dict[str, Any], stored: tuple[Any, ...] | None, cells: list[Any]
) -> None:
    view = tables.table("pods", [obj], resource_version="1", now=NOW, columns=WIDE, cells=[stored])
    assert view["columnDefinitions"] == WIDE
    assert view["rows"][0]["cells"] == cells


def test_partial_list() -> None:
    view = tables.partial_list([pod("x")], "5", "v1beta1")
    assert view["kind"] == "PartialObjectMetadataList"
    assert view["apiVersion"] == "meta.k8s.io/v1beta1"
    assert view["items"] == [
        {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1beta1",
            "metadata": pod("x")["metadata"],
        }
    ]


# RFC 7386 appendix A
@pytest.mark.parametrize(
    ("target", "patch", "result"),
    [
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_merge_patch(target: Any, patch: Any, result: Any) -> None:
    assert patching.merge_patch(target, patch) == result


def _deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"a": value}
    return value


def test_merge_patch_refuses_what_nests_too_deep() -> None:
    """Issue 27 item 6: the merge recursed along any patch and its answer failed to encode
    past orjson's 254 levels (a 500); both bounds are a ``PatchError`` now."""
    with pytest.raises(patching.PatchError, match=r"^the patch is nested deeper than 200 levels"):
        patching.merge_patch({"a": 1}, {"spec": _deep(500)})
    # A cached object can be deeper (the apiserver allows it; an offline create is stored).
    with pytest.raises(patching.PatchError, match=r"^the patched object would be nested deeper"):
        patching.merge_patch({"spec": _deep(250)}, {"b": 1})
    # Within the bound (a shallow patch onto a deep object) it is applied.
    assert patching.merge_patch({"spec": _deep(198)}, {"b": 1}) == {"spec": _deep(198), "b": 1}
