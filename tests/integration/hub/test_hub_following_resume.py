"""The hub's own list/watch loop (``following``) against the simulated apiserver, through a
cuttable link: after the link drops it resumes its watch from the version it holds instead of
listing again; a 410 lists again; a 429 (API Priority and Fairness) is waited out and resumed,
never turned into a relist."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

import aiohttp
import orjson
import pytest
from aiohttp import web

from yurthub import following, pacing
from yurthub.testing import partition, simapiserver

PATH = "/api/v1/namespaces/default/configmaps"
NO_SPREAD = pacing.Settings(relist_spread=0.0)


class Recorder:
    """A ``following.Target`` that keeps the names it holds and counts lists."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self._listing: set[str] = set()
        self.lists = 0
        self.absent = 0
        self.changed = asyncio.Event()

    def begin(self) -> None:
        self._listing = set()

    def add(self, obj: Mapping[str, Any]) -> None:
        self._listing.add(obj["metadata"]["name"])

    def commit(self) -> None:
        self.names = self._listing
        self.lists += 1
        self._wake()

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if event_type == "DELETED":
            self.names.discard(name)
        else:
            self.names.add(name)
        self._wake()

    def mark_absent(self) -> None:
        self.names = set()
        self.absent += 1
        self._wake()

    def _wake(self) -> None:
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    async def until(self, check: Callable[[], bool], within: float = 20.0) -> None:
        async with asyncio.timeout(within):
            while not check():
                await self.changed.wait()


def configmap(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"k": "v"},
    }


def requests(sim: simapiserver.SimApiserver, verb: str) -> list[int]:
    """The codes of the configmaps ``verb`` requests the apiserver saw."""
    return [r.code for r in sim.audit_log() if r.resource == "configmaps" and r.verb == verb]


class Bed:
    def __init__(self, sim: simapiserver.SimApiserver, link: partition.Partition) -> None:
        self.sim = sim
        self.link = link
        self.target = Recorder()

    async def until_accepted(self, more: int, within: float = 20.0) -> None:
        """Until the link has accepted ``more`` connections (attempts of the follower)."""
        goal = self.link.accepted + more
        async with asyncio.timeout(within):
            while self.link.accepted < goal:
                await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def following_through_a_link(
    tmp_path: Any, *, pace: pacing.Settings = NO_SPREAD, history: int | None = None
) -> AsyncIterator[Bed]:
    sim = simapiserver.SimApiserver(seed="none", insecure_port=0, workdir=tmp_path / "sim")
    await sim.start()
    if history is not None:
        sim.state.set_history_size(history)
    port = int(str(sim.insecure_url).rsplit(":", 1)[1])
    try:
        async with partition.Partition("127.0.0.1", port) as link:
            bed = Bed(sim, link)
            async with aiohttp.ClientSession() as session, asyncio.TaskGroup() as tg:
                task = tg.create_task(
                    following.follow(
                        bed.target,
                        session,
                        link.url,
                        PATH,
                        what="configmaps",
                        max_backoff=1.0,
                        pace=pace,
                    ),
                    name="follower",
                )
                try:
                    await bed.target.until(lambda: bed.target.lists == 1)
                    yield bed
                finally:
                    task.cancel()
    finally:
        await sim.stop()


pytestmark = pytest.mark.slow


async def test_a_dropped_link_resumes_the_watch_without_a_list(tmp_path: Any) -> None:
    async with following_through_a_link(tmp_path) as bed:
        bed.sim.state.create(configmap("before"))
        await bed.target.until(lambda: "before" in bed.target.names)
        # The link drops: the watch is reset, and so are the follower's next attempts.
        await bed.link.set_mode(partition.Mode.RESET)
        await bed.until_accepted(2)
        bed.sim.state.create(configmap("during"))
        await bed.link.set_mode(partition.Mode.PASS)
        bed.sim.state.create(configmap("after"))
        await bed.target.until(lambda: {"during", "after"} <= bed.target.names)
        # Everything arrived over a watch resumed from the version held: no second list.
        assert bed.target.lists == 1
        assert requests(bed.sim, "list") == [200]
        assert requests(bed.sim, "watch").count(200) >= 2


