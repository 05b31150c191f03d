"""Which hubs of a NodePool lead (reference §8.2, OpenYurt's ``hubleader`` controller).

PURE: the pool's spec, its nodes and the current leaders in; the leaders and the status to
write out. The random pick takes a ``random.Random`` so tests can seed it.

- Leader election off: no leaders (``leaderEndpoints`` emptied, ``leaderNum`` 0).
- On: candidates are the pool's nodes that are Ready, not being deleted, and have an
  InternalIP; with strategy ``mark`` also carrying every label of ``leaderNodeLabelSelector``.
- Current leaders that are still candidates stay (their address follows the node's InternalIP);
  missing places, up to ``leaderReplicas``, go to random candidates; extras (replicas lowered)
  leave in name order from the end.
- No candidate: no leaders; every hub of the pool then reads from the cloud.
- A spec with problems (``nodepools.PoolSpec.problems``) changes nothing.
- ``leaderLastElectedTime`` changes only when the set of leaders does.
"""

from __future__ import annotations

import dataclasses
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


def elect(
    spec: nodepools.PoolSpec,
    nodes: Iterable[nodepools.NodeFacts],
    leaders: Sequence[Endpoint],
    rng: random.Random,
) -> tuple[Endpoint, ...]:
    """The leaders the pool should have (sorted by node name)."""
    if spec.problems:
        return tuple(sorted(leaders))
    if not spec.enable_leader_election:
        return ()
    eligible = {n.name: n for n in candidates(spec, nodes)}
    kept = sorted(
        Endpoint(leader.node, eligible[leader.node].internal_ip)
        for leader in leaders
        if leader.node in eligible
    )
    kept = kept[: spec.leader_replicas]
    taken = {e.node for e in kept}
    rest = [name for name in sorted(eligible) if name not in taken]
    missing = spec.leader_replicas - len(kept)
    if missing > 0 and rest:
        for name in rng.sample(rest, min(missing, len(rest))):
            kept.append(Endpoint(name, eligible[name].internal_ip))
    return tuple(sorted(kept))


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
