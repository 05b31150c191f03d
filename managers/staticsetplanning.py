"""What the ``yurtstaticset`` controller does for one YurtStaticSet (apps.openyurt.io/v1alpha1).

PURE: JSON dicts in, frozen values out; clocks passed in; nothing is raised for bad input (a
spec that cannot be used is a ``problem`` naming the field).

The objects, named as OpenYurt names them (so a cluster moving from yurt-manager keeps them):

* the static Pod of node ``n`` shows up as the mirror Pod ``<yss>-<n>`` in the YSS namespace;
  its annotation ``openyurt.io/static-pod-hash`` says which template it runs;
* ConfigMap ``yurt-static-set-<yss>`` holds the manifest under the key ``spec.staticPodManifest``
  and the same hash annotation;
* worker Pod ``yss-upgrade-worker-<yss>-<node>-<hash>`` runs ``edgehub static-pod-upgrade`` on
  that node (the hash annotation says which template it installs).

Decisions (OpenYurt's, with the differences a careful user expects, each marked [quirk]):

* A node needs the upgrade when its mirror Pod's hash differs from the template's, or it has
  no hash and does not carry the template's spec and metadata.
* Status: ``totalNumber`` nodes with a mirror Pod, ``readyNumber`` of them Ready,
  ``upgradedNumber`` of them not needing the upgrade, ``observedGeneration`` the generation
  decided on.
* Worker Pods of an older hash are deleted; a Succeeded one once its node's kubelet is back
  (``staticsethalts.verify``: Lease renewed after the worker ended, Node Ready, mirror Pod on
  the new hash). [quirk] OpenYurt deletes it at once and never looks at the node again.
* AdvancedRollingUpdate: on Ready nodes that need the upgrade and have no worker, workers are
  created, at most ``maxUnavailable`` (a number, or a percentage of ``totalNumber`` rounded
  up) in flight at a time; a Succeeded worker whose node is not confirmed yet holds its slot.
  A NotReady node is never waited for: it takes no slot (nor does a worker on a node that went
  NotReady) and gets its worker once Ready again, so a node offline during the rollout is done
  when it returns. [quirk] OpenYurt waits for a whole round to finish; here a slot is refilled
  as soon as one node is done. [quirk] An absent ``maxUnavailable`` means 1 (OpenYurt fails
  the reconcile).
* Halts (``staticsethalts``): a Failed worker of the current hash, or a node whose kubelet
  did not come back within ``ready_timeout``, halts the whole YurtStaticSet: no worker is
  created until an operator resumes it (the halt annotation removed: the workers recorded
  with it are deleted, a failed node tried again) or changes the template.
* OTA: no workers; every mirror Pod gets condition ``PodNeedUpgrade`` True when it needs the
  upgrade, False when it runs the latest template (the node's hub takes it when asked).
* [quirk] The hash: OpenYurt's is FNV-32a over Go's ``spew`` dump of the PodTemplateSpec, which
  cannot be reproduced outside Go; ours is FNV-32a over the template's canonical JSON, encoded
  the same way (Kubernetes' safe alphabet). A YurtStaticSet moved from yurt-manager to edgehub
  is therefore rolled out once more.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
import yaml

from kubecontrol import kubeapi, timestamps
from managers import staticsethalts

YURT_STATIC_SETS = kubeapi.Resource("apps.openyurt.io", "v1alpha1", "yurtstaticsets")
KIND = "YurtStaticSet"
HASH_ANNOTATION = "openyurt.io/static-pod-hash"
CONFIGMAP_PREFIX = "yurt-static-set-"
WORKER_PREFIX = "yss-upgrade-worker-"
WORKER_CONTAINER = "upgrade-worker"
POD_NEED_UPGRADE = "PodNeedUpgrade"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

OWNER_ANNOTATION = "edgehub.io/owner"
"""Which controller acts on a YurtStaticSet; edgehub writes ``edgehub`` on the ones it takes
and leaves alone any that name another owner."""
OWNER_EDGEHUB = "edgehub"
OWNER_YURT_MANAGER = "yurt-manager"
OWNERS = (OWNER_EDGEHUB, OWNER_YURT_MANAGER)

ADVANCED_ROLLING_UPDATE = "AdvancedRollingUpdate"
OTA = "OTA"
STRATEGIES = (ADVANCED_ROLLING_UPDATE, OTA)
DEFAULT_MAX_UNAVAILABLE = 1

MAX_NAME = 253
_PERCENT = re.compile(r"([0-9]+)%")
# Kubernetes' rand.SafeEncodeString alphabet: no vowels, no look-alike characters.
_SAFE = "bcdfghjklmnpqrstvwxz2456789"

FINISHED = ("Succeeded", "Failed")


@dataclasses.dataclass(frozen=True, slots=True)
class Spec:
    name: str
    namespace: str
    uid: str
    generation: int
    manifest: str
    strategy: str
    max_unavailable: int | str
    template: Mapping[str, Any]
    owner: str
    """The ``edgehub.io/owner`` annotation, "" when absent."""
    problems: tuple[str, ...] = ()


def read_spec(obj: Mapping[str, Any]) -> Spec:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        spec = {}
    problems: list[str] = []
    manifest = spec.get("staticPodManifest")
    if not isinstance(manifest, str) or not manifest:
        problems.append("spec.staticPodManifest: must name the manifest file")
        manifest = ""
    elif "/" in manifest or manifest.startswith(".") or len(manifest) > MAX_NAME:
        problems.append(f"spec.staticPodManifest: {manifest[:64]!r} is not a plain file name")
    strategy_obj = spec.get("upgradeStrategy")
    if not isinstance(strategy_obj, Mapping):
        strategy_obj = {}
    raw_type = strategy_obj.get("type")
    strategy = next(
        (s for s in STRATEGIES if isinstance(raw_type, str) and raw_type.lower() == s.lower()),
        "",
    )
    if not strategy:
        problems.append(
            f"spec.upgradeStrategy.type: {str(raw_type)[:32]!r} is neither "
            f"{ADVANCED_ROLLING_UPDATE} nor {OTA}"
        )
    raw_max = strategy_obj.get("maxUnavailable", DEFAULT_MAX_UNAVAILABLE)
    max_unavailable: int | str = DEFAULT_MAX_UNAVAILABLE
    if isinstance(raw_max, bool) or not isinstance(raw_max, int | str):
        problems.append("spec.upgradeStrategy.maxUnavailable: neither a number nor a percentage")
    elif isinstance(raw_max, int):
        if raw_max < 0:
            problems.append("spec.upgradeStrategy.maxUnavailable: must not be negative")
        else:
            max_unavailable = raw_max
    elif _PERCENT.fullmatch(raw_max) is None:
        problems.append(
            f"spec.upgradeStrategy.maxUnavailable: {raw_max[:32]!r} is not a percentage like 10%"
        )
    else:
        max_unavailable = raw_max
    template = spec.get("template")
    if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
        problems.append("spec.template: must be a pod template with a spec")
        template = {}
    annotations = meta.get("annotations") or {}
    owner = annotations.get(OWNER_ANNOTATION, "") if isinstance(annotations, Mapping) else ""
    generation = meta.get("generation")
    return Spec(
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        uid=str(meta.get("uid") or ""),
        generation=generation if isinstance(generation, int) else 0,
        manifest=manifest,
        strategy=strategy,
        max_unavailable=max_unavailable,
        template=template,
        owner=str(owner),
        problems=tuple(problems),
    )


def scaled_max_unavailable(value: int | str, total: int) -> int:
    """``maxUnavailable`` as a count of ``total`` nodes: a percentage is rounded up."""
    if isinstance(value, int):
        return value
    match = _PERCENT.fullmatch(value)
    percent = int(match.group(1)) if match else 0
    return math.ceil(percent * total / 100)


def _fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def template_hash(template: Mapping[str, Any]) -> str:
    """A short stable name of the template's content (same template, same hash)."""
    digest = str(_fnv32a(orjson.dumps(template, option=orjson.OPT_SORT_KEYS)))
    return "".join(_SAFE[ord(c) % len(_SAFE)] for c in digest)


