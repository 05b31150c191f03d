"""Cache integrity on real SQLite: checksums, rows this hub did not write, older entries.

Each case was reproduced against the store before entries carried a checksum: a flipped byte
in a stored body was served as a 200 with invalid JSON, and a pickled row was unpickled (code
run) when the cache was opened.
"""

from __future__ import annotations

import pathlib
import pickle
import sqlite3
from typing import Any

import diskcache
import orjson
import pytest

from yurthub.cache import entries, keys, store, verifying

POD = keys.Scope("kubelet", "pods", "v1")
MINE = keys.list_key(POD, "", "", "spec.nodeName=n1")


def pod(name: str, rv: int) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "default", "resourceVersion": str(rv)},
        "spec": {"nodeName": "n1"},
    }


def pod_list(rv: int, *items: dict[str, Any]) -> bytes:
    return orjson.dumps(
        {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)},
         "items": list(items)}
    )  # fmt: skip


async def apply(s: store.Store, *jobs: store.Job) -> None:
    for job in jobs:
        assert s.submit(job)
    assert await s.flush(5)


def flip_byte_in(root: pathlib.Path, key: str, needle: bytes) -> None:
    """Change one byte of ``key``'s stored value, as a failing disk would."""
    con = sqlite3.connect(root / store.DB_FILES[0])
    with con:
        (value,) = con.execute("SELECT value FROM Cache WHERE key = ?", (key,)).fetchone()
        at = value.index(needle)
        damaged = value[:at] + bytes([value[at] ^ 0x01]) + value[at + 1 :]
        con.execute("UPDATE Cache SET value = ? WHERE key = ?", (damaged, key))
    con.close()


async def test_a_flipped_byte_is_a_miss_and_costs_the_lists_that_needed_it(
    tmp_path: pathlib.Path,
) -> None:
    root = tmp_path / "cache"
    s = await store.Store.open(root)
    try:
        await apply(s, store.PutList(MINE, pod_list(9, pod("a", 1), pod("b", 2))))
        assert s.list_record(MINE) is not None
        a = keys.object_key(POD, "default", "a")
        flip_byte_in(root, str(a), b'"default"')  # -> "defaulu": still JSON, but not ours
        with pytest.raises(store.CorruptRead):
            await s.all_bodies(keys.ObjectKey(POD, "", ""))
        assert await s.flush(5)
        assert await s.body(a) is None
        # Dropped: the object, and the list that is no longer whole (no partial list answers).
        assert s.entry(a) is None and s.list_record(MINE) is None
        assert [k.name for k, _ in s.objects(POD)] == ["b"]
        assert s.stats.corrupt_entries == 1
        assert await s.body(keys.object_key(POD, "default", "b")) is not None
    finally:
        await s.close()
    con = verifying.connect(root)
    try:
        assert verifying.verify(con).problems == []
    finally:
        con.close()


async def test_corrupt_entries_found_at_open_are_dropped_with_their_lists(
    tmp_path: pathlib.Path,
) -> None:
    root = tmp_path / "cache"
    s = await store.Store.open(root)
    await apply(
        s,
        store.PutList(MINE, pod_list(9, pod("a", 1), pod("b", 2))),
        store.PutObject(POD, orjson.dumps(pod("direct", 3))),
    )
    await s.close()
    flip_byte_in(root, str(keys.object_key(POD, "default", "a")), b"nodeName")
    s = await store.Store.open(root)
    try:
        assert s.corrupt_at_load == [str(keys.object_key(POD, "default", "a"))]
        assert s.list_record(MINE) is None  # lost a member: no longer whole
        # b was held only by the list: a get may still use it.
        assert [k.name for k, _ in s.objects(POD)] == ["b", "direct"]
        assert s.stats.corrupt_entries == 1
    finally:
        await s.close()
    con = verifying.connect(root)
    try:
        assert verifying.verify(con).problems == []
    finally:
        con.close()


