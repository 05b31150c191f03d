"""The agent's view of its discovery requests: one per Configuration, and when to trust it.

``Requests`` starts, replaces and stops ``discovery.registry`` requests per
Configuration, follows each request's snapshots in an owned task (every
change re-queues the Configuration), and tracks a ``Health`` per request.

Trust rule (fixes reference §4 step 5 [quirk]): Instances are only removed
for devices that a *trusted* snapshot no longer lists; joining needs no trust.
A request is *healthy* when it has endpoints, none failing, and every one of
them has been heard from: it delivered a list on its current stream
(``Snapshot.reported``; an empty list counts) or stayed silent for ``settle``
seconds. A healthy request *settles* (once and for all) as soon as the
registration window after the agent's start has passed. A settled request that
is unhealthy (a stream failed, a new endpoint has not reported yet) is trusted
again when healthy, or after ``degraded_grace`` seconds, so a crashing
handler's restart does not churn brokers but a handler that is really gone
still releases its devices.

Why each wait remains, so an agent restart never deletes Instances that still exist:
  * ``settle`` (silent endpoints): Akri's own handlers send nothing when their
    first pass finds nothing (they only send changes against an initially
    empty list), so silence must eventually mean "empty". It is long (30 s) and
    only a fallback: every endpoint that reports is believed at once.
  * ``registration_window`` (endpoints that have not re-registered yet): after
    a restart the agent cannot know that a second endpoint of the same handler
    name exists until it registers again (Akri handlers notice the restart on
    their next 10 s tick, then retry every 10 s). Without the window, the first
    endpoint's report would remove the second one's devices. It is 0 when the
    agent serves no registration socket (embedded handlers only).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from discovery import devices, registry
from discovery.agent import properties

logger = logging.getLogger(__name__)

Key = tuple[str, str]


@dataclasses.dataclass(frozen=True, slots=True)
class RequestSpec:
    handler: str
    details: str
    properties_json: str
    """Canonical JSON of ``discoveryProperties``: a change restarts the request."""

    @staticmethod
    def of(spec: Mapping[str, Any]) -> RequestSpec:
        handler = spec.get("discoveryHandler") or {}
        return RequestSpec(
            handler=str(handler.get("name") or ""),
            details=str(handler.get("discoveryDetails") or ""),
            properties_json=json.dumps(handler.get("discoveryProperties") or [], sort_keys=True),
        )

    @property
    def properties(self) -> list[Mapping[str, Any]]:
        value = json.loads(self.properties_json)
        return value if isinstance(value, list) else []


@dataclasses.dataclass(frozen=True, slots=True)
class TrustTimings:
    """The waits of the trust rule (see the module docstring), in seconds."""

    settle: float
    """Silence after which an attached endpoint counts as having reported an empty list."""
    degraded_grace: float
    """How long an unhealthy settled request (or rejected details) keeps vanished Instances."""
    registrations_until: float = 0.0
    """Monotonic time before which no request settles (agent start + registration window)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Health:
    started: float
    attached: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """When each endpoint of the current snapshot was first seen attached (never mutated)."""
    settled: bool = False
    degraded_since: float | None = None


def observe(
    health: Health, snapshot: registry.Snapshot, now: float, timings: TrustTimings
) -> Health:
    attached = {uid: health.attached.get(uid, now) for uid in snapshot.endpoints}
    heard_from_all = all(
        uid in snapshot.reported or now - since >= timings.settle for uid, since in attached.items()
    )
    healthy = (
        bool(snapshot.endpoints)
        and not snapshot.errors
        and snapshot.invalid_details is None
        and heard_from_all
    )
    settled = health.settled or (healthy and now >= timings.registrations_until)
    degraded = None
    if not healthy:
        degraded = now if health.degraded_since is None else health.degraded_since
    return Health(health.started, attached, settled, degraded)


def trusted(health: Health, snapshot: registry.Snapshot, now: float, grace: float) -> bool:
    """May Instances of devices missing from ``snapshot`` be removed now?"""
    if health.settled:
        return health.degraded_since is None or now - health.degraded_since >= grace
    # Never settled: only a handler that rejects the details for long enough is believed.
    return snapshot.invalid_details is not None and now - health.started >= grace


