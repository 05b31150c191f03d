"""Fairness: watches have a limit of their own, every client a share, kubelet's lease no limit.

Before: watches counted toward the one in-flight limit, so a local process holding many
watches got kubelet's node GET and lease PUT answered 429.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
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
