"""``edgehub status`` finds the agent on either of its metrics ports: the DaemonSet's 10270 or
8080 (Akri's ``METRICS_PORT`` default, a hand-run ``edgehub agent``'s)."""

from __future__ import annotations

import asyncio

from aiohttp import web
from edgehub import status

from yurthub.testing import ports


def test_the_default_asks_the_daemonsets_port_then_akris() -> None:
    option = next(p for p in status.command.params if p.name == "agent")
    assert option.default == "http://127.0.0.1:10270,http://127.0.0.1:8080"


async def test_the_first_agent_port_that_answers_is_shown() -> None:
    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"handlers": [{"name": "udev", "endpoints": 1}]})

    app = web.Application()
    app.router.add_get("/status", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        closed = ports.closed_port()
        candidates = f"http://127.0.0.1:{closed},http://127.0.0.1:{port}"
        hub = f"http://127.0.0.1:{ports.closed_port()}"
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(None, status.collect, hub, candidates)
        assert found["agent"] == {"handlers": [{"name": "udev", "endpoints": 1}]}
        assert found["agent_source"] == f"agent http://127.0.0.1:{port}"
        nobody = f"http://127.0.0.1:{closed},http://127.0.0.1:{ports.closed_port()}"
        found = await loop.run_in_executor(None, status.collect, hub, nobody)
        assert found["agent"] is None
        assert found["agent_problem"].count("connection refused") == 2, found["agent_problem"]
        assert f"http://127.0.0.1:{closed}: connection refused" in found["agent_problem"]
    finally:
        await runner.cleanup()
