"""The ``yurtstaticset`` controller: rolls static Pods (the hub itself, first of all) out to
the nodes that run them, as OpenYurt's yurt-static-set-controller does, for the YurtStaticSets
edgehub owns (``staticsetplanning`` decides; this module carries it out).

Ownership, so that two controllers never act on one object (docs/rollout.md):

* ``--yurtstaticset-owner`` (``settings.StaticSets.owner``): ``yurt-manager`` (the default)
  leaves every YurtStaticSet to yurt-manager and this controller is not run at all;
  ``edgehub`` runs it.
* While yurt-manager's leader Lease (``kube-system/cloud-yurt-manager``) is held and renewed,
  this controller acts on nothing and says so in one log line; checked before its first
  reconcile (the workers start once the caches, the Lease's included, are synced) and again
  whenever the Lease changes.
* It acts only on YurtStaticSets whose ``edgehub.io/owner`` annotation is absent (it then
  writes ``edgehub`` first) or ``edgehub``; any other value leaves the object alone.

Per YurtStaticSet: ConfigMap ``yurt-static-set-<name>`` holds the manifest; worker Pods, mirror
Pod conditions and the status follow ``staticsetplanning.plan``. The ConfigMap and workers
carry an owner reference, so deleting the YurtStaticSet deletes them (garbage collector).
Writes are creates, deletes and conditional PUTs; 409 -> decided again from newer objects.

It follows YurtStaticSets, Pods (every namespace, as OpenYurt does, but holding only mirror Pods
``<yss>-<node>`` and the workers: ``PODS``), Nodes (a Ready change queues every YurtStaticSet;
the shared ``shapes.NODE`` informer) and the Lease.

RBAC (manifests/manager/staticset-rbac.yaml): yurtstaticsets get/list/watch/update,
yurtstaticsets/status update, pods get/list/watch/create/delete, pods/status update, nodes
list/watch, configmaps get/create/update, leases get/list/watch (kube-system), events create.
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import Any

from kubecontrol import controlling, kubeapi, trimming
from managers import context, shapes, staticsetplanning

logger = logging.getLogger(__name__)

NAME = "yurtstaticset"
CONFLICT_REQUEUE = 1.0


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class StaticSets:
    def __init__(self, ctx: context.Context) -> None:
        own = ctx.settings.static_sets
        self.api = ctx.api
        self.recorder = ctx.recorder
        self.worker = staticsetplanning.WorkerTemplate(
            image=own.worker_image,
            static_pod_path=own.static_pod_path,
            timeout=own.worker_timeout,
        )
        self.lease_key = own.yurt_manager_lease
        self.controller = controlling.Controller(
            NAME, self.reconcile, own.timings, observer=ctx.metrics, informers=ctx.informers
        )
        self.sets = self.controller.watch(ctx.api, staticsetplanning.YURT_STATIC_SETS)
        self.pods = self.controller.watch(
            ctx.api, kubeapi.PODS, self._pod_event, primary=False, shape=PODS
        )
        self.nodes = self.controller.watch(
            ctx.api, kubeapi.NODES, self._node_event, primary=False, shape=shapes.NODE
        )
        self.leases = self.controller.watch(
            ctx.api,
            kubeapi.LEASES,
            self._lease_event,
            primary=False,
            namespace=self.lease_key[0],
            field_selector=f"metadata.name={self.lease_key[1]}",
        )
        self._pods_of: dict[controlling.Key, set[controlling.Key]] = {}
        self._set_of: dict[controlling.Key, controlling.Key] = {}
        self._ready: dict[str, bool] = {}
        self._configmaps: dict[controlling.Key, str] = {}
        """The hash each ConfigMap was last seen or written with."""
        self._held_off: bool | None = None
        self._reported: set[tuple[str, str]] = set()
        """(YSS uid, what) already reported in a log line or Event."""

    # -- events (on the loop: only bookkeeping and enqueue)

    def _pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        owner = _set_key(pod)
        old = self._set_of.get(key)
        if old is not None and (kind == "DELETED" or old != owner):
            self._pods_of.get(old, set()).discard(key)
            if not self._pods_of.get(old):
                self._pods_of.pop(old, None)
            self._set_of.pop(key, None)
        if owner is not None and kind != "DELETED":
            self._pods_of.setdefault(owner, set()).add(key)
            self._set_of[key] = owner
        for set_key in {old, owner}:
            if set_key is not None and set_key in self.sets.store:
                self.controller.enqueue(set_key)

    def _node_event(self, kind: str, node: dict[str, Any]) -> None:
        name = str((node.get("metadata") or {}).get("name") or "")
        ready = kind != "DELETED" and staticsetplanning.node_ready(node)
        if self._ready.get(name) == ready:
            return
        if kind == "DELETED":
            self._ready.pop(name, None)
        else:
            self._ready[name] = ready
        self.controller.enqueue_all()

    def _lease_event(self, kind: str, lease: dict[str, Any]) -> None:
        self.controller.enqueue_all()

    # -- reconciling

    def yurt_manager_active(self) -> bool:
        lease = self.leases.store.get(self.lease_key)
        active = staticsetplanning.lease_active(lease, time.time())
        if active != self._held_off:
            namespace, name = self.lease_key
            if active:
                holder = str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")
                logger.error(
                    "yurtstaticset: acting on no YurtStaticSet: yurt-manager holds Lease %s/%s "
                    "(%s); with --yurtstaticset-owner=edgehub, stop yurt-manager's "
                    "yurt-static-set-controller and let that Lease expire, or set "
                    "--yurtstaticset-owner=yurt-manager",
                    namespace,
                    name,
                    holder[:64],
                )
            elif self._held_off is not None:
                logger.info("yurtstaticset: Lease %s/%s is free: acting", namespace, name)
            self._held_off = active
        return active

    def _node(self, name: str) -> dict[str, Any] | None:
        return self.nodes.store.get(("", name))

    def pods_of(self, key: controlling.Key) -> list[dict[str, Any]]:
        out = []
        for pod_key in sorted(self._pods_of.get(key, ())):
            pod = self.pods.store.get(pod_key)
            if pod is not None:
                out.append(pod)
        return out

    async def _warn_once(
        self,
        spec: staticsetplanning.Spec,
        obj: dict[str, Any],
        what: str,
        reason: str,
        message: str,
    ) -> None:
        """The first time ``what`` is seen for this YurtStaticSet: one warning log line and one
        Warning Event ``reason`` (its message bounded) on the object."""
        if self._once(spec, what):
            logger.warning("YurtStaticSet %s/%s: %s", spec.namespace, spec.name, message)
            await self.recorder.post(_typed(obj), "Warning", reason, message[:1024])

    def _once(self, spec: staticsetplanning.Spec, what: str) -> bool:
        mark = (spec.uid, what)
        if mark in self._reported:
            return False
        if len(self._reported) > 4096:  # bounded: forget old reports rather than grow
            self._reported.clear()
        self._reported.add(mark)
        return True

    async def reconcile(self, key: controlling.Key) -> float | None:
        obj = self.sets.store.get(key)
        if obj is None:
            self._configmaps.pop(key, None)
            return None
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            return None
        if self.yurt_manager_active():
            return None
        spec = staticsetplanning.read_spec(obj)
        if spec.owner not in ("", staticsetplanning.OWNER_EDGEHUB):
            if self._once(spec, f"owner {spec.owner}"):
                logger.info(
                    "YurtStaticSet %s/%s: %s=%s, left to that owner",
                    spec.namespace,
                    spec.name,
                    staticsetplanning.OWNER_ANNOTATION,
                    spec.owner[:64],
                )
            return None
        if spec.problems:
            message = "; ".join(spec.problems)
            await self._warn_once(spec, obj, f"problems {spec.generation}", "InvalidSpec", message)
            return None
        try:
            if not spec.owner:
                await self.api.replace(
                    staticsetplanning.YURT_STATIC_SETS,
                    spec.namespace,
                    spec.name,
                    staticsetplanning.claim(obj),
                )
                logger.info(
                    "YurtStaticSet %s/%s: taken by edgehub (%s=%s)",
                    spec.namespace,
                    spec.name,
                    staticsetplanning.OWNER_ANNOTATION,
                    staticsetplanning.OWNER_EDGEHUB,
                )
                return None  # its event brings the annotated object back here
            decided = staticsetplanning.plan(spec, self._node, self.pods_of(key))
        except kubeapi.Conflict:
            return CONFLICT_REQUEUE
        except kubeapi.NotFound:
            return None
        return await self._carry_out(key, obj, spec, decided)

    async def _carry_out(
        self,
        key: controlling.Key,
        obj: dict[str, Any],
        spec: staticsetplanning.Spec,
        decided: staticsetplanning.Plan,
    ) -> float | None:
        ns = spec.namespace
        try:
            # Before workers mount it, the ConfigMap is read again (one deleted by hand is
            # written back); otherwise the hash last written is trusted.
            await self._sync_configmap(key, spec, decided.digest, verify=bool(decided.create))
            for worker in decided.delete:
                try:
                    await self.api.delete(kubeapi.PODS, ns, worker.name, uid=worker.uid)
                except kubeapi.NotFound:
                    pass
                logger.info(
                    "YurtStaticSet %s/%s: worker %s deleted (%s)",
                    ns,
                    spec.name,
                    worker.name,
                    worker.phase if worker.current else "old template",
                )
            for worker in decided.failed:
                await self._warn_once(
                    spec,
                    obj,
                    f"failed {worker.name}",
                    "UpgradeFailed",
                    f"worker Pod {worker.name} on node {worker.node} failed; the rollout "
                    "waits until it is deleted (its log says why)",
                )
            for node in decided.too_long:
                await self._warn_once(
                    spec,
                    obj,
                    f"too long {node}",
                    "NameTooLong",
                    f"node {node[:64]}: the worker Pod name would pass 253 characters; "
                    "that node is not upgraded (shorten the YurtStaticSet's name)",
                )
            for node in decided.create:
                body = staticsetplanning.worker_pod(spec, node, decided.digest, self.worker)
                try:
                    await self.api.create(kubeapi.PODS, ns, body)
                except kubeapi.Conflict:
                    continue  # exists already (409 AlreadyExists): its event follows
                logger.info(
                    "YurtStaticSet %s/%s: worker %s created on node %s",
                    ns,
                    spec.name,
                    body["metadata"]["name"],
                    node,
                )
            for pod_name, status in decided.conditions:
                pod = self.pods.store.get((ns, pod_name))
                if pod is None:
                    continue
                body = staticsetplanning.with_condition(
                    pod, staticsetplanning.POD_NEED_UPGRADE, status, _now()
                )
                await self.api.replace(kubeapi.PODS, ns, pod_name, body, subresource="status")
            written = staticsetplanning.status_update(obj, decided.status)
            if written is not None:
                await self.api.replace(
                    staticsetplanning.YURT_STATIC_SETS, ns, spec.name, written, subresource="status"
                )
        except kubeapi.Conflict:
            return CONFLICT_REQUEUE
        except kubeapi.NotFound:
            return CONFLICT_REQUEUE
        return None

    async def _sync_configmap(
        self, key: controlling.Key, spec: staticsetplanning.Spec, digest: str, *, verify: bool
    ) -> None:
        if self._configmaps.get(key) == digest and not verify:
            return
        want = staticsetplanning.desired_configmap(spec, digest)
        name = want["metadata"]["name"]
        existing = await self.api.get_configmap(spec.namespace, name)
        if existing is None:
            await self.api.create(kubeapi.CONFIGMAPS, spec.namespace, want)
            logger.info("ConfigMap %s/%s created (hash %s)", spec.namespace, name, digest)
        else:
            body = staticsetplanning.configmap_update(existing, want)
            if body is not None:
                await self.api.replace(kubeapi.CONFIGMAPS, spec.namespace, name, body)
                logger.info("ConfigMap %s/%s updated (hash %s)", spec.namespace, name, digest)
        self._configmaps[key] = digest


def _set_key(pod: dict[str, Any]) -> controlling.Key | None:
    """The YurtStaticSet a Pod belongs to: a worker's owner, or the ``<yss>`` of a mirror Pod
    ``<yss>-<node>``; None for other Pods."""
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    for ref in meta.get("ownerReferences") or []:
        if (
            isinstance(ref, dict)
            and ref.get("kind") == staticsetplanning.KIND
            and str(ref.get("apiVersion") or "").startswith("apps.openyurt.io/")
        ):
            return (namespace, str(ref.get("name") or ""))
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    name = str(meta.get("name") or "")
    suffix = f"-{node}"
    if (
        node
        and name.endswith(suffix)
        and len(name) > len(suffix)
        and staticsetplanning.is_mirror_pod(pod)
    ):
        return (namespace, name[: -len(suffix)])
    return None


PODS = trimming.Shape(
    trimming.WITHOUT_MANAGED_FIELDS.fields,
    keep=lambda pod: _set_key(pod) is not None,
    name="pods:yurtstaticset",
    probe={
        "metadata": {
            "name": trimming.KEEP,
            "namespace": trimming.KEEP,
            "resourceVersion": trimming.KEEP,
            "annotations": trimming.Fields({staticsetplanning.MIRROR_ANNOTATION: trimming.KEEP}),
            "ownerReferences": trimming.Items(
                {"apiVersion": trimming.KEEP, "kind": trimming.KEEP, "name": trimming.KEEP}
            ),
        },
        "spec": {"nodeName": trimming.KEEP},
    },
)
"""Of all Pods, only a YurtStaticSet's (its workers, mirror Pods named ``<yss>-<node>``) are
held, whole but for managedFields (their spec is compared with the template and their status
written back): each pod is first decoded to what ``_set_key`` reads (the probe), and only
those are decoded whole; the rest of a fleet's pods cost nothing but their watch events."""


def _typed(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        **obj,
        "apiVersion": staticsetplanning.YURT_STATIC_SETS.api_version,
        "kind": staticsetplanning.KIND,
    }


def build(ctx: context.Context) -> controlling.Controller:
    return StaticSets(ctx).controller
