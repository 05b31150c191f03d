"""Pure pieces of the simulator: paths, negotiation, paging tokens, tables, version order."""

from __future__ import annotations

import os
import zlib

import pytest

from yurthub.testing.sim import (
    errors,
    negotiation,
    paging,
    paths,
    podlogs,
    resources,
    tables,
    watching,
)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/api/v1/pods", paths.ResourcePath("", "v1", "pods")),
        ("/api/v1/namespaces", paths.ResourcePath("", "v1", "namespaces")),
        (
            "/api/v1/namespaces/kube-system",
            paths.ResourcePath("", "v1", "namespaces", None, "kube-system"),
        ),
        (
            "/api/v1/namespaces/kube-system/status",
            paths.ResourcePath("", "v1", "namespaces", None, "kube-system", "status"),
        ),
        ("/api/v1/namespaces/ns/pods", paths.ResourcePath("", "v1", "pods", "ns")),
        (
            "/api/v1/namespaces/ns/pods/p/log",
            paths.ResourcePath("", "v1", "pods", "ns", "p", "log"),
        ),
        (
            "/apis/apps/v1/namespaces/ns/deployments/d/scale",
            paths.ResourcePath("apps", "v1", "deployments", "ns", "d", "scale"),
        ),
        (
            "/api/v1/watch/namespaces/ns/pods",
            paths.ResourcePath("", "v1", "pods", "ns", None, None, True),
        ),
        ("/api", paths.GroupVersionPath(True, "", None)),
        ("/api/v1", paths.GroupVersionPath(True, "", "v1")),
        ("/apis", paths.GroupVersionPath(False, None, None)),
        ("/apis/apps", paths.GroupVersionPath(False, "apps", None)),
        ("/apis/apps/v1", paths.GroupVersionPath(False, "apps", "v1")),
        ("/healthz", None),
        ("/api/v1/namespaces/ns/pods/p/log/extra", None),
    ],
)
def test_paths(path: str, expected: object) -> None:
    assert paths.parse(path) == expected


@pytest.mark.parametrize(
    ("accept", "form", "yaml"),
    [
        (None, negotiation.Form.OBJECT, False),
        ("application/json", negotiation.Form.OBJECT, False),
        ("*/*", negotiation.Form.OBJECT, False),
        ("application/yaml", negotiation.Form.OBJECT, True),
        (
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
            negotiation.Form.TABLE,
            False,
        ),
        (
            "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
            negotiation.Form.PARTIAL,
            False,
        ),
        ("application/vnd.kubernetes.protobuf, */*", negotiation.Form.OBJECT, False),
        ("application/vnd.kubernetes.protobuf,application/json", negotiation.Form.OBJECT, False),
        (
            "application/json;as=Table;g=meta.k8s.io;v=v1;q=0.5,application/yaml",
            negotiation.Form.OBJECT,
            True,
        ),
    ],
)
def test_accept_negotiation(accept: str | None, form: negotiation.Form, yaml: bool) -> None:
    got = negotiation.negotiate(accept, table=True, partial=True)
    assert (got.form, got.yaml) == (form, yaml)


def test_accept_table_falls_through_where_not_offered_and_protobuf_only_is_406() -> None:
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    assert negotiation.negotiate(accept).form is negotiation.Form.OBJECT
    for bad in (
        "application/vnd.kubernetes.protobuf",
        "text/html",
        "application/json;as=Table;g=x;v=v1",
    ):
        with pytest.raises(errors.ApiError) as e:
            negotiation.negotiate(bad, table=True)
        assert e.value.code == 406


def test_aggregated_discovery_accept() -> None:
    accept = (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
    )
    got = negotiation.negotiate(accept, discovery=True)
    assert got.form is negotiation.Form.DISCOVERY_V2
    assert got.content_type.endswith("as=APIGroupDiscoveryList")


@pytest.mark.parametrize(
    ("content_type", "patch", "expected"),
    [
        (None, False, negotiation.BodyFormat.JSON),
        ("application/json; charset=utf-8", False, negotiation.BodyFormat.JSON),
        ("application/yaml", False, negotiation.BodyFormat.YAML),
        ("application/vnd.kubernetes.protobuf", False, negotiation.BodyFormat.PROTOBUF),
        ("application/merge-patch+json", True, negotiation.BodyFormat.MERGE_PATCH),
        ("application/strategic-merge-patch+json", True, negotiation.BodyFormat.STRATEGIC_PATCH),
        ("application/json-patch+json", True, negotiation.BodyFormat.JSON_PATCH),
        ("application/apply-patch+yaml", True, negotiation.BodyFormat.APPLY_PATCH),
    ],
)
def test_body_formats(
    content_type: str | None, patch: bool, expected: negotiation.BodyFormat
) -> None:
    assert negotiation.body_format(content_type, patch=patch) is expected


