"""List+watch one resource (cluster-wide, or one namespace, optionally through label/field
selectors) into an in-memory store, forever.

``Reflector.run`` lists, then watches from the list's resourceVersion; a 410
(``Gone``) relists at once, any other failure reconnects after a capped,
doubling back-off, so an apiserver (or hub) that is away for a while is
recovered from without a restart. A failure is logged once per distinct cause
(a warning), its repeats at debug; a 404 on the list of a resource with an
``absent_hint`` (a custom resource whose CRD is not installed) logs that hint
instead, once for every reflector sharing ``said_hints`` (a controller's).
After every relist the store is replaced and the differences are reported as
ordinary events, so a consumer never misses a deletion that happened while the watch was down.

Consumers get ``(event type, object)`` through a synchronous callback (it
must not block: the reconciler only enqueues a key) and read current objects
from ``store`` (keyed ``(namespace, name)``; ``""`` for cluster-scoped objects). ``synced`` is
set once the first list has been applied. Memory is bounded by the objects the scope
matches: narrow it with ``namespace`` and selectors where a controller needs less, and keep
less of each with ``shape`` (``trimming.Shape``): every listed and watched object is decoded
into what it keeps (``decoding``: the rest is never built) before it is stored or handed on,
and an object its ``keep`` refuses is not held (one that was held is reported DELETED). Lists
are read in pages of ``page_size`` objects, so the whole answer of a large list is never in
memory at once.

Several consumers may share one reflector (``add_handler``; ``informing.Informers`` does):
each event goes to every handler in turn. ``add_index(name, values)`` keeps, beside the store,
the keys of the objects each value names (the pods of a node), so a consumer finds them
without scanning the store; indexes follow every list and event.

Danger: stored objects are shared by every consumer (and, trimmed, share values with each
other): they are read-only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from kubecontrol import decoding, kubeapi, trimming

logger = logging.getLogger(__name__)

Key = tuple[str, str]
Handler = Callable[[str, dict[str, Any]], None]
IndexFunc = Callable[[dict[str, Any]], Iterable[str]]

DEFAULT_PAGE_SIZE = 500
"""Objects per list page: client-go's pager default."""
_NONE: frozenset[Key] = frozenset()


