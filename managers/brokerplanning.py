"""What to do about one Configuration's brokers: pure, from what exists to actions.

``plan(world)`` compares the objects that should exist (``brokerobjects``) for a Configuration
and its live Instances with the Pods, Jobs and Services that exist and are *ours* (their
controlling owner is an akri.sh Instance or Configuration: ``brokerobjects.controller_of``),
and returns the creates, updates and deletes that close the gap. Objects that are not ours are
never in an action, whatever their labels say.

Rules (Akri's, reference §7.1, with the deviations docs/brokers.md lists):

* Pods: one per node in the Instance's ``nodes`` — at most ``capacity`` of them (nodes that
  already run one first, then by name; a broker beyond the capacity could never get a slot),
  and one for an unshared Instance. A pod whose node left ``nodes`` goes. Phases: Running (or
  starting) stays; Pending longer than ``PENDING_GRACE`` after it started is recreated;
  Succeeded/Failed/Unknown is recreated, but not before ``hold`` says (the controller backs
  off pods that keep ending, where Akri recreated at once: its issue #849's storms).
* Jobs: one per Instance, named after the Configuration's generation; an existing one is
  kept while it was built from the same spec (``edgehub/template-hash``), whatever its
  generation, so only a changed ``brokerJobSpec`` (or Instance ``brokerProperties``) runs it
  again. A completed or failed Job stays (the Job controller owns retries).
* What recreates a broker: a different template hash, i.e. a changed ``brokerSpec`` or a
  changed ``brokerProperties`` of its Instance (brokers read those as environment, set only
  at allocation). Capacity, service specs and discovery details do not (Akri's agent recreated
  every Instance, and so every broker, on any Configuration change). Objects without the hash
  (made by Akri's controller) are adopted as they are.
* Services: the Instance Service while the Instance is alive, the Configuration Service while
  at least one Instance is alive, both only when the Configuration has a broker and the
  service spec; changed specs are updated in place.
* An object whose owner is gone (another Instance/Configuration with the same name, or none)
  goes; everything goes when the Configuration is gone, being deleted or has no broker.
* Something being deleted is waited for, never recreated over (the name is still taken).

A builder ``SpecError`` for one Instance is reported in ``problems`` and skips that Instance
only; the other Instances of the Configuration are still planned.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from managers import brokerobjects as objects

PENDING_GRACE = 300.0
"""Seconds a started pod may stay Pending before it is recreated (Akri: 5 min)."""
RUNNING_PHASES = ("Running", "ContainerCreating", "PodInitializing")

JSONObject = dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Create:
    kind: str  # "pods", "jobs", "services"
    body: JSONObject
    why: str


@dataclasses.dataclass(frozen=True, slots=True)
class Update:
    kind: str
    body: JSONObject
    why: str


@dataclasses.dataclass(frozen=True, slots=True)
class Delete:
    kind: str
    namespace: str
    name: str
    uid: str
    why: str
    ended: bool = False
    """A broker pod that ended (Succeeded/Failed): the controller backs off its re-creation."""


Action = Create | Update | Delete


@dataclasses.dataclass(frozen=True, slots=True)
class Problem:
    instance: str  # "" for the Configuration itself
    error: objects.SpecError


@dataclasses.dataclass(frozen=True, slots=True)
class World:
    configuration: Mapping[str, Any] | None
    """None when it does not exist."""
    instances: Sequence[Mapping[str, Any]]
    """The Instances naming this Configuration in its namespace."""
    pods: Sequence[Mapping[str, Any]] = ()
    jobs: Sequence[Mapping[str, Any]] = ()
    services: Sequence[Mapping[str, Any]] = ()
    """Objects labelled with this Configuration (ours or not: ``plan`` decides)."""
    now: float = 0.0
    """Wall-clock seconds (epoch): pod start times are compared with it."""
    hold: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Pod name -> wall-clock seconds before which it is not created again."""


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    actions: tuple[Action, ...]
    problems: tuple[Problem, ...] = ()
    requeue_after: float | None = None
    """Look again after this many seconds (a pending pod's grace, a held pod) even if no
    event comes."""
    running: frozenset[str] = frozenset()
    """Names of broker pods that run: their back-off is over."""
    wanted_pods: frozenset[str] = frozenset()
    """Names of every broker pod that should exist (the controller forgets others' holds)."""


def _phase(pod: Mapping[str, Any]) -> str:
    status = pod.get("status")
    phase = status.get("phase") if isinstance(status, Mapping) else None
    return phase if isinstance(phase, str) else ""


def _start_time(pod: Mapping[str, Any]) -> float | None:
    status = pod.get("status")
    value = status.get("startTime") if isinstance(status, Mapping) else None
    if not isinstance(value, str):
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _earliest(current: float | None, candidate: float) -> float:
    return candidate if current is None else min(current, candidate)


