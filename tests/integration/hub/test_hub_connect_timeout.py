"""An apiserver the hub cannot connect to in time (a full accept queue here; after a fleet-wide
heal, an apiserver shaking hands with thousands of connections at once): nothing was sent, so
the request, a write too, goes to the next apiserver, and the answer says what happened.

Before: aiohttp's connect timeout is a subclass of its read timeout, so it was taken for "no
answer within the idle bound" and a write was answered 504 instead of being sent elsewhere."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import aiohttp
from hubfakes import FakeApiserver, running_hub

from yurthub import settings

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}}


@contextlib.contextmanager
def full_accept_queue(port: int) -> Iterator[None]:
    """A listener on ``port`` that accepts nothing, its queue filled: a new connection's SYN is
    dropped, and the connect times out (the port's own holder also set ``SO_REUSEPORT``)."""
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(socket.socket())
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(0)
        for _ in range(2):
            filler = stack.enter_context(socket.socket())
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
        yield


async def test_a_write_that_could_not_connect_goes_to_the_next_apiserver() -> None:
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


async def test_a_connect_timeout_is_named_as_such() -> None:
    only = FakeApiserver()
    await only.start()
    try:
        async with running_hub([only.url], upstream={"connect_timeout": 0.5}, interval=60.0) as hub:
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
