"""Controller: reflectors feed a keyed work queue; N workers run one reconcile function per key.

A controller is a name, a reconcile function ``async (key) -> float | None`` and the
resources it watches (``watch``). Keys are ``(namespace, name)`` (``""`` for cluster-scoped
objects). The reconcile function reads current objects from its reflectors' stores, acts,
and returns when to look at the key again (``None``: only on the next event).

Invariants:
  * One worker per key at a time (``queueing.WorkQueue``); a burst of events for one object
    collapses into one running and at most one pending reconcile.
  * A failing reconcile is retried after a per-key capped exponential back-off
    (``backoff.PerKey``) and logged in one line; success resets the key's back-off.
  * ``run_caches`` (the reflectors) and ``run_workers`` (workers + periodic resync) run
    separately, so a standby replica keeps warm caches and starts acting the moment it is
    elected; cancelling ``run_workers`` stops every reconcile at its next await. A key held
    by a cancelled worker is released (``done``) so it is not lost for the next leader.
  * Every task is owned by a TaskGroup and named ``<controller>: ...``.
  * With ``informers`` (``informing.Informers``), the controller's watches are the process's
    shared reflectors: their owner runs them, and ``run_caches`` runs only reflectors of the
    controller's own (none). ``shape`` (``trimming.Shape``) says what of each object the
    controller reads; the store then holds only that, read-only.

Danger: the reconcile function must be idempotent and must not trust the store to be
fresher than the apiserver: a write may be refused with 409, which it should answer by
returning a short requeue delay (the watch brings the newer object meanwhile).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from kubecontrol import backoff, informing, kubeapi, queueing, trimming, watching

logger = logging.getLogger(__name__)

Key = tuple[str, str]
Reconcile = Callable[[Key], Awaitable[float | None]]
OnError = Callable[[Key, Exception], Awaitable[None]]


@dataclasses.dataclass(frozen=True, slots=True)
class Timings:
    workers: int = 2
    """Keys reconciled concurrently (never the same key twice)."""
    resync: float | None = None
    """Every this many seconds, queue every object of the primary resources again (a missed
    or failed write is then retried even without an event); None: never."""
    backoff_initial: float = 0.5
    """Delay before the first retry of a failed key; doubled after each further failure."""
    backoff_cap: float = 300.0
    """A failed key is retried at least this often."""
    watch_timeout: int = 300
    """Server-side timeout of one watch request (seconds); the watch is then resumed."""
    watch_backoff_initial: float = 0.5
    watch_backoff_cap: float = 30.0
    """Reconnect back-off of the reflectors."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("a controller needs at least one worker")
        if self.resync is not None and self.resync <= 0:
            raise ValueError("resync must be positive (or None)")


class Observer(Protocol):
    """What a controller reports for metrics: each reconcile's outcome and duration."""

    def reconciled(self, controller: str, outcome: str, seconds: float) -> None: ...


def format_key(key: Key) -> str:
    namespace, name = key
    return f"{namespace}/{name}" if namespace else name


def _describe(e: BaseException) -> str:
    return str(e) or type(e).__name__


