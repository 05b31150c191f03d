"""SIGTERM/SIGINT for the discovery processes (``edgehub agent``, ``edgehub handler``).

:func:`run_until_signalled` runs a coroutine in the calling task; the first signal cancels
that task, so the coroutine's own cleanup runs (plugins stopped, sockets removed) and the
call returns normally: a requested stop is a clean exit. A second signal exits at once
(status 1) for an operator who will not wait for that cleanup.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Coroutine
from typing import Any

logger = logging.getLogger(__name__)


async def run_until_signalled(main: Coroutine[Any, Any, None]) -> None:
    """Await ``main``; the first SIGTERM/SIGINT cancels it and returns, a second exits now."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    stopping = False

    def on_signal(signum: int) -> None:
        nonlocal stopping
        if stopping:
            logger.warning("second signal %s: exiting now", signal.Signals(signum).name)
            os._exit(1)
        stopping = True
        logger.info("signal %s: stopping", signal.Signals(signum).name)
        task.cancel()

    signals = (signal.SIGTERM, signal.SIGINT)
    for signum in signals:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        await main
    except asyncio.CancelledError:
        if not stopping:
            raise
        task.uncancel()  # the stop we asked for is done: nothing else is being cancelled
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
