"""Running a hub as a process: signals and phased shutdown.

``run(settings)`` first takes over from YurtHub (``migrating.prepare``: its cache imported on
the first start, its certificates adopted, its ports waited for), then starts the hub with its
disk cache (``assembly.running``), then any companions (e.g. the discovery agent of
``edgehub hub --enable-discovery``, which talks to the cloud through this hub), prints one
machine-readable line with the bound addresses (``EDGEHUB_HUB_READY proxy=<url>
server=<url>``; port 0 picks free ports and tests parse this), and waits for SIGTERM/SIGINT.
The first signal stops gracefully (``Hub.stop``: stop accepting, end watches, in-flight get
``shutdown_grace``); a second one forces: the grace wait ends at once and whatever is still
running is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from yurthub import assembly, migrating, settings
from yurthub.cache import store

log = logging.getLogger(__name__)

READY_LINE_PREFIX = "EDGEHUB_HUB_READY"

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
        # Before binding: YurtHub's cache and certificates taken over, its ports free.
        await migrating.prepare(hub_settings)
        async with contextlib.AsyncExitStack() as stack:
            node = await stack.enter_async_context(assembly.running(hub_settings, force=force))
            for companion in companions:
                await stack.enter_async_context(companion(node))
            starting = False
            hub = node.hub
            # Start-up (imports, the cache index load) leaves freed heap behind: give it back.
            await loop.run_in_executor(None, store.trim_heap)
            print(f"{READY_LINE_PREFIX} proxy={hub.proxy_url} server={hub.server_url}", flush=True)
            sys.stdout.flush()
            await stop.wait()
    except asyncio.CancelledError:
        if not (stop.is_set() and main.uncancel() == 0):
            raise
        log.info("stopped while starting")
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
