"""The keyed work queue: ordering by due time, collapse of repeated keys, no double processing."""

from __future__ import annotations

import asyncio

from kubecontrol import queueing


async def test_due_order_and_collapse() -> None:
    queue: queueing.WorkQueue[str] = queueing.WorkQueue()
    queue.add("late", 0.05)
    queue.add("now")
    queue.add("now")
    queue.add("late", 0.0)  # the earliest schedule wins
    # Both are due at once; each comes out exactly once, however often it was added.
    assert {await queue.get(), await queue.get()} == {"now", "late"}
    try:
        async with asyncio.timeout(0.05):
            await queue.get()
        raise AssertionError("nothing should be pending")
    except TimeoutError:
        pass


async def test_key_held_by_a_worker_is_not_handed_out_twice() -> None:
    queue: queueing.WorkQueue[str] = queueing.WorkQueue()
    queue.add("k")
    assert not queue.held("k")
    assert await queue.get() == "k"
    assert queue.held("k")
    queue.add("k")
    assert queue.pending("k") is not None
    try:
        async with asyncio.timeout(0.05):
            await queue.get()
        raise AssertionError("a held key must wait for done()")
    except TimeoutError:
        pass
    queue.done("k")
    assert await queue.get() == "k"
    queue.done("k")
    assert not queue.held("k")
    queue.add("x", 10)
    queue.forget("x")
    assert queue.pending("x") is None
