"""The heartbeat prober's pure decisions (``health.HealthChecker`` does the I/O): a server's
probe state machine, when an unhealthy server is probed again, when an unanswered renewal is
tried again or shows its server alive anyway, how long one attempt may wait for its answer,
the kubelet liveness gate, and the Lease bodies a probe writes. No I/O, no clock of its own.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Mapping
from typing import Any

from yurthub.outages import causes

LEASE_NAMESPACE = "kube-node-lease"
DELEGATE_HEARTBEAT_ANNOTATION = "openyurt.io/delegate-heartbeat"
RECOVERY_FIRST = 1.0
"""Seconds after a server turned unhealthy before it is probed again (then doubling, jittered,
up to the heartbeat interval) while it stays unhealthy."""


class ProbeState:
    """Pure state machine of one server (reference §10.6 prober cases)."""

    def __init__(self, healthy_threshold: int) -> None:
        self.threshold = healthy_threshold
        self.healthy = False
        self.successes = 0
        self.initialised = False

    def record(self, ok: bool) -> bool:
        """Apply one probe result; True when ``healthy`` changed."""
        before = self.healthy
        if not self.initialised:
            self.initialised = True
            self.healthy = ok
            self.successes = 1 if ok else 0
        elif not ok:
            self.healthy = False
            self.successes = 0
        else:
            self.successes += 1
            if not self.healthy and self.successes >= self.threshold:
                self.healthy = True
        return before != self.healthy


RECOVERY_CAP = 2.0
"""Seconds at most between probes of an unhealthy server that gave no answer at all (its link
is down: a connect attempt costs nothing on a dead route), so a healed link is seen within
about this, however long the outage lasted. One that answers with an error is up and busy or
broken: it is probed at most every heartbeat ``interval``, not harder."""


def recovery_delay(attempt: int, interval: float, jitter: float, *, silent: bool = False) -> float:
    """Seconds until the next probe of an unhealthy server: ``RECOVERY_FIRST`` doubling per
    ``attempt`` (0 first), stretched by up to a quarter (``jitter`` in [0, 1): hubs healed at
    once do not probe in step), never more than the heartbeat ``interval``, nor than
    ``RECOVERY_CAP`` when the server gave no answer (``silent``).

    PURE."""
    base = RECOVERY_FIRST * float(2 ** min(max(attempt, 0), 32))
    limit = min(interval, RECOVERY_CAP) if silent else interval
    return min(limit, base * (1 + jitter / 4))


_DEFINITIVE = frozenset(
    {causes.Cause.REFUSED, causes.Cause.UNREACHABLE, causes.Cause.DNS, causes.Cause.TLS}
)


def retry_unanswered(cause: causes.Cause, *, in_use: bool) -> bool:
    """Whether a lease renewal that got no HTTP answer (``cause``) is tried again, up to
    ``failed_retry`` attempts, before its server is declared gone.

    Only for a server in use (healthy): one not in use stays as it is after one failure, and
    is probed again soon anyway. Never for an answer that is final at once (nothing listens,
    no route, no such name, a refused handshake: the next attempt would say the same within
    milliseconds). A timeout or a reset is tried again: an apiserver busy with a fleet coming
    back at once answers late, and a pooled connection the server closed meanwhile resets, and
    neither means it is gone (YurtHub tries every failed heartbeat three times). A silent link
    is so noticed after ``failed_retry`` timeouts, not one.

    PURE."""
    return in_use and cause not in _DEFINITIVE


def alive_meanwhile(cause: causes.Cause, began: float, heard: float | None) -> bool:
    """Whether a renewal that timed out (``cause``) still shows its server alive: some answer
    of that server to the proxy arrived (``heard``, the clock's reading) after the renewal
    began (``began``). A busy apiserver keeps streaming watch events and answering; a silent
    link carries nothing at all.

    PURE."""
    return cause is causes.Cause.SILENT and heard is not None and heard >= began


PATIENCE = 2.0
"""Heartbeat intervals after a heal, or after the server last showed strain, during which a
probe's first attempt may wait an interval for its answer (``answer_bound``)."""


def answer_bound(
    timeout: float,
    interval: float,
    *,
    offline: bool,
    attempt: int,
    since_heal: float | None,
    since_strain: float | None = None,
) -> float:
    """Seconds one attempt of a probe may wait for its answer: the heartbeat ``timeout``, but
    the heartbeat ``interval`` when it is longer and

    - no server is healthy (``offline``, after the first probe round): after a fleet-wide heal
      the apiserver answers a renewal late, and a bound that gave up at ``timeout`` failed
      every probe of some hubs until the storm was over (6 of 30 trusted the cloud again 14-16
      s after the heal, the others within 1 s), each failure a new connection and handshake
      for the busy apiserver. A probe waiting on a dead route is answered as soon as the route
      is back (a held SYN or handshake goes through), so the longer bound costs no time;
    - or it is a probe's first attempt (``attempt`` 0) within ``PATIENCE`` intervals of the
      hub's coming back online (``since_heal`` seconds ago; None: it has not been offline) or
      of the server's last sign of strain (``since_strain``: response headers that came after
      the header deadline, a 429, a 503 or 504, a renewal answered after ``timeout``; None:
      none seen). Right after a fleet-wide heal the apiserver can stop answering anything for
      seconds (in a fleet of 30 nodes it answered nothing for 9.5 s, 0.4 s after the heal; in
      another run for about 10 s, 31 s after it, while the fleet was still re-listing): with
      ``failed_retry`` attempts of ``timeout`` (6 s) the hubs declared it gone moments before
      it answered again, ended every request in flight and came back a few seconds later, a
      second storm. So patience lasts as long as the storm shows, not a fixed time. A link
      that drops meanwhile is noticed one interval later than elsewhere (about 14 s, not 6 s
      by default); the outage record counts such a flap as the same outage anyway.

    A clock gone backwards (a negative ``since``) counts as nothing seen. PURE."""
    patient = max(timeout, interval)
    if offline:
        return patient
    window = PATIENCE * interval
    recent = any(
        since is not None and 0.0 <= since < window for since in (since_heal, since_strain)
    )
    if attempt == 0 and recent:
        return patient
    return timeout


STRAIN_STATUSES = frozenset({429, 503, 504})
"""Answers of a server out of capacity or time: API Priority and Fairness refusing (429), the
apiserver or a load balancer in front of it overloaded (503) or out of time (504)."""


def strained(status: int, elapsed: float, timeout: float) -> bool:
    """Whether a probe's answer (HTTP ``status`` after ``elapsed`` seconds) shows its server
    under strain: one of ``STRAIN_STATUSES``, or an answer later than the heartbeat ``timeout``
    (only a patient attempt waits that long). PURE."""
    return status in STRAIN_STATUSES or elapsed > timeout


class KubeletGate:
    def __init__(self, grace_period: float) -> None:
        self.grace_period = grace_period
        self._last: float | None = None

    def renew(self, now: float) -> None:
        self._last = now

    def alive(self, now: float) -> bool:
        return self._last is None or now - self._last <= self.grace_period


def format_micro_time(when: datetime.datetime) -> str:
    """Kubernetes MicroTime: ``2006-01-02T15:04:05.000000Z``."""
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_lease(
    node_name: str, node_uid: str, duration: int, now: datetime.datetime
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": node_name, "namespace": LEASE_NAMESPACE}
    if node_uid:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}
        ]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": node_name,
            "leaseDurationSeconds": duration,
            "renewTime": format_micro_time(now),
        },
    }


def renewed_lease(
    base: Mapping[str, Any], node_name: str, duration: int, now: datetime.datetime
) -> dict[str, Any]:
    """The PUT body renewing ``base`` (pure)."""
    lease = copy.deepcopy(dict(base))
    metadata = lease.setdefault("metadata", {})
    annotations = metadata.get("annotations")
    if isinstance(annotations, dict):
        annotations.pop(DELEGATE_HEARTBEAT_ANNOTATION, None)
    spec = lease.setdefault("spec", {})
    spec["holderIdentity"] = node_name
    spec["leaseDurationSeconds"] = duration
    spec["renewTime"] = format_micro_time(now)
    lease.setdefault("apiVersion", "coordination.k8s.io/v1")
    lease.setdefault("kind", "Lease")
    return lease
