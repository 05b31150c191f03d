"""Gzip bodies: the real apiserver compresses large lists and streaming lists for every Go client
(``Accept-Encoding: gzip``). The tee inflates them for the cache; a broken or truncated one
caches nothing; a bomb costs one bounded step."""

from __future__ import annotations

import gzip
import pathlib
import zlib

import orjson
from cache_tees import KUBELET, PODS, names, pod, tee_for
from multidict import CIMultiDict

from yurthub import requestinfo
from yurthub.cache import keys, store, teeing

GZIP = {"Content-Type": "application/json", "Content-Encoding": "gzip"}


def pod_list(*names: str) -> bytes:
    return orjson.dumps(
        {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "9"},
            "items": [pod(n, 2) for n in names],
        }
    )


def info(query: dict[str, str]) -> requestinfo.RequestInfo:
    headers = CIMultiDict({"User-Agent": KUBELET, "Accept": "application/json"})
    return requestinfo.classify("GET", "/api/v1/namespaces/d/pods", query, headers)


async def test_a_gzip_list_is_cached_inflated(cache: store.Store) -> None:
    body = gzip.compress(pod_list("a", "b"))
    sink = tee_for(cache).open(info({}), 200, GZIP)
    assert sink is not None
    for i in range(0, len(body), 7):  # any chunking of the compressed bytes
        sink.feed(body[i : i + 7])
    await sink.finish()
    assert await cache.flush(5)
    assert names(cache) == ["a", "b"]
    assert cache.list_record(keys.list_key(PODS, "d", "", "")) is not None


async def test_a_gzip_watch_stream_is_cached_event_by_event(cache: store.Store) -> None:
    # A gzip writer flushed after every event: each chunk inflates on its own.
    z = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    sink = tee_for(cache).open(info({"watch": "1"}), 200, GZIP)
    assert sink is not None
    for name, rv in (("a", 3), ("b", 4)):
        line = orjson.dumps({"type": "ADDED", "object": pod(name, rv)}) + b"\n"
        sink.feed(z.compress(line) + z.flush(zlib.Z_SYNC_FLUSH))
        assert await cache.flush(5)
        assert name in names(cache)  # applied before the stream ends
    sink.feed(z.flush())
    await sink.finish()


async def test_a_streaming_list_in_gzip_members_is_a_whole_list(cache: store.Store) -> None:
    # What kube-apiserver 1.37 sends: every flush of a watch is a gzip member of its own.
    added = orjson.dumps({"type": "ADDED", "object": pod("a", 3)}) + b"\n"
    end = orjson.dumps(
        {
            "type": "BOOKMARK",
            "object": {
                "kind": "Pod",
                "apiVersion": "v1",
                "metadata": {
                    "resourceVersion": "7",
                    "annotations": {"k8s.io/initial-events-end": "true"},
                },
            },
        }
    )
    stream = gzip.compress(added) + gzip.compress(end + b"\n")
    query = {"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
    sink = tee_for(cache).open(info(query), 200, GZIP)
    assert sink is not None
    sink.feed(stream[:40])
    sink.feed(stream[40:])  # the second member starts mid-chunk
    assert await cache.flush(5)
    record = cache.list_record(keys.list_key(PODS, "d", "", ""))
    assert record is not None and record.resource_version == "7"
    await sink.finish()
    assert cache.stats.dropped_responses == 0


async def test_a_truncated_or_corrupt_gzip_caches_nothing(cache: store.Store) -> None:
    body = gzip.compress(pod_list("a"))
    cut = tee_for(cache).open(info({}), 200, GZIP)
    assert cut is not None
    cut.feed(body[:-8])  # no trailer
    await cut.finish()
    bad = tee_for(cache).open(info({}), 200, GZIP)
    assert bad is not None
    bad.feed(b"\x1f\x8b\x08\x00garbage-not-deflate")
    await bad.finish()
    assert await cache.flush(5)
    assert names(cache) == []
    assert cache.stats.dropped_responses == 2


async def test_a_gzip_bomb_is_inflated_one_bounded_step_at_most(cache: store.Store) -> None:
    bomb = gzip.compress(b" " * (64 << 20))  # 64 MiB of spaces in ~64 KiB
    sink = tee_for(cache, max_body=1 << 20).open(info({}), 200, GZIP)
    assert sink is not None
    sink.feed(bomb)
    await sink.finish()
    assert await cache.flush(5)
    assert names(cache) == []
    assert cache.stats.dropped_responses == 1


def test_other_encodings_are_not_interpreted(tmp_path: pathlib.Path) -> None:
    tee = teeing.Tee.__new__(teeing.Tee)  # open() refuses before touching the store
    headers = {"Content-Type": "application/json", "Content-Encoding": "br"}
    assert tee.open(info({}), 200, headers) is None
