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
* Worker Pods of an older hash, and Succeeded ones, are deleted.
* AdvancedRollingUpdate: on Ready nodes that need the upgrade and have no worker, workers are
  created, at most ``maxUnavailable`` (a number, or a percentage of ``totalNumber`` rounded
  up) in flight at a time. A NotReady node is never waited for: it takes no slot (nor does a
  worker on a node that went NotReady) and gets its worker once Ready again. [quirk] OpenYurt
  waits for a whole round to finish; here a slot is refilled as soon as one worker ends.
  [quirk] An absent ``maxUnavailable`` means 1 (OpenYurt fails the reconcile). A Failed
  worker of the current hash is kept (its log tells why) and halts the rollout until it is
  deleted, as OpenYurt stops on it; its node counts as not upgraded.
* OTA: no workers; every mirror Pod gets condition ``PodNeedUpgrade`` True when it needs the
  upgrade, False when it runs the latest template (the node's hub takes it when asked).
* [quirk] The hash: OpenYurt's is FNV-32a over Go's ``spew`` dump of the PodTemplateSpec, which
  cannot be reproduced outside Go; ours is FNV-32a over the template's canonical JSON, encoded
  the same way (Kubernetes' safe alphabet). A YurtStaticSet moved from yurt-manager to edgehub
  is therefore rolled out once more.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
import yaml

from kubecontrol import kubeapi, timestamps

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
    """Failed workers of the latest template: the rollout waits until they are deleted."""
    waiting: int = 0
    """Nodes that need the upgrade and wait (NotReady, or no slot)."""
    too_long: tuple[str, ...] = ()
    """Nodes whose worker Pod name would pass 253 characters (no worker; reported)."""


def gather(
    spec: Spec,
    digest: str,
    node_of: Callable[[str], Mapping[str, Any] | None],
    pods: Sequence[Mapping[str, Any]],
) -> tuple[list[NodeState], list[Worker]]:
    """The nodes running the static Pod and the workers of ``spec``, from the namespace's Pods."""
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
            workers.append(
                Worker(
                    name=name,
                    node=node,
                    uid=str(meta.get("uid") or ""),
                    phase=str((pod.get("status") or {}).get("phase") or "Pending"),
                    current=(meta.get("annotations") or {}).get(HASH_ANNOTATION) == digest,
                )
            )
    states.sort(key=lambda s: s.node)
    workers.sort(key=lambda w: w.name)
    return states, workers


def plan(
    spec: Spec,
    node_of: Callable[[str], Mapping[str, Any] | None],
    pods: Sequence[Mapping[str, Any]],
) -> Plan:
    """What to do now for ``spec`` (which must have no problems); ``node_of`` finds a Node."""
    digest = template_hash(spec.template)
    states, workers = gather(spec, digest, node_of, pods)
    status = {
        "totalNumber": len(states),
        "readyNumber": sum(s.pod_ready for s in states),
        "upgradedNumber": sum(not s.upgrade_needed for s in states),
        "observedGeneration": spec.generation,
    }
    delete = tuple(w for w in workers if not w.current or w.phase == "Succeeded")
    failed = tuple(w for w in workers if w.current and w.phase == "Failed")
    kept = [w for w in workers if w not in delete]
    needing = [s for s in states if s.upgrade_needed]
    if spec.strategy == OTA:
        conditions = tuple(
            (s.pod, want)
            for s in states
            if s.need_condition != (want := "True" if s.upgrade_needed else "False")
        )
        return Plan(digest, status, delete=delete, conditions=conditions, failed=failed)
    if failed:
        return Plan(digest, status, delete=delete, failed=failed, waiting=len(needing))
    # Every worker still running holds a slot, whatever its hash (one upgrade per node at a
    # time, and an old one being deleted has not stopped yet), except on a node that went
    # NotReady meanwhile: that node is unavailable anyway and must not stall the others.
    running = [w for w in workers if w.phase not in FINISHED]
    in_flight = sum(_ready(node_of(w.node)) for w in running)
    busy = {w.node for w in kept} | {w.node for w in running}
    slots = max(0, scaled_max_unavailable(spec.max_unavailable, len(states)) - in_flight)
    fits = [s.node for s in needing if len(worker_name(spec.name, s.node, digest)) <= MAX_NAME]
    too_long = tuple(s.node for s in needing if s.node not in fits)
    candidates = [n for n in fits if n not in busy and _ready(node_of(n))]
    create = tuple(candidates[:slots])
    return Plan(
        digest,
        status,
        create=create,
        delete=delete,
        waiting=len(needing) - len(create),
        too_long=too_long,
    )


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


def status_update(obj: Mapping[str, Any], status: Mapping[str, int]) -> dict[str, Any] | None:
    """The YSS with ``status`` (other status fields kept), or None when it already says so."""
    current = dict(obj.get("status") or {})
    if all(current.get(k) == v for k, v in status.items()):
        return None
    return {
        **obj,
        "apiVersion": YURT_STATIC_SETS.api_version,
        "kind": KIND,
        "status": {**current, **status},
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
