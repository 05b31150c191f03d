"""The autonomy controller: pods on autonomous nodes outlast the cloud's unreachable timeout.

It follows every Node (their autonomy marking, ``nodeautonomy.marking``) and every bound,
unfinished Pod (``spec.nodeName!=``, not Succeeded/Failed), and carries out
``tolerating.decide`` on each pod: when a pod is bound to an autonomous node, and whenever its
node's marking changes, its ``node.kubernetes.io/{unreachable,not-ready}`` NoExecute
tolerations get the node's autonomy duration (none: forever); when the node stops being
autonomous (annotation removed, invalid, a cloud node) they go back to the cluster default.

Why a controller and no mutating webhook: a pod is bound to its node after it is created
(the scheduler POSTs ``pods/binding``, a Binding object a webhook cannot turn into a change
of the pod), so an admission webhook on pod CREATE would only see the few pods created with
``spec.nodeName`` already set, and every existing pod and every annotation change needs the
controller anyway. A webhook would add a TLS endpoint that pod creation across the whole
cluster depends on (``failurePolicy: Fail``) or that silently does nothing
(``Ignore``), for a window the controller closes within seconds: eviction starts only after
the node has been unreachable for the grace period plus the default toleration (minutes).

The tolerations live on the pods, not in this process: a manager that is down during an
outage changes nothing about the protection already written; pods bound while it was down
are handled when it (or another replica) leads again (every pod is reconciled then).

What it holds of them (``shapes``): of a Node its marking, of a Pod its node, tolerations,
phase, owners' kinds and two annotations, nothing more (at 50,000 pods the informers are the
manager's memory); a node's pods are found through an index by node name, never a scan.

Writes: one conditional merge patch of the pod (its resourceVersion as last seen), changing
only ``spec.tolerations`` (seconds of existing ones, or added ones, as pod update validation
allows) and the ``autonomy.edgehub.io/tolerations`` annotation; 409 -> decided again from the
newer copy; 404 -> gone; 422 (the apiserver refuses the change) -> a Warning Event on the pod
and one log line, retried on the pod's next change. An unparseable autonomy duration gets one
Warning Event ``InvalidAutonomyDuration`` on the node naming the value (repeats suppressed
until it changes); its pods are treated as on a node that is not autonomous.

A deleted Node: its pods are left exactly as they are, and the pod garbage collector deletes
them as usual.

RBAC: get/list/watch nodes; get/list/watch/patch pods; create events
(``manifests/manager/autonomy-rbac.yaml``).
"""

from __future__ import annotations

import logging
from typing import Any

import prometheus_client

from kubecontrol import controlling, kubeapi
from managers import context, shapes, tolerating
from nodeautonomy import marking

logger = logging.getLogger(__name__)

NAME = "autonomy"
PODS = kubeapi.Resource("", "v1", "pods")
NODES = kubeapi.Resource("", "v1", "nodes")
BOUND_UNFINISHED = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
CONFLICT_REQUEUE = 1.0
"""Seconds before a pod whose write lost a race is decided again."""
BY_NODE = "nodeName"
"""The pods' index: node name -> its pods' keys."""
INVALID_DURATION = "InvalidAutonomyDuration"
REFUSED = "AutonomyTolerationsRefused"


