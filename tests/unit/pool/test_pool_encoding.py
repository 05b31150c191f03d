"""Wire form of multiplexer answers."""

from __future__ import annotations

import orjson

from yurthub import statuses
from yurthub.pool import encoding


def test_list_body_is_one_json_document_in_chunks() -> None:
    items = [orjson.dumps({"metadata": {"name": f"s{i}"}, "pad": "x" * 1000}) for i in range(600)]
    chunks = list(encoding.list_chunks("ServiceList", "v1", 42, items))
    assert len(chunks) > 1
    body = orjson.loads(b"".join(chunks))
    assert body["kind"] == "ServiceList" and body["apiVersion"] == "v1"
    assert body["metadata"] == {"resourceVersion": "42"}
    assert [i["metadata"]["name"] for i in body["items"]] == [f"s{i}" for i in range(600)]
    empty = orjson.loads(b"".join(encoding.list_chunks("ServiceList", "v1", 7, [])))
    assert empty["items"] == []


def test_events_bookmarks_errors() -> None:
    line = encoding.event("ADDED", b'{"kind":"Service"}')
    assert line.endswith(b"\n") and orjson.loads(line) == {
        "type": "ADDED",
        "object": {"kind": "Service"},
    }
    mark = orjson.loads(encoding.bookmark("Service", "v1", 9, initial_end=True))
    assert mark["type"] == "BOOKMARK"
    assert mark["object"]["metadata"] == {
        "resourceVersion": "9",
        "annotations": {"k8s.io/initial-events-end": "true"},
    }
    assert (
        "annotations"
        not in orjson.loads(encoding.bookmark("Service", "v1", 9))["object"]["metadata"]
    )
    error = orjson.loads(encoding.error(statuses.failure(410, "too old")))
    assert error["type"] == "ERROR" and error["object"]["code"] == 410


def test_with_resource_version() -> None:
    raw = orjson.dumps({"metadata": {"name": "a", "resourceVersion": "3"}})
    assert (
        orjson.loads(encoding.with_resource_version(raw, 9))["metadata"]["resourceVersion"] == "9"
    )
