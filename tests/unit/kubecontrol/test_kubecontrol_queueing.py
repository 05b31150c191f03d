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


async def test_many_keys_come_out_in_due_order_and_the_heap_stays_bounded() -> None:
    """Keys queued all at once (a manager's 50,000 pods when it starts leading) come out
    earliest first, each once; rescheduling a key earlier leaves stale entries behind, which
    are skipped and compacted away (the heap stays within twice the keys plus slack)."""
    queue: queueing.WorkQueue[int] = queueing.WorkQueue()
    count = 3000
    for n in range(count):
        queue.add(n, 30.0 + (count - n) / 1000)  # later keys due first
    for _ in range(5):  # each pass pulls every key earlier: a stale entry per key and pass
        for n in range(count):
            queue.add(n, 0.0 if n % 2 else 20.0)
            assert len(queue._heap) <= 2 * len(queue) + queueing._COMPACT_SLACK
    queue.forget(1)
    out = [await queue.get() for _ in range(count // 2 - 1)]
    assert out == sorted(out) and set(out) == {n for n in range(count) if n % 2} - {1}
    for n in out:
        queue.done(n)
    assert len(queue) == count // 2
    assert all(queue.pending(n) is not None for n in range(0, count, 2))