def manifest_text(template: Mapping[str, Any], digest: str) -> str:
    """The static Pod manifest kubelet reads: the template as a Pod, with the hash annotation."""
    metadata = dict(template.get("metadata") or {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}), HASH_ANNOTATION: digest}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}
    return yaml.safe_dump(pod, sort_keys=True)


def configmap_name(yss: str) -> str:
    return CONFIGMAP_PREFIX + yss


def worker_name(yss: str, node: str, digest: str) -> str:
    return f"{WORKER_PREFIX}{yss}-{node}-{digest}"


def mirror_name(yss: str, node: str) -> str:
    return f"{yss}-{node}"


def owner_reference(spec: Spec) -> dict[str, Any]:
    return {
        "apiVersion": YURT_STATIC_SETS.api_version,
        "kind": KIND,
        "name": spec.name,
        "uid": spec.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


# -- the facts


def _condition(obj: Mapping[str, Any], kind: str) -> str:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == kind:
            return str(c.get("status") or "")
    return ""


def node_ready(node: Mapping[str, Any]) -> bool:
    return _condition(node, "Ready") == "True"


def is_mirror_pod(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return True
    return any(
        isinstance(r, Mapping) and r.get("kind") == "Node"
        for r in meta.get("ownerReferences") or []
    )


def _owned_by(pod: Mapping[str, Any], uid: str) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, Mapping) and r.get("uid") == uid and uid for r in refs)


