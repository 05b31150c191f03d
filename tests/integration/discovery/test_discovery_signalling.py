"""``signalling.run_until_signalled`` with real signals sent to this process."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from discovery import signalling


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_first_signal_cancels_main_lets_it_clean_up_and_returns(signum: int) -> None:
    started, cleaned = asyncio.Event(), asyncio.Event()

    async def main() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0)  # cleanup may await
            cleaned.set()

    async def send_when_started() -> None:
        await started.wait()
        os.kill(os.getpid(), signum)

    async with asyncio.timeout(10), asyncio.TaskGroup() as tg:
        tg.create_task(send_when_started(), name="signal sender")
        runner = tg.create_task(signalling.run_until_signalled(main()), name="runner")
    assert runner.result() is None and cleaned.is_set()
    # The handlers are gone again: the loop no longer intercepts the signal.
    assert not asyncio.get_running_loop().remove_signal_handler(signum)


async def test_a_cancellation_that_is_not_a_signal_propagates() -> None:
    async def main() -> None:
        await asyncio.sleep(3600)

    runner = asyncio.get_running_loop().create_task(
        signalling.run_until_signalled(main()), name="runner"
    )
    await asyncio.sleep(0)
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
