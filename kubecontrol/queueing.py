"""A keyed work queue with delays: each key is processed by one worker at a time.

``add(key, delay)`` schedules a key (the earliest schedule wins); a key that
is re-added while a worker holds it is scheduled again once the worker calls
``done`` — so a burst of events for one Configuration collapses into at most
one running and one pending reconcile. The number of keys is bounded by the
number of objects, never by the number of events.

Cost: ``add`` and ``get`` are O(log n) in the keys waiting (a heap ordered by due time, with
stale entries skipped and compacted away), so a manager that queues all of 50,000 pods at once
hands them out in time linear in their number, not quadratic.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

_COMPACT_SLACK = 64
"""The heap is rebuilt from the live keys once it holds this many more than twice their
number (entries left behind by keys rescheduled earlier, forgotten or handed out)."""


class WorkQueue(Generic[K]):
    def __init__(self) -> None:
        self._due: dict[K, float] = {}
        self._heap: list[tuple[float, int, K]] = []
        """(due, tie-breaker, key); an entry is live while ``_due[key]`` equals its due."""
        self._order = itertools.count()
        self._active: set[K] = set()
        self._again: dict[K, float] = {}
        self._wakeup = asyncio.Event()

    def _schedule(self, key: K, due: float) -> None:
        current = self._due.get(key)
        if current is not None and current <= due:
            return
        self._due[key] = due
        heapq.heappush(self._heap, (due, next(self._order), key))
        if len(self._heap) > 2 * len(self._due) + _COMPACT_SLACK:
            self._heap = [(d, next(self._order), k) for k, d in self._due.items()]
            heapq.heapify(self._heap)

    def add(self, key: K, delay: float = 0.0) -> None:
        due = time.monotonic() + max(0.0, delay)
        if key in self._active:
            self._again[key] = min(self._again.get(key, due), due)
        else:
            self._schedule(key, due)
        self._wakeup.set()

    def forget(self, key: K) -> None:
        self._due.pop(key, None)
        self._again.pop(key, None)

    def __len__(self) -> int:
        """Keys waiting (due or delayed), not counting those a worker holds: the depth."""
        return len(self._due) + len(self._again)

    def pending(self, key: K) -> float | None:
        """Seconds until ``key`` is due (None when not scheduled)."""
        due = self._due.get(key, self._again.get(key))
        return None if due is None else max(0.0, due - time.monotonic())

    def held(self, key: K) -> bool:
        """Whether a worker holds ``key`` now (got it and has not called ``done``)."""
        return key in self._active

    def _earliest(self) -> tuple[float, K] | None:
        """The live entry due first (stale entries on top are dropped), or None."""
        heap = self._heap
        while heap:
            due, _, key = heap[0]
            if self._due.get(key) == due:
                return due, key
            heapq.heappop(heap)
        return None

    async def get(self) -> K:
        while True:
            wait: float | None = None
            earliest = self._earliest()
            if earliest is not None:
                due, key = earliest
                wait = due - time.monotonic()
                if wait <= 0:
                    heapq.heappop(self._heap)
                    del self._due[key]
                    self._active.add(key)
                    return key
            self._wakeup.clear()
            try:
                async with asyncio.timeout(wait):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    def done(self, key: K) -> None:
        self._active.discard(key)
        again = self._again.pop(key, None)
        if again is not None:
            self._schedule(key, again)
            self._wakeup.set()