def _matches_template(template: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """A mirror Pod without a hash runs the template when every field the template sets is
    equal in the Pod (spec, and metadata other than name and creationTimestamp)."""
    pod_spec = pod.get("spec") or {}
    for key, value in (template.get("spec") or {}).items():
        if key not in pod_spec or pod_spec[key] != value:
            return False
    pod_meta = pod.get("metadata") or {}
    for key, value in (template.get("metadata") or {}).items():
        if key in ("name", "creationTimestamp"):
            continue
        if key not in pod_meta or pod_meta[key] != value:
            return False
    return True


@dataclasses.dataclass(frozen=True, slots=True)
class NodeState:
    node: str
    ready: bool
    """The Node's Ready condition is True."""
    pod: str
    pod_ready: bool
    upgrade_needed: bool
    need_condition: str
    """The mirror Pod's current ``PodNeedUpgrade`` status ("" when absent)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Worker:
    name: str
    node: str
    uid: str
    phase: str
    current: bool
    """Installs the latest template."""
    ended: float | None = None
    """When its container ended (``terminated.finishedAt``), epoch seconds."""
    marked: bool = False
    """Recorded as a worker that halted the rollout (``staticsethalts.halted_by``)."""
    message: str = ""
    """Why it failed (its termination message), for a Failed worker."""


@dataclasses.dataclass(frozen=True, slots=True)
class Facts:
    """What ``plan`` needs beyond the objects: the clock and what was read on demand."""

    now: float = 0.0
    halt: staticsethalts.Halt | None = None
    """The halt the YurtStaticSet's annotation records (whatever template it names)."""
    renewals: Mapping[str, float | None] = dataclasses.field(default_factory=dict)
    """node -> its Lease's renewTime (epoch seconds; None: no Lease), for ``awaiting``."""
    seen_ended: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """worker name -> when it was first seen Succeeded, for a worker reporting no end time."""
    ready_timeout: float = 120.0
    """Seconds a node's kubelet has to come back after its worker ended."""
    halted_by: frozenset[str] = frozenset()
    """The uids the YurtStaticSet records as having halted its rollout."""


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    digest: str
    status: Mapping[str, int]
    create: tuple[str, ...] = ()
    """Nodes that get a worker Pod now."""
    delete: tuple[Worker, ...] = ()
    conditions: tuple[tuple[str, str], ...] = ()
    """OTA: (mirror Pod name, "True"/"False") to write as ``PodNeedUpgrade``."""
    failed: tuple[Worker, ...] = ()
    """Failed workers of the latest template (kept while the rollout is halted)."""
    waiting: int = 0
    """Nodes that need the upgrade and wait (NotReady, halted, or no slot)."""
    too_long: tuple[str, ...] = ()
    """Nodes whose worker Pod name would pass 253 characters (no worker; reported)."""
    verifying: tuple[str, ...] = ()
    """Nodes whose worker succeeded and whose kubelet is awaited."""
    recheck: float | None = None
    """Seconds until a node being verified is worth looking at again."""
    halted: staticsethalts.Halt | None = None
    """The halt in force after this plan (the recorded one, or ``halt``)."""
    halt: staticsethalts.Halt | None = None
    """A new halt to record (the annotation, a condition, an Event)."""
    clear_halt: bool = False
    """The recorded halt names another template: remove it."""
    mark: tuple[Worker, ...] = ()
    """Workers found to halt the rollout now (their uids join ``halted_by``)."""
    halted_by: frozenset[str] | None = None
    """The uids to record as having halted the rollout, when they differ from the recorded."""
    resumed: tuple[Worker, ...] = ()
    """Marked workers deleted because the rollout was resumed (among ``delete``)."""


def awaiting(workers: Sequence[Worker]) -> tuple[str, ...]:
    """Nodes whose Lease ``plan`` needs: those of Succeeded, unmarked workers of the latest
    template (their kubelet has yet to be seen back)."""
    return tuple(
        sorted({w.node for w in workers if w.current and w.phase == "Succeeded" and not w.marked})
    )


def gather(
    spec: Spec,
    digest: str,
    node_of: Callable[[str], Mapping[str, Any] | None],
    pods: Sequence[Mapping[str, Any]],
    halted_by: frozenset[str] = frozenset(),
) -> tuple[list[NodeState], list[Worker]]:
    """The nodes running the static Pod and the workers of ``spec``, from the namespace's Pods
    (``halted_by``: the uids recorded as having halted its rollout)."""
    states: list[NodeState] = []
    workers: list[Worker] = []
    worker_prefix = f"{WORKER_PREFIX}{spec.name}-"
    for pod in pods:
        meta = pod.get("metadata") or {}
        name = str(meta.get("name") or "")
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if not node or meta.get("deletionTimestamp"):
            continue
        if name == mirror_name(spec.name, node) and is_mirror_pod(pod):
            annotations = meta.get("annotations") or {}
            have = annotations.get(HASH_ANNOTATION)
            if have is not None:
                needed = have != digest
            else:
                needed = not _matches_template(spec.template, pod)
            node_obj = node_of(node)
            states.append(
                NodeState(
                    node=node,
                    ready=node_obj is not None and node_ready(node_obj),
                    pod=name,
                    pod_ready=_condition(pod, "Ready") == "True",
                    upgrade_needed=needed,
                    need_condition=_condition(pod, POD_NEED_UPGRADE),
                )
            )
        elif name.startswith(worker_prefix) and _owned_by(pod, spec.uid):
            phase = str((pod.get("status") or {}).get("phase") or "Pending")
            workers.append(
                Worker(
                    name=name,
                    node=node,
                    uid=str(meta.get("uid") or ""),
                    phase=phase,
                    current=(meta.get("annotations") or {}).get(HASH_ANNOTATION) == digest,
                    ended=staticsethalts.finished_at(pod),
                    marked=str(meta.get("uid") or "") in halted_by,
                    message=staticsethalts.failure_message(pod) if phase == "Failed" else "",
                )
            )
    states.sort(key=lambda s: s.node)
    workers.sort(key=lambda w: w.name)
    return states, workers


def plan(
    spec: Spec,
    node_of: Callable[[str], Mapping[str, Any] | None],
    pods: Sequence[Mapping[str, Any]],
    facts: Facts | None = None,
) -> Plan:
    """What to do now for ``spec`` (which must have no problems); ``node_of`` finds a Node."""
    facts = facts or Facts()
    digest = template_hash(spec.template)
    states, workers = gather(spec, digest, node_of, pods, facts.halted_by)
    status = {
        "totalNumber": len(states),
        "readyNumber": sum(s.pod_ready for s in states),
        "upgradedNumber": sum(not s.upgrade_needed for s in states),
        "observedGeneration": spec.generation,
    }
    recorded = facts.halt
    halted = recorded if recorded is not None and recorded.applies_to(digest) else None
    clear = recorded is not None and halted is None
    delete = [w for w in workers if not w.current]
    failed = tuple(w for w in workers if w.current and w.phase == "Failed")
    needing = [s for s in states if s.upgrade_needed]
    if spec.strategy == OTA:
        conditions = tuple(
            (s.pod, want)
            for s in states
            if s.need_condition != (want := "True" if s.upgrade_needed else "False")
        )
        delete += [w for w in workers if w.current and w.phase == "Succeeded"]
        return Plan(
            digest,
            status,
            delete=tuple(delete),
            conditions=conditions,
            failed=failed,
            halted=halted,
            clear_halt=clear,
        )
    by_node = {s.node: s for s in states}
    resumed: list[Worker] = []
    verifying: list[str] = []
    recheck: float | None = None
    troubles: list[tuple[Worker, str, str]] = []  # (worker, reason, message) of new halts
    for w in workers:
        if not w.current or w.phase not in FINISHED:
            continue
        if w.marked:
            if halted is None:  # the operator resumed: accept the node, or try it again
                delete.append(w)
                resumed.append(w)
            continue
        if w.phase == "Failed":
            troubles.append((w, staticsethalts.WORKER_FAILED, w.message))
            continue
        state = by_node.get(w.node)
        ended = w.ended if w.ended is not None else facts.seen_ended.get(w.name, facts.now)
        verdict = staticsethalts.verify(
            ended=ended,
            node_ready=_ready(node_of(w.node)),
            renewed=facts.renewals.get(w.node),
            upgraded=state is not None and not state.upgrade_needed,
            now=facts.now,
            timeout=facts.ready_timeout,
        )
        if verdict.outcome == staticsethalts.VERIFIED:
            delete.append(w)
        elif verdict.outcome == staticsethalts.WAITING:
            verifying.append(w.node)
            if verdict.recheck is not None:
                recheck = verdict.recheck if recheck is None else min(recheck, verdict.recheck)
        else:
            troubles.append((w, staticsethalts.NODE_NOT_READY, verdict.message))
    new_halt: staticsethalts.Halt | None = None
    if troubles and halted is None:
        worker, reason, message = troubles[0]
        if len(troubles) > 1:
            others = ", ".join(t[0].node for t in troubles[1:4])
            message = f"{message} (also: {others})"
        new_halt = staticsethalts.Halt(
            hash=digest,
            node=worker.node,
            worker=worker.name,
            reason=reason,
            message=message[: staticsethalts.MAX_MESSAGE],
            since=_rfc3339(facts.now),
        )
        halted = new_halt
    mark = tuple(t[0] for t in troubles) if halted is not None else ()
    gone = {w.name for w in delete}
    # What stays recorded: the recorded workers still there (and not deleted now), and the
    # ones that halt it now; written only when that differs.
    keep = frozenset(w.uid for w in workers if w.marked and w.name not in gone)
    keep |= {w.uid for w in mark}
    halted_by = keep if keep != facts.halted_by else None
    if halted is not None:
        return Plan(
            digest,
            status,
            delete=tuple(delete),
            failed=failed,
            waiting=len(needing),
            verifying=tuple(verifying),
            recheck=recheck,
            halted=halted,
            halt=new_halt,
            clear_halt=clear,
            mark=mark,
            halted_by=halted_by,
            resumed=tuple(resumed),
        )
    # Every worker still running holds a slot, whatever its hash (one upgrade per node at a
    # time, and an old one being deleted has not stopped yet), except on a node that went
    # NotReady meanwhile: that node is unavailable anyway and must not stall the others. A
    # Succeeded worker whose node is being verified holds its slot too.
    running = [w for w in workers if w.phase not in FINISHED]
    # A failed node resumed by the operator keeps its slot: it goes first, once its old
    # worker (whose name its new one takes) is gone.
    retried = sum(1 for w in resumed if w.node in by_node and by_node[w.node].upgrade_needed)
    in_flight = sum(_ready(node_of(w.node)) for w in running) + len(verifying) + retried
    # A node is busy while it has a worker that stays, one still running, or one deleted on
    # resume (the new worker has its name: it is created once that one is gone).
    busy = {w.node for w in workers if w.name not in gone or w.phase not in FINISHED}
    busy |= {w.node for w in resumed}
    slots = max(0, scaled_max_unavailable(spec.max_unavailable, len(states)) - in_flight)
    fits = [s.node for s in needing if len(worker_name(spec.name, s.node, digest)) <= MAX_NAME]
    too_long = tuple(s.node for s in needing if s.node not in fits)
    candidates = [n for n in fits if n not in busy and _ready(node_of(n))]
    create = tuple(candidates[:slots])
    return Plan(
        digest,
        status,
        create=create,
        delete=tuple(delete),
        failed=failed,
        waiting=len(needing) - len(create),
        too_long=too_long,
        verifying=tuple(verifying),
        recheck=recheck,
        clear_halt=clear,
        halted_by=halted_by,
        resumed=tuple(resumed),
    )


def _rfc3339(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready(node: Mapping[str, Any] | None) -> bool:
    return node is not None and node_ready(node)


# -- the objects


def desired_configmap(spec: Spec, digest: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(spec.name),
            "namespace": spec.namespace,
            "annotations": {HASH_ANNOTATION: digest},
            "ownerReferences": [owner_reference(spec)],
        },
        "data": {spec.manifest: manifest_text(spec.template, digest)},
    }


def configmap_update(existing: Mapping[str, Any], want: Mapping[str, Any]) -> dict[str, Any] | None:
    """``existing`` with the wanted hash and data (other annotations and labels kept), or None
    when it already carries them."""
    meta = dict(existing.get("metadata") or {})
    annotations = dict(meta.get("annotations") or {})
    digest = want["metadata"]["annotations"][HASH_ANNOTATION]
    if annotations.get(HASH_ANNOTATION) == digest and existing.get("data") == want["data"]:
        return None
    annotations[HASH_ANNOTATION] = digest
    meta["annotations"] = annotations
    if not meta.get("ownerReferences"):
        meta["ownerReferences"] = want["metadata"]["ownerReferences"]
    return {**existing, "metadata": meta, "data": dict(want["data"])}


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerTemplate:
    image: str
    image_pull_policy: str = "IfNotPresent"
    static_pod_path: str = "/etc/kubernetes/manifests"
    timeout: float = 120.0
    """Seconds the worker waits for the new hub to be ready before putting the old one back."""


CONFIGMAP_MOUNT = "/data"


def worker_pod(spec: Spec, node: str, digest: str, template: WorkerTemplate) -> dict[str, Any]:
    """Worker Pod on ``node``: ``edgehub static-pod-upgrade`` with the ConfigMap at
    ``/data`` and kubelet's staticPodPath mounted from the host."""
    mode = "ota" if spec.strategy == OTA else "auto"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": worker_name(spec.name, node, digest),
            "namespace": spec.namespace,
            "annotations": {HASH_ANNOTATION: digest},
            "labels": {
                "app.kubernetes.io/name": "edgehub",
                "app.kubernetes.io/component": "yss-upgrade-worker",
            },
            "ownerReferences": [owner_reference(spec)],
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            # It writes a file on its node and reads its hub's readiness: no API credentials.
            "automountServiceAccountToken": False,
            # The new hub's readiness is read on the node's loopback (127.0.0.1:10267).
            "hostNetwork": True,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": WORKER_CONTAINER,
                    "image": template.image,
                    "imagePullPolicy": template.image_pull_policy,
                    "command": [
                        "edgehub",
                        "static-pod-upgrade",
                        f"--name={mirror_name(spec.name, node)}",
                        f"--namespace={spec.namespace}",
                        f"--manifest={spec.manifest}",
                        f"--hash={digest}",
                        f"--mode={mode}",
                        f"--static-pod-path={template.static_pod_path}",
                        f"--configmap-dir={CONFIGMAP_MOUNT}",
                        f"--timeout={template.timeout:g}s",
                    ],
                    # Root writes the host's staticPodPath (0755 root); nothing else is needed.
                    "securityContext": {"runAsUser": 0},
                    "volumeMounts": [
                        {"name": "hostpath", "mountPath": template.static_pod_path},
                        {"name": "configmap", "mountPath": CONFIGMAP_MOUNT, "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "hostpath",
                    "hostPath": {"path": template.static_pod_path, "type": "Directory"},
                },
                {"name": "configmap", "configMap": {"name": configmap_name(spec.name)}},
            ],
        },
    }


