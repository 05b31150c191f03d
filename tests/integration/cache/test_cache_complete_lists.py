"""Offline lists are complete or 404: only a cached list that covers the request answers it.

kubelet reads a pod missing from its pod list as deleted and kills it, so a partial list served
as whole is the worst answer the hub can give. A list record (made only by a whole list
response) covers a request when its namespace is all or the request's, and the request carries
every requirement of its selectors. Watches, gets and narrower lists make no list answerable.
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import orjson
import pytest
from cache_answering import KUBELET, MY_PODS, NODE, PODS, UNANSWERED, answering, get, pod_list

from yurthub.cache import keys, selectors, store

PROXY = "kube-proxy/v1.32.4 (linux/amd64) kubernetes/abcdef0"
SERVICES = keys.Scope("kube-proxy", "services", "v1")


def service(name: str, rv: int, namespace: str = "d", **labels: str) -> dict[str, Any]:
    return {
        "kind": "Service",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": str(rv),
            "labels": labels,
        },
        "spec": {"type": "ClusterIP", "clusterIP": f"10.0.0.{rv}"},
    }


def service_list(rv: int, *items: dict[str, Any]) -> bytes:
    return orjson.dumps(
        {
            "kind": "ServiceList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(rv)},
            "items": list(items),
        }
    )


def services_key(namespace: str = "", labels: str = "") -> keys.ListKey:
    return keys.list_key(SERVICES, namespace, selectors.parse_labels(labels).canonical(), "")


def event(kind: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": kind, "object": obj})


def bookmark(rv: int, kind: str) -> bytes:
    return event(
        "BOOKMARK", {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)}}
    )


def pod(name: str, rv: int) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "d", "resourceVersion": str(rv)},
        "spec": {"nodeName": NODE},
    }


def names(body: dict[str, Any]) -> list[str]:
    return sorted(i["metadata"]["name"] for i in body["items"])


async def test_a_watch_alone_answers_gets_but_no_list(tmp_path: pathlib.Path) -> None:
    # A hub restarted with an empty cache: kubelet and kube-proxy re-watch from their last
    # versions without relisting, so the cache holds only what changed since.
    jobs = (
        store.WatchLines(MY_PODS, (event("ADDED", pod("changed", 7)), bookmark(8, "Pod"))),
        store.WatchLines(services_key(), (event("MODIFIED", service("s1", 7)),)),
    )
    async with answering(tmp_path, *jobs) as (session, base):
        mine = {"fieldSelector": f"spec.nodeName={NODE}"}
        status, body = await get(session, base + "/api/v1/pods", "offline", params=mine)
        assert status == 404 and body["reason"] == "NotFound"
        status, _ = await get(session, base + "/api/v1/pods", "upstream-error", params=mine)
        assert status == UNANSWERED  # the upstream's failure is the truer answer
        status, body = await get(session, base + "/api/v1/services", "offline", ua=PROXY)
        assert status == 404 and body["reason"] == "NotFound"
        # What the watches carried still answers gets, and lists by name (answered like a get).
        status, body = await get(session, base + "/api/v1/namespaces/d/pods/changed", "offline")
        assert status == 200 and body["metadata"]["resourceVersion"] == "7"
        status, body = await get(
            session, base + "/api/v1/namespaces/d/services/s1", "offline", ua=PROXY
        )
        assert status == 200 and body["metadata"]["name"] == "s1"
        by_name = {"fieldSelector": "metadata.name=s1"}
        status, body = await get(
            session, base + "/api/v1/namespaces/d/services", "offline", ua=PROXY, params=by_name
        )
        assert status == 200 and names(body) == ["s1"]


@pytest.mark.parametrize(
    ("cached", "path", "labels", "answer"),
    [
        # narrow list cached, broad list asked: the narrow one cannot say what else exists
        (services_key(labels="app=a"), "/api/v1/services", "", None),
        (services_key(labels="app=a"), "/api/v1/services", "app=b", None),
        # broad list cached, narrow list asked: filtered
        (services_key(), "/api/v1/services", "app=a", ["a1", "a2"]),
        (services_key(), "/api/v1/services", "app=a,tier=web", ["a2"]),
        # the same selector (spelled differently)
        (services_key(labels="app=a,tier=web"), "/api/v1/services", "tier==web, app=a", ["a2"]),
        # namespaced list cached, all namespaces asked: 404
        (services_key("d"), "/api/v1/services", "", None),
        (services_key("d"), "/api/v1/namespaces/e/services", "", None),
        # all namespaces cached, one namespace asked: that namespace's
        (services_key(), "/api/v1/namespaces/e/services", "", ["e1"]),
        (services_key("e"), "/api/v1/namespaces/e/services", "", ["e1"]),
    ],
)
async def test_only_a_covering_list_answers(
    tmp_path: pathlib.Path,
    cached: keys.ListKey,
    path: str,
    labels: str,
    answer: list[str] | None,
) -> None:
    every = [
        service("a1", 1, app="a"),
        service("a2", 2, app="a", tier="web"),
        service("b1", 3, app="b"),
        service("e1", 4, "e"),
    ]
    wanted = selectors.parse_labels(cached.label_selector)
    listed = [
        s
        for s in every
        if wanted.matches(s["metadata"]["labels"])
        and cached.covers_namespace(s["metadata"]["namespace"])
    ]
    async with answering(tmp_path, store.PutList(cached, service_list(9, *listed))) as (
        session,
        base,
    ):
        params = {"labelSelector": labels} if labels else None
        status, body = await get(session, base + path, "offline", ua=PROXY, params=params)
        if answer is None:
            assert status == 404 and body["reason"] == "NotFound", body
        else:
            assert status == 200 and names(body) == answer
            assert body["kind"] == "ServiceList" and body["metadata"]["resourceVersion"] == "9"


async def test_an_empty_covered_list_is_an_empty_list_but_kubelet_pods_stay_404(
    tmp_path: pathlib.Path,
) -> None:
    jobs = (
        store.PutList(services_key(), service_list(9, service("a1", 1, app="a"))),
        store.PutList(keys.list_key(PODS, "", "", ""), pod_list("p1")),
    )
    async with answering(tmp_path, *jobs) as (session, base):
        params = {"labelSelector": "app=none"}
        status, body = await get(
            session, base + "/api/v1/services", "offline", ua=PROXY, params=params
        )
        assert status == 200 and body["items"] == [] and body["kind"] == "ServiceList"
        # kubelet's own pods list is covered by its list of every pod, and empty: 404 (§3.7).
        params = {"fieldSelector": "spec.nodeName=elsewhere"}
        status, _ = await get(session, base + "/api/v1/pods", "offline", params=params)
        assert status == 404


async def test_ghosts_leave_the_cache_when_a_list_that_matches_them_lacks_them(
    tmp_path: pathlib.Path,
) -> None:
    jobs = (
        # A get brought "ghost" in; a later list of every service (at version 9) lacks it: it was
        # deleted in the cloud. "fresh" came in after that snapshot and stays.
        store.PutObject(SERVICES, orjson.dumps(service("ghost", 3))),
        store.PutObject(SERVICES, orjson.dumps(service("fresh", 12))),
        store.PutList(services_key(), service_list(9, service("a1", 1, app="a"))),
    )
    async with answering(tmp_path, *jobs) as (session, base):
        status, body = await get(session, base + "/api/v1/services", "offline", ua=PROXY)
        assert status == 200 and names(body) == ["a1", "fresh"]
        path = "/api/v1/namespaces/d/services/ghost"
        assert (await get(session, base + path, "offline", ua=PROXY))[0] == 404


async def test_a_watch_list_is_complete_or_404_too(tmp_path: pathlib.Path) -> None:
    # sendInitialEvents=true is a list streamed as ADDED events: the same rule.
    jobs = (
        store.PutList(services_key(), service_list(9, service("a1", 1, app="a"))),
        store.WatchLines(MY_PODS, (event("ADDED", pod("changed", 7)),)),
    )
    async with answering(tmp_path, *jobs) as (session, base):
        params = {
            "watch": "true",
            "sendInitialEvents": "true",
            "allowWatchBookmarks": "true",
            "resourceVersionMatch": "NotOlderThan",
            "timeoutSeconds": "1",
        }
        headers = {"Accept": "application/json", "X-Reason": "offline"}
        async with session.get(
            base + "/api/v1/pods",
            params={**params, "fieldSelector": f"spec.nodeName={NODE}"},
            headers={**headers, "User-Agent": KUBELET},
        ) as resp:
            assert resp.status == 404
            assert (await resp.json())["reason"] == "NotFound"
        async with session.get(
            base + "/api/v1/services", params=params, headers={**headers, "User-Agent": PROXY}
        ) as resp:
            assert resp.status == 200
            async with asyncio.timeout(5):
                first = orjson.loads(await resp.content.readline())
                end = orjson.loads(await resp.content.readline())
        assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "a1")
        assert end["type"] == "BOOKMARK"
        assert end["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_offline_versions_let_a_client_resume_without_skipping_events(
    tmp_path: pathlib.Path,
) -> None:
    # kubelet's pod list at 5, then its own status patch of one pod answered at 9 (stored),
    # whose watch event (and any other change between 5 and 9) the cut kept from the cache.
    patched = pod("a", 9)
    jobs = (
        store.PutList(
            MY_PODS,
            orjson.dumps(
                {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": "5"},
                    "items": [pod("a", 3), pod("b", 4)],
                }
            ),
        ),
        store.PutObject(PODS, orjson.dumps(patched), "d", "a"),
    )
    async with answering(tmp_path, *jobs) as (session, base):
        mine = {"fieldSelector": f"spec.nodeName={NODE}"}
        status, body = await get(session, base + "/api/v1/pods", "offline", params=mine)
        assert status == 200 and names(body) == ["a", "b"]
        # The list's own version: resuming from 9 would skip whatever happened in between.
        assert body["metadata"]["resourceVersion"] == "5"
        # A watch from where the client is (here 7) is held at 7: never moved past events it
        # did not get, nor back to the cache's older version.
        params = {**mine, "watch": "true", "allowWatchBookmarks": "true", "resourceVersion": "7"}
        headers = {"User-Agent": KUBELET, "X-Reason": "offline"}
        async with (
            asyncio.timeout(10),
            session.get(base + "/api/v1/pods", params=params, headers=headers) as resp,
        ):
            assert resp.status == 200
            line = await resp.content.readline()
        event = orjson.loads(line)
        assert event["type"] == "BOOKMARK"
        assert event["object"]["metadata"]["resourceVersion"] == "7"


async def read_bookmark(session: Any, url: str, params: dict[str, str]) -> dict[str, Any]:
    """The first BOOKMARK of an offline watch (a streaming list's end, or a plain watch's)."""
    headers = {"Accept": "application/json", "X-Reason": "offline", "User-Agent": PROXY}
    async with asyncio.timeout(10), session.get(url, params=params, headers=headers) as resp:
        assert resp.status == 200
        while True:
            event = orjson.loads(await resp.content.readline())
            if event["type"] == "BOOKMARK":
                found: dict[str, Any] = event["object"]
                return found


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming-list", "watch-from-now"])
async def test_an_offline_watch_answered_from_a_broader_list_is_at_that_lists_version(
    tmp_path: pathlib.Path, streaming: bool
) -> None:
    # kube-proxy's list of every Service at 9; then a get stored s1 at 12, ahead of the events
    # the cache saw for the list. A watch of some of them (a selector no list of its own has)
    # is answered from the broader list: it is at 9, as that list's offline answer is, never
    # at 12 (a client resuming from 12 after the heal would skip what happened in between).
    jobs = (
        store.PutList(services_key(), service_list(9, service("a1", 1, app="a"), service("s1", 2))),
        store.PutObject(SERVICES, orjson.dumps(service("s1", 12)), "d", "s1"),
    )
    async with answering(tmp_path, *jobs) as (session, base):
        params = {"watch": "true", "allowWatchBookmarks": "true", "labelSelector": "app=a"}
        if streaming:
            params |= {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
        else:
            params["timeoutSeconds"] = "3"
        status, body = await get(
            session,
            base + "/api/v1/services",
            "offline",
            ua=PROXY,
            params={"labelSelector": "app=a"},
        )
        assert status == 200 and body["metadata"]["resourceVersion"] == "9"
        mark = await read_bookmark(session, base + "/api/v1/services", params)
        assert mark["metadata"]["resourceVersion"] == "9"
