"""The agent's HTTP probes (``/healthz``, ``/readyz``) next to ``/metrics``, on a real port."""

from __future__ import annotations

import aiohttp

from discovery.agent import metrics


async def test_readyz_follows_readiness_and_healthz_does_not() -> None:
    ready = False
    runner, port = await metrics.serve(metrics.Metrics(), "127.0.0.1", 0, lambda: ready)
    try:
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as session:

            async def status(path: str) -> int:
                async with session.get(base + path) as response:
                    await response.read()
                    return response.status

            assert (await status("/readyz"), await status("/healthz")) == (503, 200)
            ready = True
            assert (await status("/readyz"), await status("/healthz")) == (200, 200)
            assert await status("/metrics") == 200
    finally:
        await runner.cleanup()
