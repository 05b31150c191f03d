"""Pure: what a fleet of 10,000 nodes costs the control plane, extrapolated from a measured one.

The fleet bench measures, side by side on one control plane, N nodes in P pools with ~30 pods
each: per mode (no hub, YurtHub, edgehub) the watches the apiserver holds, the requests it
serves, the bytes on the edge links at steady state, and the same in reconnect storms.
``per_node`` turns one mode's figures into costs per node and per pool (the control plane's
own share, measured without any node, taken off first); ``extrapolate`` scales them to a
target fleet:

- watches: what each node holds beyond the pool-scoped ones, times the nodes, plus the
  pool-scoped ones (Services + EndpointSlices) per pool for hubs with a leader, or per node
  without; the pool-scoped watches are counted apart so a partly pooled fleet shows as such;
- steady request rate and link bytes: per node, times the nodes (the same pods per node: the
  load's kind does not change with N, only its amount);
- TCP connections into the apiserver (each a socket and a TLS session it holds): per node,
  times the nodes (a hub's pool-scoped watches are few beside its clients' own);
- storm peak (requests per second in the worst second after a fleet-wide heal) and the bytes
  of the recovery: per node, times the nodes. That is an upper bound: a real apiserver's
  priority and fairness would spread such a peak (that spreading, and the 429s it answers,
  is what the peak measures);
- Services and EndpointSlices are kept at the measured count (200 by default): the figures
  are for that many; bytes that depend on them scale with their count and size, not modelled.

Every figure says whether it was measured (at N) or extrapolated (to the target).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True, slots=True)
class Measured:
    """One mode's figures at N nodes, P pools (control plane's own share included)."""

    mode: str
    nodes: int
    pools: int
    watches: float
    pool_watches: float
    request_rate: float
    link_bytes_per_second: float
    storm_peak_rate: float | None = None
    storm_requests: float | None = None
    storm_link_bytes: float | None = None
    connections: float | None = None
    """Established TCP connections into the apiserver (None: not counted)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Baseline:
    """The control plane alone (no node): its own watches, requests and connections."""

    watches: float
    pool_watches: float
    request_rate: float
    connections: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class PerNode:
    mode: str
    other_watches_per_node: float
    pool_watches_per_node: float
    """Services + EndpointSlices watches per node (direct: ~3; pooled hubs: ~2·P/N)."""
    pool_watches_per_pool: float
    request_rate_per_node: float
    link_bytes_per_node_second: float
    storm_peak_per_node: float | None
    storm_requests_per_node: float | None
    storm_link_bytes_per_node: float | None
    connections_per_node: float | None = None


def per_node(m: Measured, base: Baseline) -> PerNode:
    """One mode's costs per node (and per pool), the control plane's share taken off."""
    n = max(1, m.nodes)
    fleet_pool = max(0.0, m.pool_watches - base.pool_watches)
    fleet_other = max(0.0, (m.watches - base.watches) - fleet_pool)
    peak = None if m.storm_peak_rate is None else max(0.0, m.storm_peak_rate - base.request_rate)
    connections = None
    if m.connections is not None and base.connections is not None:
        connections = max(0.0, m.connections - base.connections) / n
    return PerNode(
        mode=m.mode,
        other_watches_per_node=fleet_other / n,
        pool_watches_per_node=fleet_pool / n,
        pool_watches_per_pool=fleet_pool / max(1, m.pools),
        request_rate_per_node=max(0.0, m.request_rate - base.request_rate) / n,
        link_bytes_per_node_second=m.link_bytes_per_second / n,
        storm_peak_per_node=None if peak is None else peak / n,
        storm_requests_per_node=None if m.storm_requests is None else m.storm_requests / n,
        storm_link_bytes_per_node=(None if m.storm_link_bytes is None else m.storm_link_bytes / n),
        connections_per_node=connections,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    nodes: int = 10_000
    pools: int = 100
    pods: int = 300_000


@dataclasses.dataclass(frozen=True, slots=True)
class Extrapolated:
    mode: str
    watches: float
    pool_watches: float
    request_rate: float
    link_gib_per_hour: float
    storm_peak_rate: float | None
    storm_requests: float | None
    storm_link_gib: float | None
    connections: float | None = None


def extrapolate(p: PerNode, target: Target, *, pooled: bool) -> Extrapolated:
    """``pooled``: the mode shares pool-scoped watches per pool (a hub with a leader); else
    they grow with the nodes."""
    nodes = target.nodes
    pool = p.pool_watches_per_pool * target.pools if pooled else p.pool_watches_per_node * nodes
    gib = float(1 << 30)
    return Extrapolated(
        mode=p.mode,
        watches=p.other_watches_per_node * nodes + pool,
        pool_watches=pool,
        request_rate=p.request_rate_per_node * nodes,
        link_gib_per_hour=p.link_bytes_per_node_second * nodes * 3600 / gib,
        storm_peak_rate=None if p.storm_peak_per_node is None else p.storm_peak_per_node * nodes,
        storm_requests=(
            None if p.storm_requests_per_node is None else p.storm_requests_per_node * nodes
        ),
        storm_link_gib=(
            None
            if p.storm_link_bytes_per_node is None
            else p.storm_link_bytes_per_node * nodes / gib
        ),
        connections=None if p.connections_per_node is None else p.connections_per_node * nodes,
    )


def model(
    measured: Mapping[str, Measured], base: Baseline, target: Target = Target()
) -> dict[str, Extrapolated]:
    """Every measured mode extrapolated; hubs (any mode but ``direct``) pool per pool."""
    return {
        mode: extrapolate(per_node(m, base), target, pooled=mode != "direct")
        for mode, m in measured.items()
    }


@dataclasses.dataclass(frozen=True, slots=True)
class ManagerMeasured:
    """A cloud-side manager's RSS measured at one size (``bench/manager_scale.py``): with an
    empty cluster, and leading with synced caches at ``nodes`` Nodes and ``pods`` Pods."""

    name: str
    nodes: int
    pods: int
    rss_empty_mb: float
    rss_at_size_mb: float


MANAGERS_MEASURED = (
    ManagerMeasured("edgehub manager", 5_000, 50_000, rss_empty_mb=102.0, rss_at_size_mb=173.0),
    ManagerMeasured("yurt-manager", 5_000, 50_000, rss_empty_mb=64.0, rss_at_size_mb=1_772.0),
)
"""The latest ``bench/manager_scale.py --nodes 5000 --pods 50000 --pools 100`` run (docs/
performance.md, "Manager at fleet size"; load average 2.7). The fleet bench does not run the
manager at that size (it takes its own bench): these are its measured inputs, kept here so the
model prints the manager beside the fleet."""


def manager_rss_mb(m: ManagerMeasured, target: Target = Target()) -> float:
    """A manager's RSS at ``target``, extrapolated: its empty RSS plus what it grew by per
    object at the measured size, times the target's objects (pods and nodes together, as the
    informers hold both). The measured mix, ten pods a node, is not the target's thirty: where
    a node costs more than a pod (edgehub's informers: ~2.0 KB a node, ~0.9 KB a pod) this is
    an upper bound; where a pod costs more (yurt-manager keeps whole objects) a lower one."""
    objects = max(1, m.pods + m.nodes)
    per_object = max(0.0, m.rss_at_size_mb - m.rss_empty_mb) / objects
    return m.rss_empty_mb + per_object * (target.pods + target.nodes)