@pytest.mark.parametrize("as_status", [False, True], ids=["apf", "watch-cache-initialising"])
async def test_a_429_is_waited_out_and_the_watch_resumed(tmp_path: Any, as_status: bool) -> None:
    async with following_through_a_link(tmp_path) as bed:
        # APF refuses the next two watches (Retry-After: 1); or a restarted apiserver's watch
        # cache, still initialising, with a Status.
        throttle = bed.sim.throttle(
            verbs=["watch"], resources=["configmaps"], count=2, as_status=as_status
        )
        await bed.link.set_mode(partition.Mode.RESET)
        await bed.until_accepted(1)
        await bed.link.set_mode(partition.Mode.PASS)
        bed.sim.state.create(configmap("later"))
        await bed.target.until(lambda: "later" in bed.target.names)
        assert bed.target.lists == 1
        assert requests(bed.sim, "list") == [200]
        assert throttle.refused == 2
        assert requests(bed.sim, "watch").count(429) == 2


async def test_a_429_on_the_list_is_retried(tmp_path: Any) -> None:
    sim = simapiserver.SimApiserver(seed="none", insecure_port=0, workdir=tmp_path / "sim")
    await sim.start()
    try:
        throttle = sim.throttle(verbs=["list"], resources=["configmaps"], count=1)
        target = Recorder()
        async with aiohttp.ClientSession() as session, asyncio.TaskGroup() as tg:
            task = tg.create_task(
                following.follow(target, session, str(sim.insecure_url), PATH, what="cm"),
                name="follower",
            )
            await target.until(lambda: target.lists == 1)
            task.cancel()
        assert throttle.refused == 1
        assert requests(sim, "list") == [429, 200]
    finally:
        await sim.stop()


async def test_a_410_lists_again(tmp_path: Any) -> None:
    async with following_through_a_link(tmp_path, history=3) as bed:
        await bed.link.set_mode(partition.Mode.RESET)
        await bed.until_accepted(1)
        # More changes than the apiserver keeps: the version held is compacted away.
        for i in range(6):
            bed.sim.state.create(configmap(f"c{i}"))
        await bed.link.set_mode(partition.Mode.PASS)
        await bed.target.until(lambda: {f"c{i}" for i in range(6)} <= bed.target.names)
        assert bed.target.lists == 2
        assert requests(bed.sim, "list") == [200, 200]


async def test_a_collection_that_goes_away_is_listed_again_and_marked_absent(
    tmp_path: Any,
) -> None:
    # The watch is refused 404 (the CRD went): the loop lists again and learns it is absent,
    # rather than resuming a watch that cannot succeed.
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                }
            ],
        },
    }
    sim = simapiserver.SimApiserver(seed="none", insecure_port=0, workdir=tmp_path / "sim")
    await sim.start()
    try:
        sim.state.create(crd)
        sim.state.create(
            {"apiVersion": "example.com/v1", "kind": "Widget",
             "metadata": {"name": "w", "namespace": "default"}}
        )  # fmt: skip
        target = Recorder()
        async with aiohttp.ClientSession() as session, asyncio.TaskGroup() as tg:
            task = tg.create_task(
                following.follow(
                    target,
                    session,
                    str(sim.insecure_url),
                    "/apis/example.com/v1/namespaces/default/widgets",
                    what="widgets",
                    max_backoff=0.5,
                ),
                name="follower",
            )
            await target.until(lambda: target.names == {"w"})
            sim.state.delete("customresourcedefinitions", None, "widgets.example.com")
            await target.until(lambda: target.absent >= 1)
            task.cancel()
    finally:
        await sim.stop()


