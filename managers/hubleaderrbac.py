"""The ``hubleaderrbac`` controller: keeps ClusterRole ``yurt-hub-multiplexer`` granting
list/watch of every NodePool's pool-scoped resources (``hubleaderroles``).

One key for everything: any NodePool or ClusterRole event queues the role, and it is checked
again every ``RECHECK`` seconds (nothing else would create it in a cluster without pools).
Creates and conditional PUTs; 409 -> decided again.

RBAC: nodepools get/list/watch; clusterroles list/watch and create (it is created without
rules), and get/update/escalate of ``yurt-hub-multiplexer`` only (escalate: the role grants
reads of resources the manager itself cannot read). Never an unnamed ``escalate``: with it, a
stolen manager token could create a ClusterRole aggregated into ``admin``.
"""

from __future__ import annotations

import logging
from typing import Any

from kubecontrol import controlling, kubeapi
from managers import context, hubleaderroles, nodepools

logger = logging.getLogger(__name__)

NAME = "hubleaderrbac"
CLUSTER_ROLES = kubeapi.Resource("rbac.authorization.k8s.io", "v1", "clusterroles")
KEY = ("", hubleaderroles.NAME)
RECHECK = 600.0
CONFLICT_REQUEUE = 1.0


class HubLeaderRbac:
    def __init__(self, ctx: context.Context) -> None:
        self.api = ctx.api
        self.controller = controlling.Controller(
            NAME,
            self.reconcile,
            ctx.settings.hub_leader.timings,
            observer=ctx.metrics,
            informers=ctx.informers,
        )
        self.pools = self.controller.watch(
            ctx.api, nodepools.NODE_POOLS, self._any_event, primary=False
        )
        self.roles = self.controller.watch(
            ctx.api,
            CLUSTER_ROLES,
            self._any_event,
            primary=False,
            field_selector=f"metadata.name={hubleaderroles.NAME}",
        )
        self.controller.enqueue(KEY)

    def _any_event(self, kind: str, obj: dict[str, Any]) -> None:
        self.controller.enqueue(KEY)

    async def reconcile(self, key: controlling.Key) -> float | None:
        scopes = [nodepools.read_pool(pool).scope for pool in self.pools.store.values()]
        want = hubleaderroles.desired(scopes)
        existing = self.roles.store.get(KEY)
        try:
            if existing is None:
                # Created empty, then given its rules: RBAC checks an escalation on create
                # without the object's name, so ``escalate`` limited to this role (all the
                # manager holds) only applies to the update.
                existing = await self.api.create(CLUSTER_ROLES, "", {**want, "rules": []})
                logger.info("ClusterRole %s created", hubleaderroles.NAME)
            body = hubleaderroles.update(existing, want)
            if body is not None:
                await self.api.replace(CLUSTER_ROLES, "", hubleaderroles.NAME, body)
                logger.info("ClusterRole %s updated: %s", hubleaderroles.NAME, want["rules"])
        except kubeapi.Conflict:
            return CONFLICT_REQUEUE
        except kubeapi.NotFound:
            return CONFLICT_REQUEUE
        return RECHECK


def build(ctx: context.Context) -> controlling.Controller:
    return HubLeaderRbac(ctx).controller
