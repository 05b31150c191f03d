"""A keyed work queue with delays: each key is processed by one worker at a time.

``add(key, delay)`` schedules a key (the earliest schedule wins); a key that
is re-added while a worker holds it is scheduled again once the worker calls
``done`` — so a burst of events for one Configuration collapses into at most
one running and one pending reconcile. The number of keys is bounded by the
number of objects, never by the number of events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self) -> None:
        self._due: dict[K, float] = {}
        self._active: set[K] = set()
        self._again: dict[K, float] = {}
        self._wakeup = asyncio.Event()

    def add(self, key: K, delay: float = 0.0) -> None:
        due = time.monotonic() + max(0.0, delay)
        table = self._again if key in self._active else self._due
        table[key] = min(table.get(key, due), due)
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

    async def get(self) -> K:
        while True:
            now = time.monotonic()
            if self._due:
                key = min(self._due, key=self._due.__getitem__)
                wait = self._due[key] - now
                if wait <= 0:
                    del self._due[key]
                    self._active.add(key)
                    return key
            else:
                wait = None
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
            current = self._due.get(key, again)
            self._due[key] = min(current, again)
            self._wakeup.set()
