"""One pool-scoped resource in memory: its objects, their resourceVersions, a bounded history of
changes and the watchers served from it (an apiserver watch cache in small).

PURE: no I/O, no clock, no asyncio. The feeder puts what the upstream says (``replace`` for a
list, ``apply`` per watch event, ``advance`` per BOOKMARK); the server reads lists (``items``)
and starts watchers (``watch``), each of which receives the events its selection covers.

Invariants:
- ``rv`` never goes back: a list older than the store (a source that is behind) raises
  ``Behind``, an event not newer than the store is ignored. Objects keep the upstream's
  resourceVersions, so a client can resume from any version against any hub or the cloud.
- The history holds the changes after ``oldest``: a watch from ``oldest`` or later replays
  them; an older one is ``Expired`` (410, the client lists again).
- A relist (``replace`` once synced) is delivered to open watchers as the differences
  (DELETED at the store's previous version, then ADDED/MODIFIED in resourceVersion order) and
  starts a new history at the list's version: nobody has to list again, and a watcher that
  resumes from a version inside the relist gets 410, never a partial view.
- Selections behave like the apiserver's: an object that starts to match is ADDED, one that
  stops matching is DELETED (its previous content, at the event's resourceVersion).
- Memory is bounded (``Limits``): the history is trimmed by count and by bytes; a store whose
  objects alone exceed ``max_bytes`` says ``over_budget`` (its owner gives up on it). Each
  watcher queues at most ``watcher_events`` / ``watcher_bytes``; past that it is closed
  (``slow``), never blocking the feeder or the other watchers. Entries are immutable and shared
  between the objects, the history and every queue.

Danger: ``notify`` callbacks run inside ``apply``/``replace`` (on the event loop): they must
only wake a task, never write to a socket.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from yurthub import jsonbytes, statuses
from yurthub.cache import selectors
from yurthub.pool import rvrules, selection

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"

ENTRY_OVERHEAD = 256
"""Bytes an entry costs beyond its JSON (the dataclass, label and field maps), for budgets."""

Key = tuple[str, str]


class Behind(Exception):
    """A list older than what the store already holds."""


class Expired(Exception):
    """A watch from before the history: answer with ``status`` (410)."""

    def __init__(self, status: statuses.Status) -> None:
        super().__init__(status["message"])
        self.status = status


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    max_bytes: int = 256 << 20
    """Objects plus history of one resource."""
    history_events: int = 10_000
    watcher_events: int = 4_096
    """Events one watcher may have queued; past it the watcher is closed as slow."""
    watcher_bytes: int = 32 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    namespace: str
    name: str
    rv: int
    raw: bytes
    """The object as JSON, with ``kind`` and ``apiVersion``."""
    labels: Mapping[str, str]
    fields: Mapping[str, str]

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def size(self) -> int:
        return len(self.raw) + ENTRY_OVERHEAD


def entry_of(resource: str, obj: Mapping[str, Any], kind: str, api_version: str) -> Entry:
    """An entry for an upstream object (``kind``/``apiVersion`` added when missing, as list
    items lack them); ``ValueError`` for an object without a name or resourceVersion."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise ValueError("an object without metadata")
    name = meta.get("name")
    namespace = meta.get("namespace") or ""
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        raise ValueError("an object without a name")
    try:
        rv = rvrules.parse(str(meta.get("resourceVersion") or ""))
    except ValueError as e:
        raise ValueError(f"{namespace}/{name}: resourceVersion is not a number") from e
    if not rv:
        raise ValueError(f"{namespace}/{name}: no resourceVersion")
    labels = meta.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise ValueError(f"{namespace}/{name}: labels are not a map")
    if obj.get("kind") != kind or obj.get("apiVersion") != api_version:
        obj = {**obj, "kind": kind, "apiVersion": api_version}
    return Entry(
        namespace=namespace,
        name=name,
        rv=rv,
        raw=jsonbytes.dumps(obj),  # held as long as the object (see jsonbytes)
        labels={str(k): str(v) for k, v in labels.items()},
        fields=selectors.field_values(resource, obj),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    type: str
    rv: int
    entry: Entry
    """The object now (for DELETED: its last state)."""
    prev: Entry | None
    """What the store held before (None: nothing)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    """One event as a watcher sees it."""

    type: str
    entry: Entry
    rv_override: int | None = None
    """Set the object's resourceVersion to this (a DELETED made of a previous state)."""


class Watcher:
    def __init__(self, sel: selection.Selection, limits: Limits) -> None:
        self.selection = sel
        self._limits = limits
        self.pending: collections.deque[Delivery] = collections.deque()
        self.pending_bytes = 0
        self.initial: list[Entry] = []
        """The state to send first (``watch(initial=True)``)."""
        self.start_rv = 0
        """The store's version when the watch started (the initial state's)."""
        self.closed: str | None = None
        """Why the store stopped feeding this watcher (None: open)."""
        self.notify: Callable[[], None] | None = None

    def _matches(self, entry: Entry) -> bool:
        return self.selection.matches(entry.namespace, entry.name, entry.labels, entry.fields)

    def offer(self, event: Event) -> None:
        if self.closed is not None:
            return
        now = event.type != DELETED and self._matches(event.entry)
        before = event.prev is not None and self._matches(event.prev)
        if event.type == DELETED and event.prev is None:
            before = self._matches(event.entry)
        if now and before:
            delivery = Delivery(MODIFIED, event.entry)
        elif now:
            delivery = Delivery(ADDED, event.entry)
        elif before and event.type == DELETED:
            delivery = Delivery(DELETED, event.entry)
        elif before:
            assert event.prev is not None
            delivery = Delivery(DELETED, event.prev, rv_override=event.rv)
        else:
            return
        self.pending.append(delivery)
        self.pending_bytes += delivery.entry.size
        if (
            len(self.pending) > self._limits.watcher_events
            or self.pending_bytes > self._limits.watcher_bytes
        ):
            self.close("slow")
            return
        if self.notify is not None:
            self.notify()

    def take(self, most: int) -> list[Delivery]:
        out: list[Delivery] = []
        while self.pending and len(out) < most:
            delivery = self.pending.popleft()
            self.pending_bytes -= delivery.entry.size
            out.append(delivery)
        return out

    def close(self, reason: str) -> None:
        if self.closed is not None:
            return
        self.closed = reason
        self.pending.clear()
        self.pending_bytes = 0
        if self.notify is not None:
            self.notify()


class Store:
    def __init__(self, resource: str, limits: Limits = Limits()) -> None:
        self.resource = resource
        self.limits = limits
        self.kind = ""
        self.list_kind = ""
        self.api_version = ""
        self.rv = 0
        self.oldest = 0
        self.synced = False
        self.over_budget = False
        self._objects: dict[Key, Entry] = {}
        self._history: collections.deque[Event] = collections.deque()
        self._watchers: set[Watcher] = set()
        self.objects_bytes = 0
        self.history_bytes = 0

    # --- feeding -----------------------------------------------------------------------------

    def replace(
        self, entries: list[Entry], rv: int, *, kind: str, list_kind: str, api_version: str
    ) -> None:
        """A whole list at ``rv``; raises ``Behind`` when older than the store."""
        if self.synced and rv < self.rv:
            raise Behind(f"list at {rv}, the store is at {self.rv}")
        new = {e.key: e for e in entries}
        self.kind, self.list_kind, self.api_version = kind, list_kind, api_version
        if self.synced and self._watchers:
            for event in _differences(self._objects, new, self.rv):
                for watcher in list(self._watchers):
                    watcher.offer(event)
        self._objects = new
        self.objects_bytes = sum(e.size for e in entries)
        self._history.clear()
        self.history_bytes = 0
        self.rv = self.oldest = rv
        self.synced = True
        self._trim()

    def apply(self, event_type: str, entry: Entry) -> bool:
        """One watch event; False when ignored (not newer than the store)."""
        if entry.rv <= self.rv:
            return False
        key = entry.key
        prev = self._objects.get(key)
        if event_type == DELETED:
            if prev is not None:
                del self._objects[key]
                self.objects_bytes -= prev.size
            kind = DELETED
        else:
            self._objects[key] = entry
            self.objects_bytes += entry.size - (prev.size if prev is not None else 0)
            kind = MODIFIED if prev is not None else ADDED
        event = Event(kind, entry.rv, entry, prev)
        self.rv = entry.rv
        self._history.append(event)
        self.history_bytes += _event_size(event)
        for watcher in list(self._watchers):
            watcher.offer(event)
        self._trim()
        return True

    def advance(self, rv: int) -> None:
        """A BOOKMARK: nothing changed up to ``rv``."""
        if rv > self.rv:
            self.rv = rv

    def reset(self, reason: str) -> None:
        """Forget everything (the resource is no longer served): every watcher is closed."""
        for watcher in list(self._watchers):
            watcher.close(reason)
        self._watchers.clear()
        self._objects = {}
        self._history.clear()
        self.objects_bytes = self.history_bytes = 0
        self.rv = self.oldest = 0
        self.synced = False

    # --- serving -----------------------------------------------------------------------------

    def items(self, sel: selection.Selection) -> list[Entry]:
        """The objects ``sel`` covers, sorted by namespace and name."""
        if sel.name and sel.namespace:
            found = self._objects.get((sel.namespace, sel.name))
            candidates: Iterator[Entry] = iter([found] if found is not None else [])
        else:
            candidates = iter(self._objects.values())
        matched = [e for e in candidates if sel.matches(e.namespace, e.name, e.labels, e.fields)]
        matched.sort(key=lambda e: e.key)
        return matched

    def watch(self, sel: selection.Selection, *, initial: bool, since: int | None) -> Watcher:
        """A watcher from the current state (``initial``), after ``since``, or after now.
        Raises ``Expired`` for a ``since`` older than the history."""
        if since is not None and since < self.oldest:
            raise Expired(rvrules.too_old(since, self.oldest))
        watcher = Watcher(sel, self.limits)
        watcher.start_rv = self.rv
        if initial:
            watcher.initial = self.items(sel)
        elif since is not None:
            for event in self._history:
                if event.rv > since:
                    watcher.offer(event)
        if watcher.closed is None:
            self._watchers.add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)

    def close_watchers(self, reason: str) -> int:
        count = len(self._watchers)
        for watcher in list(self._watchers):
            watcher.close(reason)
        self._watchers.clear()
        return count

    @property
    def watchers(self) -> int:
        return len(self._watchers)

    @property
    def objects(self) -> int:
        return len(self._objects)

    @property
    def history_length(self) -> int:
        return len(self._history)

    @property
    def bytes(self) -> int:
        return self.objects_bytes + self.history_bytes

    # --- bounds ------------------------------------------------------------------------------

    def _trim(self) -> None:
        limits = self.limits
        while self._history and (
            len(self._history) > limits.history_events or self.bytes > limits.max_bytes
        ):
            dropped = self._history.popleft()
            self.history_bytes -= _event_size(dropped)
            self.oldest = dropped.rv
        self.over_budget = self.objects_bytes > limits.max_bytes


def _event_size(event: Event) -> int:
    # What the history keeps alive beyond the objects map: an upper bound (entries still in the
    # map are counted twice), which errs on the side of trimming.
    return event.entry.size + (event.prev.size if event.prev is not None else 0)


def _differences(old: Mapping[Key, Entry], new: Mapping[Key, Entry], old_rv: int) -> list[Event]:
    """A relist as events: deletions at ``old_rv``, then additions and changes by version."""
    events = [Event(DELETED, old_rv, entry, entry) for key, entry in old.items() if key not in new]
    changed = [
        Event(ADDED if key not in old else MODIFIED, entry.rv, entry, old.get(key))
        for key, entry in new.items()
        if key not in old or old[key].rv != entry.rv
    ]
    changed.sort(key=lambda e: e.rv)
    return events + changed
