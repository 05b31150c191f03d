"""An apiserver the hub cannot connect to in time (a full accept queue here; after a fleet-wide
heal, an apiserver shaking hands with thousands of connections at once): nothing was sent, so
the request, a write too, goes to the next apiserver, and the answer says what happened.

Before: aiohttp's connect timeout is a subclass of its read timeout, so it was taken for "no
answer within the idle bound" and a write was answered 504 instead of being sent elsewhere."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import pytest
from accept_support import full_accept_queue
from hubfakes import FakeApiserver, running_hub

from yurthub import server, settings

T = TypeVar("T")

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}}


async def settled(caplog: pytest.LogCaptureFixture) -> None:
    """Until the hub's start-up reads are over (the last is the issuer keys' fetch, which the
    fake apiserver answers 404): none may be connecting while a test stops an apiserver (a
    connection aiohttp's server accepts as it stops is left to the garbage collector)."""
    async with asyncio.timeout(10):
        while not any("issuer keys" in r.getMessage() for r in caplog.records):
            await asyncio.sleep(0.02)


async def test_a_write_that_could_not_connect_goes_to_the_next_apiserver(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, second = FakeApiserver(), FakeApiserver()
    await first.start()
    await second.start()
    try:
        # One heartbeat a minute: the first apiserver stays healthy until this request finds
        # it out (it is then probed at once).
        async with running_hub(
            [first.url, second.url],
            upstream={"lb_mode": settings.LbMode.PRIORITY, "connect_timeout": 0.5},
            interval=60.0,
        ) as hub:
            await settled(caplog)
            await first.stop(keep_port=True)
            with full_accept_queue(first.port):
                async with (
                    aiohttp.ClientSession() as http,
                    http.post(
                        hub.proxy_url + "/api/v1/namespaces/default/pods",
                        json=POD,
                        headers={"User-Agent": "kubectl/v1.37.2"},
                    ) as resp,
                ):
                    assert resp.status == 201, await resp.text()
                    assert (await resp.json())["metadata"]["name"] == "p"
            assert second.requests >= 1
    finally:
        await first.stop()
        await second.stop()


async def test_a_connect_timeout_is_named_as_such(caplog: pytest.LogCaptureFixture) -> None:
    only = FakeApiserver()
    await only.start()
    try:
        async with running_hub([only.url], upstream={"connect_timeout": 0.5}, interval=60.0) as hub:
            await settled(caplog)
            await only.stop(keep_port=True)
            with full_accept_queue(only.port):
                async with (
                    aiohttp.ClientSession() as http,
                    http.post(
                        hub.proxy_url + "/api/v1/namespaces/default/pods",
                        json=POD,
                        headers={"User-Agent": "kubectl/v1.37.2"},
                    ) as resp,
                ):
                    body = await resp.json()
        assert resp.status == 504, body
        assert body["kind"] == "Status"
        assert "connect (TCP and TLS) timed out" in body["message"], body
    finally:
        await only.stop()


async def through_a_dropped_syn(
    caplog: pytest.LogCaptureFixture, send: Callable[[server.Hub], Awaitable[T]]
) -> T:
    """``send``'s answer when its connection's SYN is dropped (the apiserver's queue is full)
    and the apiserver comes back a moment later: the kernel's retransmitted SYN gets through
    after the hub's 0.5 s connect timeout."""
    api = FakeApiserver()
    await api.start()
    try:
        async with running_hub(
            [api.url],
            upstream={"connect_timeout": 0.5, "header_deadline": 30.0},
            interval=60.0,
        ) as hub:
            await settled(caplog)
            await api.stop(keep_port=True)
            async with asyncio.TaskGroup() as tg:
                with full_accept_queue(api.port):
                    sent = tg.create_task(send(hub), name="request through a dropped SYN")
                    await asyncio.sleep(0.7)
                await api.start()
            return sent.result()
    finally:
        await api.stop()


async def test_kubelets_heartbeat_waits_for_a_slow_handshake_beyond_the_connect_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # kubelet's node read goes over the heartbeat lane (its first after the hub started goes
    # to the cloud): kubelet gets its node instead of a 504 at the connect timeout.
    async def get_node(hub: server.Hub) -> tuple[int, dict[str, Any]]:
        headers = {"User-Agent": "kubelet/v1.37.2 (linux/amd64) kubernetes/abcdef0"}
        async with (
            aiohttp.ClientSession() as http,
            http.get(hub.proxy_url + "/api/v1/nodes/n1", headers=headers) as resp,
        ):
            return resp.status, await resp.json()

    status, body = await through_a_dropped_syn(caplog, get_node)
    assert status == 200, body
    assert body["kind"] == "Node"


async def test_the_hubs_own_watch_waits_for_a_slow_handshake_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The hub's own requests (a pool feeder's watch, over its own socket) are patient too: they
    # only retry, and each retry after a fleet-wide heal is one more handshake for the apiserver.
    async def own_watch(hub: server.Hub) -> int:
        route = hub.own_route
        headers = {"User-Agent": "multiplexer-proxy-n1"}
        url = route.url + "/api/v1/pods?watch=1&timeoutSeconds=1"
        async with route.session() as own, own.get(url, headers=headers) as resp:
            return resp.status

    assert await through_a_dropped_syn(caplog, own_watch) == 200


async def test_a_clients_watch_waits_for_a_slow_handshake_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A client's watch connects patiently as well: failing it at the connect timeout (a 504
    # here, the hub having no cache) only sends its client back for one more handshake.
    async def watch(hub: server.Hub) -> int:
        headers = {"User-Agent": "kube-proxy/v1.37.2 (linux/amd64) kubernetes/abcdef0"}
        url = hub.proxy_url + "/api/v1/pods?watch=1&timeoutSeconds=1"
        async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as resp:
            return resp.status

    assert await through_a_dropped_syn(caplog, watch) == 200
