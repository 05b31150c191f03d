"""The local answerer alone, on a real loopback server over a real store: what each reason answers.

The harness is ``cache_answering``: the test names the reason, so the answers are checked
without waiting for a heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
from typing import Any

import orjson
import pytest
from cache_answering import (
    KUBELET,
    MY_PODS,
    NODE,
    NODES,
    PODS,
    UNANSWERED,
    answering,
    get,
    pod_list,
)

from yurthub.cache import keys, store


async def test_kubelet_empty_pod_list_is_404_offline_and_unanswered_on_upstream_error(
    tmp_path: pathlib.Path,
) -> None:
    async with answering(tmp_path, store.PutList(MY_PODS, pod_list())) as (session, base):
        params = {"fieldSelector": f"spec.nodeName={NODE}"}
        status, body = await get(session, base + "/api/v1/pods", "offline", params=params)
        assert status == 404 and body["reason"] == "NotFound"
        status, _ = await get(session, base + "/api/v1/pods", "upstream-error", params=params)
        assert status == UNANSWERED  # the router reports the transport error (502)


async def test_a_client_that_takes_no_json_is_left_to_the_cloud_unless_offline(
    tmp_path: pathlib.Path,
) -> None:
    node = orjson.dumps(
        {"kind": "Node", "apiVersion": "v1", "metadata": {"name": NODE, "resourceVersion": "3"}}
    )
    async with answering(tmp_path, store.PutObject(NODES, node)) as (session, base):
        url = f"{base}/api/v1/nodes/{NODE}"
        protobuf = "application/vnd.kubernetes.protobuf"
        assert (await get(session, url, "kubelet-node"))[0] == 200
        assert (await get(session, url, "kubelet-node", accept=protobuf))[0] == UNANSWERED
        assert (await get(session, url, "upstream-error", accept=protobuf))[0] == UNANSWERED
        status, body = await get(session, url, "offline", accept=protobuf)
        assert status == 406 and body["kind"] == "Status"


async def test_a_watch_with_timeout_seconds_zero_is_held_like_one_without(
    tmp_path: pathlib.Path,
) -> None:
    # The apiserver reads timeoutSeconds=0 as "not given" (min-request-timeout x (1+rand)); a
    # watch closed at once would come straight back, over and over.
    async with answering(tmp_path, store.PutList(MY_PODS, pod_list("a"))) as (session, base):
        params = {"watch": "true", "timeoutSeconds": "0", "allowWatchBookmarks": "true"}
        headers = {"User-Agent": KUBELET, "Accept": "application/json", "X-Reason": "offline"}
        async with session.get(base + "/api/v1/pods", params=params, headers=headers) as resp:
            assert resp.status == 200
            async with asyncio.timeout(5):
                line = await resp.content.readline()
            assert orjson.loads(line)["type"] == "BOOKMARK"  # still open after a bookmark interval


async def test_views_of_a_long_list_are_whole(tmp_path: pathlib.Path) -> None:
    # Over one page (store.PAGE_ROWS): views are built and written a page at a
    # time, and must still be one whole document.
    names = [f"p{i:04}" for i in range(store.PAGE_ROWS * 2 + 7)]
    async with answering(tmp_path, store.PutList(MY_PODS, pod_list(*names))) as (session, base):
        params = {"fieldSelector": f"spec.nodeName={NODE}"}
        table = "application/json;as=Table;v=v1;g=meta.k8s.io"
        status, view = await get(
            session, base + "/api/v1/pods", "offline", accept=table, params=params
        )
        assert status == 200 and view["kind"] == "Table"
        assert [c["name"] for c in view["columnDefinitions"]][:3] == ["Name", "Ready", "Status"]
        assert [r["cells"][0] for r in view["rows"]] == names
        assert view["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
        partial = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
        status, items = await get(
            session, base + "/api/v1/pods", "offline", accept=partial, params=params
        )
        assert status == 200 and items["kind"] == "PartialObjectMetadataList"
        assert [i["metadata"]["name"] for i in items["items"]] == names
        status, plain = await get(session, base + "/api/v1/pods", "offline", params=params)
        assert status == 200 and [i["metadata"]["name"] for i in plain["items"]] == names


async def test_a_list_of_everything_streams_page_by_page_and_is_whole(
    tmp_path: pathlib.Path,
) -> None:
    # No selector: the whole range is read from SQLite a page (store.PAGE_ROWS) at a time and
    # streamed; the answer is still one ordered document, and the initial events of a
    # streaming list are every object plus the end bookmark.
    names = [f"p{i:04}" for i in range(store.PAGE_ROWS * 2 + 3)]
    everything = keys.list_key(PODS, "", "", "")
    async with answering(tmp_path, store.PutList(everything, pod_list(*names))) as (session, base):
        status, plain = await get(session, base + "/api/v1/pods", "offline", ua="kube-proxy/1")
        assert status == 404  # another component's cache
        status, plain = await get(session, base + "/api/v1/pods", "offline")
        assert status == 200 and plain["kind"] == "PodList"
        assert [i["metadata"]["name"] for i in plain["items"]] == names
        assert plain["items"][0]["kind"] == "Pod"
        params = {"watch": "1", "sendInitialEvents": "true", "allowWatchBookmarks": "true"}
        headers = {"User-Agent": KUBELET, "Accept": "application/json", "X-Reason": "offline"}
        async with session.get(base + "/api/v1/pods", params=params, headers=headers) as resp:
            assert resp.status == 200
            seen: list[str] = []
            async with asyncio.timeout(10):
                while True:
                    event = orjson.loads(await resp.content.readline())
                    if event["type"] == "BOOKMARK":
                        notes = event["object"]["metadata"].get("annotations", {})
                        assert notes == {"k8s.io/initial-events-end": "true"}
                        break
                    assert event["type"] == "ADDED"
                    seen.append(event["object"]["metadata"]["name"])
        assert seen == names


async def test_kubelet_lease_writes_offline(tmp_path: pathlib.Path) -> None:
    leases = keys.Scope("kubelet", "leases", "v1", "coordination.k8s.io")
    lease: dict[str, Any] = {
        "kind": "Lease",
        "apiVersion": "coordination.k8s.io/v1",
        "metadata": {"name": NODE, "namespace": "kube-node-lease", "resourceVersion": "4"},
        "spec": {"holderIdentity": NODE},
    }
    cached = store.PutObject(leases, orjson.dumps(lease), "kube-node-lease")
    async with answering(tmp_path, cached) as (session, base):
        collection = f"{base}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        headers = {"User-Agent": KUBELET, "X-Reason": "kubelet-lease"}
        # kubelet creates by POSTing to the collection: the name is the body's.
        async with session.post(collection, json=lease, headers=headers) as resp:
            assert resp.status == 409 and (await resp.json())["reason"] == "AlreadyExists"
        other = {**lease, "metadata": {**lease["metadata"], "name": "other-node"}}
        async with session.put(f"{collection}/{NODE}", json=other, headers=headers) as resp:
            assert resp.status == 400  # would have been stored as other-node's lease
        async with session.put(f"{collection}/{NODE}", json=lease, headers=headers) as resp:
            assert resp.status == 200
        status, body = await get(session, f"{collection}/{NODE}", "kubelet-lease")
        assert status == 200 and body["metadata"]["name"] == NODE
        assert (await get(session, f"{collection}/other-node", "kubelet-lease"))[0] == 404


def _pb(number: int, value: int | bytes | str) -> bytes:
    """One protobuf field (varint or length-delimited), as Go's gogo encoder writes it."""

    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                return bytes(out)

    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    return b"k8s\x00" + _pb(1, _pb(1, api_version) + _pb(2, kind)) + _pb(2, raw)


