"""The store on real SQLite: atomic list replacement, persistence, modes, hostile names, errors."""

from __future__ import annotations

import dataclasses
import pathlib
import stat
from typing import Any

import diskcache
import orjson
import pytest

from yurthub.cache import entries, keys, store, verifying

POD = keys.Scope("kubelet", "pods", "v1")
MINE = keys.list_key(POD, "", "", "spec.nodeName=n1")
LABELLED = keys.list_key(POD, "default", "app=x", "")


def pod(
    name: str, rv: int, *, ns: str = "default", node: str = "n1", **labels: str
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "resourceVersion": str(rv), "labels": labels},
        "spec": {"nodeName": node},
    }


def pod_list(rv: int, *items: dict[str, Any], cont: str = "") -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if cont:
        meta["continue"] = cont
    return orjson.dumps(
        {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": list(items)}
    )


def event(kind: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": kind, "object": {"kind": "Pod", "apiVersion": "v1", **obj}})


def bookmark(rv: int) -> bytes:
    return orjson.dumps(
        {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": str(rv)}}}
    )


def names(s: store.Store, scope: keys.Scope = POD) -> dict[str, str]:
    return {k.name: e.resource_version for k, e in s.objects(scope)}


async def apply(s: store.Store, *jobs: store.Job) -> None:
    for job in jobs:
        assert s.submit(job)
    assert await s.flush(5)


async def test_list_then_watch_then_relist(cache: store.Store) -> None:
    await apply(cache, store.PutList(MINE, pod_list(10, pod("a", 1), pod("b", 2))))
    assert names(cache) == {"a": "1", "b": "2"}
    await apply(
        cache,
        store.WatchLines(
            MINE,
            (
                event("MODIFIED", pod("a", 11)),
                event("ADDED", pod("c", 12)),
                event("DELETED", pod("b", 13)),
                orjson.dumps(
                    {
                        "type": "BOOKMARK",
                        "object": {"kind": "Pod", "metadata": {"resourceVersion": "20"}},
                    }
                ),
                b'{"type":"ERROR","object":{"kind":"Status","code":410}}',
            ),
        ),
    )
    assert names(cache) == {"a": "11", "c": "12"}
    record = cache.list_record(MINE)
    assert record is not None and (record.resource_version, record.members, record.kind) == (
        "20",
        2,
        "Pod",
    )
    body = await cache.body(keys.object_key(POD, "default", "a"))
    assert body is not None and orjson.loads(body)["metadata"]["resourceVersion"] == "11"
    await apply(cache, store.PutList(MINE, pod_list(30, pod("c", 12))))
    assert names(cache) == {"c": "12"}


async def test_lists_with_different_selectors_coexist_on_disk(tmp_path: pathlib.Path) -> None:
    s = await store.Store.open(tmp_path / "c")
    await apply(
        s,
        store.PutList(MINE, pod_list(5, pod("a", 1), pod("b", 2, app="x"))),
        store.PutList(LABELLED, pod_list(6, pod("b", 2, app="x"), pod("c", 3, app="x", node="n2"))),
    )
    # Each relist has its say over what it matches only: c is not on n1, a is not labelled.
    await apply(s, store.PutList(MINE, pod_list(7, pod("a", 1), pod("b", 2, app="x"))))
    await apply(
        s,
        store.PutList(LABELLED, pod_list(8, pod("b", 2, app="x"), pod("c", 3, app="x", node="n2"))),
    )
    assert names(s) == {"a": "1", "b": "2", "c": "3"}
    await s.close()
    reopened = await store.Store.open(tmp_path / "c")
    try:
        assert names(reopened) == {"a": "1", "b": "2", "c": "3"}
        assert {str(k): r.members for k, r in reopened.list_records()} == {
            str(MINE): 2,
            str(LABELLED): 2,
        }
    finally:
        await reopened.close()


def verified(path: pathlib.Path) -> None:
    con = verifying.connect(path)
    try:
        report = verifying.verify(con)
    finally:
        con.close()
    assert report.ok, [str(p) for p in report.problems]


async def test_a_watch_alone_makes_no_list_record(tmp_path: pathlib.Path) -> None:
    # A hub restarted on a wiped cache sees kubelet re-watch without relisting: the events are
    # kept (gets can use them) but say nothing about what else exists.
    s = await store.Store.open(tmp_path / "c")
    try:
        watch = store.WatchLines(MINE, (event("ADDED", pod("a", 11)), bookmark(20)))
        await apply(s, watch, store.WatchLines(MINE, (bookmark(21),)))
        assert names(s) == {"a": "11"}
        assert s.list_records() == []
        a = s.entry(keys.object_key(POD, "default", "a"))
        assert a is not None and a.owners == {entries.DIRECT}
        verified(s.path)
        # A DELETED under a selector still takes it away.
        await apply(s, store.WatchLines(MINE, (event("DELETED", pod("a", 12)),)))
        assert names(s) == {}
        # The list makes the record; the watch continuing it advances it from then on.
        await apply(
            s,
            store.WatchLines(MINE, (event("ADDED", pod("b", 13)),)),
            store.PutList(MINE, pod_list(30, pod("b", 13), pod("c", 14))),
            store.WatchLines(MINE, (event("ADDED", pod("d", 31)), bookmark(40))),
        )
        record = s.list_record(MINE)
        assert record is not None and (record.resource_version, record.members) == ("40", 3)
        b = s.entry(keys.object_key(POD, "default", "b"))
        assert b is not None and b.owners == {str(MINE), entries.DIRECT}
        verified(s.path)
    finally:
        await s.close()


async def test_a_chunked_list_makes_its_record_at_its_last_page(cache: store.Store) -> None:
    got = store.PutObject(POD, orjson.dumps({"kind": "Pod", **pod("got", 1)}))
    await apply(cache, got)
    await apply(
        cache, store.PutList(MINE, pod_list(9, pod("a", 2), pod("got", 1), cont="t1"), False)
    )
    assert cache.list_record(MINE) is None  # half a list answers nothing
    assert set(names(cache)) == {"a", "got"}
    verified(cache.path)
    await apply(cache, store.PutList(MINE, pod_list(9, pod("b", 3)), continued=True))
    record = cache.list_record(MINE)
    assert record is not None and (record.resource_version, record.members) == ("9", 3)
    owners = {k.name: e.owners for k, e in cache.objects(POD)}
    # Page items are the list's only; the earlier get's own claim stays.
    assert owners == {"a": {str(MINE)}, "b": {str(MINE)}, "got": {str(MINE), entries.DIRECT}}
    verified(cache.path)


async def test_a_last_page_without_its_first_pages_makes_no_record(cache: store.Store) -> None:
    await apply(cache, store.PutList(MINE, pod_list(9, pod("b", 3)), continued=True))
    assert names(cache) == {"b": "3"} and cache.list_record(MINE) is None
    verified(cache.path)


async def test_a_list_removes_the_ghosts_it_matches(cache: store.Store) -> None:
    await apply(
        cache,
        store.PutObject(POD, orjson.dumps({"kind": "Pod", **pod("ghost", 3)})),
        store.PutObject(POD, orjson.dumps({"kind": "Pod", **pod("fresh", 12)})),
        store.PutObject(POD, orjson.dumps({"kind": "Pod", **pod("elsewhere", 3, node="n2")})),
        store.PutList(LABELLED, pod_list(4, pod("b", 2, app="x"))),
    )
    await apply(cache, store.PutList(MINE, pod_list(10, pod("a", 1))))
    # ghost: on n1 by its stored spec, older than the list, not in it. fresh: newer than the
    # list's snapshot. elsewhere: not something a list of n1's pods says anything about.
    assert names(cache) == {"a": "1", "elsewhere": "3", "fresh": "12"}
    record = cache.list_record(LABELLED)
    assert record is not None and record.members == 0  # b was on n1 too
    verified(cache.path)


async def test_chunked_list_pages_replace_only_at_the_end(cache: store.Store) -> None:
    await apply(cache, store.PutList(MINE, pod_list(5, pod("old", 1), pod("a", 1))))
    await apply(cache, store.PutList(MINE, pod_list(9, pod("a", 2), cont="t1"), continued=False))
    assert set(names(cache)) == {"old", "a"}  # a page releases nothing
    await apply(cache, store.PutList(MINE, pod_list(9, pod("b", 3)), continued=True))
    assert names(cache) == {"a": "2", "b": "3"}


async def test_chunked_list_without_request_info_uses_the_session(cache: store.Store) -> None:
    await apply(cache, store.PutList(MINE, pod_list(5, pod("old", 1))))
    await apply(cache, store.PutList(MINE, pod_list(9, pod("a", 2), cont="t1")))
    await apply(cache, store.PutList(MINE, pod_list(9, pod("b", 3))))
    assert names(cache) == {"a": "2", "b": "3"}


async def test_single_objects_are_rv_guarded_and_non_objects_refused(
    cache: store.Store,
) -> None:
    await apply(
        cache,
        store.PutObject(POD, orjson.dumps({"kind": "Pod", "apiVersion": "v1", **pod("a", 5)})),
        store.PutObject(POD, orjson.dumps({"kind": "Pod", "apiVersion": "v1", **pod("a", 3)})),
        store.PutObject(POD, orjson.dumps({"kind": "Pod", **pod("u", 1, node="")})),
        store.PutObject(POD, b'{"kind":"Status","code":404}'),
        store.PutObject(POD, b"not json"),
    )
    assert names(cache) == {"a": "5", "u": "1"}  # an unscheduled pod is an object too
    assert cache.stats.bad_bodies == 2


async def test_an_object_naming_another_than_its_url_is_not_stored(cache: store.Store) -> None:
    body = orjson.dumps({"kind": "Pod", "apiVersion": "v1", **pod("a", 5)})
    await apply(
        cache,
        store.PutObject(POD, body, "default", name="b"),  # GET .../pods/b answered with a
        store.PutObject(POD, body, "kube-system", name="a"),  # another namespace
        store.PutObject(POD, body, "kube-system"),  # a create in kube-system
    )
    assert names(cache) == {} and cache.stats.refused_objects == 3
    await apply(cache, store.PutObject(POD, body, "default", name="a"))
    assert names(cache) == {"a": "5"}


def status_body(code: int = 200) -> bytes:
    return orjson.dumps(
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}
    )


@pytest.mark.parametrize(
    "body",
    [
        status_body(),
        status_body(500),
        orjson.dumps({"kind": "Pod", "apiVersion": "v1", **pod("x", 9)}),
        orjson.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"}}),
        # One item the cache cannot store: the list would answer incomplete offline.
        pod_list(9, pod("a", 1), {"metadata": {"namespace": "default"}}),
    ],
    ids=["status", "status-500", "object", "no-items", "item-without-name"],
)
async def test_a_2xx_list_that_is_no_whole_list_touches_nothing(
    cache: store.Store, body: bytes
) -> None:
    everything = keys.list_key(POD, "", "", "")
    await apply(cache, store.PutList(everything, pod_list(5, pod("a", 1), pod("b", 2))))
    record = cache.list_record(everything)
    await apply(cache, store.PutList(everything, body))
    assert cache.list_record(everything) == record and names(cache) == {"a": "1", "b": "2"}
    fresh = keys.list_key(POD, "elsewhere", "", "")
    await apply(cache, store.PutList(fresh, body))
    assert cache.list_record(fresh) is None


async def test_a_status_never_supersedes_a_queued_list(cache: store.Store) -> None:
    everything = keys.list_key(POD, "", "", "")
    blocker = store.PutList(MINE, pod_list(4, *[pod(f"p{i}", i + 1) for i in range(300)]))
    good = store.PutList(everything, pod_list(5, pod("a", 1)))
    await apply(cache, blocker, good, store.PutList(everything, status_body()))
    assert cache.list_record(everything) is not None and cache.stats.superseded_lists == 0


async def test_a_metadata_list_never_supersedes_a_queued_full_list(cache: store.Store) -> None:
    # Some servers label both forms plain application/json: the tee then gives both the full
    # scope's key, and only the body tells them apart (the writer moves metadata-only items to
    # their own scope). Dropping one for the other lost a whole list.
    everything = keys.list_key(POD, "", "", "")
    blocker = store.PutList(MINE, pod_list(4, *[pod(f"p{i}", i + 1) for i in range(300)]))
    metadata = orjson.dumps(
        {
            "kind": "PartialObjectMetadataList",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": "5"},
            "items": [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                       "metadata": {"name": "a", "namespace": "default", "resourceVersion": "1"}}],
        }
    )  # fmt: skip
    full = store.PutList(everything, pod_list(6, pod("a", 1)))
    await apply(cache, blocker, store.PutList(everything, metadata), full)
    partial = dataclasses.replace(everything, scope=dataclasses.replace(POD, partial="v1"))
    assert cache.list_record(everything) is not None and cache.list_record(partial) is not None
    assert cache.stats.superseded_lists == 0


async def test_a_namespaced_list_holding_another_namespace_is_not_stored(
    cache: store.Store,
) -> None:
    in_default = keys.list_key(POD, "default", "", "")
    await apply(cache, store.PutList(in_default, pod_list(5, pod("a", 1), pod("b", 2, ns="x"))))
    assert cache.list_record(in_default) is None and names(cache) == {}
    watch = store.WatchLines(in_default, (event("ADDED", pod("c", 3, ns="x")),))
    await apply(cache, watch)
    assert names(cache) == {} and cache.stats.refused_objects == 2


async def test_a_list_stores_its_unscheduled_pods_too(cache: store.Store) -> None:
    everything = keys.list_key(POD, "", "", "")
    await apply(cache, store.PutList(everything, pod_list(5, pod("a", 1), pod("p", 2, node=""))))
    assert names(cache) == {"a": "1", "p": "2"}
    assert cache.list_record(everything) is not None


@pytest.mark.parametrize("name", ["a/b", "..", "../../../../etc/passwd", "%2F", "名前", "x?y=z"])
async def test_hostile_names_are_exact_and_stay_inside(tmp_path: pathlib.Path, name: str) -> None:
    root = tmp_path / "cache"
    s = await store.Store.open(root)
    try:
        await apply(
            s,
            store.PutObject(POD, orjson.dumps({"kind": "Pod", **pod(name, 1)})),
            store.PutObject(POD, orjson.dumps({"kind": "Pod", **pod(name + "2", 1)})),
        )
        key = keys.object_key(POD, "default", name)
        assert s.entry(key) is not None
        body = await s.body(key)
        assert body is not None and orjson.loads(body)["metadata"]["name"] == name
        assert await s.body(keys.object_key(POD, "default", name[:-1] or "_")) is None
    finally:
        await s.close()
    assert sorted(p.name for p in root.iterdir()) == [
        "cache.db",
        "cache.db-shm",
        "cache.db-wal",
    ] or sorted(p.name for p in root.iterdir()) == ["cache.db"]
    assert not (tmp_path / "etc").exists()


async def test_directory_and_files_are_private(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "cache"
    root.mkdir(mode=0o755)
    s = await store.Store.open(root)
    await apply(s, store.PutObject(POD, orjson.dumps({"kind": "Pod", **pod("a", 1)})))
    try:
        assert stat.S_IMODE(root.stat().st_mode) == 0o700
        for file in root.iterdir():
            assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
    finally:
        await s.close()


async def test_bulk_and_point_reads_agree(cache: store.Store) -> None:
    items = [pod(f"p{i:03}", i + 1, ns=f"ns{i % 3}") for i in range(200)]
    await apply(cache, store.PutList(keys.list_key(POD, "", "", ""), pod_list(500, *items)))
    wanted = [k for k, _ in cache.objects(POD, "ns1")]
    bulk = await cache.bodies(wanted, within=keys.ObjectKey(POD, "ns1", ""))
    point = await cache.bodies(wanted)
    assert bulk == point and len(bulk) == 67 and all(b is not None for b in bulk)
    everything = [k for k, _ in cache.objects(POD)]
    assert len(await cache.bodies(everything, within=keys.ObjectKey(POD, "", ""))) == 200


async def test_corrupt_entries_are_skipped_at_load(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "cache"
    s = await store.Store.open(root)
    await apply(s, store.PutObject(POD, orjson.dumps({"kind": "Pod", **pod("a", 1)})))
    await s.close()
    raw = diskcache.Cache(str(root))
    raw.set("kubelet/pods.v1.core/default/bad", b"garbage")
    raw.set("not a key at all", entries.encode_list(entries.ListRecord("1", 1, "Pod", "v1", 0)))
    raw.close()
    s = await store.Store.open(root)
    try:
        assert names(s) == {"a": "1"}
        assert sorted(s.corrupt_at_load) == ["kubelet/pods.v1.core/default/bad", "not a key at all"]
    finally:
        await s.close()


async def test_refuses_jobs_over_the_pending_bound(tmp_path: pathlib.Path) -> None:
    s = await store.Store.open(tmp_path / "c", max_pending_bytes=1000)
    try:
        big = store.PutObject(POD, b"x" * 600)
        accepted = [s.submit(big) for _ in range(5)]
        # The first is in flight at once; the second queues; the third would pass the bound.
        assert accepted[:2] == [True, True] and False in accepted
        assert s.stats.refused_jobs == accepted.count(False)
        assert await s.flush(5)
    finally:
        await s.close()


async def test_documents(cache: store.Store) -> None:
    key = keys.nonresource_key("/version")
    await apply(cache, store.PutDocument(key, "application/json", b'{"major":"1"}'))
    assert await cache.document(key) == ("application/json", b'{"major":"1"}')
    assert await cache.document(keys.nonresource_key("/api")) is None


async def test_range_reads_return_objects_only(cache: store.Store) -> None:
    # A namespaced list's record sorts inside the all-namespaces range of its resource
    # (``kubelet/pods.v1.core/default?...``); it is not an object and has no body.
    await apply(
        cache,
        store.PutList(keys.list_key(POD, "default", "", ""), pod_list(5, pod("a", 1))),
        store.PutList(LABELLED, pod_list(6, pod("a", 1))),
        store.PutList(MINE, pod_list(7, pod("a", 1), pod("b", 2, ns="other"))),
    )
    everything = keys.ObjectKey(POD, "", "")
    bodies = await cache.all_bodies(everything)
    assert [orjson.loads(b)["metadata"]["name"] for b in bodies] == ["a", "b"]
    wanted = [k for k, _ in cache.objects(POD)] * 40  # over the range-read threshold
    assert all(b is not None for b in await cache.bodies(wanted, within=everything))


async def test_a_damaged_database_is_moved_aside_and_a_new_one_started(
    tmp_path: pathlib.Path,
) -> None:
    # Before: the hub ran without a cache for good (and readyz said OK).
    root = tmp_path / "cache"
    s = await store.Store.open(root)
    padded = [{**pod(f"p{i:03}", i + 1), "pad": "x" * 500} for i in range(400)]
    await apply(s, store.PutList(MINE, pod_list(500, *padded)))
    await s.close()
    db = root / store.DB_FILES[0]
    with db.open("r+b") as f:
        f.seek(db.stat().st_size // 2)
        f.write(b"\xa5" * 40_000)
    s = await store.Store.open(root)
    try:
        assert "damaged" in s.reset and len(s) == 0 and not s.list_records()
        aside = sorted(p.name for p in root.glob("cache.db.damaged-*"))
        assert len(aside) == 1 and aside[0] in s.reset
        assert stat.S_IMODE((root / aside[0]).stat().st_mode) == 0o600
        await apply(s, store.PutObject(POD, orjson.dumps({"kind": "Pod", **pod("a", 1)})))
        assert names(s) == {"a": "1"}
    finally:
        await s.close()
    s = await store.Store.open(root)  # the new database is a good one
    try:
        assert not s.reset and names(s) == {"a": "1"}
    finally:
        await s.close()


async def test_a_truncated_database_is_moved_aside(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "cache"
    s = await store.Store.open(root)
    padded = [{**pod(f"p{i:03}", i + 1), "pad": "x" * 500} for i in range(400)]
    await apply(s, store.PutList(MINE, pod_list(500, *padded)))
    await s.close()
    db = root / store.DB_FILES[0]
    with db.open("r+b") as f:
        f.truncate(db.stat().st_size // 3)
    s = await store.Store.open(root)
    try:
        assert "damaged" in s.reset and len(s) == 0
    finally:
        await s.close()


async def test_a_database_that_cannot_be_opened_is_not_moved_aside(
    tmp_path: pathlib.Path,
) -> None:
    # Only damage is cured by starting anew; a database SQLite cannot even open (here a
    # directory in its place; in life permissions or a lock) is the operator's to look at.
    root = tmp_path / "cache"
    (root / store.DB_FILES[0]).mkdir(parents=True)
    with pytest.raises(store.StoreError):
        await store.Store.open(root)
    assert (root / store.DB_FILES[0]).is_dir() and not list(root.glob("*.damaged-*"))


async def test_a_list_orjson_refuses_costs_only_itself(cache: store.Store) -> None:
    first = store.PutObject(POD, orjson.dumps({"kind": "Pod", **pod("first", 1)}))
    bad = store.PutList(MINE, pod_list(5, pod("a", 1)).replace(b'"n1"}', b'"n1","x":NaN}'))
    good = store.PutObject(POD, orjson.dumps({"kind": "Pod", **pod("good", 1)}))
    await apply(cache, first, bad, good)  # bad and good queue behind first: one batch
    assert names(cache) == {"first": "1", "good": "1"}
    assert cache.stats.bad_bodies == 1 and not cache.stats.last_error


async def test_settled_waits_for_the_writes_queued_before_it(cache: store.Store) -> None:
    # A read of what the hub answered a moment ago (offline right after) must find it: the
    # write is still queued when the read comes (small writes wait for company first).
    assert await cache.settled(0.5)  # nothing queued: at once
    assert cache.submit(store.PutList(MINE, pod_list(10, pod("a", 1))))
    assert cache.list_record(MINE) is None  # queued, not applied
    assert await cache.settled(5.0)
    record = cache.list_record(MINE)
    assert record is not None and record.rv == 10
    assert names(cache) == {"a": "1"}


async def test_settled_gives_up_after_its_grace(cache: store.Store) -> None:
    assert cache.submit(store.PutList(MINE, pod_list(10, pod("a", 1))))
    assert not await cache.settled(0.0)  # the read goes on with what the cache has
    assert await cache.settled(5.0)