def recheck_in(
    health: Health, snapshot: registry.Snapshot, now: float, timings: TrustTimings
) -> float | None:
    """Seconds until trust could change without a new snapshot (a timer must re-queue the
    key then), or ``None``. Only future instants count: one already past is reflected in
    ``health``, and returning 0 for it would re-queue the key in a busy loop."""
    # A failing endpoint is unhealthy until it reports, silent or not: no settle timer for it.
    waits = [
        timings.settle - (now - since)
        for uid, since in health.attached.items()
        if uid not in snapshot.reported
        and uid not in snapshot.errors
        and not now - since >= timings.settle
    ]
    if not health.settled:
        # Healthy (not degraded) and waiting only for the registration window to pass.
        if health.degraded_since is None and now < timings.registrations_until:
            waits.append(timings.registrations_until - now)
        if (
            snapshot.invalid_details is not None
            and not now - health.started >= timings.degraded_grace
        ):
            waits.append(timings.degraded_grace - (now - health.started))
    elif (
        health.degraded_since is not None
        and not now - health.degraded_since >= timings.degraded_grace
    ):
        waits.append(timings.degraded_grace - (now - health.degraded_since))
    return min(waits, default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class View:
    """One Configuration's discovery state, as the reconciler consumes it."""

    devices: tuple[tuple[devices.Device, bool], ...]
    trusted: bool
    recheck_in: float | None
    invalid_details: str | None
    errors: Mapping[str, str]
    rejected: tuple[str, ...] = ()
    """Why reported devices were not admitted (``registry.Snapshot.rejected``)."""


@dataclasses.dataclass
class _Tracked:
    spec: RequestSpec
    request: registry.DiscoveryRequest
    provider: properties.Provider
    health: Health
    snapshot: registry.Snapshot
    task: asyncio.Task[None] | None = None


class Requests:
    def __init__(
        self,
        reg: registry.Registry,
        reader: properties.ObjectReader,
        tg: asyncio.TaskGroup,
        on_change: Callable[[Key], None],
        *,
        timings: TrustTimings,
        on_snapshot: Callable[[Key, str, registry.Snapshot, float], None] | None = None,
    ) -> None:
        self.registry = reg
        self.reader = reader
        self.tg = tg
        self.on_change = on_change
        self.on_snapshot = on_snapshot
        self.timings = timings
        self._tracked: dict[Key, _Tracked] = {}

    def is_registered(self, handler: str) -> bool:
        return handler in self.registry.handler_names()

    def ensure(self, key: Key, spec: RequestSpec) -> None:
        """Start the request for ``key``, or restart it if its spec changed."""
        tracked = self._tracked.get(key)
        if tracked is not None and tracked.spec == spec:
            return
        if tracked is not None and tracked.task is not None:
            tracked.task.cancel()
        props: Sequence[Mapping[str, Any]] = spec.properties
        reader = self.reader

        async def provider() -> properties.Resolved:
            return await properties.resolve(props, reader)

        request = self.registry.request(_request_key(key), spec.handler, spec.details, provider)
        now = time.monotonic()
        tracked = _Tracked(spec, request, provider, Health(started=now), request.snapshot())
        self._tracked[key] = tracked
        tracked.task = self.tg.create_task(self._follow(key, tracked), name=f"follow {key}")
        logger.info("discovery request for %s/%s started (handler %s)", *key, spec.handler)

    async def _follow(self, key: Key, tracked: _Tracked) -> None:
        started = tracked.health.started
        first = True
        async for snapshot in tracked.request.snapshots():
            now = time.monotonic()
            tracked.snapshot = snapshot
            tracked.health = observe(tracked.health, snapshot, now, self.timings)
            if self.on_snapshot is not None and not first:
                self.on_snapshot(key, tracked.spec.handler, snapshot, now - started)
            first = False
            self.on_change(key)

    async def stop(self, key: Key) -> None:
        tracked = self._tracked.pop(key, None)
        if tracked is None:
            return
        if tracked.task is not None:
            tracked.task.cancel()
        await self.registry.stop_request(_request_key(key))
        logger.info("discovery request for %s/%s stopped", *key)

    def view(self, key: Key) -> View | None:
        tracked = self._tracked.get(key)
        if tracked is None:
            return None
        now = time.monotonic()
        snapshot = tracked.snapshot
        tracked.health = observe(tracked.health, snapshot, now, self.timings)
        return View(
            devices=tuple((d.device, d.shared) for d in snapshot.devices),
            trusted=trusted(tracked.health, snapshot, now, self.timings.degraded_grace),
            recheck_in=recheck_in(tracked.health, snapshot, now, self.timings),
            invalid_details=snapshot.invalid_details,
            errors=snapshot.errors,
            rejected=snapshot.rejected,
        )


def _request_key(key: Key) -> str:
    return f"{key[0]}/{key[1]}"
