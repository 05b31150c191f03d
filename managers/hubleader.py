"""The ``hubleader`` controller: elects the leader hubs of every NodePool
(``hubleaderelecting``) and writes them to the pool's status.

It follows NodePools (apps.openyurt.io/v1beta2) and Nodes; a node event queues the pool the
node is in (and the one it left, when its pool label changed), so a leader whose node
loses its InternalIP or is deleted is replaced at once, one NotReady while others are Ready
after a grace (``hubleaderelecting.REPLACE_AFTER``, the hidden ``--hub-leader-replace-after``
for tests; the reconcile comes back when it ends), and one NotReady with the whole pool (its
cloud link dropped) not at all. The status is
written with a conditional PUT of ``nodepools/<name>/status`` (409 -> decided again from the
newer pool), and a changed set of leaders is posted as a Normal Event ``LeadersElected``; a
spec that cannot be used as a Warning Event ``InvalidLeaderElection`` naming the field
(leaders kept as they are).

RBAC: nodepools get/list/watch, nodepools/status update, nodes list/watch, events create.
"""

from __future__ import annotations

import datetime
import logging
import random
from typing import Any

from kubecontrol import controlling, kubeapi
from managers import context, hubleaderelecting, nodepools, shapes

logger = logging.getLogger(__name__)

NAME = "hubleader"
CONFLICT_REQUEUE = 1.0


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class HubLeader:
    def __init__(self, ctx: context.Context, rng: random.Random | None = None) -> None:
        self.api = ctx.api
        self.recorder = ctx.recorder
        self.rng = rng or random.Random()
        self.replace_after = ctx.settings.hub_leader.replace_after
        self.controller = controlling.Controller(
            NAME,
            self.reconcile,
            ctx.settings.hub_leader.timings,
            observer=ctx.metrics,
            informers=ctx.informers,
        )
        self.pools = self.controller.watch(ctx.api, nodepools.NODE_POOLS)
        self.nodes = self.controller.watch(
            ctx.api, nodepools.NODES, self._node_event, primary=False, shape=shapes.NODE
        )
        self._pool_of: dict[str, str] = {}
        self._members: dict[str, set[str]] = {}

    def _node_event(self, kind: str, obj: dict[str, Any]) -> None:
        facts = nodepools.read_node(obj)
        old = self._pool_of.get(facts.name)
        new = "" if kind == "DELETED" else facts.pool
        if old and old != new:
            self._members.get(old, set()).discard(facts.name)
        if new:
            self._members.setdefault(new, set()).add(facts.name)
            self._pool_of[facts.name] = new
        else:
            self._pool_of.pop(facts.name, None)
        for pool in {old, new}:
            if pool:
                self.controller.enqueue(("", pool))

    def members(self, pool: str) -> list[nodepools.NodeFacts]:
        out = []
        for name in sorted(self._members.get(pool, ())):
            node = self.nodes.store.get(("", name))
            if node is not None:
                out.append(nodepools.read_node(node))
        return out

    async def reconcile(self, key: controlling.Key) -> float | None:
        pool = self.pools.store.get(key)
        if pool is None:
            return None
        spec = nodepools.read_pool(pool)
        if spec.problems:
            message = "; ".join(spec.problems)
            logger.warning("NodePool %s: %s; its leaders are left as they are", spec.name, message)
            await self.recorder.post(
                _typed(pool), "Warning", "InvalidLeaderElection", message[:1024]
            )
            return None
        before = hubleaderelecting.current(pool)
        decided = hubleaderelecting.decide(
            spec,
            self.members(spec.name),
            before,
            self.rng,
            now=datetime.datetime.now(datetime.UTC),
            replace_after=self.replace_after,
        )
        leaders = decided.leaders
        status = hubleaderelecting.status(pool, leaders, _now())
        if status is None:
            return decided.recheck
        body = {**_typed(pool), "status": status}
        try:
            await self.api.replace(nodepools.NODE_POOLS, "", spec.name, body, subresource="status")
        except kubeapi.Conflict:
            return CONFLICT_REQUEUE
        except kubeapi.NotFound:
            return None
        if {e.node for e in before} != {e.node for e in leaders}:
            names = ", ".join(f"{e.node}/{e.address}" for e in leaders) or "none"
            logger.info("NodePool %s: leaders %s", spec.name, names)
            await self.recorder.post(_typed(pool), "Normal", "LeadersElected", f"leaders: {names}")
        return decided.recheck


def _typed(pool: dict[str, Any]) -> dict[str, Any]:
    return {**pool, "apiVersion": nodepools.NODE_POOLS.api_version, "kind": "NodePool"}


def build(ctx: context.Context) -> controlling.Controller:
    return HubLeader(ctx).controller
