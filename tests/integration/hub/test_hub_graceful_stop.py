"""``Hub.stop``'s order: nothing new is taken (an idle keep-alive connection is closed at once),
every watch ends, even one whose headers come after the stop began, and only a request being
answered gets the grace period.

The grace here is 600 s and every wait a deadline far below it: a stop that waited for a watch
or an idle connection would miss it.
"""

from __future__ import annotations

import asyncio

import aiohttp
from hubfakes import FakeApiserver, running_hub

GRACE = 600.0
DEADLINE = 30.0
"""Seconds any one step may take here (the grace is twenty times that)."""


async def until(check: object, what: str) -> None:
    """Wait for ``check()`` to hold, ``DEADLINE`` at most."""
    assert callable(check)
    try:
        async with asyncio.timeout(DEADLINE):
            while not check():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"{what}: not within {DEADLINE} s") from None


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    """One whole HTTP/1.1 answer (fixed length or chunked); its head."""
    head = await reader.readuntil(b"\r\n\r\n")
    fields = {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(b":") for line in head.split(b"\r\n")[1:] if line)
    }
    if fields.get(b"transfer-encoding") == b"chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                return head
    await reader.readexactly(int(fields.get(b"content-length", b"0")))
    return head


async def test_stop_takes_nothing_new_ends_late_watches_and_lets_a_put_finish(
    apiserver: FakeApiserver,
) -> None:
    apiserver.watch_headers = asyncio.Event()
    async with (
        running_hub([apiserver.url], proxy={"shutdown_grace": GRACE}) as hub,
        aiohttp.ClientSession() as http,
        asyncio.TaskGroup() as tg,
    ):
        host, port = hub.proxy_url.removeprefix("http://").rsplit(":", 1)
        # A keep-alive connection, idle after one answer (what kubelet's pool keeps).
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await read_answer(reader)).startswith(b"HTTP/1.1 200")
        # A PUT the apiserver is still answering, and a watch it has not answered yet.
        put = tg.create_task(
            http.put(hub.proxy_url + "/api/v1/namespaces/d/secrets/held", json={"x": 1}),
            name="held put",
        )
        watch = tg.create_task(http.get(hub.proxy_url + "/api/v1/pods?watch=1"), name="watch")
        await until(lambda: apiserver.held == 1 and apiserver.watches_held == 1, "both sent on")
        stop = tg.create_task(hub.stop(grace=GRACE), name="hub stop")

        # The idle connection is closed at once, not after the grace.
        async with asyncio.timeout(DEADLINE):
            assert await reader.read() == b""
        writer.close()
        # The watch's headers come now, after the stop ended the watches: it ends at once,
        # cleanly (its client re-watches elsewhere).
        apiserver.watch_headers.set()
        async with asyncio.timeout(DEADLINE):
            answer = await watch
            assert answer.status == 200
            assert await answer.content.read() == b""
        answer.release()
        # Nothing but the PUT is left to wait for, and it is still being answered.
        router = hub.router
        assert router is not None
        await until(lambda: router.in_flight == 1, "only the PUT in flight")
        assert router.finishing == 1 and not put.done() and not stop.done()

        apiserver.release_held.set()
        async with asyncio.timeout(DEADLINE):
            done = await put
            assert done.status == 200
            assert (await done.json())["metadata"]["name"] == "held"
            await stop
        done.release()


async def test_stop_with_watches_alone_does_not_wait(apiserver: FakeApiserver) -> None:
    async with (
        running_hub([apiserver.url], proxy={"shutdown_grace": GRACE}) as hub,
        aiohttp.ClientSession() as http,
    ):
        watches = [await http.get(hub.proxy_url + "/api/v1/pods?watch=1") for _ in range(3)]
        router = hub.router
        assert router is not None
        await until(lambda: router.in_flight == 3, "three watches in flight")
        async with asyncio.timeout(DEADLINE):
            await hub.stop()
            for watch in watches:
                assert await watch.content.read() == b""  # ended cleanly, not cut
                watch.release()
