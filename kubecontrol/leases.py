"""Lease leader election, the decisions: client-go's ``leaderelection`` semantics, no I/O.

Replicas compete for one ``coordination.k8s.io/v1`` Lease. Every retry period a candidate
reads it and ``decide``\\ s:

* no Lease: create it holding it (``leaseTransitions`` 0);
* held by someone else whose record this candidate saw change less than
  ``leaseDurationSeconds`` ago (by its *own* monotonic clock, never by the ``renewTime``
  written with someone else's wall clock, so clock skew between replicas does not matter):
  stand by;
* held by this candidate: renew (same ``acquireTime`` and transitions, new ``renewTime``);
* otherwise (released, expired, never renewed): take it over, ``leaseTransitions`` + 1.

Every write is a conditional PUT/POST (resourceVersion), so two candidates cannot both win.
A leader that cannot renew within ``renew_deadline`` of its last successful renewal stops
acting; others wait ``lease_duration`` after their last sighting of a change, and
``renew_deadline < lease_duration`` is what keeps two leaders from acting at once.
Releasing (clean stop) writes an empty holder with a 1 s duration so a standby takes over on
its next try instead of after the lease expires.

Defaults are kube-controller-manager's: lease 15 s, renew deadline 10 s, retry period 2 s.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

# client-go's JitterUntil factor for acquisition tries: period .. period * (1 + 1.2).
JITTER_FACTOR = 1.2
MICRO_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


@dataclasses.dataclass(frozen=True, slots=True)
class Config:
    namespace: str
    name: str
    identity: str
    """Unique per process (``hostname_uuid``): a restarted replica is a new candidate."""
    lease_duration: int = 15
    """Seconds a standby waits after the last change it saw before taking over."""
    renew_deadline: float = 10.0
    """A leader that has not renewed for this long stops acting."""
    retry_period: float = 2.0
    """Seconds between tries (acquisition tries are jittered up to 2.2 times this)."""

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("leader election needs an identity")
        if not self.namespace or not self.name:
            raise ValueError("leader election needs the Lease's namespace and name")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("the lease duration must be greater than the renew deadline")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError("the renew deadline must exceed 1.2 times the retry period")
        if self.retry_period <= 0:
            raise ValueError("the retry period must be positive")


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """The election fields of a Lease's spec."""

    holder: str = ""
    lease_duration: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Observed:
    """The record last seen and when (monotonic) it was first seen as it is."""

    record: Record
    at: float

    def valid(self, now: float) -> bool:
        """Someone holds the lease and has renewed it recently enough (as seen from here)."""
        return bool(self.record.holder) and self.at + self.record.lease_duration > now


@dataclasses.dataclass(frozen=True, slots=True)
class Standby:
    """Someone else leads: do not write."""

    holder: str


@dataclasses.dataclass(frozen=True, slots=True)
class Write:
    """Create (no Lease yet) or update the Lease to this record, conditionally."""

    record: Record


Decision = Standby | Write


def micro_time(wall: datetime.datetime) -> str:
    return wall.astimezone(datetime.UTC).strftime(MICRO_TIME_FORMAT)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def record_of(lease: Mapping[str, Any]) -> Record:
    spec = lease.get("spec")
    if not isinstance(spec, Mapping):
        return Record()
    holder = spec.get("holderIdentity")
    return Record(
        holder=holder if isinstance(holder, str) else "",
        lease_duration=_int(spec.get("leaseDurationSeconds")),
        acquire_time=_str(spec.get("acquireTime")),
        renew_time=_str(spec.get("renewTime")),
        transitions=_int(spec.get("leaseTransitions")),
    )


def observe(previous: Observed | None, current: Record, now: float) -> Observed:
    """The observation after reading ``current``: its time only moves when the record changed."""
    if previous is not None and previous.record == current:
        return previous
    return Observed(current, now)


def decide(
    config: Config, observed: Observed | None, now: float, wall: datetime.datetime
) -> Decision:
    """One try, given the Lease as just read (``None``: there is no Lease)."""
    stamp = micro_time(wall)
    if observed is None:
        return Write(Record(config.identity, config.lease_duration, stamp, stamp, 0))
    current = observed.record
    if current.holder == config.identity:
        return Write(
            Record(
                config.identity,
                config.lease_duration,
                current.acquire_time or stamp,
                stamp,
                current.transitions,
            )
        )
    if observed.valid(now):
        return Standby(current.holder)
    return Write(
        Record(config.identity, config.lease_duration, stamp, stamp, current.transitions + 1)
    )


def released(record: Record, wall: datetime.datetime) -> Record:
    """What a leader writes on a clean stop: nobody holds it, expiring in a second."""
    stamp = micro_time(wall)
    return Record("", 1, stamp, stamp, record.transitions)


def body(config: Config, lease: Mapping[str, Any] | None, record: Record) -> dict[str, Any]:
    """The Lease to write: ``lease`` as read (keeping its resourceVersion, labels and other
    spec fields) with the election fields of ``record``; a new Lease when ``lease`` is None."""
    if lease is None:
        new: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": config.name, "namespace": config.namespace},
            "spec": {},
        }
    else:
        new = copy.deepcopy(dict(lease))
        if not isinstance(new.get("spec"), dict):
            new["spec"] = {}
    spec = new["spec"]
    spec["holderIdentity"] = record.holder
    spec["leaseDurationSeconds"] = record.lease_duration
    spec["leaseTransitions"] = record.transitions
    for field, value in (("acquireTime", record.acquire_time), ("renewTime", record.renew_time)):
        if value is None:
            spec.pop(field, None)
        else:
            spec[field] = value
    return new
