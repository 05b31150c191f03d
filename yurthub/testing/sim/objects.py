"""What the simulated etcd holds: frozen object versions, buckets, events, list filters.

PURE data: ``Stored`` is one object version whose dict is never mutated after ``freeze``
(its JSON is encoded once, so lists and watches are byte concatenation); a ``Bucket`` holds
the objects of one storage with a lazily sorted key list; an ``Event`` is one write as
watchers see it; a ``Filter`` is what a list or watch covers.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Mapping
from typing import Any

import orjson

from yurthub.cache import selectors
from yurthub.testing.sim import resources

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects
GroupResource = resources.GroupResource
ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


@dataclasses.dataclass(frozen=True, slots=True)
class Stored:
    """One object version: the dict (never mutated), its JSON, and what selectors read."""

    obj: dict[str, Any]
    raw: bytes
    rv: int
    labels: Mapping[str, str]
    fields: Mapping[str, str]

    @property
    def meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = self.obj["metadata"]
        return meta

    @property
    def uid(self) -> str:
        return str(self.meta.get("uid", ""))

    @property
    def deleting(self) -> bool:
        return bool(self.meta.get("deletionTimestamp"))

    def copy(self) -> dict[str, Any]:
        """A deep copy the caller may mutate."""
        out: dict[str, Any] = orjson.loads(self.raw)
        return out


def freeze(resource: str, obj: dict[str, Any], rv: int) -> Stored:
    meta = obj["metadata"]
    if rv:
        meta["resourceVersion"] = str(rv)
    labels = meta.get("labels") or {}
    return Stored(
        obj=obj,
        raw=orjson.dumps(obj),
        rv=rv,
        labels=labels,
        fields=selectors.field_values(resource, obj),
    )


class Bucket:
    """The objects of one storage (group, resource), with a lazily sorted key list."""

    __slots__ = ("_sorted", "items")

    def __init__(self) -> None:
        self.items: dict[Key, Stored] = {}
        self._sorted: list[Key] | None = None

    def put(self, key: Key, stored: Stored) -> None:
        if key not in self.items:
            self._sorted = None
        self.items[key] = stored

    def remove(self, key: Key) -> None:
        if self.items.pop(key, None) is not None:
            self._sorted = None

    def sorted_keys(self) -> list[Key]:
        if self._sorted is None:
            self._sorted = sorted(self.items)
        return self._sorted


def keys_in(sorted_keys: list[Key], namespace: str | None, after: Key | None) -> list[Key]:
    """The slice of ``sorted_keys`` in ``namespace`` (None: all) strictly after ``after``."""
    lo, hi = 0, len(sorted_keys)
    if namespace is not None:
        lo = bisect.bisect_left(sorted_keys, (namespace, ""))
        hi = bisect.bisect_left(sorted_keys, (namespace + "\x00", ""))
    if after is not None:
        lo = max(lo, bisect.bisect_right(sorted_keys, after))
    return sorted_keys[lo:hi]


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    type: str
    storage: GroupResource
    key: Key
    obj: Stored
    prev: Stored | None

    @property
    def rv(self) -> int:
        return self.obj.rv


@dataclasses.dataclass(frozen=True, slots=True)
class Filter:
    """What a list or watch covers: namespace (None: all) and selectors."""

    namespace: str | None = None
    labels: selectors.LabelSelector = dataclasses.field(default_factory=selectors.LabelSelector)
    fields: selectors.FieldSelector = dataclasses.field(default_factory=selectors.FieldSelector)

    def matches(self, key: Key, stored: Stored) -> bool:
        if self.namespace is not None and key[0] != self.namespace:
            return False
        return self.labels.matches(stored.labels) and self.fields.matches(stored.fields)


@dataclasses.dataclass(frozen=True, slots=True)
class ListResult:
    items: list[Stored]
    rv: int
    continue_token: str | None = None
    remaining: int | None = None
