"""Per-key capped exponential back-off: how long a failing key waits before its next try.

``PerKey.failed(key)`` records a failure and returns the delay: ``initial`` after the first
failure, doubling after each further one, never above ``cap`` (client-go's per-item
exponential rate limiter, capped). ``succeeded(key)`` (or ``forget``) resets the key. Pure
bookkeeping, no clock: the work queue applies the delay.

Bounded by the keys that are failing right now: a controller forgets a key when it succeeds
or its object goes away, so the table never outgrows the objects it watches.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

_MAX_COUNTED = 1024


class PerKey(Generic[K]):
    def __init__(self, initial: float, cap: float) -> None:
        if initial <= 0 or cap < initial:
            raise ValueError(f"back-off needs 0 < initial <= cap, got {initial} and {cap}")
        self.initial = initial
        self.cap = cap
        self._failures: dict[K, int] = {}

    def failed(self, key: K) -> float:
        """Record a failure of ``key``; returns the seconds to wait before retrying it."""
        # Counted up to a bound: past it the delay is the cap anyway.
        failures = min(self._failures.get(key, 0) + 1, _MAX_COUNTED)
        self._failures[key] = failures
        return self.delay(failures)

    def delay(self, failures: int) -> float:
        """The delay after ``failures`` consecutive failures (1 -> ``initial``)."""
        if failures <= 0:
            return 0.0
        delay = self.initial
        for _ in range(failures - 1):
            delay *= 2
            if delay >= self.cap:
                return self.cap
        return min(delay, self.cap)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    def succeeded(self, key: K) -> None:
        self._failures.pop(key, None)

    forget = succeeded

    def __len__(self) -> int:
        return len(self._failures)
