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
matches: narrow it with ``namespace`` and selectors where a controller needs less.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from kubecontrol import kubeapi

logger = logging.getLogger(__name__)

Key = tuple[str, str]
Handler = Callable[[str, dict[str, Any]], None]


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
    ) -> None:
        """``absent_hint``: what to tell the operator when the list is 404 (how to install
        the CRD); ``said_hints``: hints already logged, shared by reflectors that should say
        one only once (bounded: hints are constants of the code)."""
        self.api = api
        self.resource = resource
        self.on_event = on_event
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

    def _apply_list(self, items: list[dict[str, Any]]) -> None:
        fresh = {kubeapi.key_of(obj): obj for obj in items}
        old = self.store
        self.store = fresh
        for key, obj in old.items():
            if key not in fresh:
                self.on_event("DELETED", obj)
        for key, obj in fresh.items():
            previous = old.get(key)
            if previous is None:
                self.on_event("ADDED", obj)
            elif kubeapi.resource_version_of(previous) != kubeapi.resource_version_of(obj):
                self.on_event("MODIFIED", obj)

    def _apply_event(self, event: kubeapi.WatchEvent) -> None:
        key = kubeapi.key_of(event.object)
        if event.type == "DELETED":
            self.store.pop(key, None)
        else:
            self.store[key] = event.object
        self.on_event(event.type, event.object)

    async def run(self) -> None:
        backoff = self.backoff_initial
        resource_version: str | None = None
        what = self.resource.plural
        while True:
            try:
                if resource_version is None:
                    listed = await self.api.list(
                        self.resource,
                        self.namespace,
                        label_selector=self.label_selector,
                        field_selector=self.field_selector,
                    )
                    self._apply_list(listed.items)
                    resource_version = listed.resource_version
                    self.synced.set()
                    if self._said:
                        logger.info("listed %s again", what)
                    self._said = ""
                    self._said_hints.discard(self.absent_hint)
                    logger.debug("listed %d %s at %s", len(listed.items), what, resource_version)
                opened = time.monotonic()
                events = 0
                async for event in self.api.watch(
                    self.resource,
                    resource_version,
                    self.watch_timeout,
                    namespace=self.namespace,
                    label_selector=self.label_selector,
                    field_selector=self.field_selector,
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