@pytest.mark.parametrize(
    ("content_type", "patch"), [("text/plain", False), ("application/json", True)]
)
def test_unknown_body_format_is_415(content_type: str, patch: bool) -> None:
    with pytest.raises(errors.ApiError) as e:
        negotiation.body_format(content_type, patch=patch)
    assert e.value.code == 415


def test_continue_token_round_trip_and_opaque_errors() -> None:
    token = paging.encode(1234, ("default", "p-9"))
    assert paging.decode(token) == paging.Continue(1234, ("default", "p-9"))
    for bad in ("%%%", "bm90IGpzb24", paging.encode(1, ("a", "b"))[:-3] + "AAA"):
        with pytest.raises(errors.ApiError) as e:
            paging.decode(bad)
        assert e.value.code == 400


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (125, "2m5s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (10 * 3600, "10h"),
        (3 * 86400 + 3600, "3d1h"),
        (30 * 86400, "30d"),
        (3 * 365 * 86400, "3y"),
    ],
)
def test_human_duration(seconds: int, text: str) -> None:
    assert tables.human_duration(seconds) == text


def test_table_rows_and_include_object() -> None:
    registry = resources.Registry()
    pods = registry.get("", "v1", "pods")
    assert pods is not None
    pod = {
        "metadata": {"name": "p", "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "containerStatuses": [
                {"ready": True, "restartCount": 2},
                {"ready": False, "restartCount": 1},
            ],
        },
    }
    now = 1704067200 + 90
    table = tables.table(pods, [pod], now=now, include="Object")
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names[:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    row = table["rows"][0]
    assert row["cells"][:5] == ["p", "1/2", "Running", 3, "90s"]
    assert row["object"] is pod
    meta = tables.table(pods, [pod], now=now)["rows"][0]["object"]
    assert meta == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": pod["metadata"],
    }
    assert "object" not in tables.table(pods, [pod], now=now, include="None")["rows"][0]


def test_crd_printer_columns_json_path() -> None:
    obj = {
        "spec": {"items": [{"n": 1}, {"n": 2}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert tables.json_path(obj, ".spec.items[1].n") == [2]
    assert tables.json_path(obj, ".spec.items[*].n") == [1, 2]
    assert tables.json_path(obj, '.status.conditions[?(@.type=="Ready")].status') == ["True"]
    assert tables.json_path(obj, ".missing.x") == []


def test_version_priority_is_kube_aware() -> None:
    versions = ["v1alpha1", "v2", "v1beta1", "foo", "v1", "v1beta2", "v10"]
    assert sorted(versions, key=resources.version_priority) == [
        "v10", "v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"
    ]  # fmt: skip


async def test_log_follower_slower_than_the_bounded_tail_skips_ahead_in_order() -> None:
    book = podlogs.LogBook(lambda: 0.0, max_lines=3)
    book.append("ns", "p", "c", "l0")
    follower = book.follow("ns", "p", "c")
    assert (await anext(follower))[1] == "l0"
    for i in range(1, 6):  # more lines than the tail keeps arrive while the follower writes
        book.append("ns", "p", "c", f"l{i}")
    got = [(await anext(follower))[1] for _ in range(3)]
    assert got == ["l3", "l4", "l5"]  # what fell out is skipped; the rest in order
    book.close_pod("ns", "p")
    assert [line async for _, line in follower] == []


@pytest.mark.parametrize(
    "data",
    [b"", b'{"type":"BOOKMARK"}\n', b'{"type":"ADDED"}\n' * 5000, os.urandom(70_000)],
    ids=["empty", "one-event", "many-events", "incompressible"],
)
def test_a_gzip_write_is_whole_before_its_final_block(data: bytes) -> None:
    member = watching.flushed_member(data)
    z = zlib.decompressobj(16 + zlib.MAX_WBITS)
    assert z.decompress(member) == data and z.eof and not z.unused_data
    # What precedes the last sync point is all of it: a streaming reader needs no more.
    end = member.rindex(b"\x00\x00\xff\xff") + 4
    assert zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(member[:end]) == data
