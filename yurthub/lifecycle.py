"""Running a hub as a process: signals and phased shutdown.

``run(settings)`` starts the hub, prints one machine-readable line with the bound addresses
(``EDGEHUB_HUB_READY proxy=<url> server=<url>``; port 0 picks free ports and tests parse this),
and waits for SIGTERM/SIGINT. The first signal stops gracefully (``Hub.stop``: stop accepting,
end watches, in-flight get ``shutdown_grace``); a second one forces: the grace wait ends at once
and whatever is still running is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from yurthub import server, settings

log = logging.getLogger(__name__)

READY_LINE_PREFIX = "EDGEHUB_HUB_READY"


async def run(hub_settings: settings.HubSettings) -> None:
    hub = server.Hub(hub_settings)
    stop = asyncio.Event()
    force = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        if stop.is_set():
            log.warning("second %s: forcing shutdown", signal.Signals(signum).name)
            force.set()
        else:
            log.info("%s: shutting down gracefully", signal.Signals(signum).name)
            stop.set()

    signals = (signal.SIGTERM, signal.SIGINT)
    for signum in signals:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        await hub.start()
        print(f"{READY_LINE_PREFIX} proxy={hub.proxy_url} server={hub.server_url}", flush=True)
        sys.stdout.flush()
        await stop.wait()
        await hub.stop(force=force)
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
