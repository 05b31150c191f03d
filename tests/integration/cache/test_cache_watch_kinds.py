"""The kind an offline held watch's BOOKMARKs carry when the hub holds no list of that scope.

client-go decodes every watch event's object by its own ``kind`` (``runtime.Decode`` with no
target type): a bookmark with an empty kind ends the watch with ``Object 'Kind' is missing``,
and kubelet's Node watch (by field selector, a scope the hub often has no list record of) met
it at every bookmark interval. The hub names the kind from what it knows: Kubernetes' own
resources, the objects and lists it stores, and the discovery documents it keeps.
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import aiohttp
import orjson
from cache_answering import KUBELET, NODE, NODES, answering

from yurthub.cache import keys, store
from yurthub.kubeproto import converting, enveloping
from yurthub.proxy import localkinds

WATCH = {"watch": "true", "allowWatchBookmarks": "true", "resourceVersion": "7"}
MY_NODE = {"fieldSelector": f"metadata.name={NODE}"}
WIDGETS = keys.Scope("kubelet", "widgets", "v1", "example.com")


async def first_event(
    session: aiohttp.ClientSession, url: str, params: dict[str, str], accept: str
) -> tuple[str, bytes]:
    """The content type and first line or frame of an offline watch (held open, so the first
    bookmark comes after the harness's bookmark interval)."""
    headers = {"User-Agent": KUBELET, "Accept": accept, "X-Reason": "offline"}
    async with session.get(url, params=params, headers=headers) as resp, asyncio.timeout(10):
        assert resp.status == 200
        content_type = resp.headers["Content-Type"]
        if content_type == enveloping.WATCH_CONTENT_TYPE:
            size = int.from_bytes(await resp.content.readexactly(4), "big")
            return content_type, await resp.content.readexactly(size)
        return content_type, await resp.content.readline()


async def json_bookmark(
    session: aiohttp.ClientSession, url: str, params: dict[str, str]
) -> dict[str, Any]:
    _, line = await first_event(session, url, params, "application/json")
    event = orjson.loads(line)
    assert event["type"] == "BOOKMARK"
    obj: dict[str, Any] = event["object"]
    return obj


async def test_kubelets_node_watch_with_nothing_cached_bookmarks_a_node(
    tmp_path: pathlib.Path,
) -> None:
    async with answering(tmp_path) as (session, base):
        obj = await json_bookmark(session, base + "/api/v1/nodes", {**WATCH, **MY_NODE})
    assert (obj["kind"], obj["apiVersion"]) == ("Node", "v1")
    assert obj["metadata"]["resourceVersion"] == "7"


async def test_a_node_watch_with_the_node_but_no_list_cached_bookmarks_a_node(
    tmp_path: pathlib.Path,
) -> None:
    node = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": NODE, "resourceVersion": "3"}}
    async with answering(tmp_path, store.PutObject(NODES, orjson.dumps(node))) as (session, base):
        obj = await json_bookmark(session, base + "/api/v1/nodes", {**WATCH, **MY_NODE})
    assert (obj["kind"], obj["apiVersion"]) == ("Node", "v1")


async def test_a_protobuf_only_node_watch_bookmarks_a_node(tmp_path: pathlib.Path) -> None:
    async with answering(tmp_path) as (session, base):
        content_type, frame = await first_event(
            session,
            base + "/api/v1/nodes",
            {**WATCH, **MY_NODE},
            "application/vnd.kubernetes.protobuf",
        )
    assert content_type == enveloping.WATCH_CONTENT_TYPE
    event = converting.Converter().event(frame)
    assert event["type"] == "BOOKMARK"
    assert (event["object"]["kind"], event["object"]["apiVersion"]) == ("Node", "v1")


async def test_a_custom_resource_watch_takes_its_kind_from_cached_discovery(
    tmp_path: pathlib.Path,
) -> None:
    discovery = {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "items": [
            {
                "metadata": {"name": "example.com"},
                "versions": [
                    {
                        "version": "v1",
                        "resources": [
                            {
                                "resource": "widgets",
                                "responseKind": {
                                    "group": "example.com",
                                    "version": "v1",
                                    "kind": "Widget",
                                },
                                "scope": "Namespaced",
                            }
                        ],
                    }
                ],
            }
        ],
    }
    key = keys.nonresource_key("/apis", "as=APIGroupDiscoveryList;g=apidiscovery.k8s.io;v=v2")
    document = store.PutDocument(
        key,
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        orjson.dumps(discovery),
    )
    async with answering(tmp_path, document) as (session, base):
        obj = await json_bookmark(session, base + "/apis/example.com/v1/widgets", WATCH)
    assert (obj["kind"], obj["apiVersion"]) == ("Widget", "example.com/v1")


async def test_a_custom_resource_watch_takes_its_kind_from_a_stored_object(
    tmp_path: pathlib.Path,
) -> None:
    widget = {
        "kind": "Widget",
        "apiVersion": "example.com/v1",
        "metadata": {"name": "w", "namespace": "d", "resourceVersion": "3"},
    }
    job = store.PutObject(WIDGETS, orjson.dumps(widget), "d")
    async with answering(tmp_path, job) as (session, base):
        obj = await json_bookmark(
            session, base + "/apis/example.com/v1/namespaces/d/widgets", {**WATCH, **MY_NODE}
        )
    assert (obj["kind"], obj["apiVersion"]) == ("Widget", "example.com/v1")


async def test_a_watch_of_a_resource_the_hub_cannot_name_is_held_without_bookmarks(
    tmp_path: pathlib.Path,
) -> None:
    # No kind to give: a bookmark would end the client's watch with a decode error, so the
    # watch is held to its timeout with none (bookmarks are optional to the client).
    params = {**WATCH, "timeoutSeconds": "1"}
    headers = {"User-Agent": KUBELET, "Accept": "application/json", "X-Reason": "offline"}
    async with answering(tmp_path) as (session, base):
        url = base + "/apis/example.com/v1/widgets"
        async with session.get(url, params=params, headers=headers) as resp, asyncio.timeout(30):
            assert resp.status == 200
            assert await resp.read() == b""


async def test_a_streaming_list_the_hub_cannot_name_the_kind_of_is_refused_before_it_starts(
    tmp_path: pathlib.Path,
) -> None:
    # A whole list of widgets whose answer named no item kind ("List"): its end bookmark could
    # not decode, so the client gets a Status (client-go then falls back to a plain list).
    empty = {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "4"}, "items": []}
    job = store.PutList(keys.list_key(WIDGETS, "", "", ""), orjson.dumps(empty))
    params = {"watch": "1", "sendInitialEvents": "true", "allowWatchBookmarks": "true"}
    headers = {"User-Agent": KUBELET, "Accept": "application/json", "X-Reason": "offline"}
    async with answering(tmp_path, job) as (session, base):
        url = base + "/apis/example.com/v1/widgets"
        async with session.get(url, params=params, headers=headers) as resp:
            assert resp.status == 503
            status = orjson.loads(await resp.read())
    assert status["kind"] == "Status" and "widgets.example.com" in status["message"]


async def test_a_parsed_discovery_document_is_kept_a_while_then_read_again(
    tmp_path: pathlib.Path,
) -> None:
    def listing(kind: str) -> store.PutDocument:
        document = {
            "kind": "APIResourceList",
            "groupVersion": "example.com/v1",
            "resources": [{"name": "widgets", "kind": kind}],
        }
        key = keys.nonresource_key("/apis/example.com/v1")
        return store.PutDocument(key, "application/json", orjson.dumps(document))

    now = [0.0]
    cache = await store.Store.open(tmp_path / "cache")
    try:
        assert cache.submit(listing("Widget")) and await cache.flush(5)
        kinds = localkinds.Kinds(cache, clock=lambda: now[0])
        assert await kinds.kind(WIDGETS) == "Widget"
        assert cache.submit(listing("Renamed")) and await cache.flush(5)
        now[0] = localkinds.MEMO_SECONDS - 1
        assert await kinds.kind(WIDGETS) == "Widget"  # the memo, not a parse per watch
        now[0] = localkinds.MEMO_SECONDS
        assert await kinds.kind(WIDGETS) == "Renamed"
    finally:
        await cache.close()
