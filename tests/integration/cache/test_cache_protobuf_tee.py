"""The tee on protobuf answers (kubelet and kube-proxy get the apiserver's protobuf): the
cache stores each object as received (enveloped as a get answers it), reads what its index
needs from the wire, and gives JSON readers the same JSON the apiserver's JSON answer holds,
for lists (gzip too), single objects, streaming-list watches and watch events; it stores
nothing for what does not decode.

Bodies are real: tests/data/kubeproto/ holds answers captured from kube-apiserver v1.37.2 in
both representations (see tests/unit/kubeproto/test_converting.py).
"""

from __future__ import annotations

import gzip
import logging
import pathlib
from typing import Any

import orjson
import pytest
from cache_tees import KUBELET, tee_for
from multidict import CIMultiDict

from yurthub import requestinfo
from yurthub.cache import keys, store
from yurthub.kubeproto import converting, wire

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


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = wire.delimited(1, api_version.encode()) + wire.delimited(2, kind.encode())
    return converting.MAGIC + wire.delimited(1, type_meta) + wire.delimited(2, raw)


def _first_item(list_message: bytes) -> bytes:
    """The bytes of field 2 (items) of a list message: its first object."""
    pos = 0
    while pos < len(list_message):
        key, pos = wire.varint(list_message, pos)
        size, pos = wire.varint(list_message, pos)
        if key >> 3 == 2:
            return list_message[pos : pos + size]
        pos += size
    raise AssertionError("no item")


def relisted(body: bytes, changed: dict[str, str]) -> bytes:
    """``body`` (a protobuf PodList) with the pods named in ``changed`` at a new
    resourceVersion and labelled ``changed=yes``: what a relist after an update carries."""
    split = converting.Converter().split_list(body)
    assert split is not None
    items = []
    for span in split.items:
        pod = split.item_class.FromString(span)
        meta: Any = getattr(pod, "metadata")  # noqa: B009  (generated class, no stubs)
        if meta.name in changed:
            meta.resourceVersion = changed[meta.name]
            meta.labels["changed"] = "yes"
        items.append(pod.SerializeToString())
    envelope = body[len(converting.MAGIC) :]
    out = bytearray(converting.MAGIC)
    for number, _wire, value, whole in wire.fields(envelope):
        if number != 2:
            out += whole
            continue
        assert isinstance(value, bytes)
        head = b"".join(w for n, _t, _v, w in wire.fields(value) if n != 2)
        out += wire.delimited(2, head + b"".join(wire.delimited(2, item) for item in items))
    return bytes(out)


