"""Which hubs of a NodePool lead (reference §8.2, OpenYurt's ``hubleader`` controller).

PURE: the pool's spec, its nodes and the current leaders in; the leaders and the status to
write out. The random pick takes a ``random.Random`` so tests can seed it.

- Leader election off: no leaders (``leaderEndpoints`` emptied, ``leaderNum`` 0).
- On: candidates are the pool's nodes that are Ready, not being deleted, and have an
  InternalIP; with strategy ``mark`` also carrying every label of ``leaderNodeLabelSelector``.
- Current leaders stay (their address follows the node's InternalIP) unless they are *gone*
  (deleted, being deleted, left the pool, no InternalIP, ``mark`` labels removed) or have a
  problem of their own: NotReady for ``replace_after`` seconds while a Ready candidate that
  does not lead yet could take their place, both at once (from the later of the leader's
  NotReady and the longest-Ready candidate's Ready ``lastTransitionTime``; unknown counts as
  long ago). When most of the pool is NotReady (more than half of its nodes: its cloud link
  dropped, and kube-controller-manager marks its nodes NotReady one by one, seconds and in a
  loaded control plane tens of seconds apart), no candidate is better and the leaders stay:
  the hubs keep reading from them instead of all going to the cloud. (In a fleet of 30 nodes
  whose every link was cut, one pool's leader was replaced by a node that was marked NotReady
  37 s after it; kube-controller-manager's own zone state said "PartialDisruption" then.)
  The grace keeps a leader whose NotReady came a little before the rest of the pool's,
  and one whose Ready comes a little after the others' when the link returns after a long
  outage (its nodes come back one by one; counting from the leader's NotReady alone would
  replace it by the first one back). ``recheck`` says when a grace ends (the controller
  decides again then).
- Missing places, up to ``leaderReplicas``, go to random candidates; extras (replicas lowered)
  leave NotReady ones first, then in name order from the end.
- No leader left and no candidate: no leaders; every hub of the pool then reads from the cloud.
  An empty set is therefore only published when the old leaders are gone.
- A spec with problems (``nodepools.PoolSpec.problems``) changes nothing.
- ``leaderLastElectedTime`` changes only when the set of leaders does.
"""

from __future__ import annotations

import dataclasses
import datetime
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from managers import nodepools


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Endpoint:
    node: str
    address: str

    def as_json(self) -> dict[str, str]:
        return {"nodeName": self.node, "address": self.address}


def current(pool: Mapping[str, Any]) -> tuple[Endpoint, ...]:
    status = pool.get("status") or {}
    out = []
    for item in status.get("leaderEndpoints") or []:
        if isinstance(item, Mapping) and item.get("nodeName"):
            out.append(Endpoint(str(item["nodeName"]), str(item.get("address") or "")))
    return tuple(out)


def candidates(
    spec: nodepools.PoolSpec, nodes: Iterable[nodepools.NodeFacts]
) -> list[nodepools.NodeFacts]:
    out = []
    for node in nodes:
        if node.pool != spec.name or not node.ready or not node.internal_ip:
            continue
        if spec.strategy == nodepools.MARK and any(
            node.labels.get(k) != v for k, v in spec.leader_node_label_selector.items()
        ):
            continue
        out.append(node)
    return sorted(out, key=lambda n: n.name)


REPLACE_AFTER = 30.0
"""Seconds a leader must be NotReady, while a Ready candidate waits, before it is replaced."""


@dataclasses.dataclass(frozen=True, slots=True)
class Election:
    leaders: tuple[Endpoint, ...]
    """Sorted by node name."""
    recheck: float | None = None
    """Seconds until a NotReady leader's grace ends (decide again then), or None."""


def _may_lead(spec: nodepools.PoolSpec, node: nodepools.NodeFacts) -> bool:
    """Whether ``node`` could lead, Readiness aside."""
    if node.pool != spec.name or node.deleting or not node.internal_ip:
        return False
    return spec.strategy != nodepools.MARK or all(
        node.labels.get(k) == v for k, v in spec.leader_node_label_selector.items()
    )


