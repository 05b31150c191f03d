"""An ``edgehub manager`` process as tests watch it: its log lines (stderr), its metrics port
(read from its "/metrics on" line), ready once it runs its controllers, leader or not."""

from __future__ import annotations

import asyncio
import re

import aiohttp


class Replica:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.port: int | None = None
        self.ready = asyncio.Event()

    async def follow(self) -> None:
        """Read its stderr until it ends (a task of the test's)."""
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.lines.append(line)
            found = re.search(r"/metrics on [0-9.]+:(\d+)", line)
            if found:
                self.port = int(found.group(1))
            if "edgehub manager running controllers" in line:
                self.ready.set()

    async def metrics(self) -> str:
        """Its /metrics, "" while it has no port or is gone."""
        if self.port is None or self.proc.returncode is not None:
            return ""
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"http://127.0.0.1:{self.port}/metrics") as resp,
            ):
                return await resp.text()
        except aiohttp.ClientError:
            return ""

    async def leader(self) -> bool:
        return "\nedgehub_manager_leader 1.0" in await self.metrics()
