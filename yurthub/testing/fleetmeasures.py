"""What a fleet costs the control plane at steady state and in storms, measured from outside.

Everything is read where a user would read it, never from inside the hubs' code:
kube-apiserver's ``/metrics`` (open watches by resource, requests by verb, resource and code),
its audit log (``fleetaudit``: who listed what), ``/proc`` (CPU and RSS of the apiserver,
etcd, the manager and every member's processes; the TCP connections into the apiserver), the
links' byte counters, the hubs' and hollow kubelets' own ``/metrics``, the NodePools' leaders
and the hubs' caches (``fleetcaches``).

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
import functools
import itertools
import os
import statistics
import threading
import time
from collections.abc import Iterable, Mapping

from yurthub.testing import apimetrics, fleetcaches, fleetplumbing, fleets, procstats

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
    connections: int | None = None
    """Established TCP connections into kube-apiserver at the end of the window (the whole
    machine's: the control plane's own included; None when its port is not known)."""

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
        connections=apiserver_connections(admin),
    )


def apiserver_connections(admin: fleetplumbing.Admin) -> int | None:
    """Established TCP connections into kube-apiserver now (``procstats.connections_into``)."""
    ports = admin.cluster.ports
    return None if ports is None else procstats.connections_into(ports.apiserver)