def decide(
    spec: nodepools.PoolSpec,
    nodes: Iterable[nodepools.NodeFacts],
    leaders: Sequence[Endpoint],
    rng: random.Random,
    *,
    now: datetime.datetime | None = None,
    replace_after: float = REPLACE_AFTER,
) -> Election:
    """The leaders the pool should have. ``now`` None: every NotReady leader's grace is over."""
    if spec.problems:
        return Election(tuple(sorted(leaders)))
    if not spec.enable_leader_election:
        return Election(())
    nodes = list(nodes)
    members = {n.name: n for n in nodes if _may_lead(spec, n)}
    eligible = {n.name: n for n in candidates(spec, nodes)}
    leading = {leader.node for leader in leaders}
    spares = [n for name, n in eligible.items() if name not in leading]
    # Most of the pool NotReady: its link is dropping (its nodes go NotReady one by one over
    # kube-controller-manager's grace, seconds apart) or gone; no candidate is better.
    pool = [n for n in nodes if n.pool == spec.name and not n.deleting]
    mostly_down = 2 * sum(1 for n in pool if not n.ready) > len(pool)
    spare = bool(spares) and not mostly_down
    # Since when a Ready candidate has been waiting (the longest-waiting one); None: long ago.
    known = [n.ready_since for n in spares]
    spare_since = None if not known or None in known else min(t for t in known if t is not None)
    kept: list[nodepools.NodeFacts] = []
    grace: dict[str, float] = {}
    for leader in leaders:
        member = members.get(leader.node)
        if member is None:
            continue  # gone
        if member.ready or not spare:
            kept.append(member)
            continue
        since = max(
            (t for t in (member.not_ready_since, spare_since) if t is not None), default=None
        )
        left = 0.0
        if now is not None and since is not None:
            left = replace_after - (now - since).total_seconds()
        if left > 0:
            kept.append(member)
            grace[member.name] = left
    kept.sort(key=lambda n: (not n.ready, n.name))
    kept = kept[: spec.leader_replicas]
    chosen = [Endpoint(n.name, n.internal_ip) for n in kept]
    taken = {e.node for e in chosen}
    rest = [name for name in sorted(eligible) if name not in taken]
    missing = spec.leader_replicas - len(chosen)
    if missing > 0 and rest:
        for name in rng.sample(rest, min(missing, len(rest))):
            chosen.append(Endpoint(name, eligible[name].internal_ip))
    waiting = [grace[name] for name in taken if name in grace]
    return Election(tuple(sorted(chosen)), min(waiting) if waiting else None)


def elect(
    spec: nodepools.PoolSpec,
    nodes: Iterable[nodepools.NodeFacts],
    leaders: Sequence[Endpoint],
    rng: random.Random,
) -> tuple[Endpoint, ...]:
    """The leaders the pool should have (sorted by node name), every grace over."""
    return decide(spec, nodes, leaders, rng).leaders


def status(pool: Mapping[str, Any], leaders: Sequence[Endpoint], now: str) -> dict[str, Any] | None:
    """The pool's new ``status``, or None when it already says this."""
    old = pool.get("status")
    old = dict(old) if isinstance(old, Mapping) else {}
    before = current(pool)
    new = dict(old)
    new["leaderEndpoints"] = [e.as_json() for e in leaders]
    new["leaderNum"] = len(leaders)
    if {e.node for e in before} != {e.node for e in leaders} or (
        leaders and "leaderLastElectedTime" not in old
    ):
        new["leaderLastElectedTime"] = now
    if (
        (old.get("leaderEndpoints") or []) == new["leaderEndpoints"]
        and old.get("leaderNum") == new["leaderNum"]
        and old.get("leaderLastElectedTime") == new.get("leaderLastElectedTime")
    ):
        return None
    return new
