"""The tee over a real store: collected bodies are bounded across responses, not only each."""

from __future__ import annotations

import pathlib

import orjson
from multidict import CIMultiDict

from yurthub import requestinfo
from yurthub.cache import agents, keys, store, teeing

KUBELET = "kubelet/v1.32.4 (linux/amd64) kubernetes/abcdef0"
JSON = {"Content-Type": "application/json"}


def pod_list(namespace: str, *names: str) -> bytes:
    items = [
        {
            "metadata": {"name": n, "namespace": namespace, "resourceVersion": "1"},
            "spec": {"nodeName": "n"},
        }
        for n in names
    ]
    return orjson.dumps(
        {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "5"},
            "items": items,
        }
    )


def list_info(namespace: str) -> requestinfo.RequestInfo:
    headers = CIMultiDict({"User-Agent": KUBELET, "Accept": "application/json"})
    return requestinfo.classify("GET", f"/api/v1/namespaces/{namespace}/pods", {}, headers)


async def test_bodies_being_collected_share_the_store_bound(tmp_path: pathlib.Path) -> None:
    names = [f"p{i:02}" for i in range(8)]
    body = {ns: pod_list(ns, *names) for ns in "abc"}
    cache = await store.Store.open(tmp_path / "cache", max_pending_bytes=len(body["a"]) * 3 // 2)
    try:
        tee = teeing.Tee(
            cache, agents.AgentSet(node_name="n"), max_body_bytes=1 << 20, max_event_bytes=1 << 20
        )
        first, second = tee.open(list_info("a"), 200, JSON), tee.open(list_info("b"), 200, JSON)
        assert first is not None and second is not None
        first.feed(body["a"])
        second.feed(body["b"])  # both at once would pass the bound: this one is not cached
        await first.finish()
        await second.finish()
        assert cache.stats.dropped_responses == 1
        assert await cache.flush(5)
        pods = keys.Scope("kubelet", "pods", "v1")
        assert [k.namespace for k, _ in cache.objects(pods)] == ["a"] * 8
        # What the first one held was given back: the next response is collected again.
        third = tee.open(list_info("c"), 200, JSON)
        assert third is not None
        third.feed(body["c"][:10])
        third.abort("client went away")
        fourth = tee.open(list_info("b"), 200, JSON)
        assert fourth is not None
        fourth.feed(body["b"])
        await fourth.finish()
        assert await cache.flush(5)
        assert cache.stats.dropped_responses == 1
        assert {k.namespace for k, _ in cache.objects(pods)} == {"a", "b"}
    finally:
        await cache.close()