async def test_kubelet_protobuf_lease_and_token_request_offline(tmp_path: pathlib.Path) -> None:
    # A real kubelet sends its Lease renewals and TokenRequests as protobuf.
    leases = keys.Scope("kubelet", "leases", "v1", "coordination.k8s.io")
    cached = {
        "kind": "Lease",
        "apiVersion": "coordination.k8s.io/v1",
        "metadata": {"name": NODE, "namespace": "kube-node-lease", "resourceVersion": "4"},
        "spec": {"holderIdentity": NODE},
    }
    job = store.PutObject(leases, orjson.dumps(cached), "kube-node-lease")
    meta = _pb(1, NODE) + _pb(3, "kube-node-lease") + _pb(6, "4")
    lease = _envelope(
        "coordination.k8s.io/v1", "Lease", _pb(1, meta) + _pb(2, _pb(1, NODE) + _pb(2, 40))
    )
    # kubelet's request for the projected token of a pod it runs (as the cache holds it).
    bound = _pb(1, "Pod") + _pb(2, "v1") + _pb(3, "app") + _pb(4, "u-1")
    spec = _pb(1, "api") + _pb(3, bound) + _pb(4, 3607)
    token = _envelope("authentication.k8s.io/v1", "TokenRequest", _pb(2, spec))
    pod = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": "app", "namespace": "default", "uid": "u-1", "resourceVersion": "2"},
        "spec": {
            "nodeName": NODE,
            "serviceAccountName": "default",
            "volumes": [
                {
                    "name": "t",
                    "projected": {"sources": [{"serviceAccountToken": {"audience": "api"}}]},
                }
            ],
        },
    }
    pods = store.PutObject(keys.Scope("kubelet", "pods", "v1"), orjson.dumps(pod), "default")
    async with answering(tmp_path, job, pods) as (session, base):
        url = f"{base}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}"
        headers = {
            "User-Agent": KUBELET,
            "X-Reason": "kubelet-lease",
            "Content-Type": "application/vnd.kubernetes.protobuf",
            "Accept": "application/vnd.kubernetes.protobuf,application/json",
        }
        async with session.put(url, data=lease, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            assert resp.content_type == "application/json"
            answer = await resp.json()
        assert answer["spec"] == {"holderIdentity": NODE, "leaseDurationSeconds": 40}
        # The renewal is written behind the answer: a later GET agrees once it landed.
        async with asyncio.timeout(5):
            while True:
                status, body = await get(session, url, "kubelet-lease")
                if body.get("spec", {}).get("leaseDurationSeconds") == 40:
                    break
                await asyncio.sleep(0.05)
        assert status == 200
        async with session.put(url, data=b"k8s\x00garbage", headers=headers) as resp:
            assert resp.status == 400 and "cannot be read" in (await resp.json())["message"]
        url = f"{base}/api/v1/namespaces/default/serviceaccounts/default/token"
        async with session.post(
            url, data=token, headers={**headers, "X-Reason": "offline"}
        ) as resp:
            assert resp.status == 201, await resp.text()
            answer = await resp.json()
        assert answer["spec"]["audiences"] == ["api"]
        assert answer["spec"]["boundObjectRef"]["uid"] == "u-1"


async def test_a_client_leaving_mid_list_is_no_server_error(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    padded = orjson.loads(pod_list(*(f"p{i:04}" for i in range(2000))))
    for item in padded["items"]:
        item["spec"]["pad"] = "x" * 4000
    job = store.PutList(MY_PODS, orjson.dumps(padded))
    async with answering(tmp_path, job) as (session, base):
        headers = {"User-Agent": KUBELET, "Accept": "application/json", "X-Reason": "offline"}
        params = {"fieldSelector": f"spec.nodeName={NODE}"}
        async with session.get(base + "/api/v1/pods", params=params, headers=headers) as resp:
            assert resp.status == 200
            await resp.content.readany()
            resp.connection.transport.abort()  # type: ignore[union-attr]
        await asyncio.sleep(0.5)  # the server writes on into a closed connection
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
