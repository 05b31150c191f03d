"""Watchers of the simulated apiserver: one bounded queue of events per watch request.

A watcher that falls behind is closed (the client re-watches), never allowed to grow
memory. ``classify`` turns an event into what this watcher sees: selectors turn a
MODIFIED into ADDED or DELETED as an object enters or leaves them.
"""

from __future__ import annotations

import asyncio
import dataclasses

from yurthub.testing.sim import objects


class WatcherClosed(Exception):
    """The watcher ended: it fell behind, its resource stopped being served, or it was closed."""


class Watcher:
    """A bounded queue of events for one watch request."""

    def __init__(self, storage: objects.GroupResource, flt: objects.Filter, limit: int) -> None:
        self.storage = storage
        self.filter = flt
        self._limit = limit
        self._queue: asyncio.Queue[tuple[str, objects.Event] | None] = asyncio.Queue()
        self.closed: str | None = None

    def classify(self, event: objects.Event) -> str | None:
        """The event type this watcher sees for ``event`` (selectors can turn it), or None."""
        if event.storage != self.storage:
            return None
        matches_now = self.filter.matches(event.key, event.obj)
        if event.type == objects.ADDED:
            return objects.ADDED if matches_now else None
        if event.type == objects.DELETED:
            return objects.DELETED if matches_now else None
        matched_before = event.prev is not None and self.filter.matches(event.key, event.prev)
        if matches_now and matched_before:
            return objects.MODIFIED
        if matches_now:
            return objects.ADDED
        if matched_before:
            return objects.DELETED
        return None

    def offer(self, event: objects.Event) -> None:
        if self.closed is not None:
            return
        kind = self.classify(event)
        if kind is None:
            return
        if self._queue.qsize() >= self._limit:
            self.close("the watcher fell behind")
            return
        self._queue.put_nowait((kind, event))

    def close(self, reason: str) -> None:
        if self.closed is None:
            self.closed = reason
            self._queue.put_nowait(None)

    def pending(self) -> int:
        return self._queue.qsize()

    async def next(self) -> tuple[str, objects.Event]:
        """The next event; raises ``WatcherClosed`` once closed and drained."""
        item = await self._queue.get()
        if item is None:
            raise WatcherClosed(self.closed or "closed")
        return item


@dataclasses.dataclass(frozen=True, slots=True)
class WatchStart:
    """What a new watch sends before live events: synthetic ADDEDs or replayed history."""

    initial: list[tuple[str, objects.Stored]]
    watcher: Watcher
    rv: int