class AutonomyController:
    def __init__(self, ctx: context.Context) -> None:
        own = ctx.settings.autonomy
        self.api = ctx.api
        self.recorder = ctx.recorder
        self.defaults = tolerating.Defaults(
            not_ready=own.not_ready_toleration_seconds,
            unreachable=own.unreachable_toleration_seconds,
        )
        self.controller = controlling.Controller(
            NAME, self.reconcile, own.timings, observer=ctx.metrics, informers=ctx.informers
        )
        self.updates = prometheus_client.Counter(
            "edgehub_manager_autonomy_pod_updates",
            "Pods whose unreachable/not-ready tolerations the autonomy controller changed "
            "(change: extend on an autonomous node, restore to the cluster default)",
            ["change"],
            registry=ctx.metrics.registry,
        )
        self._markings: dict[str, marking.Marking] = {}
        self.nodes = self.controller.watch(ctx.api, NODES, self._on_node, shape=shapes.NODE)
        self.pods = self.controller.watch(
            ctx.api,
            PODS,
            self._on_pod,
            field_selector=BOUND_UNFINISHED,
            shape=shapes.AUTONOMY_POD,
        )
        # A node's change queues its pods only, found through this index (not a scan).
        self.pods.add_index(BY_NODE, _node_name)

    # -- events (on the loop: only bookkeeping and enqueueing)

    def _on_node(self, kind: str, node: dict[str, Any]) -> None:
        key = kubeapi.key_of(node)
        name = key[1]
        if kind == "DELETED":
            self._markings.pop(name, None)
            self.controller.queue.forget(key)
            return
        now = marking.of_node(node)
        if self._markings.get(name) == now:
            return
        self._markings[name] = now
        self.controller.enqueue(key)
        for pod in self.pods.indexed(BY_NODE, name):
            self.controller.enqueue(pod)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        key = kubeapi.key_of(pod)
        if kind == "DELETED":
            self.controller.queue.forget(key)
            return
        self.controller.enqueue(key)

    # -- reconcile

    async def reconcile(self, key: controlling.Key) -> float | None:
        namespace, name = key
        if not namespace:
            await self._reconcile_node(name)
            return None
        pod = self.pods.store.get(key)
        if pod is None:
            return None
        node_name = str((pod.get("spec") or {}).get("nodeName") or "")
        node = self.nodes.store.get(("", node_name))
        node_marking = marking.of_node(node) if node is not None else None
        decision = tolerating.decide(pod, node_marking, self.defaults)
        if isinstance(decision, tolerating.Leave):
            return None
        body = tolerating.patch(pod, decision)
        try:
            await self.api.patch(PODS, namespace, name, body)
        except kubeapi.Conflict:
            logger.debug("pod %s/%s changed while updating it; deciding again", namespace, name)
            return CONFLICT_REQUEUE
        except kubeapi.NotFound:
            return None
        except kubeapi.KubeError as e:
            if e.status not in (400, 422):
                raise  # retried with back-off (the apiserver away, 403 until RBAC is fixed)
            logger.warning(
                "pod %s/%s: the apiserver refused its autonomy tolerations (%s): %s",
                namespace,
                name,
                tolerating.describe(decision),
                e,
            )
            await self.recorder.post(
                _with_kind(pod, "Pod"),
                "Warning",
                REFUSED,
                f"could not set the tolerations for node autonomy "
                f"({tolerating.describe(decision)}): {e}",
            )
            return None
        autonomous = isinstance(node_marking, marking.Autonomous)
        self.updates.labels("extend" if autonomous else "restore").inc()
        logger.info(
            "pod %s/%s on node %s: %s (%s)",
            namespace,
            name,
            node_name,
            tolerating.describe(decision),
            f"node autonomous {node_marking.describe()}"
            if isinstance(node_marking, marking.Autonomous)
            else "node not autonomous: cluster default restored",
        )
        return None

    async def _reconcile_node(self, name: str) -> None:
        node = self.nodes.store.get(("", name))
        if node is None:
            return
        node_marking = marking.of_node(node)
        subject = _with_kind(node, "Node")
        if isinstance(node_marking, marking.Invalid):
            message = node_marking.describe()
            logger.warning("node %s: %s", name, message)
            await self.recorder.post(subject, "Warning", INVALID_DURATION, message)
        else:
            # A later invalid value (even the same one again) is reported again.
            self.recorder.clear(subject, INVALID_DURATION)


def _node_name(pod: dict[str, Any]) -> tuple[str, ...]:
    node = (pod.get("spec") or {}).get("nodeName")
    return (node,) if isinstance(node, str) and node else ()


def _with_kind(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    """List items carry no apiVersion/kind; an Event's involvedObject needs them."""
    return {**obj, "apiVersion": "v1", "kind": kind}


def build(ctx: context.Context) -> controlling.Controller:
    return AutonomyController(ctx).controller
