"""Running a hub as a process: signals and phased shutdown.

``run(settings)`` first takes over from YurtHub (``migrating.prepare``: its cache imported on
the first start, its certificates adopted, its ports waited for), then starts the hub with its
disk cache (``assembly.running``) and prints one machine-readable line with the bound addresses
(``EDGEHUB_HUB_LISTENING proxy=<url> server=<url>``; port 0 picks free ports and tests parse
this), then starts any companions (e.g. the discovery agent of ``edgehub hub
--enable-discovery``, which talks to the cloud through this hub). Once the companions run and
the hub is ready (``/v1/readyz`` would answer 200: every readiness condition holds; a wrong
``--server-addr`` with nothing cached never is), it prints ``EDGEHUB_HUB_READY proxy=<url>
server=<url>``, once, however late. Then it waits for SIGTERM/SIGINT. The first signal stops
gracefully (``Hub.stop``: stop accepting, stop the hub's own loops, end watches, the requests
being answered get ``shutdown_grace``); a second one forces: the grace wait ends at once and
whatever is still running is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from yurthub import assembly, migrating, readiness, settings
from yurthub.cache import store

log = logging.getLogger(__name__)

READY_LINE_PREFIX = "EDGEHUB_HUB_READY"
LISTENING_LINE_PREFIX = "EDGEHUB_HUB_LISTENING"
READY_POLL = 0.2
"""Seconds between two looks at readiness before the READY line (its checks are callables with
no event to wait on; each look is a few attribute reads)."""

Companion = Callable[[assembly.Node], contextlib.AbstractAsyncContextManager[Any]]
"""Something that runs beside the hub for as long as it runs, given the running node; entered
after the hub is up and left before it stops."""


async def run(hub_settings: settings.HubSettings, companions: Sequence[Companion] = ()) -> None:
    stop = asyncio.Event()
    force = asyncio.Event()
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    starting = True

    def on_signal(signum: int) -> None:
        if stop.is_set():
            log.warning("second %s: forcing shutdown", signal.Signals(signum).name)
            force.set()
            return
        log.info("%s: shutting down gracefully", signal.Signals(signum).name)
        stop.set()
        if starting:
            # Still starting (e.g. a companion waiting for an unreachable cloud): stop waiting
            # for it; what did start is stopped by the exit stack below.
            main.cancel()

    signals = (signal.SIGTERM, signal.SIGINT)
    for signum in signals:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        # The node's data key first (it seals what the migration writes too); then, before
        # binding: YurtHub's cache and certificates taken over, its ports free.
        keys = await assembly.open_node_keys(hub_settings)
        await migrating.prepare(hub_settings, keys=keys.keys, seal=keys.seal())
        async with contextlib.AsyncExitStack() as stack:
            node = await stack.enter_async_context(
                assembly.running(hub_settings, force=force, keys=keys)
            )
            hub = node.hub
            addresses = f"proxy={hub.proxy_url} server={hub.server_url}"
            _say(f"{LISTENING_LINE_PREFIX} {addresses}")
            for companion in companions:
                await stack.enter_async_context(companion(node))
            starting = False
            # Start-up (imports, the cache index load) leaves freed heap behind: give it back.
            await loop.run_in_executor(None, store.trim_heap)
            async with asyncio.TaskGroup() as tg:
                announcing = tg.create_task(
                    _announce_when_ready(hub.readiness, f"{READY_LINE_PREFIX} {addresses}"),
                    name="ready-line",
                )
                await stop.wait()
                announcing.cancel()
    except asyncio.CancelledError:
        if not (stop.is_set() and main.uncancel() == 0):
            raise
        log.info("stopped while starting")
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)


def _say(line: str) -> None:
    print(line, flush=True)
    sys.stdout.flush()


async def _announce_when_ready(ready: readiness.Readiness, line: str) -> None:
    """Print ``line`` once the hub is ready (at once if it is), never before."""
    while not ready.ready():  # noqa: ASYNC110 (readiness has no event to wait on)
        await asyncio.sleep(READY_POLL)
    _say(line)