def counting(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """(names of list items read for the index, of list items converted whole)."""
    read: list[str] = []
    converted: list[str] = []
    skeleton, item = converting.SplitList.skeleton, converting.SplitList.item

    def counted_skeleton(
        self: converting.SplitList, span: bytes, paths: dict[str, Any]
    ) -> dict[str, Any]:
        out = skeleton(self, span, paths)
        read.append(out["metadata"]["name"])
        return out

    def counted_item(self: converting.SplitList, span: bytes) -> dict[str, Any]:
        out = item(self, span)
        converted.append(out["metadata"]["name"])
        return out

    monkeypatch.setattr(converting.SplitList, "skeleton", counted_skeleton)
    monkeypatch.setattr(converting.SplitList, "item", counted_item)
    return read, converted


async def test_a_protobuf_list_is_stored_as_received(cache: store.Store) -> None:
    everything = keys.list_key(PODS, "", "", "")
    body = (DATA / "pods.pb").read_bytes()
    split = converting.Converter().split_list(body)
    assert split is not None
    assert cache.submit(store.PutList(everything, body, protobuf=True))
    assert await cache.flush(5)
    raw = await cache.all_bodies(keys.object_key(PODS, "", ""))
    assert raw and not any(store.is_protobuf(b) for b in raw)  # JSON for JSON readers
    as_stored: list[bytes] = []
    async for page in cache.pages(keys.object_key(PODS, "", ""), as_stored=True):
        as_stored.extend(page)
    assert all(store.is_protobuf(b) for b in as_stored)
    # Each is the item's message in the envelope a get of it answers with.
    spans = sorted(bytes(span) for span in split.items)
    assert sorted(converting.Converter().envelope(b)[2] for b in as_stored) == spans
    assert {converting.Converter().envelope(b)[:2] for b in as_stored} == {("v1", "Pod")}


async def test_a_protobuf_relist_reads_only_the_items_that_changed(
    cache: store.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    read, converted = counting(monkeypatch)
    everything = keys.list_key(PODS, "", "", "")
    body = (DATA / "pods.pb").read_bytes()
    want = wanted("pods")
    assert cache.submit(store.PutList(everything, body, protobuf=True))
    assert await cache.flush(5)
    assert len(read) == len(want)
    assert converted == []  # stored as received: nothing converted to write it
    converted = read
    first = await stored(cache, PODS)

    converted.clear()
    assert cache.submit(store.PutList(everything, body, protobuf=True))
    assert await cache.flush(5)
    assert converted == []  # same names, same resourceVersions: nothing converted
    assert await stored(cache, PODS) == first

    name = next(iter(want)).split("/")[1]
    assert cache.submit(store.PutList(everything, relisted(body, {name: "999999"}), protobuf=True))
    assert await cache.flush(5)
    assert converted == [name]
    after = await stored(cache, PODS)
    changed = [k for k in after if after[k] != first[k]]
    assert [k.split("/")[1] for k in changed] == [name]
    (key,) = changed
    pod: Any = after[key]
    assert pod["metadata"]["labels"]["changed"] == "yes"
    assert pod["metadata"]["resourceVersion"] == "999999"
    assert (pod["kind"], pod["apiVersion"]) == ("Pod", "v1")


async def test_a_protobuf_list_with_an_item_that_does_not_convert_stores_nothing(
    cache: store.Store, caplog: pytest.LogCaptureFixture
) -> None:
    good = relisted((DATA / "pods.pb").read_bytes(), {})
    split = converting.Converter().split_list(good)
    assert split is not None
    # The last item's bytes replaced by a message that is no Pod (a varint in a string field).
    last = split.items[-1]
    broken = good.replace(wire.delimited(2, last), wire.delimited(2, b"\x0a\x03\x08\x01\x02"))
    assert broken != good
    everything = keys.list_key(PODS, "", "", "")
    failures = cache.transcoder.failures
    with caplog.at_level(logging.WARNING):
        assert cache.submit(store.PutList(everything, broken, protobuf=True))
        assert await cache.flush(5)
    assert await stored(cache, PODS) == {}
    assert cache.list_record(everything) is None
    assert cache.transcoder.failures == failures + 1
    assert "does not convert" in caplog.text


async def test_a_newer_protobuf_list_supersedes_a_queued_one(cache: store.Store) -> None:
    everything = keys.list_key(PODS, "", "", "")
    body = (DATA / "pods.pb").read_bytes()
    assert store.transcoding.whole_list_kind(body) == "PodList"
    # A big JSON list keeps the writer busy while the two protobuf lists queue behind it.
    blocker = orjson.dumps(
        {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "1"},
            "items": [
                {"metadata": {"name": f"b{i}", "namespace": "x", "resourceVersion": "1"},
                 "spec": {"nodeName": "other", "containers": [{"name": "c", "image": "i" * 500}]}}
                for i in range(3000)
            ],
        }
    )  # fmt: skip
    mine = keys.list_key(PODS, "", "", "spec.nodeName=other")
    assert cache.submit(store.PutList(mine, blocker))
    assert cache.submit(store.PutList(everything, body, protobuf=True))
    assert cache.submit(store.PutList(everything, relisted(body, {}), protobuf=True))
    assert await cache.flush(10)
    assert cache.stats.superseded_lists == 1
    assert cache.list_record(everything) is not None


async def test_a_repeated_protobuf_streaming_list_reads_only_its_bookmark(
    cache: store.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # kubelet and kube-proxy 1.37 list by streaming: every restart or re-watch sends the
    # whole state again, mostly what the cache holds at the same resourceVersion.
    converted: list[str] = []
    original = converting.Converter.skeleton

    def counted(self: converting.Converter, body: bytes, paths: dict[str, Any]) -> dict[str, Any]:
        out = original(self, body, paths)
        converted.append(str(out["metadata"].get("name")))
        return out

    monkeypatch.setattr(converting.Converter, "skeleton", counted)
    query = {"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
    stream = (DATA / "watch-configmaps.pb").read_bytes()
    stored_before: dict[str, object] = {}
    for round_ in range(2):
        converted.clear()
        sink = tee_for(cache).open(info("/api/v1/configmaps", query), 200, PB_WATCH)
        assert sink is not None
        sink.feed(stream)
        await sink.finish()
        assert await cache.flush(5)
        now = await stored(cache, CONFIGMAPS)
        objects = list(converted)
        if round_ == 0:
            assert len(objects) == len(now) > 1
            stored_before = now
        else:
            assert objects == []  # every object known at its version
            assert now == stored_before
        assert cache.list_record(keys.list_key(CONFIGMAPS, "", "", "")) is not None


def _frame(event_type: str, body: bytes) -> bytes:
    event = wire.delimited(1, event_type.encode()) + wire.delimited(2, wire.delimited(1, body))
    return len(event).to_bytes(4, "big") + event


async def test_protobuf_watch_events_are_stored_as_received(cache: store.Store) -> None:
    converter = converting.Converter()
    stream = (DATA / "watch-configmaps.pb").read_bytes()
    frames = []
    at = 0
    while at < len(stream):
        size = int.from_bytes(stream[at : at + 4], "big")
        frames.append(stream[at + 4 : at + 4 + size])
        at += 4 + size
    added = [body for t, body in map(converter.event_parts, frames) if t == "ADDED"]
    assert len(added) > 1
    sink = tee_for(cache).open(info("/api/v1/configmaps", {"watch": "1"}), 200, PB_WATCH)
    assert sink is not None
    for body in added:
        sink.feed(_frame("ADDED", body))
    gone = added[0]
    _, _, name, namespace, _ = converter.identity(gone)
    sink.feed(_frame("DELETED", gone))
    await sink.finish()
    assert await cache.flush(5)
    names = {(k.namespace, k.name) for k, _ in cache.objects(CONFIGMAPS)}
    want = {converter.identity(b)[3:1:-1] for b in added[1:]}
    assert names == want and (namespace, name) not in names
    kept = await cache.bodies([k for k, _ in cache.objects(CONFIGMAPS)], as_stored=True)
    assert sorted(b for b in kept if b is not None) == sorted(added[1:])
    json_bodies = await stored(cache, CONFIGMAPS)
    assert json_bodies == {
        f"{o['metadata']['namespace']}/{o['metadata']['name']}": o
        for o in (converter.object(b) for b in added[1:])
    }
