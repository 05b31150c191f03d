"""The tee on protobuf answers (kubelet and kube-proxy get the apiserver's protobuf): the
cache stores the same JSON the apiserver's JSON answer holds, for lists (gzip too), single
objects and streaming-list watches, and stores nothing for what does not convert.

Bodies are real: tests/data/kubeproto/ holds answers captured from kube-apiserver v1.37.2 in
both representations (see tests/unit/kubeproto/test_converting.py).
"""

from __future__ import annotations

import gzip
import logging
import pathlib

import orjson
import pytest
from cache_tees import KUBELET, tee_for
from multidict import CIMultiDict

from yurthub import requestinfo
from yurthub.cache import keys, store
from yurthub.kubeproto import converting

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "kubeproto"
PB = {"Content-Type": "application/vnd.kubernetes.protobuf"}
PB_WATCH = {"Content-Type": "application/vnd.kubernetes.protobuf;stream=watch"}
ACCEPT = "application/vnd.kubernetes.protobuf,application/json"
PODS = keys.Scope("kubelet", "pods", "v1")
CONFIGMAPS = keys.Scope("kubelet", "configmaps", "v1")


def info(path: str, query: dict[str, str] | None = None) -> requestinfo.RequestInfo:
    headers = CIMultiDict({"User-Agent": KUBELET, "Accept": ACCEPT})
    return requestinfo.classify("GET", path, query or {}, headers)


async def stored(cache: store.Store, scope: keys.Scope) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, _entry in cache.objects(scope):
        body = await cache.body(key)
        assert body is not None
        out[f"{key.namespace}/{key.name}"] = orjson.loads(body)
    return out


def wanted(name: str) -> dict[str, object]:
    listed = orjson.loads((DATA / f"{name}.json").read_bytes())
    return {
        f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": o for o in listed["items"]
    }


@pytest.mark.parametrize("compressed", [False, True])
async def test_a_protobuf_list_is_cached_as_the_apiservers_json(
    cache: store.Store, compressed: bool
) -> None:
    body = (DATA / "pods.pb").read_bytes()
    headers = dict(PB)
    if compressed:
        body = gzip.compress(body)
        headers["Content-Encoding"] = "gzip"
    sink = tee_for(cache).open(info("/api/v1/pods"), 200, headers)
    assert sink is not None
    for i in range(0, len(body), 1000):  # as the stream comes, in pieces
        sink.feed(body[i : i + 1000])
    await sink.finish()
    assert await cache.flush(5)
    got = await stored(cache, PODS)
    want = wanted("pods")
    # The store adds the kind and apiVersion a list's items lack.
    assert got == {k: {"kind": "Pod", "apiVersion": "v1", **v} for k, v in want.items()}
    record = cache.list_record(keys.list_key(PODS, "", "", ""))
    assert record is not None and record.members == len(want)


async def test_a_protobuf_object_is_cached(cache: store.Store) -> None:
    converter = converting.Converter()
    pods = orjson.loads((DATA / "pods.json").read_bytes())
    first = pods["items"][0]
    # A single-object answer: the envelope of a Pod (taken from the list's first item).
    listed = (DATA / "pods.pb").read_bytes()
    api_version, kind, raw = converter.envelope(listed)
    assert (api_version, kind) == ("v1", "PodList")
    item = _first_item(raw)
    body = _envelope("v1", "Pod", item)
    namespace, name = first["metadata"]["namespace"], first["metadata"]["name"]
    sink = tee_for(cache).open(info(f"/api/v1/namespaces/{namespace}/pods/{name}"), 200, PB)
    assert sink is not None
    sink.feed(body)
    await sink.finish()
    assert await cache.flush(5)
    assert await stored(cache, PODS) == {
        f"{namespace}/{name}": {"kind": "Pod", "apiVersion": "v1", **first}
    }


async def test_a_protobuf_streaming_list_makes_an_answerable_list(cache: store.Store) -> None:
    query = {
        "watch": "1",
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
    }
    sink = tee_for(cache).open(info("/api/v1/configmaps", query), 200, PB_WATCH)
    assert sink is not None
    stream = (DATA / "watch-configmaps.pb").read_bytes()
    for i in range(0, len(stream), 333):
        sink.feed(stream[i : i + 333])
    await sink.finish()
    assert await cache.flush(5)
    events = [
        orjson.loads(line)
        for line in (DATA / "watch-configmaps.json").read_bytes().split(b"\n")
        if line
    ]
    want = {
        f"{e['object']['metadata']['namespace']}/{e['object']['metadata']['name']}": e["object"]
        for e in events
        if e["type"] == "ADDED"
    }
    assert await stored(cache, CONFIGMAPS) == want
    record = cache.list_record(keys.list_key(CONFIGMAPS, "", "", ""))
    end = events[-1]["object"]["metadata"]["resourceVersion"]
    assert record is not None and record.resource_version == end
    assert record.members == len(want)


async def test_a_body_that_does_not_convert_stores_nothing_and_is_logged_once(
    cache: store.Store, caplog: pytest.LogCaptureFixture
) -> None:
    widget = _envelope("example.com/v1", "WidgetList", b"\x0a\x00")
    caplog.set_level(logging.DEBUG, "yurthub.cache.transcoding")
    for _ in range(2):
        sink = tee_for(cache).open(info("/api/v1/pods"), 200, PB)
        assert sink is not None
        sink.feed(widget)
        await sink.finish()
        assert await cache.flush(5)
    assert await stored(cache, PODS) == {}
    assert cache.list_record(keys.list_key(PODS, "", "", "")) is None
    assert cache.stats.bad_bodies == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "example.com/v1/WidgetList" in warnings[0].getMessage()


async def test_a_cut_streaming_list_with_a_corrupt_frame_makes_no_list(cache: store.Store) -> None:
    query = {"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
    sink = tee_for(cache).open(info("/api/v1/configmaps", query), 200, PB_WATCH)
    assert sink is not None
    stream = (DATA / "watch-configmaps.pb").read_bytes()
    first = 4 + int.from_bytes(stream[:4], "big")
    sink.feed(stream[:first])  # one good event
    sink.feed(b"\x00\x00\x00\x03abc")  # a frame that is no WatchEvent
    sink.feed(stream[first : first + 10])  # a frame cut short by the end of the stream
    sink.abort("upstream went away")
    assert await cache.flush(5)
    assert len(await stored(cache, CONFIGMAPS)) == 1  # the good event is kept
    assert cache.list_record(keys.list_key(CONFIGMAPS, "", "", "")) is None


async def test_a_frame_over_the_event_bound_stops_caching_the_stream(cache: store.Store) -> None:
    sink = tee_for(cache).open(info("/api/v1/configmaps", {"watch": "1"}), 200, PB_WATCH)
    assert sink is not None
    sink.feed((1 << 21).to_bytes(4, "big"))  # announces 2 MiB, over the 1 MiB bound
    assert not sink.collecting
    assert cache.stats.dropped_responses == 1


def _field(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _field(1, api_version.encode()) + _field(2, kind.encode())
    return converting.MAGIC + _field(1, type_meta) + _field(2, raw)


def _first_item(list_message: bytes) -> bytes:
    """The bytes of field 2 (items) of a list message: its first object."""
    pos = 0
    while pos < len(list_message):
        key, pos = _read_varint(list_message, pos)
        size, pos = _read_varint(list_message, pos)
        if key >> 3 == 2:
            return list_message[pos : pos + size]
        pos += size
    raise AssertionError("no item")


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
