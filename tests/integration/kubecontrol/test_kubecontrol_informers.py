"""Reflectors at fleet size, against the simulated apiserver: lists read in pages and trimmed at
ingest, indexes that follow every event, an expired continue token answered by a relist, and
controllers sharing one list+watch through ``informing.Informers``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from kubecontrol import controlling, informing, kubeapi, trimming, watching
from kubecontrol.trimming import KEEP
from yurthub.testing import simapiserver

CONFIGMAPS = kubeapi.CONFIGMAPS
NS = "informers"
SMALL = trimming.Shape(
    {"metadata": {"name": KEEP, "namespace": KEEP, "resourceVersion": KEEP, "labels": KEEP}},
    keep=lambda cm: (cm.get("metadata") or {}).get("labels", {}).get("keep") != "no",
    name="configmaps:small",
)


@contextlib.asynccontextmanager
async def api_to(sim: simapiserver.SimApiserver) -> AsyncIterator[kubeapi.KubeApi]:
    client = await kubeapi.connect(None, sim.kubeconfig_path, "kubecontrol-test/0")
    try:
        yield kubeapi.KubeApi(client, request_timeout=5.0)
    finally:
        await client.close()


def configmap(name: str, node: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS, "labels": {"node": node, **labels}},
        "data": {"payload": "x" * 256},
    }


def namespace(sim: simapiserver.SimApiserver) -> None:
    sim.state.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})


async def eventually(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def by_node(obj: dict[str, Any]) -> tuple[str, ...]:
    node = ((obj.get("metadata") or {}).get("labels") or {}).get("node")
    return (node,) if node else ()


def lists(sim: simapiserver.SimApiserver) -> int:
    return sum(1 for r in sim.audit_log() if r.verb == "list" and r.resource == "configmaps")


def watches(sim: simapiserver.SimApiserver) -> int:
    return sum(1 for r in sim.audit_log() if r.verb == "watch" and r.resource == "configmaps")


async def test_a_paged_trimmed_list_and_an_index_follow_every_event(
    sim_apiserver: simapiserver.SimApiserver,
) -> None:
    sim = sim_apiserver
    namespace(sim)
    for n in range(25):
        sim.state.create(configmap(f"cm-{n:02}", f"node-{n % 3}"))
    sim.state.create(configmap("refused", "node-0", keep="no"))
    sim.clear_audit_log()
    seen: list[tuple[str, str]] = []
    async with api_to(sim) as api:
        reflector = watching.Reflector(
            api,
            CONFIGMAPS,
            lambda kind, obj: seen.append((kind, obj["metadata"]["name"])),
            namespace=NS,
            label_selector="node",
            shape=SMALL,
            page_size=10,
        )
        reflector.add_index("node", by_node)
        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(reflector.run(), name="reflector")
            await reflector.synced.wait()
            assert lists(sim) == 3  # 26 objects in pages of 10
            assert len(reflector.store) == 25  # the refused one is not held
            stored = reflector.store[(NS, "cm-00")]
            assert "data" not in stored and stored["metadata"]["labels"]["node"] == "node-0"
            assert "managedFields" not in stored["metadata"]
            assert {k[1] for k in reflector.indexed("node", "node-1")} == {
                f"cm-{n:02}" for n in range(25) if n % 3 == 1
            }

            # An object moves to another node: the index follows.
            moved = sim.state.get("configmaps", NS, "cm-01")
            moved["metadata"]["labels"]["node"] = "node-2"
            sim.state.update(moved)
            await eventually(lambda: (NS, "cm-01") in reflector.indexed("node", "node-2"))
            assert (NS, "cm-01") not in reflector.indexed("node", "node-1")
            # One stops being kept: gone from the store and the index, and reported DELETED.
            gone = sim.state.get("configmaps", NS, "cm-04")
            gone["metadata"]["labels"]["keep"] = "no"
            sim.state.update(gone)
            await eventually(lambda: (NS, "cm-04") not in reflector.store)
            assert ("DELETED", "cm-04") in seen
            assert (NS, "cm-04") not in reflector.indexed("node", "node-1")
            # A refused one changes: nothing is held or said about it.
            refused = sim.state.get("configmaps", NS, "refused")
            refused["data"] = {"payload": "y"}
            sim.state.update(refused)
            sim.state.delete("configmaps", NS, "cm-07")
            await eventually(lambda: (NS, "cm-07") not in reflector.store)
            assert not any(name == "refused" for _, name in seen)
            assert (NS, "cm-07") not in reflector.indexed("node", "node-1")
            # The last of a node's objects goes: its index entry goes too (memory follows).
            for n in (2, 5, 8, 11, 14, 17, 20, 23, 1):
                sim.state.delete("configmaps", NS, f"cm-{n:02}")
            await eventually(lambda: "node-2" not in reflector.indexes["node"].keys)
            task.cancel()


class _CompactingApi(kubeapi.KubeApi):
    """After the first page of the first list, the apiserver moves on by more events than it
    keeps: the next page's continue token has expired (410)."""

    def __init__(self, inner: kubeapi.KubeApi, sim: simapiserver.SimApiserver) -> None:
        super().__init__(inner.api_client, inner.request_timeout)
        self.sim = sim
        self.compacted = False

    async def list_pages(self, *args: Any, **kw: Any) -> AsyncIterator[kubeapi.ObjectList]:
        async for page in super().list_pages(*args, **kw):
            yield page
            if not self.compacted:
                self.compacted = True
                for n in range(30):
                    self.sim.state.create(configmap(f"late-{n:02}", "node-9"))


