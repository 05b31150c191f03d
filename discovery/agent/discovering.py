"""The agent's view of its discovery requests: one per Configuration, and when to trust it.

``Requests`` starts, replaces and stops ``discovery.registry`` requests per
Configuration, follows each request's snapshots in an owned task (every
change re-queues the Configuration), and tracks a ``Health`` per request.

Trust rule (fixes reference §4 step 5 [quirk]): Instances are only removed
for devices that a *trusted* snapshot no longer lists. A request becomes
settled when its endpoints are all streaming without error and they either
reported a device or stayed silent for ``settle`` seconds — so a restarted
agent never deletes Instances before its handlers re-reported them. A
settled request that degrades (a stream failed, the handler went away) is
trusted again only when healthy, or after ``degraded_grace`` seconds, so a
crashing handler's restart does not churn brokers but a handler that is
really gone still releases its devices.
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
class Health:
    started: float
    attached_since: float | None = None
    settled: bool = False
    degraded_since: float | None = None


def observe(health: Health, snapshot: registry.Snapshot, now: float, settle: float) -> Health:
    attached = health.attached_since
    if attached is None and snapshot.endpoints:
        attached = now
    healthy = bool(snapshot.endpoints) and not snapshot.errors and snapshot.invalid_details is None
    settled = health.settled or (
        healthy and (bool(snapshot.devices) or (attached is not None and now - attached >= settle))
    )
    degraded = None if healthy else (health.degraded_since or now)
    return Health(health.started, attached, settled, degraded)


def trusted(health: Health, snapshot: registry.Snapshot, now: float, grace: float) -> bool:
    """May Instances of devices missing from ``snapshot`` be removed now?"""
    if health.settled:
        return health.degraded_since is None or now - health.degraded_since >= grace
    # Never settled: only a handler that rejects the details for long enough is believed.
    return snapshot.invalid_details is not None and now - health.started >= grace


def recheck_in(health: Health, now: float, settle: float, grace: float) -> float | None:
    """When trust could change without a new snapshot (a timer must re-queue the key)."""
    if not health.settled and health.attached_since is not None:
        return max(0.0, health.attached_since + settle - now)
    if health.degraded_since is not None:
        return max(0.0, health.degraded_since + grace - now)
    if not health.settled:
        return max(0.0, health.started + grace - now)
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class View:
    """One Configuration's discovery state, as the reconciler consumes it."""

    devices: tuple[tuple[devices.Device, bool], ...]
    trusted: bool
    recheck_in: float | None
    invalid_details: str | None
    errors: Mapping[str, str]


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
        settle: float,
        degraded_grace: float,
        on_snapshot: Callable[[Key, registry.Snapshot, float], None] | None = None,
    ) -> None:
        self.registry = reg
        self.reader = reader
        self.tg = tg
        self.on_change = on_change
        self.on_snapshot = on_snapshot
        self.settle = settle
        self.degraded_grace = degraded_grace
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
            tracked.health = observe(tracked.health, snapshot, now, self.settle)
            if self.on_snapshot is not None and not first:
                self.on_snapshot(key, snapshot, now - started)
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

    def keys(self) -> list[Key]:
        return list(self._tracked)

    def view(self, key: Key) -> View | None:
        tracked = self._tracked.get(key)
        if tracked is None:
            return None
        now = time.monotonic()
        snapshot = tracked.snapshot
        tracked.health = observe(tracked.health, snapshot, now, self.settle)
        return View(
            devices=tuple((d.device, d.shared) for d in snapshot.devices),
            trusted=trusted(tracked.health, snapshot, now, self.degraded_grace),
            recheck_in=recheck_in(tracked.health, now, self.settle, self.degraded_grace),
            invalid_details=snapshot.invalid_details,
            errors=snapshot.errors,
        )


def _request_key(key: Key) -> str:
    return f"{key[0]}/{key[1]}"