class Index:
    """value -> keys of the stored objects ``values`` files under it (sets dropped when empty,
    so memory follows the objects)."""

    def __init__(self, values: IndexFunc) -> None:
        self.values = values
        self.keys: dict[str, set[Key]] = {}

    def add(self, key: Key, obj: dict[str, Any]) -> None:
        for value in self.values(obj):
            self.keys.setdefault(value, set()).add(key)

    def replace(self, key: Key, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """``key``'s object changed from ``old`` to ``new`` (None: absent); only the values
        that changed are touched, so an entry keeps the key object it was added with."""
        before = set(self.values(old)) if old is not None else set()
        after = set(self.values(new)) if new is not None else set()
        for value in before - after:
            keys = self.keys.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.keys[value]
        for value in after - before:
            self.keys.setdefault(value, set()).add(key)

    def rebuild(self, store: dict[Key, dict[str, Any]]) -> None:
        self.keys = {}
        for key, obj in store.items():
            self.add(key, obj)


class Reflector:
    def __init__(
        self,
        api: kubeapi.KubeApi,
        resource: kubeapi.Resource,
        on_event: Handler,
        *,
        watch_timeout: int = 300,
        backoff_initial: float = 0.5,
        backoff_cap: float = 30.0,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        absent_hint: str = "",
        said_hints: set[str] | None = None,
        shape: trimming.Shape | None = None,
        sharing: trimming.Sharing | None = None,
        page_size: int | None = DEFAULT_PAGE_SIZE,
    ) -> None:
        """``absent_hint``: what to tell the operator when the list is 404 (how to install
        the CRD); ``said_hints``: hints already logged, shared by reflectors that should say
        one only once (bounded: hints are constants of the code). ``shape``: what of each
        object to keep (None: all of it), its shared values through ``sharing`` (one for the
        process, or the reflector's own); ``page_size``: objects per list page (None: one
        request for the whole list)."""
        if page_size is not None and page_size < 1:
            raise ValueError("page_size must be positive (or None)")
        self.api = api
        self.resource = resource
        self.handlers: list[Handler] = [on_event]
        self.shape = shape
        self._decoder = (
            decoding.Decoder(shape, sharing or trimming.Sharing()) if shape is not None else None
        )
        self.page_size = page_size
        self.indexes: dict[str, Index] = {}
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_timeout = watch_timeout
        self.backoff_initial = backoff_initial
        self.backoff_cap = backoff_cap
        self.store: dict[Key, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self.absent_hint = absent_hint
        self._said_hints = said_hints if said_hints is not None else set()
        self._said = ""
        """The failure last logged as a warning ("" since the last list)."""

    # -- consumers

    def add_handler(self, handler: Handler) -> None:
        """Also hand every event to ``handler`` (after those added before)."""
        self.handlers.append(handler)

    def add_index(self, name: str, values: IndexFunc) -> None:
        """Keep the keys of the objects for which ``values(obj)`` names each value; read
        with ``indexed(name, value)``. Must be added before the first list."""
        if name in self.indexes:
            raise ValueError(f"index {name!r} exists already on {self.resource.plural}")
        index = Index(values)
        for key, obj in self.store.items():
            index.add(key, obj)
        self.indexes[name] = index

    def indexed(self, name: str, value: str) -> frozenset[Key] | set[Key]:
        """The keys of the stored objects index ``name`` files under ``value`` (a live view:
        copy it before awaiting anything)."""
        return self.indexes[name].keys.get(value, _NONE)

    def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        for handler in self.handlers:
            handler(kind, obj)

    # -- applying

    def _kept(self, obj: dict[str, Any]) -> bool:
        return self.shape is None or self.shape.keeps(obj)

    def _take_page(self, fresh: dict[Key, dict[str, Any]], items: list[dict[str, Any]]) -> None:
        for obj in items:
            if self._kept(obj):
                fresh[kubeapi.key_of(obj)] = obj

    def _apply_list(self, fresh: dict[Key, dict[str, Any]]) -> None:
        old = self.store
        self.store = fresh
        for index in self.indexes.values():
            index.rebuild(fresh)
        for key, obj in old.items():
            if key not in fresh:
                self._emit("DELETED", obj)
        for key, obj in fresh.items():
            previous = old.get(key)
            if previous is None:
                self._emit("ADDED", obj)
            elif kubeapi.resource_version_of(previous) != kubeapi.resource_version_of(obj):
                self._emit("MODIFIED", obj)

    def _apply_event(self, event: kubeapi.WatchEvent) -> None:
        obj = event.object  # what the shape keeps of it (decoded so)
        kept = self._kept(obj)
        key = kubeapi.key_of(obj)
        previous = self.store.get(key)
        if event.type == "DELETED" or not kept:
            if previous is not None:
                del self.store[key]
                for index in self.indexes.values():
                    index.replace(key, previous, None)
            if kept:
                self._emit("DELETED", obj)
            elif previous is not None:  # no longer kept: gone, as far as consumers know
                self._emit("DELETED", previous)
            return
        # An existing entry keeps its key object (the one its index entries hold).
        self.store[key] = obj
        for index in self.indexes.values():
            index.replace(key, previous, obj)
        self._emit(event.type, obj)

    async def _list(self) -> str:
        """List (in pages) into a fresh store, apply it, and return its resourceVersion."""
        fresh: dict[Key, dict[str, Any]] = {}
        if self.page_size is None:
            listed = await self.api.list(
                self.resource,
                self.namespace,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
            )
            if self._decoder is not None:
                listed = kubeapi.ObjectList(
                    [
                        self._decoder.shape.trim_fields(o, self._decoder.sharing)
                        for o in listed.items
                    ],
                    listed.resource_version,
                )
            self._take_page(fresh, listed.items)
            resource_version = listed.resource_version
        else:
            resource_version = ""
            async for page in self.api.list_pages(
                self.resource,
                self.namespace,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                limit=self.page_size,
                decode=self._decoder.page if self._decoder is not None else None,
            ):
                self._take_page(fresh, page.items)
                resource_version = page.resource_version or resource_version
        self._apply_list(fresh)
        return resource_version

    async def run(self) -> None:
        backoff = self.backoff_initial
        resource_version: str | None = None
        what = self.resource.plural
        while True:
            try:
                if resource_version is None:
                    resource_version = await self._list()
                    self.synced.set()
                    if self._said:
                        logger.info("listed %s again", what)
                    self._said = ""
                    self._said_hints.discard(self.absent_hint)
                    logger.debug("listed %d %s at %s", len(self.store), what, resource_version)
                opened = time.monotonic()
                events = 0
                async for event in self.api.watch(
                    self.resource,
                    resource_version,
                    self.watch_timeout,
                    namespace=self.namespace,
                    label_selector=self.label_selector,
                    field_selector=self.field_selector,
                    decode=self._decoder.event if self._decoder is not None else None,
                ):
                    events += 1
                    backoff = self.backoff_initial
                    if event.type != "BOOKMARK":
                        self._apply_event(event)
                    resource_version = kubeapi.resource_version_of(event.object) or resource_version
                if not events and time.monotonic() - opened < 1.0:
                    # A server (or proxy) that closes watches at once must not make us spin.
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, self.backoff_cap)
            except kubeapi.Gone:
                logger.info("watch of %s expired; relisting", what)
                resource_version = None
            except kubeapi.KubeError as e:
                self._log_failure(e, listing=resource_version is None, backoff=backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.backoff_cap)
                # Relist after an outage: events may have been compacted meanwhile.
                resource_version = None

    def _log_failure(self, error: kubeapi.KubeError, *, listing: bool, backoff: float) -> None:
        what = self.resource.plural
        if listing and isinstance(error, kubeapi.NotFound) and self.absent_hint:
            if self.absent_hint in self._said_hints:
                logger.debug("list of %s: %s (%s)", what, error, self.absent_hint)
                return
            self._said_hints.add(self.absent_hint)
            self._said = str(error)
            logger.warning("%s (%s); retrying until they are", self.absent_hint, error)
            return
        cause = str(error)
        level = logging.DEBUG if cause == self._said else logging.WARNING
        self._said = cause
        logger.log(level, "list/watch of %s failed (%s); retrying in %.1fs", what, error, backoff)