async def test_an_expired_continue_token_is_answered_by_a_fresh_list(
    sim_apiserver: simapiserver.SimApiserver,
) -> None:
    sim = sim_apiserver
    namespace(sim)
    for n in range(12):
        sim.state.create(configmap(f"cm-{n:02}", "node-0"))
    sim.state.set_history_size(5)
    async with api_to(sim) as inner:
        api = _CompactingApi(inner, sim)
        reflector = watching.Reflector(
            api,
            CONFIGMAPS,
            lambda kind, obj: None,
            namespace=NS,
            label_selector="node",
            page_size=5,
        )
        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(reflector.run(), name="reflector")
            await reflector.synced.wait()
            assert api.compacted
            assert any(r.verb == "list" and r.code == 410 for r in sim.audit_log())
            # The store is the fresh list's, whole: nothing from the abandoned one is missing.
            assert len(reflector.store) == 12 + 30
            task.cancel()


async def test_controllers_share_one_list_and_watch(
    sim_apiserver: simapiserver.SimApiserver,
) -> None:
    sim = sim_apiserver
    namespace(sim)
    for n in range(6):
        sim.state.create(configmap(f"cm-{n}", f"node-{n % 2}"))
    sim.clear_audit_log()
    done: dict[str, set[str]] = {"a": set(), "b": set(), "c": set()}

    def reconciler(name: str) -> controlling.Reconcile:
        async def reconcile(key: controlling.Key) -> float | None:
            done[name].add(key[1])
            return None

        return reconcile

    async with api_to(sim) as api:
        informers = informing.Informers(api, informing.Settings(page_size=4))
        a, b, c = (
            controlling.Controller(name, reconciler(name), informers=informers)
            for name in ("a", "b", "c")
        )
        ra = a.watch(api, CONFIGMAPS, namespace=NS, label_selector="node", shape=SMALL)
        rb = b.watch(api, CONFIGMAPS, namespace=NS, label_selector="node", shape=SMALL)
        rc = c.watch(
            api, CONFIGMAPS, namespace=NS, label_selector="node"
        )  # another shape: its own reflector
        assert ra is rb and rc is not ra
        assert len(informers.reflectors) == 2
        async with asyncio.TaskGroup() as tg:
            run = tg.create_task(informers.run(), name="informers")
            workers = [tg.create_task(x.run_workers(), name=f"{x.name} workers") for x in (a, b, c)]
            for x in (a, b, c):
                await x.run_caches()  # none of their own: returns at once
            everything = {f"cm-{n}" for n in range(6)}
            await eventually(lambda: all(d == everything for d in done.values()))
            # Two reflectors (two scopes), each listed in pages of 4 and watched once.
            await eventually(lambda: watches(sim) >= 2)
            assert lists(sim) == 4 and watches(sim) == 2
            assert "data" not in ra.store[(NS, "cm-0")] and "data" in rc.store[(NS, "cm-0")]
            sim.state.create(configmap("cm-new", "node-0"))
            await eventually(lambda: all("cm-new" in d for d in done.values()))
            # Nobody may join once they run: the first list would have missed its handlers.
            try:
                informers.reflector(
                    CONFIGMAPS, lambda kind, obj: None, namespace=NS, label_selector="node"
                )
                raise AssertionError("joining a running informer must be refused")
            except RuntimeError:
                pass
            for t in (run, *workers):
                t.cancel()
