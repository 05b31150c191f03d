"""Streaming lists (client-go's WatchListClient, on by default since 1.35): a watch with
``sendInitialEvents=true`` whose initial events end with the ``k8s.io/initial-events-end``
BOOKMARK is as good as a list for the offline answer; one cut short is not."""

from __future__ import annotations

import orjson
import pytest
from cache_tees import KUBELET, PODS, names, pod, tee_for
from multidict import CIMultiDict

from yurthub import requestinfo
from yurthub.cache import keys, store, teeing

JSON = {"Content-Type": "application/json"}
LIST_KEY = keys.list_key(PODS, "", "", "spec.nodeName=n")


def event(kind: str, obj: dict[str, object]) -> bytes:
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


def end_bookmark(rv: int) -> bytes:
    return event(
        "BOOKMARK",
        {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {
                "resourceVersion": str(rv),
                "annotations": {"k8s.io/initial-events-end": "true"},
            },
        },
    )


def watch_info(*, initial: bool = True) -> requestinfo.RequestInfo:
    query = {"watch": "1", "fieldSelector": "spec.nodeName=n", "allowWatchBookmarks": "true"}
    if initial:
        query |= {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
    headers = CIMultiDict({"User-Agent": KUBELET, "Accept": "application/json"})
    return requestinfo.classify("GET", "/api/v1/pods", query, headers)


async def seed_list(cache: store.Store, *pods: str) -> None:
    body = orjson.dumps(
        {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "3"},
            "items": [pod(p, 2) for p in pods],
        }
    )
    assert cache.submit(store.PutList(LIST_KEY, body))
    assert await cache.flush(5)


async def test_completed_initial_events_replace_the_list_and_make_it_answerable(
    cache: store.Store,
) -> None:
    await seed_list(cache, "gone", "kept")
    sink = tee_for(cache).open(watch_info(), 200, JSON)
    assert sink is not None
    stream = event("ADDED", pod("kept", 5)) + event("ADDED", pod("new", 6)) + end_bookmark(9)
    # Split mid-line: the held events are cut into lines like any stream.
    sink.feed(stream[:37])
    sink.feed(stream[37:])
    assert await cache.flush(5)
    assert names(cache) == ["kept", "new"]  # "gone" was not in the new state: released
    record = cache.list_record(LIST_KEY)
    assert record is not None and record.resource_version == "9" and record.members == 2
    # Live events after the end bookmark follow as ordinary watch events.
    sink.feed(event("DELETED", pod("new", 10)))
    await sink.finish()
    assert await cache.flush(5)
    assert names(cache) == ["kept"]


async def test_a_stream_cut_before_the_end_bookmark_proves_no_list(cache: store.Store) -> None:
    sink = tee_for(cache).open(watch_info(), 200, JSON)
    assert sink is not None
    sink.feed(event("ADDED", pod("a", 5)) + event("ADDED", pod("b", 6)))
    sink.abort("upstream went away")
    assert await cache.flush(5)
    # The complete events are kept (gets can use them), but no list is answerable from them.
    assert names(cache) == ["a", "b"]
    assert cache.list_record(LIST_KEY) is None


@pytest.mark.parametrize("ending", ["abort", "finish"])
async def test_a_snapshot_cut_short_never_moves_the_lists_version(
    cache: store.Store, ending: str
) -> None:
    # Seen in a fleet: a flap cut kubelet's streaming relist after "a"; "a" came at 12, so the
    # list's version became 12 while "z" (after the cut, in key order) had changed at 11 unseen.
    # Offline, kubelet then got 12 as the list's version, resumed from it and never saw z@11.
    await seed_list(cache, "a", "z")  # both at 2, the list at 3
    sink = tee_for(cache).open(watch_info(), 200, JSON)
    assert sink is not None
    sink.feed(event("ADDED", pod("a", 12)))
    if ending == "abort":
        sink.abort("upstream went away")
    else:
        await sink.finish()
    assert await cache.flush(5)
    assert names(cache) == ["a", "z"]  # a@12 is kept: gets can use it
    record = cache.list_record(LIST_KEY)
    assert record is not None and record.resource_version == "3"


async def test_a_snapshot_too_large_to_hold_moves_the_version_only_at_its_end(
    cache: store.Store,
) -> None:
    await seed_list(cache, "a", "z")
    first = event("ADDED", pod("a", 12))
    sink = tee_for(cache, max_body=len(first) + 10).open(watch_info(), 200, JSON)
    assert sink is not None
    sink.feed(first + event("ADDED", pod("b", 11)))
    assert await cache.flush(5)
    record = cache.list_record(LIST_KEY)
    assert record is not None and record.resource_version == "3"
    sink.feed(event("ADDED", pod("z", 10)) + end_bookmark(14) + event("MODIFIED", pod("b", 15)))
    await sink.finish()
    assert await cache.flush(5)
    # Not replaced as a list (it was never held whole), so not moved by its end bookmark
    # either; live events after the end move it as any watch's.
    record = cache.list_record(LIST_KEY)
    assert record is not None and record.resource_version == "15"


async def test_a_streaming_list_over_the_body_bound_is_cached_event_by_event(
    cache: store.Store,
) -> None:
    await seed_list(cache, "old")
    first = event("ADDED", pod("a", 5))
    sink = tee_for(cache, max_body=len(first) + 10).open(watch_info(), 200, JSON)
    assert sink is not None
    sink.feed(first + event("ADDED", pod("b", 6)) + end_bookmark(9))
    await sink.finish()
    assert await cache.flush(5)
    # Not replaced as a list ("old" stays), but every event was applied.
    assert names(cache) == ["a", "b", "old"]
    assert cache.stats.dropped_responses == 0


async def test_a_plain_watch_with_the_same_events_makes_no_list(cache: store.Store) -> None:
    sink = tee_for(cache).open(watch_info(initial=False), 200, JSON)
    assert sink is not None
    sink.feed(event("ADDED", pod("a", 5)) + end_bookmark(9))
    await sink.finish()
    assert await cache.flush(5)
    assert names(cache) == ["a"]
    assert cache.list_record(LIST_KEY) is None


@pytest.mark.parametrize(
    ("line", "want"),
    [
        (end_bookmark(3), True),
        (
            event("ADDED", {"metadata": {"annotations": {"k8s.io/initial-events-end": "true"}}}),
            False,
        ),
        (event("BOOKMARK", {"metadata": {"resourceVersion": "3"}}), False),
        (
            b'{"type":"BOOKMARK","object":{"metadata":{"annotations":'
            b'{"k8s.io/initial-events-end":"false"}}}}',
            False,
        ),
        (b"BOOKMARK k8s.io/initial-events-end not json", False),
    ],
)
def test_end_bookmark_recognition(line: bytes, want: bool) -> None:
    assert teeing.is_initial_events_end(line) is want
