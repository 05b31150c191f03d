"""``/healthz``, ``/readyz`` and ``/metrics`` of ``edgehub manager`` (aiohttp).

``/healthz`` is 200 while the event loop answers (liveness does not depend on the apiserver:
restarting a manager that waits for an unreachable apiserver would not help it). ``/readyz``
runs the checks it is given and answers 200 when all pass, else 503, listing each check as
Kubernetes components do (``[+]name ok`` / ``[-]name failed: why``). ``/metrics`` is the
process's own registry in the Prometheus text format.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Sequence

import prometheus_client
from aiohttp import web

from managers import metrics

logger = logging.getLogger(__name__)

Check = tuple[str, bool, str]  # (name, passed, detail)


def render_checks(checks: Sequence[Check]) -> tuple[int, str]:
    lines = [
        f"[+]{name} ok" + (f" ({detail})" if detail else "")
        if ok
        else f"[-]{name} failed: {detail}"
        for name, ok, detail in checks
    ]
    passed = all(ok for _, ok, _ in checks)
    lines.append("readyz check passed" if passed else "readyz check failed")
    return (200 if passed else 503), "\n".join(lines) + "\n"


async def serve(
    manager_metrics: metrics.Metrics,
    host: str,
    port: int,
    readiness: Callable[[], Sequence[Check]],
) -> tuple[web.AppRunner, int]:
    """Start serving; returns the runner (the caller cleans it up) and the bound port."""

    async def metrics_handler(request: web.Request) -> web.Response:
        return web.Response(
            body=manager_metrics.render(),
            headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST},
        )

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(request: web.Request) -> web.Response:
        status, text = render_checks(readiness())
        return web.Response(status=status, text=text)

    app = web.Application()
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner, bound = await start(app, host, port)
    logger.info("serving /healthz, /readyz and /metrics on %s:%d", host, bound)
    return runner, bound


async def start(
    app: web.Application, host: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port`` (0: a free port); the runner (the caller cleans it up)
    and the bound port. A failure to bind cleans up and raises."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    addresses = runner.addresses
    return runner, int(addresses[0][1]) if addresses else port
