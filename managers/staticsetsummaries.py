"""Where a YurtStaticSet's rollout stands, per pool (``edgehub rollout status``).

PURE: the YurtStaticSet, its namespace's Pods and the Nodes in; frozen rows out. It reads the
same objects as the ``yurtstaticset`` controller, with the same rules (``staticsetplanning``),
so its totals are what ``kubectl get yss`` shows (TOTAL, READY, UPGRADED).

Per node (each node running the static Pod is in exactly one state):

* ``upgraded``: its mirror Pod carries the current template's hash (``verifying`` while the
  controller still waits for its kubelet after the swap);
* ``failed``: the current template's worker failed there, or its kubelet did not come back
  after the swap (the halt names it; such a node may be upgraded too: it counts in both);
* ``upgrading``: its worker runs (or waits for the node's kubelet to start it);
* ``offline``: it needs the upgrade and the Node is not Ready: done once it is back;
* ``pending``: it needs the upgrade and waits for a slot (or for an OTA request on the node).

A node's pool is its ``apps.openyurt.io/nodepool`` label, else the YurtStaticSet's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from managers import staticsethalts, staticsetplanning

POOL_LABEL = "apps.openyurt.io/nodepool"
UPGRADED, VERIFYING, FAILED, UPGRADING, OFFLINE, PENDING = (
    "upgraded",
    "verifying",
    "failed",
    "upgrading",
    "offline",
    "pending",
)


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One YurtStaticSet's nodes of one pool."""

    namespace: str
    name: str
    pool: str
    strategy: str
    hash: str
    nodes: tuple[tuple[str, str], ...]
    """(node, state), by node name."""
    ready: int
    """Nodes whose static Pod is Ready."""
    upgraded: int
    halt: staticsethalts.Halt | None
    problems: tuple[str, ...] = ()

    def count(self, state: str) -> int:
        return sum(s == state for _, s in self.nodes)

    @property
    def total(self) -> int:
        return len(self.nodes)

    @property
    def failed(self) -> int:
        return self.count(FAILED)

    @property
    def pending(self) -> int:
        """Nodes that need the upgrade and are reachable: waiting or being upgraded."""
        return self.count(PENDING) + self.count(UPGRADING)

    @property
    def offline(self) -> int:
        return self.count(OFFLINE)

    @property
    def state(self) -> str:
        if self.problems:
            return "Invalid: " + "; ".join(self.problems)
        if self.halt is not None:
            where = f"node {self.halt.node}: " if self.halt.node else ""
            return f"Halted ({self.halt.reason}): {where}{self.halt.message}"
        if self.upgraded == self.total and not self.failed and not self.count(VERIFYING):
            return "Complete"
        if self.pending or self.count(VERIFYING):
            return "Rolling" if self.strategy != staticsetplanning.OTA else "Waiting for OTA"
        if self.offline:
            return "Waiting for offline nodes"
        return "Rolling"

    def as_json(self) -> dict[str, Any]:
        halt = self.halt
        return {
            "namespace": self.namespace,
            "name": self.name,
            "pool": self.pool,
            "strategy": self.strategy,
            "hash": self.hash,
            "total": self.total,
            "upgraded": self.upgraded,
            "ready": self.ready,
            "pending": self.pending,
            "offline": self.offline,
            "failed": self.failed,
            "state": self.state,
            "halted": None if halt is None else dataclasses.asdict(halt),
            "nodes": {node: state for node, state in self.nodes},
        }


def summarize(
    obj: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    node_of: Callable[[str], Mapping[str, Any] | None],
) -> list[Row]:
    """One row per pool the YurtStaticSet's nodes are in (one row with no nodes when none)."""
    spec = staticsetplanning.read_spec(obj)
    meta = obj.get("metadata") or {}
    own_pool = str((meta.get("labels") or {}).get(POOL_LABEL) or "")
    recorded = staticsethalts.read(meta.get("annotations"))
    base = Row(
        namespace=spec.namespace,
        name=spec.name,
        pool=own_pool,
        strategy=spec.strategy,
        hash="",
        nodes=(),
        ready=0,
        upgraded=0,
        halt=None,
    )
    if spec.problems:
        return [dataclasses.replace(base, problems=spec.problems)]
    digest = staticsetplanning.template_hash(spec.template)
    halt = recorded if recorded is not None and recorded.applies_to(digest) else None
    halted_by = staticsethalts.halted_by(meta.get("annotations"))
    states, workers = staticsetplanning.gather(spec, digest, node_of, pods, halted_by)
    current = {w.node: w for w in workers if w.current}
    per_pool: dict[str, list[tuple[staticsetplanning.NodeState, str]]] = {}
    for s in states:
        node = node_of(s.node)
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        pool = str(labels.get(POOL_LABEL) or own_pool)
        per_pool.setdefault(pool, []).append((s, _state(s, current.get(s.node), halt)))
    if not per_pool:
        per_pool[own_pool] = []
    rows = []
    for pool in sorted(per_pool):
        entries = per_pool[pool]
        rows.append(
            dataclasses.replace(
                base,
                pool=pool,
                hash=digest,
                nodes=tuple((s.node, state) for s, state in entries),
                ready=sum(s.pod_ready for s, _ in entries),
                upgraded=sum(not s.upgrade_needed for s, _ in entries),
                halt=halt,
            )
        )
    return rows


def _state(
    s: staticsetplanning.NodeState,
    worker: staticsetplanning.Worker | None,
    halt: staticsethalts.Halt | None,
) -> str:
    if halt is not None and halt.node == s.node:
        return FAILED
    if worker is not None and worker.phase == "Failed":
        return FAILED
    if not s.upgrade_needed:
        if worker is not None and worker.phase == "Succeeded" and not worker.marked:
            return VERIFYING
        return UPGRADED
    if worker is not None and worker.phase not in staticsetplanning.FINISHED:
        return UPGRADING if s.ready else OFFLINE
    return PENDING if s.ready else OFFLINE
