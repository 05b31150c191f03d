"""The ``hubleaderconfig`` controller: keeps ConfigMap ``leader-hub-<pool>`` in the hubs'
namespace (``--namespace``) equal to what ``hubleaderconfigs.desired`` says for each NodePool.

It follows NodePools and the ConfigMaps labelled ``openyurt.io/configmap-name`` in that
namespace (so a ConfigMap edited or deleted by hand is put back). Creates and conditional PUTs;
409 -> decided again from the newer objects. Deleting the NodePool deletes the ConfigMap
through its owner reference (the garbage collector). Labels, annotations and other owners
someone added are kept.

RBAC: nodepools get/list/watch, configmaps get/list/watch/create/update in the namespace,
events create.
"""

from __future__ import annotations

import logging
from typing import Any

from kubecontrol import controlling, kubeapi
from managers import context, hubleaderconfigs, nodepools

logger = logging.getLogger(__name__)

NAME = "hubleaderconfig"
CONFLICT_REQUEUE = 1.0


class HubLeaderConfig:
    def __init__(self, ctx: context.Context) -> None:
        self.api = ctx.api
        self.recorder = ctx.recorder
        self.namespace = ctx.settings.hub_leader.namespace
        self.controller = controlling.Controller(
            NAME,
            self.reconcile,
            ctx.settings.hub_leader.timings,
            observer=ctx.metrics,
            informers=ctx.informers,
        )
        self.pools = self.controller.watch(ctx.api, nodepools.NODE_POOLS)
        self.configmaps = self.controller.watch(
            ctx.api,
            kubeapi.CONFIGMAPS,
            self._configmap_event,
            primary=False,
            namespace=self.namespace,
            label_selector=hubleaderconfigs.LABEL,
        )

    def _configmap_event(self, kind: str, obj: dict[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        if name.startswith(hubleaderconfigs.PREFIX):
            self.controller.enqueue(("", name.removeprefix(hubleaderconfigs.PREFIX)))

    async def reconcile(self, key: controlling.Key) -> float | None:
        pool = self.pools.store.get(key)
        if pool is None:
            return None
        spec = nodepools.read_pool(pool)
        if spec.problems:
            return None  # hubleader reports them; the hubs keep their last good configuration
        want = hubleaderconfigs.desired(pool, self.namespace)
        if want is None:
            logger.warning("NodePool %s: its name is too long for a ConfigMap name", spec.name)
            return None
        name = want["metadata"]["name"]
        existing = self.configmaps.store.get((self.namespace, name))
        try:
            if existing is None:
                await self.api.create(kubeapi.CONFIGMAPS, self.namespace, want)
                logger.info("ConfigMap %s/%s created", self.namespace, name)
                return None
            body = hubleaderconfigs.update(existing, want)
            if body is None:
                return None
            await self.api.replace(kubeapi.CONFIGMAPS, self.namespace, name, body)
            logger.info("ConfigMap %s/%s updated: %s", self.namespace, name, want["data"])
        except kubeapi.Conflict:
            return CONFLICT_REQUEUE
        except kubeapi.NotFound:
            return CONFLICT_REQUEUE
        return None


def build(ctx: context.Context) -> controlling.Controller:
    return HubLeaderConfig(ctx).controller