class Controller:
    def __init__(
        self,
        name: str,
        reconcile: Reconcile,
        timings: Timings = Timings(),
        *,
        on_error: OnError | None = None,
        observer: Observer | None = None,
        informers: informing.Informers | None = None,
    ) -> None:
        self.name = name
        self.informers = informers
        self._own: list[watching.Reflector] = []
        """Reflectors this controller runs itself (not shared)."""
        self._sharing: trimming.Sharing | None = None
        self.reconcile = reconcile
        self.timings = timings
        self.on_error = on_error
        self.observer = observer
        self.queue: queueing.WorkQueue[Key] = queueing.WorkQueue()
        self.backoff: backoff.PerKey[Key] = backoff.PerKey(
            min(timings.backoff_initial, timings.backoff_cap), timings.backoff_cap
        )
        self.reflectors: list[watching.Reflector] = []
        self._primary: list[watching.Reflector] = []
        self._said_hints: set[str] = set()
        """Hints the reflectors have logged (a missing CRD is said once per controller)."""

    # -- wiring

    def watch(
        self,
        api: kubeapi.KubeApi,
        resource: kubeapi.Resource,
        on_event: watching.Handler | None = None,
        *,
        primary: bool = True,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        absent_hint: str = "",
        shape: trimming.Shape | None = None,
    ) -> watching.Reflector:
        """Follow ``resource``; by default each event queues the object's own key.

        ``on_event`` maps events to keys itself (e.g. an owned object queues its owner); it
        runs on the event loop and must only enqueue. A ``primary`` resource's keys are the
        controller's keys: they are all queued when the workers start and on every resync.
        ``absent_hint``: logged (once for the controller) when the list is 404: how to install
        the resource's CRD. ``shape``: what of each object to keep (None: the informers'
        default, or whole objects without informers).
        """
        handler = on_event or self._enqueue_object
        if self.informers is not None:
            reflector = self.informers.reflector(
                resource,
                handler,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                shape=shape,
                absent_hint=absent_hint,
            )
        else:
            if shape is not None:
                self._sharing = self._sharing or trimming.Sharing()
            reflector = watching.Reflector(
                api,
                resource,
                handler,
                watch_timeout=self.timings.watch_timeout,
                backoff_initial=self.timings.watch_backoff_initial,
                backoff_cap=self.timings.watch_backoff_cap,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                absent_hint=absent_hint,
                said_hints=self._said_hints,
                shape=shape,
                sharing=self._sharing,
            )
            self._own.append(reflector)
        self.reflectors.append(reflector)
        if primary:
            self._primary.append(reflector)
        return reflector

    def _enqueue_object(self, kind: str, obj: dict[str, Any]) -> None:
        self.queue.add(kubeapi.key_of(obj))

    def enqueue(self, key: Key, delay: float = 0.0) -> None:
        self.queue.add(key, delay)

    def enqueue_all(self) -> None:
        """Queue every object the primary resources hold now."""
        for reflector in self._primary:
            for key in list(reflector.store):
                self.queue.add(key)

    # -- state

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

    async def wait_synced(self) -> None:
        for reflector in self.reflectors:
            await reflector.synced.wait()

    # -- running

    async def run_caches(self) -> None:
        """Run the controller's own reflectors until cancelled (shared ones run by their
        owner; with none of its own this returns at once)."""
        async with asyncio.TaskGroup() as tg:
            for reflector in self._own:
                tg.create_task(
                    reflector.run(), name=f"{self.name}: watch {reflector.resource.plural}"
                )

    async def run_workers(self) -> None:
        """Once the caches are synced: every primary object, then the workers and the resync,
        until cancelled (e.g. this replica stopped leading)."""
        await self.wait_synced()
        self.enqueue_all()
        async with asyncio.TaskGroup() as tg:
            for number in range(self.timings.workers):
                tg.create_task(self._worker(), name=f"{self.name}: worker {number}")
            if self.timings.resync is not None:
                tg.create_task(self._resync(self.timings.resync), name=f"{self.name}: resync")

    async def run(self) -> None:
        """Caches and workers together (a controller that needs no leader election; shared
        reflectors must be run by the informers' owner)."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.run_caches(), name=f"{self.name}: caches")
            tg.create_task(self.run_workers(), name=f"{self.name}: workers")

    async def _resync(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            self.enqueue_all()

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            started = time.monotonic()
            try:
                again = await self.reconcile(key)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                outcome = "error"
                delay = self.backoff.failed(key)
                logger.warning(
                    "%s: reconcile of %s failed (%s); retry in %.1fs",
                    self.name,
                    format_key(key),
                    _describe(e),
                    delay,
                )
                logger.debug("%s: reconcile of %s failed", self.name, key, exc_info=e)
                if self.on_error is not None:
                    try:
                        await self.on_error(key, e)
                    except Exception as report_error:  # reporting must not stop the worker
                        logger.debug("%s: on_error failed: %s", self.name, report_error)
                self.queue.add(key, delay)
            else:
                self.backoff.succeeded(key)
                outcome = "success" if again is None else "requeue"
                if again is not None:
                    self.queue.add(key, again)
            finally:
                self.queue.done(key)
            if self.observer is not None:
                self.observer.reconciled(self.name, outcome, time.monotonic() - started)
