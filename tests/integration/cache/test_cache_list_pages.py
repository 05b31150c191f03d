"""Offline lists read a page at a time: the next page is read while one is written, a sealed
cache opens only the chosen keys' values, and a short page never ends the answer early."""

from __future__ import annotations

import os
import pathlib
from collections.abc import AsyncIterator

import aiohttp
import orjson
from aiohttp import web

from yurthub.cache import keys, sealing, store
from yurthub.proxy import locallists

PODS = keys.Scope("kubelet", "pods", "v1")


def _pods(count: int) -> bytes:
    items = [
        {"metadata": {"name": f"p{i:04}", "namespace": "d", "resourceVersion": "1"}}
        for i in range(count)
    ]
    return orjson.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})


def _names(page: list[bytes]) -> list[str]:
    return [orjson.loads(body)["metadata"]["name"] for body in page]


async def test_a_short_first_page_does_not_end_the_answer() -> None:
    """A page of chosen keys is short when some went meanwhile; what follows is still sent."""

    async def pages() -> AsyncIterator[list[bytes]]:
        yield [b'{"n":1}']
        yield [b'{"n":2}', b'{"n":3}']
        yield [b'{"n":4}']

    async def handler(request: web.Request) -> web.StreamResponse:
        head = locallists.open_items({"kind": "List", "items": []})
        return await locallists.stream_items(request, head, pages())

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        url = f"http://127.0.0.1:{port}/"
        async with aiohttp.ClientSession() as session, session.get(url) as r:
            assert r.status == 200
            assert [i["n"] for i in (await r.json())["items"]] == [1, 2, 3, 4]
    finally:
        await runner.cleanup()


async def test_pages_read_ahead_and_a_reader_that_stops_early_leaves_nothing_behind(
    tmp_path: pathlib.Path,
) -> None:
    kek = tmp_path / "kek"
    kek.write_bytes(os.urandom(32))
    kek.chmod(0o600)
    s = await store.Store.open(
        tmp_path / "cache", key_source=sealing.Source(sealing.Kind.KEYFILE, kek)
    )
    try:
        assert s.submit(store.PutList(keys.list_key(PODS, "", "", ""), _pods(25)))
        assert await s.flush(5)
        within = locallists.within(PODS, "")
        got = [_names(page) async for page in s._readers.pages(within, size=10)]
        assert [len(p) for p in got] == [10, 10, 5]
        assert [name for page in got for name in page] == [f"p{i:04}" for i in range(25)]

        # Chosen keys, in their order, a gone one left out, across pages.
        chosen = [keys.object_key(PODS, "d", f"p{i:04}") for i in (24, 3, 7, 99, 0)]
        pages = s._readers.chosen_pages(chosen, within, size=2)
        assert [_names(p) async for p in pages] == [["p0024", "p0003"], ["p0007"], ["p0000"]]

        # A reader that stops after the first page (a client gone): the page read ahead is
        # dropped, and the store closes at once.
        early = s._readers.pages(within, size=10)
        assert len(await anext(early)) == 10
        await early.aclose()
        early_chosen = s._readers.chosen_pages(chosen, within, size=2)
        assert len(await anext(early_chosen)) == 2
        await early_chosen.aclose()
    finally:
        await s.close()
