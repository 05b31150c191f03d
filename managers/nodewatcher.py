"""The node watcher: carries out ``nodeleaving.observe`` per node.

Keys are nodes (``("", name)``). A node's own events queue it (and mark it *seen*), and so
does every Instance event for each node the Instance lists. Only a node this watcher saw and
then lost is cleaned (``nodeleaving``): Instances naming a node no watch event ever named are
left alone, logged once per node (its agent is likely alive with a mistyped ``--node-name``,
and would write them back for ever). A deleted node whose agent still writes its Instances
back is cleaned again only after a per-node growing back-off. Cleaning a node:

1. For a node that is absent from the cache, a GET confirms it is really gone (the watch may
   not have brought a re-created node yet; a new node's first Instance may arrive before its
   Node object); anything else waits for the watch.
2. Every Instance listing it (or holding its finalizer): remove the node from ``nodes``, its
   finalizer and the ``deviceUsage`` slots it held, or delete the Instance when it was the last
   node — the agent's own resourceVersion-guarded read-modify-write
   (``discovery.agent.instances.leave``), so a concurrent agent write is never lost. The
   broker controller then removes the node's broker pods.
3. A deleted node only: its agent's finalizer (the node name) is removed from every
   Configuration, or deleting such a Configuration would hang forever.

Only after all of it succeeded is the node remembered as cleaned; a failure backs the key
off (capped) and the whole cleaning is retried (each step is idempotent). Each cleaned
Instance gets a Normal Event ``NodeLeft`` and a log line. Memory is bounded: a deleted node
is forgotten once nothing names it any more (looked at again when its back-off ends).

RBAC: nodes get/list/watch; instances get/list/watch/update/delete; configurations
get/list/watch/update; events create.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

from discovery.agent import instances, resources
from kubecontrol import controlling, kubeapi
from managers import context, nodeleaving, shapes

logger = logging.getLogger(__name__)

NAME = "nodewatcher"
_FINALIZER_ATTEMPTS = 8
_UNSEEN_LOGGED = 1024
"""Never-seen node names logged once each; past this many, further ones only at debug."""


class NodeWatcher:
    def __init__(self, ctx: context.Context) -> None:
        self.api = ctx.api
        self.recorder = ctx.recorder
        self.metrics = ctx.metrics
        own = ctx.settings.node_watcher
        self.memory: dict[str, nodeleaving.Memory] = {}
        self.seen: set[str] = set()
        """Nodes a watch event named (bounded: forgotten with their memory once gone)."""
        self.again = nodeleaving.Recleaning(own.reclean_initial, own.reclean_cap)
        self._unseen_logged: set[str] = set()
        self.controller = controlling.Controller(
            NAME, self.reconcile, own.timings, observer=ctx.metrics, informers=ctx.informers
        )
        self.nodes = self.controller.watch(
            ctx.api, kubeapi.NODES, self._node_event, shape=shapes.NODE
        )
        hint = resources.CRDS_MISSING
        self.instances = self.controller.watch(
            ctx.api, resources.INSTANCES, self._queue_nodes_of, primary=False, absent_hint=hint
        )
        self.configurations = self.controller.watch(
            ctx.api,
            resources.CONFIGURATIONS,
            lambda kind, obj: None,
            primary=False,
            absent_hint=hint,
        )

    def _node_event(self, kind: str, node: dict[str, Any]) -> None:
        key = kubeapi.key_of(node)
        self.seen.add(key[1])
        self._unseen_logged.discard(key[1])
        self.controller.enqueue(key)

    def _queue_nodes_of(self, kind: str, instance: dict[str, Any]) -> None:
        spec = instance.get("spec")
        nodes = spec.get("nodes") if isinstance(spec, dict) else None
        for node in nodes if isinstance(nodes, list) else ():
            if isinstance(node, str) and node:
                self.controller.enqueue(("", node))

    async def reconcile(self, key: controlling.Key) -> float | None:
        name = key[1]
        node = self.nodes.store.get(key)
        decision = nodeleaving.observe(
            self.memory.get(name), node, time.time(), seen=name in self.seen, again=self.again
        )
        if not decision.clean:
            if node is None and decision.memory is None:
                self._never_seen(name)
            self._remember(name, decision.memory)
            return decision.recheck_after
        listed = nodeleaving.listing(name, list(self.instances.store.values()))
        finalized = (
            nodeleaving.holding_finalizer(name, list(self.configurations.store.values()))
            if decision.gone
            else []
        )
        if not listed and not finalized:
            # A deleted node nothing names any more is forgotten (memory stays bounded).
            self._remember(name, None if decision.gone else decision.memory)
            return None
        if decision.gone and await self.api.get_or_none(kubeapi.NODES, "", name) is not None:
            return None  # it exists: the watch has not brought it yet
        for namespace, instance in listed:
            written = await instances.write(self.api, namespace, instance, instances.leave(name))
            outcome = "deleted (its last node)" if written is None else "node removed"
            logger.info(
                "node %s %s: Instance %s/%s %s, its slots freed",
                name,
                decision.why,
                namespace,
                instance,
                outcome,
            )
            await self.recorder.post(
                written
                or {
                    "apiVersion": resources.INSTANCES.api_version,
                    "kind": "Instance",
                    "metadata": {"name": instance, "namespace": namespace},
                },
                "Normal",
                "NodeLeft",
                f"node {name} {decision.why}: removed from the Instance ({outcome}), "
                "its slots freed",
            )
        for namespace, configuration in finalized:
            await self._drop_finalizer(namespace, configuration, name)
        self.metrics.node_cleanups.labels("deleted" if decision.gone else "not-ready").inc()
        self._remember(name, decision.memory)
        return decision.recheck_after

    def _remember(self, name: str, memory: nodeleaving.Memory | None) -> None:
        if memory is None:
            self.memory.pop(name, None)
            self.seen.discard(name)
        else:
            self.memory[name] = memory

    def _never_seen(self, name: str) -> None:
        if name in self._unseen_logged or len(self._unseen_logged) >= _UNSEEN_LOGGED:
            logger.debug("node %s: never seen, its Instances are left alone", name)
            return
        self._unseen_logged.add(name)
        logger.warning(
            "Instances name node %s, which does not exist and this manager never saw: left "
            "alone (its agent's --node-name mistyped, or the node deleted while no manager ran?)",
            name,
        )

    async def _drop_finalizer(self, namespace: str, name: str, finalizer: str) -> None:
        """Remove ``finalizer`` with a resourceVersion-guarded PUT (retried on a race)."""
        for _ in range(_FINALIZER_ATTEMPTS):
            current = await self.api.get_or_none(resources.CONFIGURATIONS, namespace, name)
            if current is None:
                return
            meta = current.setdefault("metadata", {})
            finalizers = meta.get("finalizers") or []
            if finalizer not in finalizers:
                return
            meta["finalizers"] = [f for f in finalizers if f != finalizer]
            try:
                await self.api.replace(resources.CONFIGURATIONS, namespace, name, current)
            except (kubeapi.Conflict, kubeapi.NotFound):
                await asyncio.sleep(random.uniform(0, 0.2))
                continue
            logger.info(
                "node %s deleted: removed its agent's finalizer from Configuration %s/%s",
                finalizer,
                namespace,
                name,
            )
            return
        raise instances.WriteFailed(
            f"finalizer {finalizer} on Configuration {namespace}/{name}: too many conflicts"
        )


def build(ctx: context.Context) -> controlling.Controller:
    return NodeWatcher(ctx).controller
