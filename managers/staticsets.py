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
  whenever the Lease changes. ``--yurt-manager-lease=''`` drops that check: the operator
  vouches that the yurt-manager still running has its yurt-static-set-controller off.
* It acts only on YurtStaticSets whose ``edgehub.io/owner`` annotation is absent (it then
  writes ``edgehub`` first) or ``edgehub``; any other value leaves the object alone.

Per YurtStaticSet: ConfigMap ``yurt-static-set-<name>`` holds the manifest; worker Pods, mirror
Pod conditions and the status follow ``staticsetplanning.plan``; each template rolled out is a
ControllerRevision (``staticsetrevisions``, for ``edgehub rollout undo``); a halt
(``staticsethalts``) is the YurtStaticSet's ``edgehub.io/rollout-halted`` annotation, the
``Halted`` condition and a Warning Event. The ConfigMap, workers and revisions carry an owner
reference, so deleting the YurtStaticSet deletes them (garbage collector). Writes are creates,
deletes and conditional PUTs; 409 -> decided again from newer objects.

It follows YurtStaticSets, Pods (every namespace, as OpenYurt does, but holding only mirror Pods
``<yss>-<node>`` and the workers: ``PODS``), Nodes (a Ready change queues every YurtStaticSet;
the shared ``shapes.NODE`` informer) and yurt-manager's Lease. A node whose worker succeeded
has its Lease (``kube-node-lease/<node>``) read on demand, every couple of seconds until its
kubelet is seen back or the deadline passes: only the nodes being upgraded, never a watch of
every node's Lease.

