"""What a fleet costs the control plane at steady state and in storms, measured from outside.

Everything is read where a user would read it, never from inside the hubs' code:
kube-apiserver's ``/metrics`` (open watches by resource, requests by verb, resource and code),
its audit log (``fleetaudit``: who listed what), ``/proc`` (CPU and RSS of the apiserver,
etcd, the manager and every member's processes), the links' byte counters, the hubs' and hollow
kubelets' own ``/metrics``, the NodePools' leaders and the hubs' caches (``fleetcaches``).

- ``Recorder``: a thread sampling kube-apiserver's ``/metrics`` every second (bounded history)
  for request-rate peaks, 429s and the pool-scoped watches over time.
- ``steady``: one window at steady state (``Steady``).
- ``storm``: one storm (``Storm``: ``cut``, ``apiserver-restart``, ``compacted``,
  ``leaders-killed``) and the recovery after it (``StormResult``).

Times are measured, never asserted here; a recovery not seen within its deadline is ``None``.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import itertools
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from yurthub.testing import apimetrics, fleetaudit, fleetcaches, fleetplumbing, fleets, procstats

FAMILIES = (apimetrics.REQUESTS, apimetrics.LONGRUNNING, apimetrics.REJECTED)


@dataclasses.dataclass(frozen=True, slots=True)
class Point:
    t: float
    wall: float
    """``time.time()`` when sampled (to meet the audit log's times)."""
    requests: float
    code_429: float
    rejected: float
    lists: float
    pool_watches: float
    watches: float
    kinds: dict[str, float] = dataclasses.field(default_factory=dict)
    """Requests so far by ``VERB resource`` (what a peak is made of)."""


def point(t: float, scrape: apimetrics.Scrape, wall: float = 0.0) -> Point:
    counts = apimetrics.requests(scrape)
    all_watches = apimetrics.watches(scrape)
    return Point(
        t=t,
        wall=wall,
        requests=apimetrics.total(counts),
        code_429=apimetrics.total(counts, code="429"),
        rejected=scrape.get(apimetrics.REJECTED),
        lists=apimetrics.total(counts, verb="LIST"),
        pool_watches=sum(all_watches.get(r, 0.0) for r in apimetrics.POOL_RESOURCES),
        watches=sum(all_watches.values()),
        kinds={f"{v} {r}": n for (v, r), n in apimetrics.by_verb_resource(counts).items()},
    )


def arrivals_peak(
    points: list[Point], watch_starts: Iterable[tuple[float, str]], most: int = 6
) -> tuple[float, dict[str, float]]:
    """The highest rate of requests *arriving* between consecutive points, and what it was
    made of (the ``most`` largest, requests/s by ``VERB resource``). kube-apiserver counts a
    request in ``apiserver_request_total`` when it ends, a WATCH too: after a link heals the
    watches left open at the cut end all at once, which is no new work. So WATCHes are
    counted here at their start (``watch_starts``: the audit log's wall-clock time and
    resource of each), every other verb from the metrics as before. PURE."""
    starts = sorted(watch_starts)
    best: tuple[float, dict[str, float]] = (0.0, {})
    first = 0
    for a, b in itertools.pairwise(points):
        if b.t <= a.t:
            continue
        span = b.t - a.t
        mix: dict[str, float] = {}
        for kind, n in b.kinds.items():
            if kind.startswith("WATCH "):
                continue
            was = a.kinds.get(kind, 0.0)
            grew = n - was if n >= was else n
            if grew > 0:
                mix[kind] = grew
        while first < len(starts) and starts[first][0] < a.wall:
            first += 1
        k = first
        while k < len(starts) and starts[k][0] < b.wall:
            key = f"WATCH {starts[k][1]}"
            mix[key] = mix.get(key, 0.0) + 1
            k += 1
        rate = sum(mix.values()) / span
        if rate > best[0]:
            top = sorted(((n, key) for key, n in mix.items()), reverse=True)[:most]
            best = (rate, {key: round(n / span, 1) for n, key in top})
    return best


def peak_mix(points: list[Point], most: int = 6) -> dict[str, float]:
    """What the fastest interval between consecutive points was made of: requests per second
    by ``VERB resource``, the ``most`` largest (a counter that went down restarts from zero,
    as in ``apimetrics.peak_rate``). PURE."""
    best: tuple[float, Point, Point] | None = None
    for a, b in itertools.pairwise(points):
        if b.t <= a.t:
            continue
        rate = (b.requests - a.requests if b.requests >= a.requests else b.requests) / (b.t - a.t)
        if best is None or rate > best[0]:
            best = (rate, a, b)
    if best is None:
        return {}
    _, a, b = best
    rates = {
        kind: (n - a.kinds.get(kind, 0.0) if n >= a.kinds.get(kind, 0.0) else n) / (b.t - a.t)
        for kind, n in b.kinds.items()
    }
    top = sorted(((r, k) for k, r in rates.items() if r > 0), reverse=True)[:most]
    return {k: round(r, 1) for r, k in top}


def window_mix(points: list[Point], most: int = 12) -> dict[str, float]:
    """PURE: the requests over the whole window of ``points`` by ``VERB resource``, the
    ``most`` largest (summed over the intervals: a counter that went down restarts from zero)."""
    totals: dict[str, float] = {}
    for a, b in itertools.pairwise(points):
        for kind, n in b.kinds.items():
            before = a.kinds.get(kind, 0.0)
            totals[kind] = totals.get(kind, 0.0) + (n - before if n >= before else n)
    top = sorted(((n, k) for k, n in totals.items() if n > 0), reverse=True)[:most]
    return {k: n for n, k in top}


class Recorder:
    """Samples kube-apiserver's ``/metrics`` every ``interval`` seconds in a thread while open
    (``with Recorder(admin) as rec``); ``points`` keeps the last ``limit`` readings. A scrape
    that fails (the apiserver restarting) is counted and skipped."""

    def __init__(
        self, admin: fleetplumbing.Admin, interval: float = 1.0, limit: int = 7200
    ) -> None:
        self.admin = admin
        self.interval = interval
        self.points: collections.deque[Point] = collections.deque(maxlen=limit)
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet-recorder", daemon=True)

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                scrape = apimetrics.select(self.admin.metrics(), FAMILIES)
                self.points.append(point(time.monotonic(), scrape, time.time()))
            except (OSError, ValueError):
                self.failures += 1
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def since(self, t: float) -> list[Point]:
        return [p for p in list(self.points) if p.t >= t]


# --- costs of processes --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Cost:
    millicores: float
    rss_mib: float


@dataclasses.dataclass(frozen=True, slots=True)
class RoleCost:
    """One role (hub, kubelet, kube-proxy, link) over the members: mean and max."""

    count: int
    mean_millicores: float
    max_millicores: float
    mean_rss_mib: float
    max_rss_mib: float


def role_costs(costs: Mapping[str, list[Cost]]) -> dict[str, RoleCost]:
    """PURE."""
    return {
        role: RoleCost(
            len(found),
            statistics.fmean(c.millicores for c in found),
            max(c.millicores for c in found),
            statistics.fmean(c.rss_mib for c in found),
            max(c.rss_mib for c in found),
        )
        for role, found in costs.items()
        if found
    }


class Processes:
    """The sessions a fleet's figures are read from: control plane and members."""

    def __init__(self, fleet: fleets.Fleet) -> None:
        self.fleet = fleet

    def sids(self) -> dict[str, int]:
        out: dict[str, int] = {}
        cluster = self.fleet.cluster
        for name in ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler"):
            out[name] = cluster.process(name).pid
        if self.fleet.manager is not None and self.fleet.manager.alive:
            out["edgehub-manager"] = self.fleet.manager.pid
        for member in self.fleet.members:
            for role, proc in member.components().items():
                if proc.alive:
                    out[f"{role}|{member.name}"] = proc.pid
        return out

    def read(self) -> tuple[float, dict[str, procstats.Usage]]:
        sids = self.sids()
        usage = procstats.sessions(sids.values())
        return time.monotonic(), {name: usage[sid] for name, sid in sids.items()}


def costs_between(
    before: tuple[float, Mapping[str, procstats.Usage]],
    after: tuple[float, Mapping[str, procstats.Usage]],
) -> dict[str, Cost]:
    """PURE."""
    seconds = after[0] - before[0]
    out: dict[str, Cost] = {}
    for name, now in after[1].items():
        was = before[1].get(name)
        if was is None:
            continue
        out[name] = Cost(procstats.millicores(was, now, seconds), now.rss_bytes / (1 << 20))
    return out


def split_roles(costs: Mapping[str, Cost]) -> tuple[dict[str, Cost], dict[str, list[Cost]]]:
    """(control-plane components by name, member roles -> one cost per member). PURE."""
    control: dict[str, Cost] = {}
    roles: dict[str, list[Cost]] = collections.defaultdict(list)
    for name, cost in costs.items():
        role, sep, _ = name.partition("|")
        if sep:
            roles[role].append(cost)
        else:
            control[name] = cost
    return control, dict(roles)


# --- the hubs' own view -------------------------------------------------------------------------


def hub_source(member: fleets.Member, text: str | None) -> str:
    """Where a hub's pool-scoped reads go now: ``leader``, ``cloud`` or ``""`` (unknown, no
    hub, not answering). edgehub: ``node_yurthub_multiplexer_upstream_watches``; YurtHub: the
    ``server`` of its forwarded services/endpointslices requests
    (``node_yurthub_target_for_multiplexer_requests_collector``)."""
    if text is None:
        return ""
    if member.mode is fleets.Mode.EDGEHUB:
        scrape = apimetrics.select(text, ("node_yurthub_multiplexer_upstream_watches",))
        for source in ("leader", "cloud"):
            if scrape.get("node_yurthub_multiplexer_upstream_watches", source=source) >= 1:
                return source
        return ""
    family = "node_yurthub_target_for_multiplexer_requests_collector"
    scrape = apimetrics.select(text, (family,))
    servers = {
        dict(labels).get("server", "")
        for (name, labels), value in scrape.values.items()
        if name == family and value >= 1
    }
    if not servers:
        return ""
    return "cloud" if any(str(member.link.port) in s for s in servers) else "leader"


def followers_on_cloud(fleet: fleets.Fleet) -> tuple[int, int]:
    """(hubs that are no leader and read their pool's resources from the cloud, hubs that
    are no leader)."""
    leaders = {name for names in fleet.leaders().values() for name in names}
    followers = [m for m in fleet.members if m.hub is not None and m.name not in leaders]
    texts = fleetplumbing.in_parallel([m.hub_metrics for m in followers])
    on_cloud = sum(1 for m, t in zip(followers, texts, strict=True) if hub_source(m, t) == "cloud")
    return on_cloud, len(followers)


def kubelet_429s(fleet: fleets.Fleet) -> float:
    """429s the hollow kubelets were answered so far (their client-go counters; a restarted
    kubelet starts from zero)."""
    texts = fleetplumbing.in_parallel([m.hollow.metrics for m in fleet.members])
    return sum(
        apimetrics.rest_client_codes(apimetrics.select(t, (apimetrics.REST_CLIENT,))).get(
            "429", 0.0
        )
        for t in texts
        if t
    )


def cache_differences(fleet: fleets.Fleet) -> dict[str, list[str]]:
    """Each hub's differences from the apiserver (``fleetcaches``); empty lists: equal.
    Direct mode has no caches: ``{}``."""
    if fleet.mode in (None, fleets.Mode.DIRECT):
        return {}
    cloud = fleetcaches.Cloud.read(fleet.admin)
    read = (
        fleetcaches.edgehub_copies
        if fleet.mode is fleets.Mode.EDGEHUB
        else fleetcaches.yurthub_copies
    )

    def one(member: fleets.Member) -> list[str]:
        try:
            copies = read(member.cache_dir)
        except OSError as e:
            return [f"cache unreadable: {e}"]
        return fleetcaches.differences(copies, cloud, member.name)

    found = fleetplumbing.in_parallel([functools.partial(one, m) for m in fleet.members], workers=4)
    return {m.name: d for m, d in zip(fleet.members, found, strict=True)}


LASTING = 5.0
"""Seconds a steady-state cache difference must outlast to count: a watch event the hub has
not written yet, or an object changed between reading the cloud and the cache, is not one."""


def difference_keys(found: Iterable[str]) -> set[str]:
    """The objects named by ``fleetcaches.differences`` lines (what precedes ``": "``). PURE."""
    return {line.split(": ", 1)[0] for line in found}


def still_different(
    first: Mapping[str, list[str]], later: Mapping[str, list[str]]
) -> dict[str, list[str]]:
    """Per hub, the differences of ``later`` about objects that differed in ``first`` too.
    PURE."""
    out: dict[str, list[str]] = {}
    for name, lines in later.items():
        before = difference_keys(first.get(name, ()))
        kept = [line for line in lines if line.split(": ", 1)[0] in before]
        if kept:
            out[name] = kept
    return out


def lasting_differences(fleet: fleets.Fleet) -> dict[str, list[str]]:
    """The hubs' differences from the apiserver that are still there ``LASTING`` seconds
    later (a steady-state check: one snapshot may catch an event in flight)."""
    first = cache_differences(fleet)
    if not any(first.values()):
        return {}
    time.sleep(LASTING)
    return still_different(first, cache_differences(fleet))


# --- steady state ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Steady:
    mode: str
    nodes: int
    pools: int
    seconds: float
    load_average: tuple[float, float, float]
    watches: dict[str, float]
    """Open watches per resource at the end of the window (the whole apiserver)."""
    pool_watches: float
    """Services + EndpointSlices watches (the whole apiserver)."""
    requests: dict[str, float]
    """``VERB resource`` -> requests in the window (the whole apiserver)."""
    codes: dict[str, float]
    link_bytes: int
    control: dict[str, Cost]
    roles: dict[str, RoleCost]
    followers_on_cloud: tuple[int, int] | None
    kubelet_429: float
    cache_problems: int | None
    """Hubs whose cache differs from the apiserver at the end of the window (None: direct)."""

    @property
    def request_rate(self) -> float:
        return sum(self.requests.values()) / self.seconds

    @property
    def link_bytes_per_second(self) -> float:
        return self.link_bytes / self.seconds


def steady(
    fleet: fleets.Fleet | None,
    admin: fleetplumbing.Admin,
    seconds: float,
    *,
    procs: Processes | None = None,
    mode: str = "",
) -> Steady:
    """Measure one window of ``seconds``: no sampling inside it (scraping ``/metrics`` costs
    the apiserver CPU), one reading at each end. ``fleet`` None: the control plane alone."""
    procs = procs or (Processes(fleet) if fleet is not None else None)
    first = apimetrics.select(admin.metrics(), FAMILIES)
    usage0 = procs.read() if procs is not None else None
    bytes0 = fleet.link_bytes() if fleet is not None else 0
    k429_0 = kubelet_429s(fleet) if fleet is not None else 0.0
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    usage1 = procs.read() if procs is not None else None
    bytes1 = fleet.link_bytes() if fleet is not None else 0
    last = apimetrics.select(admin.metrics(), FAMILIES)
    counts = apimetrics.delta(apimetrics.requests(first), apimetrics.requests(last))
    by_code: dict[str, float] = collections.defaultdict(float)
    for (_, _, code), value in counts.items():
        by_code[code] += value
    control: dict[str, Cost] = {}
    roles: dict[str, RoleCost] = {}
    if usage0 is not None and usage1 is not None:
        control, member_costs = split_roles(costs_between(usage0, usage1))
        roles = role_costs(member_costs)
    hubs = fleet is not None and fleet.mode not in (None, fleets.Mode.DIRECT)
    problems = None
    if hubs and fleet is not None:
        problems = sum(1 for d in lasting_differences(fleet).values() if d)
    return Steady(
        mode=mode or (str(fleet.mode) if fleet is not None else "control plane"),
        nodes=len(fleet.members) if fleet is not None else 0,
        pools=fleet.spec.pools if fleet is not None else 0,
        seconds=elapsed,
        load_average=os.getloadavg(),
        watches=apimetrics.watches(last),
        pool_watches=apimetrics.pool_watches(last),
        requests={f"{v} {r}": n for (v, r), n in apimetrics.by_verb_resource(counts).items()},
        codes=dict(by_code),
        link_bytes=bytes1 - bytes0,
        control=control,
        roles=roles,
        followers_on_cloud=followers_on_cloud(fleet) if hubs and fleet is not None else None,
        kubelet_429=(kubelet_429s(fleet) - k429_0) if fleet is not None else 0.0,
        cache_problems=problems,
    )


# --- storms -----------------------------------------------------------------------------------


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
    (``arrivals_peak``; None without an audit log)."""
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
    k429 = kubelet_429s(fleet)
    hubs = fleet.mode not in (None, fleets.Mode.DIRECT)
    with Recorder(admin) as rec:
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
                fleet.cluster.restart_apiserver()
            _wait(max(0.0, outage - (time.monotonic() - began)), watcher)
            audit0 = fleetaudit.size(audit_log) if audit_log else 0
            bytes0 = fleet.link_bytes()
            origin = time.monotonic()
            spread += fleet.heal_all()
        elif kind is Storm.APISERVER_RESTART:
            audit0 = fleetaudit.size(audit_log) if audit_log else 0
            bytes0 = fleet.link_bytes()
            fleet.cluster.restart_apiserver()
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
        pooled_after = _recover(fleet, watcher, rec, origin, deadline, pool_target, hubs)
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
        arrivals = arrivals_peak(points, ((c.at, c.resource) for c in calls if c.verb == "watch"))
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
        peak_mix=peak_mix(points),
        arrival_peak_rate=arrivals[0],
        arrival_mix=arrivals[1],
        baseline_request_rate=baseline,
        requests=grew("requests"),
        code_429=grew("code_429"),
        apf_rejected=grew("rejected"),
        kubelet_429=max(0.0, kubelet_429s(fleet) - k429),
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
        recovery_mix=window_mix(points),
        pool_watch_steps=steps(points, origin),
    )


def held_from(
    points: list[Point], origin: float, target: float, hold: float = 10.0
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


def steps(points: list[Point], origin: float) -> list[tuple[float, float]]:
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


def _recover(
    fleet: fleets.Fleet,
    watcher: _Watcher,
    rec: Recorder,
    origin: float,
    deadline: float,
    pool_target: float | None,
    hubs: bool,
) -> float | None:
    """Poll until every node is Ready, every cache equal and the pool watches back (or the
    deadline); returns when the pool watches came back (None: not seen)."""
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
                found = cache_differences(fleet)
            except OSError:
                found = {"?": ["the apiserver did not answer"]}
            watcher.last_cache = found
            if not any(found.values()):
                watcher.caches_after = time.monotonic() - origin
            next_cache = time.monotonic() + 3.0
        if hubs and now >= next_sources:
            try:
                on_cloud, _ = followers_on_cloud(fleet)
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