def with_condition(pod: Mapping[str, Any], kind: str, status: str, now: str) -> dict[str, Any]:
    """``pod`` with condition ``kind`` set to ``status`` (for a PUT of ``pods/<name>/status``)."""
    pod_status = dict(pod.get("status") or {})
    conditions = [
        c
        for c in pod_status.get("conditions") or []
        if not (isinstance(c, Mapping) and c.get("type") == kind)
    ]
    conditions.append({"type": kind, "status": status, "lastTransitionTime": now})
    pod_status["conditions"] = conditions
    return {**pod, "status": pod_status}


def status_update(
    obj: Mapping[str, Any],
    status: Mapping[str, int],
    conditions: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any] | None:
    """The YSS with ``status`` (other status fields kept) and, when given, ``conditions``; None
    when it already says so."""
    current = dict(obj.get("status") or {})
    if conditions is None and all(current.get(k) == v for k, v in status.items()):
        return None
    new = {**current, **status}
    if conditions is not None:
        new["conditions"] = [dict(c) for c in conditions]
    return {
        **obj,
        "apiVersion": YURT_STATIC_SETS.api_version,
        "kind": KIND,
        "status": new,
    }


def claim(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The YSS annotated ``edgehub.io/owner: edgehub`` (edgehub takes an unclaimed one)."""
    meta = dict(obj.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), OWNER_ANNOTATION: OWNER_EDGEHUB}
    return {**obj, "apiVersion": YURT_STATIC_SETS.api_version, "kind": KIND, "metadata": meta}


# -- coexistence with yurt-manager

YURT_MANAGER_LEASE = ("kube-system", "cloud-yurt-manager")
"""yurt-manager's leader-election Lease (its chart's ``leaderElectResourceName``)."""


def lease_active(lease: Mapping[str, Any] | None, now: float) -> bool:
    """The Lease has a holder that renewed it within its duration (``now``: epoch seconds)."""
    if lease is None:
        return False
    spec = lease.get("spec") or {}
    if not spec.get("holderIdentity"):
        return False
    renewed = timestamps.epoch(spec.get("renewTime") or spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    if renewed is None or not isinstance(duration, int):
        return True  # held, but we cannot tell for how long: assume it is
    return now < renewed + duration
