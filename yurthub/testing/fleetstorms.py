"""A fleet in a storm, measured from outside: the storm (``Storm``: ``cut``,
``apiserver-restart``, ``compacted``, ``leaders-killed``), the recovery after it, and what it
cost (``StormResult``).

``storm`` cuts every link (or restarts the apiserver, compacts etcd, kills the leaders), heals
at one instant, then polls until every node is Ready, every hub's cache equals the apiserver
(``fleetcaches``) and the pool-scoped watches are back, or the deadline. The figures come from
``fleetmeasures``' readers (the apiserver's metrics sampled by its ``Recorder``, the audit log,
the hubs' caches and ``/metrics``). Times are measured, never asserted here; a recovery not
seen within its deadline is ``None``.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from yurthub.testing import apimetrics, fleetaudit, fleetmeasures, fleetplumbing, fleets


class Storm(enum.StrEnum):
    CUT = "cut"
    """Every link cut (blackholed) for a while, healed at the same instant."""
    APISERVER_RESTART = "apiserver-restart"
    COMPACTED = "compacted"
    """Every link cut; meanwhile etcd compacted and kube-apiserver restarted (its watch cache
    starts anew from the compacted revision): no watch from before can resume (410 Gone)."""
    LEADERS_KILLED = "leaders-killed"
    """Every pool's leader hub SIGKILLed at once, started again after a while."""


@dataclasses.dataclass(frozen=True, slots=True)
class StormResult:
    storm: str
    mode: str
    nodes: int
    pools: int
    outage_seconds: float
    """How long the cut, restart or kill lasted."""
    spread_seconds: float
    """How long cutting/healing every link took (they are switched in parallel)."""
    load_average: tuple[float, float, float]
    peak_request_rate: float
    """The highest 1-second request rate after the recovery began."""
    peak_mix: dict[str, float]
    """What that second was made of: requests/s by ``VERB resource``, the largest."""
    arrival_peak_rate: float | None
    """The highest 1-second rate of requests arriving, WATCHes counted at their start
    (``fleetmeasures.arrivals_peak``; None without an audit log)."""
    arrival_mix: dict[str, float]
    """What that second was made of."""
    baseline_request_rate: float
    """The mean request rate in the 20 s before the storm."""
    requests: float
    """Requests from the recovery's start until recovered (or the deadline)."""
    code_429: float
    apf_rejected: float
    kubelet_429: float
    ready_after: float | None
    """From the heal (or restart) to the last node's Ready transition, by the conditions'
    ``lastTransitionTime`` (whole seconds of kubelet's clock, which is this machine's)."""
    ready_seen_after: float | None
    """When the recovery loop's poll (about once a second, between its other checks) first
    saw every node Ready."""
    """Seconds from recovery start until every node is Ready in the cloud."""
    caches_equal_after: float | None
    pooled_after: float | None
    """Seconds until the Services + EndpointSlices watches are back at their steady count."""
    evicted: int
    """Pods deleted or recreated (their UID changed or vanished) during the storm."""
    leader_changes: int
    leaders_same: bool
    followers_on_cloud_peak: int | None
    lists: fleetaudit.Lists | None
    """The fleet nodes' LISTs and WATCHes from the recovery's start (audit log: relists,
    streaming lists, resumed watches), None without one."""
    all_lists: float
    """Every LIST the apiserver served from the recovery's start (its metrics)."""
    link_bytes: int
    cache_problems: dict[str, list[str]]
    """What still differed at the deadline (empty when the caches became equal)."""
    recovery_mix: dict[str, float] = dataclasses.field(default_factory=dict)
    """What ``requests`` were, by ``VERB resource`` (the largest)."""
    pool_watch_steps: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    """The apiserver's Services + EndpointSlices watches after the heal: (seconds, count) at
    each sample where the count changed."""
    ready_times: list[float] = dataclasses.field(default_factory=list)
    """Each node's Ready transition after the heal (seconds, ascending): whether the last one
    is one late node or the whole fleet's spread."""


@dataclasses.dataclass
class _Watcher:
    """What the recovery loop keeps seeing, sampled (ready nodes, leaders, caches, sources)."""

    fleet: fleets.Fleet
    origin: float
    leaders: dict[str, tuple[str, ...]]
    leader_changes: int = 0
    ready_after: float | None = None
    ready_seen_after: float | None = None
    ready_times: list[float] = dataclasses.field(default_factory=list)
    origin_wall: float = 0.0
    caches_after: float | None = None
    followers_peak: int = 0
    last_cache: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def poll_leaders(self) -> None:
        try:
            now = self.fleet.leaders()
        except OSError:
            return
        for pool, names in now.items():
            if self.leaders.get(pool) != names:
                self.leader_changes += 1
        self.leaders = now