class ScriptedApiserver:
    """An apiserver that lists ConfigMaps at ``rv`` and answers every watch 410, recording each
    list's query; ``too_large``: a list asking for a state not older than a version it does not
    have yet answers as kube-apiserver does (504, cause ``ResourceVersionTooLarge``), as after
    an etcd restore that took its versions back."""

    def __init__(self, rv: int, *, too_large: bool = False) -> None:
        self.rv = rv
        self.too_large = too_large
        self.lists: list[dict[str, str]] = []
        self.watches: list[str] = []
        self.listed = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get(PATH, self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        if query.get("watch") == "true":
            self.watches.append(query.get("resourceVersion", ""))
            return web.json_response(
                {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410}
                | {"reason": "Expired", "message": "too old resource version"},
                status=410,
            )
        self.lists.append(query)
        self.listed.set()
        asked = int(query.get("resourceVersion") or 0)
        if self.too_large and asked > self.rv:
            return web.json_response(
                {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 504}
                | {"reason": "Timeout", "message": f"Too large resource version: {asked}"}
                | {"details": {"causes": [{"reason": "ResourceVersionTooLarge"}]}},
                status=504,
                headers={"Retry-After": "1"},
            )
        items = [configmap(f"at-{self.rv}")]
        return web.json_response(
            {"kind": "ConfigMapList", "apiVersion": "v1", "items": items}
            | {"metadata": {"resourceVersion": str(self.rv)}}
        )


class Script(Protocol):
    def app(self) -> web.Application: ...


@contextlib.asynccontextmanager
async def following_a_script(script: Script, **follow: Any) -> AsyncIterator[Recorder]:
    """A follower of ``PATH`` on ``script``'s app; ``follow``: more arguments of ``follow``."""
    runner = web.AppRunner(script.app(), shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    target = Recorder()
    try:
        async with aiohttp.ClientSession() as session, asyncio.TaskGroup() as tg:
            task = tg.create_task(
                following.follow(
                    target,
                    session,
                    f"http://127.0.0.1:{port}",
                    PATH,
                    what="configmaps",
                    max_backoff=0.5,
                    pace=NO_SPREAD,
                    **follow,
                ),
                name="follower",
            )
            try:
                yield target
            finally:
                task.cancel()
    finally:
        await runner.cleanup()


async def test_a_relist_after_410_asks_for_a_state_not_older_than_the_one_held() -> None:
    # As client-go's reflector relists: from the apiserver's watch cache, at least as new as
    # what the loop holds (a list without a version is a quorum read: all of a fleet's hubs
    # relisting after an apiserver restart would each read etcd).
    script = ScriptedApiserver(rv=100)
    async with following_a_script(script) as target:
        await target.until(lambda: target.lists >= 2)
    first, second = script.lists[:2]
    assert "resourceVersion" not in first
    assert second["resourceVersion"] == "100"
    assert second["resourceVersionMatch"] == "NotOlderThan"


async def test_a_relist_refused_as_too_large_lists_the_current_state() -> None:
    # The apiserver that answers the relist does not have the version held (its watch cache
    # lags the one that said 410, or etcd was restored and the versions went back): it waits
    # 3 s and says so. As client-go's reflector does, the loop then lists the current state.
    script = ScriptedApiserver(rv=100, too_large=True)
    async with following_a_script(script) as target:
        await target.until(lambda: target.lists == 1)
        script.rv = 50
        await target.until(lambda: "at-50" in target.names)
    assert [q.get("resourceVersion", "") for q in script.lists[:3]] == ["", "100", ""]


class SilentFirstWatch:
    """An apiserver whose first watch sends its headers and then nothing, ever (its end lost
    on the way: a connection nothing writes to again), and whose later watches send one event.
    ``release`` lets the handlers end, so the server stops at once."""

    def __init__(self) -> None:
        self.lists = 0
        self.watches: list[str] = []
        self.release = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get(PATH, self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            self.lists += 1
            return web.json_response(
                {"kind": "ConfigMapList", "apiVersion": "v1", "items": [configmap("listed")]}
                | {"metadata": {"resourceVersion": "5"}}
            )
        self.watches.append(request.query.get("resourceVersion", ""))
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        if len(self.watches) > 1:
            event = {"type": "ADDED", "object": configmap("watched")}
            event["object"]["metadata"]["resourceVersion"] = "6"
            await resp.write(orjson.dumps(event) + b"\n")
        await self.release.wait()
        return resp


async def test_a_watch_that_outlives_its_timeout_is_ended_and_resumed() -> None:
    # The apiserver (or the hub's proxy) ends a watch at its timeoutSeconds; one still open
    # well after that will never deliver anything (fleet finding: a follower stuck for good on
    # such a connection). The loop ends it itself and resumes from the version it holds.
    script = SilentFirstWatch()
    bounds = {"watch_timeout": (1, 1), "watch_overrun": 0.5}
    async with following_a_script(script, **bounds) as target:
        await target.until(lambda: "watched" in target.names, within=10.0)
        script.release.set()  # its handlers end: the server stops at once (else within 1 s)
    assert script.lists == 1  # resumed, not listed again
    assert script.watches[:2] == ["5", "5"]
