"""Fairness: watches have a limit of their own, every client a share, kubelet's lease no limit.

Before: watches counted toward the one in-flight limit, so a local process holding many
watches got kubelet's node GET and lease PUT answered 429. Then: a ``yurthub/...`` or
``edgehub/...`` User-Agent, or a kubelet watch on leases, bought an exemption from every limit
(300 watches as ``yurthub/1.0`` were all accepted with a limit of 6); now only the hub's own
socket and kubelet's get/update of its own Lease and Node are exempt.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from hubfakes import LEASE_PATH, FakeApiserver, ScriptedLocal

MakeHub = Callable[..., Any]
GREEDY = {"User-Agent": "greedy/1.0"}
KUBELET = {"User-Agent": "kubelet/v1.32.4"}
LIMITS = {
    "max_in_flight": 6,
    "max_long_running": 6,
    "max_in_flight_per_client": 3,
    "max_long_running_per_client": 4,
}
SLOW = "/api/v1/namespaces/d/configmaps/slow?sleep=3"
LEASE_WATCH = LEASE_PATH + "?watch=1&fieldSelector=metadata.name%3Dn1"


async def held_watches(
    session: aiohttp.ClientSession, url: str, count: int, headers: dict[str, str]
) -> tuple[list[aiohttp.ClientResponse], list[int]]:
    """Open ``count`` watches one after the other: (the ones held open, every status). A
    refused one is read to its end, so its connection serves the next."""
    held, statuses = [], []
    for _ in range(count):
        resp = await session.get(url, headers=headers)
        statuses.append(resp.status)
        if resp.status == 200:
            held.append(resp)
        else:
            await resp.read()
    return held, statuses


@contextlib.asynccontextmanager
async def watches(url: str, count: int, headers: dict[str, str]) -> AsyncIterator[list[int]]:
    async with aiohttp.ClientSession(headers=headers) as s:
        opened = [await s.get(url + "/api/v1/pods?watch=1") for _ in range(count)]
        try:
            yield [r.status for r in opened]
        finally:
            for r in opened:
                r.close()


async def status_of(url: str, headers: dict[str, str], method: str = "GET", **kw: Any) -> int:
    async with aiohttp.ClientSession(headers=headers) as s, s.request(method, url, **kw) as r:
        await r.read()
        return r.status


async def in_flight(hub: Any, count: int) -> None:
    async with asyncio.timeout(3):
        while hub.router.in_flight < count:
            await asyncio.sleep(0.01)


async def test_watches_cannot_starve_kubelet(apiserver: FakeApiserver, make_hub: MakeHub) -> None:
    async with make_hub([apiserver.url], proxy=LIMITS) as hub:
        url = hub.proxy_url
        async with watches(url, 6, GREEDY) as statuses:
            # The client's share of watches is 4: the rest are its 429s, nobody else's.
            assert statuses.count(200) == 4 and statuses.count(429) == 2
            assert await status_of(url + "/api/v1/nodes/n1", KUBELET) == 200
            async with watches(url, 2, KUBELET) as kubelet_watches:
                assert kubelet_watches == [200, 200]
            assert await status_of(url + "/api/v1/nodes/n1", GREEDY) == 200


async def test_one_clients_slow_requests_cannot_starve_kubelet(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    async with make_hub([apiserver.url], proxy=LIMITS) as hub, asyncio.TaskGroup() as tg:
        held = [
            tg.create_task(status_of(hub.proxy_url + SLOW, GREEDY), name=f"held-{i}")
            for i in range(3)
        ]
        await in_flight(hub, 3)
        assert await status_of(hub.proxy_url + SLOW, GREEDY) == 429
        assert await status_of(hub.proxy_url + "/api/v1/nodes/n1", KUBELET) == 200
        for task in held:
            task.cancel()


async def test_kubelets_lease_and_node_are_never_refused(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    local = ScriptedLocal({"kubelet-lease"})
    limits = LIMITS | {"max_in_flight": 2, "max_in_flight_per_client": 2}
    async with (
        make_hub([apiserver.url], proxy=limits, local=local) as hub,
        asyncio.TaskGroup() as tg,
    ):
        held = [
            tg.create_task(status_of(hub.proxy_url + SLOW, GREEDY), name=f"held-{i}")
            for i in range(2)
        ]
        await in_flight(hub, 2)
        # The hub is full: others wait their turn, kubelet's heartbeat does not.
        assert await status_of(hub.proxy_url + "/api/v1/pods", KUBELET) == 429
        lease = hub.proxy_url + LEASE_PATH + "/n1"
        body = orjson.dumps({"metadata": {"name": "n1"}})
        for _ in range(3):
            assert await status_of(lease, KUBELET, "PUT", data=body) == 200
        assert await status_of(hub.proxy_url + "/api/v1/nodes/n1", KUBELET) == 200
        for task in held:
            task.cancel()


@pytest.mark.parametrize(
    ("path", "ua", "count"),
    [
        ("/api/v1/pods?watch=1", "yurthub/1.0", 300),
        ("/api/v1/pods?watch=1", "edgehub/0.1", 20),
        ("/api/v1/pods?watch=1", "multiplexer-proxy-n1", 20),
        (LEASE_WATCH, "kubelet/v1.32.4", 20),
    ],
)
async def test_a_user_agent_buys_no_exemption(
    apiserver: FakeApiserver, make_hub: MakeHub, path: str, ua: str, count: int
) -> None:
    async with (
        make_hub([apiserver.url], proxy=LIMITS) as hub,
        # No client-side cap: every watch the hub accepts is held open at once.
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s,
    ):
        held, statuses = await held_watches(s, hub.proxy_url + path, count, {"User-Agent": ua})
        try:
            # The client's share of watches is 4: the hub's own name or kubelet's lease watch
            # is no way around it.
            assert statuses.count(200) == 4 and statuses.count(429) == count - 4
        finally:
            for resp in held:
                resp.close()


async def test_the_hubs_own_socket_is_exempt(apiserver: FakeApiserver, make_hub: MakeHub) -> None:
    async with make_hub([apiserver.url], proxy=LIMITS) as hub:
        route = hub.own_route
        async with route.session() as own, aiohttp.ClientSession() as other:
            mine, statuses = await held_watches(
                own, route.url + "/api/v1/pods?watch=1", 10, {"User-Agent": "yurthub/edgehub"}
            )
            try:
                assert statuses == [200] * 10
                # Not counted: everyone else still has the whole room.
                theirs, statuses = await held_watches(
                    other, hub.proxy_url + "/api/v1/pods?watch=1", 6, GREEDY
                )
                assert statuses.count(200) == 4
                for resp in theirs:
                    resp.close()
            finally:
                for resp in mine:
                    resp.close()


async def test_only_the_hubs_own_requests_pass_the_readiness_gate(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    async with make_hub([apiserver.url]) as hub:
        hub.readiness.add("held-for-the-test", lambda: "held")
        own = {"User-Agent": "yurthub/edgehub"}
        assert await status_of(hub.proxy_url + "/api/v1/pods", own) == 503
        route = hub.own_route
        async with route.session() as s, s.get(route.url + "/api/v1/pods", headers=own) as r:
            assert r.status == 200
