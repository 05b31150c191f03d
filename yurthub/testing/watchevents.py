"""Reading a JSON watch stream in tests: one event per line, as they arrive, with deadlines.

``Events(resp)`` wraps an open ``aiohttp`` response of a ``?watch=true`` request: ``next``
returns the next event (an assertion error when the stream ends), ``until`` the first event a
predicate accepts, ``ended`` whether the server closed the stream in time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson


class Events:
    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp

    async def next(self, within: float = 5.0) -> dict[str, Any]:
        async with asyncio.timeout(within):
            while True:
                line = await self.resp.content.readline()
                assert line, "the watch ended"
                if line.strip():
                    event = orjson.loads(line)
                    assert isinstance(event, dict)
                    return event

    async def until(
        self, match: Callable[[dict[str, Any]], bool], within: float = 5.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + within
        while True:
            event = await self.next(max(0.01, deadline - time.monotonic()))
            if match(event):
                return event

    async def ended(self, within: float = 5.0) -> bool:
        """True once the stream ends (events before the end are skipped)."""
        async with asyncio.timeout(within):
            while True:
                if not await self.resp.content.readline():
                    return True