def storm(
    fleet: fleets.Fleet,
    kind: Storm,
    *,
    outage: float,
    deadline: float = 300.0,
    audit_log: Any = None,
    pool_target: float | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> StormResult:
    """Run one storm on a fleet at steady state and measure the recovery. ``outage``: how
    long links stay cut / leaders stay dead; ``deadline``: the most the recovery is waited
    for (what did not recover by then is reported as such); ``pool_target``: the apiserver's
    Services + EndpointSlices watches at steady state (the ``pooled_after`` goal);
    ``audit_log``: the apiserver's audit log path (``fleetaudit.audit_args``)."""
    admin = fleet.admin
    uids = fleet.pod_uids()
    leaders_before = fleet.leaders()
    k429 = fleetmeasures.kubelet_429s(fleet)
    hubs = fleet.mode not in (None, fleets.Mode.DIRECT)
    with fleetmeasures.Recorder(admin) as rec:
        time.sleep(20)
        pre = rec.since(time.monotonic() - 21)
        baseline = (
            (pre[-1].requests - pre[0].requests) / (pre[-1].t - pre[0].t) if len(pre) > 1 else 0.0
        )
        spread = 0.0
        watcher = _Watcher(fleet, 0.0, leaders_before)
        began = time.monotonic()
        if kind is Storm.CUT or kind is Storm.COMPACTED:
            spread += fleet.cut_all()
            if kind is Storm.COMPACTED:
                # Half way through the outage the history goes: etcd's, then the watch
                # cache's (a restarted apiserver starts its cache at the current revision).
                _wait(outage / 2, watcher)
                revision = fleet.cluster.compact_etcd()
                log(f"etcd compacted at revision {revision}; restarting kube-apiserver")
                fleet.cluster.restart_apiserver(timeout=deadline)
            _wait(max(0.0, outage - (time.monotonic() - began)), watcher)
            audit0 = fleetaudit.size(audit_log) if audit_log else 0
            bytes0 = fleet.link_bytes()
            origin = time.monotonic()
            spread += fleet.heal_all()
        elif kind is Storm.APISERVER_RESTART:
            audit0 = fleetaudit.size(audit_log) if audit_log else 0
            bytes0 = fleet.link_bytes()
            # A restarted apiserver that a fleet keeps from getting ready is a figure of the
            # storm (the restart's seconds), not a failure of the run: waited for as long as
            # the recovery is.
            fleet.cluster.restart_apiserver(timeout=deadline)
            origin = time.monotonic()
        else:
            if not hubs:
                raise ValueError("leaders-killed needs hubs (not mode direct)")
            victims = fleet.leader_members()
            fleetplumbing.in_parallel([m.kill_hub for m in victims])
            _wait(outage, watcher)
            audit0 = fleetaudit.size(audit_log) if audit_log else 0
            bytes0 = fleet.link_bytes()
            origin = time.monotonic()
            # In this thread: a process started with die_with_parent dies with its thread.
            for member in victims:
                member.restart_hub()
        outage_seconds = origin - began
        log(f"{fleet.mode} {kind}: recovering after {outage_seconds:.0f} s")
        watcher.origin = origin
        watcher.origin_wall = time.time() - (time.monotonic() - origin)
        pooled_after = _recover(fleet, watcher, rec, origin, deadline, pool_target, hubs, log)
        points = rec.since(origin - 1.5)
        if pool_target is not None and pooled_after is not None:
            pooled_after = held_from(points, origin, pool_target) or pooled_after
    link_bytes = fleet.link_bytes() - bytes0
    lists = None
    arrivals: tuple[float | None, dict[str, float]] = (None, {})
    if audit_log:
        calls, _ = fleetaudit.read_from(audit_log, audit0)
        users = frozenset(f"system:node:{m.name}" for m in fleet.members)
        lists = fleetaudit.summarize(calls, users)
        arrivals = fleetmeasures.arrivals_peak(
            points, ((c.at, c.resource) for c in calls if c.verb == "watch")
        )
    after = fleet.pod_uids()
    evicted = sum(1 for key, uid in uids.items() if after.get(key) != uid)
    first, last = (points[0], points[-1]) if points else (None, None)

    def grew(attr: str) -> float:
        if first is None or last is None:
            return 0.0
        a, b = getattr(first, attr), getattr(last, attr)
        return float(b - a if b >= a else b)

    return StormResult(
        storm=str(kind),
        mode=str(fleet.mode),
        nodes=len(fleet.members),
        pools=fleet.spec.pools,
        outage_seconds=outage_seconds,
        spread_seconds=spread,
        load_average=os.getloadavg(),
        peak_request_rate=apimetrics.peak_rate((p.t, p.requests) for p in points),
        peak_mix=fleetmeasures.peak_mix(points),
        arrival_peak_rate=arrivals[0],
        arrival_mix=arrivals[1],
        baseline_request_rate=baseline,
        requests=grew("requests"),
        code_429=grew("code_429"),
        apf_rejected=grew("rejected"),
        kubelet_429=max(0.0, fleetmeasures.kubelet_429s(fleet) - k429),
        ready_after=watcher.ready_after,
        ready_times=watcher.ready_times,
        ready_seen_after=watcher.ready_seen_after,
        caches_equal_after=watcher.caches_after,
        pooled_after=pooled_after,
        evicted=evicted,
        leader_changes=watcher.leader_changes,
        leaders_same=fleet.leaders() == leaders_before,
        followers_on_cloud_peak=watcher.followers_peak if hubs else None,
        lists=lists,
        all_lists=grew("lists"),
        link_bytes=link_bytes,
        cache_problems={k: v for k, v in watcher.last_cache.items() if v},
        recovery_mix=fleetmeasures.window_mix(points),
        pool_watch_steps=steps(points, origin),
    )


def held_from(
    points: list[fleetmeasures.Point], origin: float, target: float, hold: float = 10.0
) -> float | None:
    """PURE: seconds after ``origin`` from which the pool watches were at ``target`` in every
    sample for at least ``hold`` seconds (the first such run; None: none in ``points``). The
    recovery loop sees the count only between its other checks, seconds apart: this reads the
    1 s samples themselves."""
    since: float | None = None
    for p in points:
        if p.t <= origin:
            continue
        if p.pool_watches != target:
            since = None
            continue
        if since is None:
            since = p.t
        if p.t - since >= hold:
            return since - origin
    return None


def steps(points: list[fleetmeasures.Point], origin: float) -> list[tuple[float, float]]:
    """PURE: (seconds after ``origin``, pool watches) where the count changed."""
    out: list[tuple[float, float]] = []
    for p in points:
        if not out or out[-1][1] != p.pool_watches:
            out.append((round(p.t - origin, 1), p.pool_watches))
    return out


def _wait(seconds: float, watcher: _Watcher) -> None:
    """Sleep ``seconds`` while counting leader changes (polled twice a second)."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        watcher.poll_leaders()
        time.sleep(min(0.5, left))


def cache_poll_line(found: Mapping[str, list[str]], after: float) -> str:
    """One cache poll that found differences, for the progress log. PURE."""
    differing = {name: lines for name, lines in found.items() if lines}
    objects = sum(len(lines) for lines in differing.values())
    name, lines = next(iter(differing.items()))
    return (
        f"caches polled {after:.1f} s after: {len(differing)} hubs differ "
        f"({objects} lines), e.g. {name}: {lines[0]}"
    )


def _recover(
    fleet: fleets.Fleet,
    watcher: _Watcher,
    rec: fleetmeasures.Recorder,
    origin: float,
    deadline: float,
    pool_target: float | None,
    hubs: bool,
    log: Callable[[str], None],
) -> float | None:
    """Poll until every node is Ready, every cache equal and the pool watches back (or the
    deadline); returns when the pool watches came back (None: not seen). Each cache poll
    that still finds differences is logged (how many hubs, how many objects, one of them)."""
    pooled_after: float | None = None
    pooled_since: float | None = None
    next_cache = next_sources = origin
    want = {p.name for p in fleet.placements}
    while True:
        now = time.monotonic()
        watcher.poll_leaders()
        if watcher.ready_seen_after is None:
            try:
                since = fleet.ready_since()
                if want <= since.keys():
                    seen = time.monotonic() - origin
                    times = [since[n] for n in want]
                    # A transition time that does not parse: the poll's figure stands in.
                    known = [t for t in times if t is not None]
                    watcher.ready_times = sorted(
                        round(max(0.0, t - watcher.origin_wall), 1) for t in known
                    )
                    watcher.ready_after = (
                        max(0.0, max(known) - watcher.origin_wall)
                        if len(known) == len(times)
                        else seen
                    )
                    watcher.ready_seen_after = seen
            except OSError:
                pass
        if hubs and watcher.caches_after is None and now >= next_cache:
            try:
                found = fleetmeasures.cache_differences(fleet)
            except OSError:
                found = {"?": ["the apiserver did not answer"]}
            watcher.last_cache = found
            if not any(found.values()):
                watcher.caches_after = time.monotonic() - origin
            else:
                log(cache_poll_line(found, now - origin))
            next_cache = time.monotonic() + 3.0
        if hubs and now >= next_sources:
            try:
                on_cloud, _ = fleetmeasures.followers_on_cloud(fleet)
                watcher.followers_peak = max(watcher.followers_peak, on_cloud)
            except OSError:
                pass
            next_sources = time.monotonic() + 5.0
        latest = rec.points[-1] if rec.points else None
        if pool_target is not None and latest is not None and latest.t > origin:
            if latest.pool_watches == pool_target:
                if pooled_since is None:
                    pooled_since = latest.t
                # Back at the target for 10 s running: pooled since it first got there.
                if latest.t - pooled_since >= 10 and pooled_after is None:
                    pooled_after = pooled_since - origin
            else:
                pooled_since = None
                pooled_after = None
        done = (
            watcher.ready_after is not None
            and (not hubs or watcher.caches_after is not None)
            and (pool_target is None or pooled_after is not None)
        )
        if done or now - origin > deadline:
            return pooled_after
        fleet.check_alive()
        time.sleep(1.0)