def _alive_config(configuration: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if configuration is None or objects.deleting(configuration):
        return None
    return configuration


class _Planner:
    def __init__(self, world: World) -> None:
        self.world = world
        self.actions: list[Action] = []
        self.problems: list[Problem] = []
        self.requeue: float | None = None
        self.running: set[str] = set()
        self.wanted_pods: set[str] = set()
        self.taken_pods: set[str] = set()
        self.taken_jobs: set[str] = set()
        self.configuration = _alive_config(world.configuration)
        self.broker: tuple[str, Mapping[str, Any]] | None = None
        if self.configuration is not None:
            try:
                self.broker = objects.broker_kind(self.configuration)
            except objects.SpecError as e:
                self.problems.append(Problem("", e))
        self.instances = {
            objects.uid_of(i): i
            for i in world.instances
            if not objects.deleting(i) and objects.uid_of(i)
        }

    def _ours(self, items: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return [o for o in items if objects.controller_of(o) is not None]

    def _delete(self, kind: str, obj: Mapping[str, Any], why: str, ended: bool = False) -> None:
        self.actions.append(
            Delete(
                kind,
                objects.namespace_of(obj),
                objects.name_of(obj),
                objects.uid_of(obj),
                why,
                ended,
            )
        )

    def _owned_by_live_instance(self, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
        owner = objects.controller_of(obj)
        if owner is None or owner.get("kind") != "Instance":
            return None
        return self.instances.get(str(owner.get("uid") or ""))

    # --- pods ------------------------------------------------------------------------

    def pods(self) -> None:
        wants_pods = self.broker is not None and self.broker[0] == "pod"
        by_instance: dict[str, list[Mapping[str, Any]]] = {}
        ours = self._ours(self.world.pods)
        # A name held by any pod of ours (going, or another Instance's) is not created over.
        self.taken_pods = {objects.name_of(p) for p in ours}
        for pod in ours:
            if objects.deleting(pod):
                by_instance.setdefault(self._owner_uid(pod), []).append(pod)
                continue
            instance = self._owned_by_live_instance(pod)
            if instance is None:
                self._delete("pods", pod, "its Instance is gone")
                continue
            if not wants_pods:
                self._delete("pods", pod, "the Configuration has no brokerPodSpec any more")
                continue
            by_instance.setdefault(objects.uid_of(instance), []).append(pod)
        if not wants_pods or self.configuration is None:
            return
        for uid, instance in self.instances.items():
            self._instance_pods(instance, by_instance.get(uid, []))

    def _owner_uid(self, obj: Mapping[str, Any]) -> str:
        owner = objects.controller_of(obj)
        return str((owner or {}).get("uid") or "")

    def _instance_pods(
        self, instance: Mapping[str, Any], existing: list[Mapping[str, Any]]
    ) -> None:
        assert self.configuration is not None
        instance_name = objects.name_of(instance)
        is_shared = objects.shared(instance)
        nodes = objects.instance_nodes(instance)
        present = {
            objects.labels_of(p).get(objects.TARGET_NODE_LABEL, "")
            for p in existing
            if not objects.deleting(p)
        }
        ordered = sorted(n for n in nodes if n in present) + sorted(
            n for n in nodes if n not in present
        )
        limit = objects.instance_capacity(instance)
        if not is_shared:
            limit = min(limit, 1)
        chosen = ordered[:limit]
        desired: dict[str, JSONObject] = {}
        for node in chosen:
            try:
                body = objects.broker_pod(self.configuration, instance, node)
            except objects.SpecError as e:
                self.problems.append(Problem(instance_name, e))
                # Nothing can be built for this Instance: leave its pods as they are.
                return
            desired[body["metadata"]["name"]] = body
        self.wanted_pods.update(desired)
        for pod in existing:
            name = objects.name_of(pod)
            if objects.deleting(pod):
                continue
            node = objects.labels_of(pod).get(objects.TARGET_NODE_LABEL, "")
            wanted = desired.get(name)
            if wanted is None:
                why = (
                    f"node {node} left the Instance"
                    if node not in nodes
                    else f"over the Instance's capacity of {objects.instance_capacity(instance)}"
                )
                self._delete("pods", pod, why)
                continue
            have = objects.template_hash(pod)
            if have is not None and have != objects.template_hash(wanted):
                self._delete("pods", pod, "its broker spec or brokerProperties changed")
                continue
            self._judge_phase(pod)
        for name, body in desired.items():
            if name in self.taken_pods:
                continue
            held_until = self.world.hold.get(name, 0.0)
            if held_until > self.world.now:
                self.requeue = _earliest(self.requeue, held_until - self.world.now)
                continue
            node = body["metadata"]["labels"][objects.TARGET_NODE_LABEL]
            self.actions.append(Create("pods", body, f"broker for node {node}"))

    def _judge_phase(self, pod: Mapping[str, Any]) -> None:
        phase = _phase(pod)
        name = objects.name_of(pod)
        if phase in RUNNING_PHASES:
            if phase == "Running":
                self.running.add(name)
            return
        started = _start_time(pod)
        if phase in ("", "Pending"):
            if started is None:
                return  # not started by a kubelet yet (e.g. waiting for a node with a slot)
            due = started + PENDING_GRACE
            if self.world.now >= due:
                self._delete("pods", pod, f"Pending for more than {PENDING_GRACE:.0f} s")
            else:
                self.requeue = _earliest(self.requeue, due - self.world.now)
            return
        self._delete("pods", pod, f"it ended ({phase})", ended=True)

    # --- jobs ------------------------------------------------------------------------

    def jobs(self) -> None:
        wants_jobs = self.broker is not None and self.broker[0] == "job"
        by_instance: dict[str, list[Mapping[str, Any]]] = {}
        ours = self._ours(self.world.jobs)
        self.taken_jobs = {objects.name_of(j) for j in ours}
        for job in ours:
            if objects.deleting(job):
                by_instance.setdefault(self._owner_uid(job), []).append(job)
                continue
            instance = self._owned_by_live_instance(job)
            if instance is None:
                self._delete("jobs", job, "its Instance is gone")
            elif not wants_jobs:
                self._delete("jobs", job, "the Configuration has no brokerJobSpec any more")
            else:
                by_instance.setdefault(objects.uid_of(instance), []).append(job)
        if not wants_jobs or self.configuration is None:
            return
        for uid, instance in self.instances.items():
            self._instance_job(instance, by_instance.get(uid, []))

    def _instance_job(self, instance: Mapping[str, Any], existing: list[Mapping[str, Any]]) -> None:
        assert self.configuration is not None
        try:
            desired = objects.broker_job(self.configuration, instance)
        except objects.SpecError as e:
            self.problems.append(Problem(objects.name_of(instance), e))
            return
        name = desired["metadata"]["name"]
        digest = objects.template_hash(desired)
        live = [j for j in existing if not objects.deleting(j)]

        def current(job: Mapping[str, Any]) -> bool:
            have = objects.template_hash(job)
            return have == digest if have is not None else objects.name_of(job) == name

        keep = next((j for j in live if current(j)), None)
        for job in live:
            if job is not keep:
                self._delete("jobs", job, "its broker spec or brokerProperties changed")
        if keep is None and name not in self.taken_jobs:
            self.actions.append(Create("jobs", desired, "broker Job"))

    # --- services --------------------------------------------------------------------

    def services(self) -> None:
        desired: dict[str, JSONObject] = {}
        unknown: set[str] = set()  # could not be built: left as they are
        configuration = self.configuration
        if configuration is not None and self.broker is not None:
            for instance in self.instances.values():
                instance_name = objects.name_of(instance)
                try:
                    body = objects.instance_service(configuration, instance)
                except objects.SpecError as e:
                    self.problems.append(Problem(instance_name, e))
                    unknown.add(objects.instance_service_name(instance_name))
                    continue
                if body is not None:
                    desired[body["metadata"]["name"]] = body
            if self.instances:
                try:
                    body = objects.configuration_service(configuration)
                except objects.SpecError as e:
                    self.problems.append(Problem("", e))
                    unknown.add(objects.configuration_service_name(objects.name_of(configuration)))
                    body = None
                if body is not None:
                    desired[body["metadata"]["name"]] = body
        config_uid = objects.uid_of(configuration) if configuration is not None else ""
        taken: set[str] = set()
        for service in self._ours(self.world.services):
            name = objects.name_of(service)
            taken.add(name)
            if objects.deleting(service):
                continue
            owner = objects.controller_of(service) or {}
            owner_uid = str(owner.get("uid") or "")
            alive = (
                owner_uid in self.instances
                if owner.get("kind") == "Instance"
                else bool(config_uid) and owner_uid == config_uid
            )
            wanted = desired.get(name)
            if not alive:
                self._delete("services", service, "its owner is gone")
            elif name in unknown:
                continue
            elif wanted is None:
                self._delete("services", service, "no longer wanted")
            elif objects.template_hash(service) != objects.template_hash(wanted):
                self.actions.append(
                    Update("services", objects.updated_service(service, wanted), "spec changed")
                )
        for name, body in desired.items():
            if name not in taken:
                self.actions.append(Create("services", body, "service"))


def plan(world: World) -> Plan:
    planner = _Planner(world)
    planner.pods()
    planner.jobs()
    planner.services()
    # Deletes first: a name freed now is created on the next pass, never raced.
    ordered = sorted(planner.actions, key=lambda a: 0 if isinstance(a, Delete) else 1)
    return Plan(
        tuple(ordered),
        tuple(planner.problems),
        planner.requeue,
        frozenset(planner.running),
        frozenset(planner.wanted_pods),
    )
