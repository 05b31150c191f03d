"""A bounded memo for per-request decisions that repeat (kubelet asks the same few URLs).

PURE: a dict with a cap. The oldest entry goes when the memo is full, so a client that sends
ever-new keys (long or random URLs) costs at most ``capacity`` entries, never more; callers
also refuse keys longer than they want to hold. Not thread-safe: the event loop owns it.
"""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedMemo(Generic[K, V]):
    __slots__ = ("_capacity", "_entries")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self._capacity = capacity
        self._entries: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        return self._entries.get(key)

    def put(self, key: K, value: V) -> V:
        entries = self._entries
        if len(entries) >= self._capacity and key not in entries:
            del entries[next(iter(entries))]  # the oldest (dicts keep insertion order)
        entries[key] = value
        return value

    def __len__(self) -> int:
        return len(self._entries)