class _Boom:
    """Unpickling this touches a file: proof that code ran."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (pathlib.Path.touch, (self.marker,))


async def test_rows_this_hub_did_not_write_are_never_unpickled_nor_followed(
    tmp_path: pathlib.Path,
) -> None:
    root = tmp_path / "cache"
    s = await store.Store.open(root)
    await apply(s, store.PutObject(POD, orjson.dumps(pod("ok", 1))))
    await s.close()
    marker = tmp_path / "code-ran"
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    con = sqlite3.connect(root / store.DB_FILES[0])
    with con:
        payload = pickle.dumps(_Boom(marker))
        row = "INSERT INTO Cache(key, raw, store_time, expire_time, access_time, access_count, tag,"
        row += " size, mode, filename, value) VALUES (?, ?, 0, NULL, 0, 0, NULL, 0, ?, ?, ?)"
        # A pickled value under an object key, a pickled key, a raw row naming a side file.
        con.execute(row, ("kubelet/pods.v1.core/default/evil", 1, 4, None, payload))
        con.execute(row, (payload, 0, 1, None, b"x"))
        con.execute(row, ("kubelet/pods.v1.core/default/file", 1, 1, str(victim), None))
    con.close()
    s = await store.Store.open(root)
    try:
        assert not marker.exists()
        assert [k.name for k, _ in s.objects(POD)] == ["ok"]
        assert len(s.corrupt_at_load) == 3
        # Overwriting a key whose row named a side file would have deleted that file.
        await apply(s, store.PutObject(POD, orjson.dumps(pod("file", 2))))
    finally:
        await s.close()
    assert victim.read_text() == "keep me" and not marker.exists()
    con = sqlite3.connect(root / store.DB_FILES[0])
    try:
        modes = {m for (m,) in con.execute("SELECT mode FROM Cache")}
        assert modes == {1}
    finally:
        con.close()


def legacy(value: bytes) -> bytes:
    """The same entry as an older hub wrote it: ``EHC1 | length | header | body`` (ours:
    ``EHC2 | crc | length | header | body``)."""
    return b"EHC1" + value[8:12] + value[12:]


async def test_entries_of_an_older_hub_are_checked_and_upgraded(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "cache"
    s = await store.Store.open(root)
    await apply(
        s,
        store.PutList(MINE, pod_list(9, pod("a", 1), pod("b", 2))),
        store.PutDocument(keys.nonresource_key("/version"), "application/json", b'{"major":"1"}'),
    )
    await s.close()
    raw = diskcache.Cache(str(root))
    for key in list(raw.iterkeys()):
        raw.set(key, legacy(raw.get(key)))
    # An old entry whose body is no longer JSON: what can still be checked, is.
    broken = legacy(
        entries.encode_object(
            entries.Entry("3", 3, "Pod", "v1", None, {}, frozenset({""}), 5), b"{oops"
        )
    )
    raw.set("kubelet/pods.v1.core/default/c", broken)
    raw.close()
    s = await store.Store.open(root)
    try:
        assert sorted(k.name for k, _ in s.objects(POD)) == ["a", "b"]
        assert s.list_record(MINE) is not None and s.corrupt_at_load == [
            "kubelet/pods.v1.core/default/c"
        ]
        assert await s.document(keys.nonresource_key("/version")) == (
            "application/json",
            b'{"major":"1"}',
        )
        assert orjson.loads((await s.body(keys.object_key(POD, "default", "a"))) or b"")
    finally:
        await s.close()
    raw = diskcache.Cache(str(root))
    try:
        assert all(raw.get(k)[:4] == entries.MAGIC for k in raw.iterkeys())
    finally:
        raw.close()


@pytest.mark.parametrize("at", [0, 5, 9, 13, -2])
def test_every_changed_byte_but_in_the_magic_fails_the_check(at: int) -> None:
    value = entries.encode_object(
        entries.Entry("1", 1, "Pod", "v1", {"a": "b"}, {}, frozenset({""}), 2), b"{}"
    )
    entries.body_of(value)
    damaged = bytearray(value)
    damaged[at] ^= 0x10
    with pytest.raises(entries.CorruptEntry):
        entries.body_of(bytes(damaged))
