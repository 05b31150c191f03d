"""Stopping a ``grpc.aio`` server without losing (or inventing) a cancellation.

Every gRPC server of ours (the registry's registration socket, a handler served by the SDK,
each kubelet device plugin) is stopped through :func:`stop`. It exists because grpcio's
``Server.stop(grace)`` mishandles cancellation in three ways (grpcio 1.85 on Python 3.11; each is
reproduced in ``tests/integration/discovery/test_discovery_grpcserving.py``):

* Swallowed: the grace wait is ``asyncio.wait_for(shield(shutdown_completed), grace)``; on 3.11
  a cancellation arriving as the shutdown completes is dropped by ``wait_for`` and ``stop``
  returns normally, so the owner of the stopping task keeps running.
* Half-stopped: a cancellation during the grace wait propagates, but nothing then cuts the
  in-flight RPCs short: their handler tasks (owned by grpc, not by us) run on after we left.
* Invented: ``stop(None)`` awaits grpc's shared shutdown future unshielded, so a cancelled stop
  can cancel that future, and every later ``stop`` raises ``CancelledError`` in a task that
  nobody cancelled, which silently ends that task inside a TaskGroup.

Invariant of :func:`stop`: it raises ``CancelledError`` if and only if its task was cancelled
while it ran (counted with ``Task.cancelling()``), and when it raises, the server's calls have
been cancelled. A caller already unwinding a cancellation (``stop`` in a ``finally``) is not
interrupted, so its remaining cleanup still runs and its own ``CancelledError`` carries on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc.aio

logger = logging.getLogger(__name__)


def _cancel_requests() -> int:
    task = asyncio.current_task()
    return 0 if task is None else task.cancelling()


async def stop(server: grpc.aio.Server, grace: float | None) -> None:
    """Stop ``server``: in-flight RPCs get ``grace`` seconds (``None``: none), then are cut.

    Raises ``CancelledError`` exactly when the calling task is cancelled meanwhile.
    """
    before = _cancel_requests()
    try:
        await server.stop(grace)
    except asyncio.CancelledError:
        if _cancel_requests() == before:
            # grpc's shared shutdown future was cancelled by an earlier, cancelled stop: the
            # calls were already cut then. Not a cancellation of ours; do not pass it on.
            logger.debug("grpc server shutdown was already cancelled; treating it as stopped")
            return
        # Ours, mid-grace: cut the remaining calls so no handler outlives its owner.
        with contextlib.suppress(asyncio.CancelledError):
            await server.stop(None)
        raise
    if _cancel_requests() > before:
        # The shutdown completed, but the cancellation that arrived meanwhile was dropped.
        raise asyncio.CancelledError
