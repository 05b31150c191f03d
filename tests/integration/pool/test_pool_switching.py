"""Followers switching between the cloud and their leader: a follower whose store is newer than
its leader's (it read the cloud while the leader's link was down) resumes from the leader
instead of bouncing off it, and an answer written to a watch client (a follower) that has gone
says so in one debug line, never a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from pool_edge import SERVICES, Hub, eventually, named, pool_of, service

from yurthub.pool import rvrules, selection, serving, watchcache
from yurthub.testing import partition


def store_of(hub: Hub, resource: str = "services") -> Any:
    for gvr, res in hub.pool.mux.resources.items():
        if gvr.resource == resource:
            return res.store
    raise AssertionError(resource)


@pytest.mark.slow
async def test_a_follower_ahead_of_its_leader_reads_from_it_without_bouncing(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with pool_of(tmp_path, leaders=()) as pool:
        leader, _, follower = pool.hubs
        for hub in pool.hubs:  # no ConfigMap yet: every hub reads from the cloud
            await eventually(lambda h=hub: h.source() == "cloud" and h.watching(), what=hub.name)
        await leader.link.set_mode(partition.Mode.BLACKHOLE)
        await eventually(lambda: not leader.node.hub.health.any_healthy())  # type: ignore[union-attr]
        # The follower learns of a change the cut-off leader does not have: it is ahead.
        async with follower.watch(SERVICES) as events:
            pool.sim.state.create(service("while-cut"))
            await events.until(named("while-cut"))
            ahead = store_of(follower).rv
            assert ahead > store_of(leader).rv
            pool.set_leaders("edge-node-1")
            await eventually(lambda: follower.source() == "edge-node-1" and follower.watching())
            # Both followers are served by the leader although it is still behind them.
            await eventually(
                lambda: store_of(leader).watchers >= 2,
                what="the followers watch the leader",
            )
            await leader.link.set_mode(partition.Mode.PASS)
            pool.sim.state.create(service("after-heal"))
            # The same client watch goes on, fed by the leader once it caught up.
            await events.until(named("after-heal"), within=20.0)
        # Only the leader watches the cloud: no follower bounced back to it.
        await eventually(lambda: pool.upstream_watches() == {"services": 1, "endpointslices": 1})
        assert follower.source() == "edge-node-1"
        bounced = [
            r.getMessage()
            for r in caplog.records
            if "Too large resource version" in r.getMessage()
            or (r.name == "yurthub.pool.leaders" and "failed" in r.getMessage())
        ]
        assert not bounced, bounced


@contextlib.asynccontextmanager
async def serve_once(
    answer: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
) -> AsyncIterator[str]:
    # A server that does not cancel its handlers when the client goes (over TLS a closing
    # connection is seen by a write before the handler is cancelled): the answer itself must
    # cope with a client that has gone.
    server = web.Server(answer, access_log=None)
    runner = web.ServerRunner(server, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("what", ["too-large", "events"])
async def test_a_watch_client_gone_before_the_answer_is_written_costs_one_debug_line(
    caplog: pytest.LogCaptureFixture, what: str
) -> None:
    caplog.set_level(logging.DEBUG)
    store = watchcache.Store("services")
    obj = service("web")
    obj["metadata"]["resourceVersion"] = "10"
    store.replace(
        [watchcache.entry_of("services", obj, "Service", "v1")],
        10,
        kind="Service",
        list_kind="ServiceList",
        api_version="v1",
    )
    requests: list[web.BaseRequest] = []
    arrived = asyncio.Event()
    gone = asyncio.Event()

    async def wait_fresh(rv: int, seconds: float) -> bool:
        await gone.wait()
        return False

    async def answer(request: web.BaseRequest) -> web.StreamResponse:
        requests.append(request)
        arrived.set()
        min_rv = 11 if what == "too-large" else 0
        plan = rvrules.WatchPlan(initial=True, min_rv=min_rv)
        watch = serving.WatchAnswer(
            store,
            plan,
            selection.Selection(),
            None,
            timeout=30.0,
            bookmarks=False,
            bookmark_interval=60.0,
            wait_fresh=wait_fresh if what == "too-large" else None,
        )
        if what == "events":
            await gone.wait()
        return await watch.run(request)

    async with serve_once(answer) as url, aiohttp.ClientSession() as session:
        if what == "events":
            # The client goes before the handler even prepared its answer, but only once the
            # handler has the request: a client that gave up after a fixed time could go before
            # the server saw anything on a loaded machine, and nothing would be tested.
            async with asyncio.TaskGroup() as tg:
                get = tg.create_task(session.get(url + SERVICES), name="watch client")
                async with asyncio.timeout(30):  # a deadline, not a measure
                    await arrived.wait()
                get.cancel()  # aiohttp closes the connection of a request cancelled unanswered
            assert get.cancelled(), "the client left before any answer"
        else:
            async with session.get(url + SERVICES) as resp:
                assert resp.status == 200
                resp.close()
        await eventually(lambda: requests and _closed(requests[0]), what="the server saw it")
        gone.set()

        def went_away() -> list[logging.LogRecord]:
            return [
                r
                for r in caplog.records
                if r.name == "yurthub.pool.serving" and "went away" in r.getMessage()
            ]

        await eventually(went_away, what="the answer noticed the client left")
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert not tracebacks, [r.getMessage() for r in tracebacks]
    assert store.watchers == 0


def _closed(request: web.BaseRequest) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


@pytest.mark.slow
async def test_an_empty_leader_set_keeps_followers_on_their_reachable_leader(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with pool_of(tmp_path) as pool:
        leader, *followers = pool.hubs
        for hub in followers:
            await eventually(lambda h=hub: h.source() == "edge-node-1" and h.watching())
        async with followers[1].watch(SERVICES) as events:
            await events.until(named("web"))
            pool.set_leaders()  # the manager published no leaders; edge-node-1 still answers

            def seen() -> list[logging.LogRecord]:
                return [
                    r
                    for r in caplog.records
                    if r.name == "yurthub.pool.runtime" and "leaders none" in r.getMessage()
                ]

            await eventually(lambda: len(seen()) >= len(followers), what="the followers read it")
            pool.sim.state.create(service("meanwhile"))
            await events.until(named("meanwhile"))
            # Still read from the leader: the cloud did not get a watch per follower.
            assert [hub.source() for hub in followers] == ["edge-node-1", "edge-node-1"]
            assert pool.upstream_watches() == {"services": 1, "endpointslices": 1}
            # Once the old leader is gone too, the followers read from the cloud.
            await leader.stop()
            for hub in followers:
                await eventually(lambda h=hub: h.source() == "cloud" and h.watching())
            pool.sim.state.create(service("later"))
            await events.until(named("later"))
