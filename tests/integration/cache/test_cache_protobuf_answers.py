"""Offline answers to protobuf clients (kubelet, kube-proxy) from what the cache stored as
received: lists assembled from the stored messages byte for byte as the apiserver sends them,
gets as stored, filters applied item by item; JSON readers of the same objects get the
apiserver's JSON; objects stored as JSON answer a protobuf-first client in JSON and a
protobuf-only one with a 406 offline (left to the cloud otherwise).

Bodies are real: tests/data/kubeproto/ (see tests/unit/kubeproto/test_converting.py).
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson
import pytest
from cache_answering import KUBELET, PODS, UNANSWERED, answering

from yurthub import requestinfo
from yurthub.cache import keys, store
from yurthub.kubeproto import converting, enveloping, wire
from yurthub.proxy import seams

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "kubeproto"
PROTOBUF_FIRST = "application/vnd.kubernetes.protobuf,application/json"
PROTOBUF_ONLY = "application/vnd.kubernetes.protobuf"
EVERYTHING = keys.list_key(PODS, "", "", "")
ONE_JSON_POD = orjson.dumps(
    {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "9"},
        "items": [{"metadata": {"name": "a", "namespace": "d", "resourceVersion": "9"}}],
    }
)
"""A pod list as a JSON client caches it."""


async def fetch(
    session: aiohttp.ClientSession, url: str, accept: str, reason: str = "offline"
) -> tuple[int, str, bytes]:
    headers = {"User-Agent": KUBELET, "Accept": accept, "X-Reason": reason}
    async with session.get(url, headers=headers) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.read()


def pods_pb() -> bytes:
    return (DATA / "pods.pb").read_bytes()


async def test_an_offline_list_is_the_apiservers_protobuf_byte_for_byte(
    tmp_path: pathlib.Path,
) -> None:
    body = pods_pb()
    async with answering(tmp_path, store.PutList(EVERYTHING, body, protobuf=True)) as (s, base):
        status, content_type, got = await fetch(s, base + "/api/v1/pods", PROTOBUF_FIRST)
        assert (status, content_type) == (200, PROTOBUF_ONLY)
        assert got == body  # nothing decoded or re-encoded: the stored messages, concatenated
        status, content_type, got = await fetch(s, base + "/api/v1/pods", PROTOBUF_ONLY)
        assert (status, got) == (200, body)
        # A JSON client of the same cache gets the apiserver's JSON.
        status, content_type, got = await fetch(s, base + "/api/v1/pods", "application/json")
        assert (status, content_type) == (200, "application/json")
        want = orjson.loads((DATA / "pods.json").read_bytes())
        listed = orjson.loads(got)
        assert [{"kind": "Pod", "apiVersion": "v1", **o} for o in want["items"]] == listed["items"]


async def test_an_offline_get_is_the_stored_protobuf(tmp_path: pathlib.Path) -> None:
    converter = converting.Converter()
    split = converter.split_list(pods_pb())
    assert split is not None
    first = enveloping.envelope("v1", "Pod", split.items[0])
    _, _, name, namespace, _ = converter.identity(first)
    job = store.PutObject(PODS, first, namespace, name=name, protobuf=True)
    async with answering(tmp_path, job) as (s, base):
        url = f"{base}/api/v1/namespaces/{namespace}/pods/{name}"
        assert await fetch(s, url, PROTOBUF_FIRST) == (200, PROTOBUF_ONLY, first)
        status, _, got = await fetch(s, url, "application/json")
        assert status == 200 and orjson.loads(got) == converter.object(first)


async def test_objects_stored_as_json_answer_protobuf_clients_in_json_or_406(
    tmp_path: pathlib.Path,
) -> None:
    async with answering(tmp_path, store.PutList(EVERYTHING, ONE_JSON_POD)) as (s, base):
        status, content_type, got = await fetch(s, base + "/api/v1/pods", PROTOBUF_FIRST)
        assert (status, content_type) == (200, "application/json")
        assert [p["metadata"]["name"] for p in orjson.loads(got)["items"]] == ["a"]
        status, _, got = await fetch(s, base + "/api/v1/pods", PROTOBUF_ONLY)
        assert status == 406 and orjson.loads(got)["kind"] == "Status"
        status, _, _ = await fetch(s, base + "/api/v1/pods", PROTOBUF_ONLY, "upstream-error")
        assert status == UNANSWERED  # online, the cloud answers it in protobuf


class _DropFirst:
    """Filters that drop one pod by name (in protobuf and in JSON)."""

    def __init__(self, name: str) -> None:
        self.name = name.encode()

    def object(self, body: bytes) -> bytes:
        return body

    def item(self, body: bytes) -> bytes | None:
        return None if b'"name":"' + self.name + b'"' in body else body

    def protobuf_object(self, body: bytes) -> bytes:
        return body

    def protobuf_item(self, raw: bytes) -> bytes | None:
        _, _, name, _, _ = converting.Converter().identity(enveloping.envelope("v1", "Pod", raw))
        return None if name.encode() == self.name else raw


class _Filters:
    def __init__(self, stored: _DropFirst) -> None:
        self._stored = stored

    def open(
        self, info: requestinfo.RequestInfo, status: int, headers: Mapping[str, str]
    ) -> seams.BodyTransform | None:
        return None

    def stored(self, info: requestinfo.RequestInfo) -> seams.StoredObjects | None:
        return self._stored

    def ready(self) -> bool:
        return True

    def not_read(self) -> str:
        return ""


async def test_offline_protobuf_lists_go_through_the_filters(tmp_path: pathlib.Path) -> None:
    body = pods_pb()
    converter = converting.Converter()
    split = converter.split_list(body)
    assert split is not None and len(split.items) > 1
    dropped = split.identity(split.items[0])[0]
    filters = _Filters(_DropFirst(dropped))
    job = store.PutList(EVERYTHING, body, protobuf=True)
    async with answering(tmp_path, job, filters=filters) as (s, base):
        status, _, got = await fetch(s, base + "/api/v1/pods", PROTOBUF_FIRST)
        assert status == 200
        kept = converter.split_list(got)
        assert kept is not None
        names = [kept.identity(item)[0] for item in kept.items]
        assert names == [split.identity(item)[0] for item in split.items[1:]]
        _, _, as_json = await fetch(s, base + "/api/v1/pods", "application/json")
        assert [p["metadata"]["name"] for p in orjson.loads(as_json)["items"]] == names


async def test_a_big_offline_protobuf_list_streams_with_its_length(tmp_path: pathlib.Path) -> None:
    # 1,500 copies of a real pod under other names: over the one-write bound, sent in parts.
    split = converting.Converter().split_list(pods_pb())
    assert split is not None
    messages = [_renamed(split.items[0], f"p{i:04d}") for i in range(1500)]
    body = b"".join(enveloping.ListBody("v1", "PodList", "7", messages).parts())
    async with answering(tmp_path, store.PutList(EVERYTHING, body, protobuf=True)) as (s, base):
        status, content_type, got = await fetch(s, base + "/api/v1/pods", PROTOBUF_FIRST)
        assert (status, content_type) == (200, PROTOBUF_ONLY)
        assert len(got) > (1 << 20) and got == body


def _renamed(pod: memoryview, name: str) -> bytes:
    """A pod message as ``name`` in namespace d at resourceVersion 7."""
    fields = []
    for number, _wire_type, value, field in wire.fields(bytes(pod)):
        if number != 1 or not isinstance(value, bytes):
            fields.append(field)
            continue
        # ObjectMeta: name 1, namespace 3, resourceVersion 6.
        meta = [f for n, _w, _v, f in wire.fields(value) if n not in (1, 3, 6)]
        meta += [wire.delimited(1, name.encode()), wire.delimited(3, b"d"), wire.delimited(6, b"7")]
        fields.append(wire.delimited(1, b"".join(meta)))
    return b"".join(fields)


def frames(stream: bytes) -> list[dict[str, object]]:
    converter = converting.Converter()
    out = []
    at = 0
    while at < len(stream):
        size = int.from_bytes(stream[at : at + 4], "big")
        out.append(converter.event(stream[at + 4 : at + 4 + size]))
        at += 4 + size
    assert at == len(stream)
    return out


STREAMING = {
    "watch": "1",
    "sendInitialEvents": "true",
    "allowWatchBookmarks": "true",
    "resourceVersionMatch": "NotOlderThan",
    "timeoutSeconds": "1",
}


async def watch(session: aiohttp.ClientSession, url: str, accept: str) -> tuple[int, str, bytes]:
    headers = {"User-Agent": KUBELET, "Accept": accept, "X-Reason": "offline"}
    async with session.get(url, headers=headers, params=STREAMING) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.read()


async def test_an_offline_streaming_list_is_protobuf_frames_of_the_stored_objects(
    tmp_path: pathlib.Path,
) -> None:
    body = pods_pb()
    converter = converting.Converter()
    split = converter.split_list(body)
    assert split is not None
    rv = split.head["metadata"]["resourceVersion"]
    filters = _Filters(_DropFirst(split.identity(split.items[0])[0]))
    job = store.PutList(EVERYTHING, body, protobuf=True)
    async with answering(tmp_path, job, filters=filters) as (s, base):
        status, content_type, got = await watch(s, base + "/api/v1/pods", PROTOBUF_FIRST)
        assert (status, content_type) == (200, enveloping.WATCH_CONTENT_TYPE)
        events: list[Any] = frames(got)
        added = [e for e in events if e["type"] == "ADDED"]
        want = [converter.object(enveloping.envelope("v1", "Pod", i)) for i in split.items[1:]]
        assert [e["object"] for e in added] == want  # the filter dropped the first
        end = events[len(added)]
        assert end["type"] == "BOOKMARK"
        assert end["object"]["kind"] == "Pod"
        assert end["object"]["metadata"]["resourceVersion"] == rv
        assert end["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
        # The same objects to a JSON client: JSON lines, the same end.
        status, content_type, got = await watch(s, base + "/api/v1/pods", "application/json")
        lines = [orjson.loads(line) for line in got.splitlines()]
        assert [e["object"] for e in lines if e["type"] == "ADDED"] == want
        assert (
            lines[len(want)]["object"]["metadata"]["annotations"]
            == end["object"]["metadata"]["annotations"]
        )


async def test_an_offline_streaming_list_of_json_objects_is_json_or_406(
    tmp_path: pathlib.Path,
) -> None:
    async with answering(tmp_path, store.PutList(EVERYTHING, ONE_JSON_POD)) as (s, base):
        status, content_type, got = await watch(s, base + "/api/v1/pods", PROTOBUF_FIRST)
        assert (status, content_type) == (200, "application/json")
        assert orjson.loads(got.splitlines()[0])["object"]["metadata"]["name"] == "a"
        status, _, got = await watch(s, base + "/api/v1/pods", PROTOBUF_ONLY)
        assert status == 406 and orjson.loads(got)["kind"] == "Status"


async def test_an_offline_plain_watch_is_json_unless_the_client_takes_only_protobuf(
    tmp_path: pathlib.Path,
) -> None:
    params = {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": "1"}
    job = store.PutList(EVERYTHING, pods_pb(), protobuf=True)
    async with answering(tmp_path, job) as (s, base):
        for accept, content_type in (
            (PROTOBUF_FIRST, "application/json"),
            (PROTOBUF_ONLY, enveloping.WATCH_CONTENT_TYPE),
        ):
            headers = {"User-Agent": KUBELET, "Accept": accept, "X-Reason": "offline"}
            async with s.get(base + "/api/v1/pods", headers=headers, params=params) as resp:
                assert resp.headers["Content-Type"] == content_type
                got = await resp.read()
            if content_type == "application/json":
                events = [orjson.loads(line) for line in got.splitlines()]
            else:
                events = frames(got)
            assert events and {e["type"] for e in events} == {"BOOKMARK"}


async def test_a_stored_protobuf_object_that_does_not_convert_is_a_miss_for_json_readers(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A ControllerRevision whose data (a RawExtension) holds neither JSON nor protobuf: its
    # index fields read, so it is stored as it came; a protobuf client gets those bytes, a
    # JSON reader a 404 (the row is dropped and logged), never a half-converted object.
    d = wire.delimited
    meta = d(1, b"rev") + d(3, b"d") + d(6, b"5")
    message = d(1, meta) + d(2, d(1, b"\xff\x00not json")) + b"\x18\x01"
    body = enveloping.envelope("apps/v1", "ControllerRevision", message)
    scope = keys.Scope("kubelet", "controllerrevisions", "v1", "apps")
    job = store.PutObject(scope, body, "d", name="rev", protobuf=True)
    url_path = "/apis/apps/v1/namespaces/d/controllerrevisions/rev"
    async with answering(tmp_path, job) as (s, base):
        assert await fetch(s, base + url_path, PROTOBUF_FIRST) == (200, PROTOBUF_ONLY, body)
        with caplog.at_level(logging.WARNING):
            status, _, got = await fetch(s, base + url_path, "application/json")
        assert status == 404 and orjson.loads(got)["reason"] == "NotFound"
        assert "corrupt" in caplog.text