RBAC (manifests/manager/staticset-rbac.yaml): yurtstaticsets get/list/watch/update,
yurtstaticsets/status update, pods get/list/watch/create/delete, pods/status update, nodes
list/watch, configmaps
get/create/update, controllerrevisions list/create/update/delete, leases get/list/watch
(kube-system, yurt-manager's) and get (kube-node-lease), events create.
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import Any

from kubecontrol import controlling, kubeapi, timestamps, trimming
from managers import context, shapes, staticsethalts, staticsetplanning, staticsetrevisions

logger = logging.getLogger(__name__)

NAME = "yurtstaticset"
CONFLICT_REQUEUE = 1.0
NODE_LEASES = "kube-node-lease"
MAX_REMEMBERED = 4096


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
        self.ready_timeout = own.node_ready_timeout
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
        self.leases = None
        if self.lease_key is not None:  # None: the operator vouches yurt-manager runs no YSS
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
        self._recorded: dict[controlling.Key, str] = {}
        """The template hash last recorded as a ControllerRevision, per YurtStaticSet."""
        self._seen_ended: dict[str, float] = {}
        """Worker name -> when it was first seen Succeeded (for one reporting no end time)."""
        self._no_conditions: set[str] = set()
        """Uids of YurtStaticSets whose CRD drops ``status.conditions`` (OpenYurt's)."""

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
        if self.leases is None or self.lease_key is None:
            return False
        lease = self.leases.store.get(self.lease_key)
        active = staticsetplanning.lease_active(lease, time.time())
        if active != self._held_off:
            namespace, name = self.lease_key
            if active:
                holder = str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")
                logger.error(
                    "yurtstaticset: acting on no YurtStaticSet: yurt-manager holds Lease %s/%s "
                    "(%s); with --yurtstaticset-owner=edgehub, stop yurt-manager's "
                    "yurt-static-set-controller and let that Lease expire (or, when yurt-manager "
                    "runs with --controllers=*,-yurt-static-set-controller, give "
                    "--yurt-manager-lease=''), or set --yurtstaticset-owner=yurt-manager",
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
            self._recorded.pop(key, None)
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
            pods = self.pods_of(key)
            digest = staticsetplanning.template_hash(spec.template)
            _, workers = staticsetplanning.gather(
                spec,
                digest,
                self._node,
                pods,
                staticsethalts.halted_by((obj.get("metadata") or {}).get("annotations")),
            )
            now = time.time()
            self._note_ended(workers, now)
            renewals = {n: await self._renewed(n) for n in staticsetplanning.awaiting(workers)}
            annotations = (obj.get("metadata") or {}).get("annotations")
            facts = staticsetplanning.Facts(
                now=now,
                halt=staticsethalts.read(annotations),
                halted_by=staticsethalts.halted_by(annotations),
                renewals=renewals,
                seen_ended=self._seen_ended,
                ready_timeout=self.ready_timeout,
            )
            decided = staticsetplanning.plan(spec, self._node, pods, facts)
        except kubeapi.Conflict:
            return CONFLICT_REQUEUE
        except kubeapi.NotFound:
            return None
        return await self._carry_out(key, obj, spec, decided)

    def _note_ended(self, workers: list[staticsetplanning.Worker], now: float) -> None:
        for w in workers:
            if w.phase == "Succeeded" and w.ended is None:
                self._seen_ended.setdefault(w.name, now)
        if len(self._seen_ended) > MAX_REMEMBERED:  # bounded: the oldest go first
            for name in sorted(self._seen_ended, key=self._seen_ended.__getitem__)[:1024]:
                del self._seen_ended[name]

    async def _renewed(self, node: str) -> float | None:
        """When ``node``'s kubelet last renewed its Lease (epoch seconds); None when there is
        no Lease or it cannot be read now (the node is not confirmed: looked at again)."""
        try:
            lease = await self.api.get_or_none(kubeapi.LEASES, NODE_LEASES, node)
        except kubeapi.KubeError as e:
            logger.debug("Lease %s/%s: %s", NODE_LEASES, node, e)
            return None
        if lease is None:
            return None
        return timestamps.epoch((lease.get("spec") or {}).get("renewTime"))

    async def _carry_out(
        self,
        key: controlling.Key,
        obj: dict[str, Any],
        spec: staticsetplanning.Spec,
        decided: staticsetplanning.Plan,
    ) -> float | None:
        ns = spec.namespace
        try:
            if decided.clear_halt:
                await self._write_halt(obj, spec, None, decided.halted_by)
                await self.recorder.post(
                    _typed(obj),
                    "Normal",
                    "RolloutResumed",
                    f"the template changed (hash {decided.digest}): the halt of an earlier "
                    "template no longer applies",
                )
                return None  # the updated object comes back here
            if decided.halt is not None:
                obj = await self._write_halt(obj, spec, decided.halt, decided.halted_by)
                halt = decided.halt
                where = f"node {halt.node}: " if halt.node else ""
                logger.warning(
                    "YurtStaticSet %s/%s: rollout halted (%s): %s%s",
                    ns,
                    spec.name,
                    halt.reason,
                    where,
                    halt.message,
                )
                await self.recorder.post(
                    _typed(obj),
                    "Warning",
                    "RolloutHalted",
                    f"{where}{halt.reason}: {halt.message}; no node is started until resumed "
                    "(remove annotation edgehub.io/rollout-halted, or change the template)",
                )
            elif decided.halted_by is not None:  # the workers that halted it, recorded
                obj = await self._write_halt(obj, spec, None, decided.halted_by, keep_halt=True)
            await self._record_revision(key, obj, spec, decided.digest)
            # Before workers mount it, the ConfigMap is read again (one deleted by hand is
            # written back); otherwise the hash last written is trusted.
            await self._sync_configmap(key, spec, decided.digest, verify=bool(decided.create))
            for worker in decided.delete:
                try:
                    await self.api.delete(kubeapi.PODS, ns, worker.name, uid=worker.uid)
                except kubeapi.NotFound:
                    pass
                self._seen_ended.pop(worker.name, None)
                why = worker.phase if worker.current else "old template"
                if worker in decided.resumed:
                    why = f"{worker.phase}, rollout resumed"
                logger.info("YurtStaticSet %s/%s: worker %s deleted (%s)", ns, spec.name,
                            worker.name, why)  # fmt: skip
            if decided.resumed:
                nodes = ", ".join(w.node for w in decided.resumed)
                await self.recorder.post(
                    _typed(obj),
                    "Normal",
                    "RolloutResumed",
                    f"resumed by an operator: the workers that halted it are deleted ({nodes})",
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
            await self._write_status(obj, spec, decided)
        except kubeapi.Conflict:
            return CONFLICT_REQUEUE
        except kubeapi.NotFound:
            return CONFLICT_REQUEUE
        return decided.recheck

    async def _write_halt(
        self,
        obj: dict[str, Any],
        spec: staticsetplanning.Spec,
        halt: staticsethalts.Halt | None,
        workers: frozenset[str] | None,
        *,
        keep_halt: bool = False,
    ) -> dict[str, Any]:
        """Write the halt annotation (``halt``, None: removed; ``keep_halt``: left as it is)
        and the workers that halted it (``workers``; None: left as they are) in one update;
        the stored object."""
        body = dict(obj) if keep_halt else staticsethalts.with_halt(obj, halt)
        if workers is not None:
            body = staticsethalts.with_halted_by(body, workers)
        return await self.api.replace(
            staticsetplanning.YURT_STATIC_SETS, spec.namespace, spec.name, _typed(body)
        )

    async def _write_status(
        self, obj: dict[str, Any], spec: staticsetplanning.Spec, decided: staticsetplanning.Plan
    ) -> None:
        conditions = None
        if spec.uid not in self._no_conditions:
            previous = (obj.get("status") or {}).get("conditions") or []
            conditions = staticsethalts.condition(decided.halted, previous, _now())
        written = staticsetplanning.status_update(obj, decided.status, conditions)
        if written is None:
            return
        stored = await self.api.replace(
            staticsetplanning.YURT_STATIC_SETS, spec.namespace, spec.name, written,
            subresource="status",
        )  # fmt: skip
        if conditions is not None and "conditions" not in (stored.get("status") or {}):
            self._no_conditions.add(spec.uid)
            logger.info(
                "YurtStaticSet %s/%s: its CRD keeps no status.conditions (OpenYurt's): a halt "
                "is in annotation %s and Events only",
                spec.namespace,
                spec.name,
                staticsethalts.HALT_ANNOTATION,
            )

    async def _record_revision(
        self,
        key: controlling.Key,
        obj: dict[str, Any],
        spec: staticsetplanning.Spec,
        digest: str,
    ) -> None:
        """Make the current template the newest ControllerRevision (once per hash)."""
        if self._recorded.get(key) == digest:
            return
        resource = staticsetrevisions.CONTROLLER_REVISIONS
        listed = await self.api.list(
            resource,
            spec.namespace,
            label_selector=f"{staticsetrevisions.UID_LABEL}={spec.uid}",
        )
        existing = staticsetrevisions.owned(listed.items, spec.uid)
        handed_over = None
        if not existing:
            configmap = await self.api.get_configmap(
                spec.namespace, staticsetplanning.configmap_name(spec.name)
            )
            text = ((configmap or {}).get("data") or {}).get(spec.manifest)
            if isinstance(text, str):
                handed_over = staticsetrevisions.template_of_manifest(text)
        decided = staticsetrevisions.plan(
            spec, digest, existing, staticsetrevisions.history_limit(obj), handed_over
        )
        for body in decided.create:
            try:
                await self.api.create(resource, spec.namespace, body)
            except kubeapi.Conflict:
                continue  # recorded already by an earlier replica or pass
            logger.info(
                "YurtStaticSet %s/%s: revision %d recorded (%s)",
                spec.namespace,
                spec.name,
                body["revision"],
                body["metadata"]["name"],
            )
        by_name = {(o.get("metadata") or {}).get("name"): o for o in listed.items}
        for revision, number in decided.renumber:
            current = by_name.get(revision.name)
            if current is not None:
                body = staticsetrevisions.renumbered(current, number)
                await self.api.replace(resource, spec.namespace, revision.name, body)
        for revision in decided.prune:
            try:
                await self.api.delete(resource, spec.namespace, revision.name, uid=revision.uid)
            except kubeapi.NotFound:
                pass
        self._recorded[key] = digest
        if len(self._recorded) > MAX_REMEMBERED:
            self._recorded.clear()  # bounded: recorded again on the next pass, idempotently

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
