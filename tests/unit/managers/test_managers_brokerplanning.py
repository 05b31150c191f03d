"""What the broker controller does for a Configuration, from what exists (table tests).

Akri's own cases (reference §9 items 12 and 13) first, then the rules that differ on purpose.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

from managers import brokerobjects as objects
from managers import brokerplanning as planning

NOW = 1_700_000_000.0
POD_SPEC = {"containers": [{"name": "b", "image": "nginx"}]}
JOB_SPEC = {
    "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "j", "image": "x"}]}}
}


def iso(seconds_ago: float) -> str:
    when = datetime.datetime.fromtimestamp(NOW - seconds_ago, datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def configuration(generation: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "akri.sh/v0",
        "kind": "Configuration",
        "metadata": {"name": "config-a", "namespace": "ns", "uid": "cfg", "generation": generation},
        "spec": {"discoveryHandler": {"name": "debugEcho"}, "capacity": 5, **spec},
    }


PODS = configuration(brokerSpec={"brokerPodSpec": POD_SPEC})
JOBS = configuration(brokerSpec={"brokerJobSpec": JOB_SPEC})


def instance(
    name: str = "config-a-b494b6",
    nodes: tuple[str, ...] = ("node-a",),
    shared: bool = False,
    capacity: int = 5,
    **meta: Any,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"{name}-uid", **meta},
        "spec": {
            "configurationName": "config-a",
            "capacity": capacity,
            "shared": shared,
            "nodes": list(nodes),
            "brokerProperties": {},
        },
    }


def pod_of(
    config: dict[str, Any],
    inst: dict[str, Any],
    node: str,
    phase: str = "Running",
    started: float | None = 60.0,
    **meta: Any,
) -> dict[str, Any]:
    pod = objects.broker_pod(config, inst, node)
    pod["metadata"]["uid"] = f"{pod['metadata']['name']}-uid"
    pod["metadata"].update(meta)
    pod["status"] = {"phase": phase}
    if started is not None:
        pod["status"]["startTime"] = iso(started)
    return pod


def run(
    config: dict[str, Any] | None = PODS,
    instances: tuple[dict[str, Any], ...] = (),
    pods: tuple[dict[str, Any], ...] = (),
    jobs: tuple[dict[str, Any], ...] = (),
    services: tuple[dict[str, Any], ...] = (),
    hold: dict[str, float] | None = None,
) -> planning.Plan:
    return planning.plan(planning.World(config, instances, pods, jobs, services, NOW, hold or {}))


def summary(plan: planning.Plan) -> list[tuple[str, str, str]]:
    out = []
    for action in plan.actions:
        if isinstance(action, planning.Delete):
            out.append(("delete", action.kind, action.name))
        else:
            verb = "create" if isinstance(action, planning.Create) else "update"
            out.append((verb, action.kind, objects.name_of(action.body)))
    return out


# --- Akri's instance flow (instance_action.rs tests) ---------------------------------------


def test_local_instance_without_pods_gets_one() -> None:
    assert summary(run(instances=(instance(),))) == [("create", "pods", "config-a-b494b6-pod")]


def test_removed_instance_loses_its_running_pod() -> None:
    pod = pod_of(PODS, instance(), "node-a")
    assert summary(run(pods=(pod,))) == [("delete", "pods", "config-a-b494b6-pod")]


def test_shared_instance_pod_is_named_after_its_node() -> None:
    shared = instance("config-a-359973", shared=True)
    assert summary(run(instances=(shared,))) == [("create", "pods", "node-a-config-a-359973-pod")]


def test_shared_instance_moving_to_another_node_moves_its_broker() -> None:
    before = instance("config-a-359973", shared=True)
    after = instance("config-a-359973", nodes=("node-b",), shared=True)
    running = pod_of(PODS, before, "node-a")
    plan = run(instances=(after,), pods=(running,))
    assert summary(plan) == [
        ("delete", "pods", "node-a-config-a-359973-pod"),
        ("create", "pods", "node-b-config-a-359973-pod"),
    ]
    assert plan.actions[0].why == "node node-a left the Instance"


def test_two_nodes_of_a_shared_device_get_two_brokers() -> None:
    shared = instance("config-a-359973", nodes=("node-b", "node-a"), shared=True)
    assert sorted(summary(run(instances=(shared,)))) == [
        ("create", "pods", "node-a-config-a-359973-pod"),
        ("create", "pods", "node-b-config-a-359973-pod"),
    ]


# --- pod phases (pod_action.rs tests, start times relative to now) ---------------------------


@pytest.mark.parametrize(
    ("phase", "started", "expected", "ended"),
    [
        ("Running", 600, [], False),
        ("ContainerCreating", 600, [], False),
        ("PodInitializing", 600, [], False),
        ("Pending", 600, [("delete", "pods", "config-a-b494b6-pod")], False),
        ("Pending", 0, [], False),
        ("Pending", None, [], False),
        ("Failed", 600, [("delete", "pods", "config-a-b494b6-pod")], True),
        ("Succeeded", 0, [("delete", "pods", "config-a-b494b6-pod")], True),
        ("UnexpectedAdmissionError", 0, [("delete", "pods", "config-a-b494b6-pod")], True),
        ("Unknown", None, [("delete", "pods", "config-a-b494b6-pod")], True),
    ],
)
def test_pod_phases(
    phase: str, started: float | None, expected: list[tuple[str, str, str]], ended: bool
) -> None:
    inst = instance()
    plan = run(instances=(inst,), pods=(pod_of(PODS, inst, "node-a", phase, started),))
    assert summary(plan) == expected
    if expected:
        assert plan.actions[0].ended is ended


def test_pending_pod_is_looked_at_again_when_its_grace_ends() -> None:
    inst = instance()
    plan = run(instances=(inst,), pods=(pod_of(PODS, inst, "node-a", "Pending", 100),))
    assert plan.actions == ()
    assert plan.requeue_after == pytest.approx(200)


def test_running_pods_are_reported_so_their_back_off_ends() -> None:
    inst = instance()
    plan = run(instances=(inst,), pods=(pod_of(PODS, inst, "node-a"),))
    assert plan.running == {"config-a-b494b6-pod"}
    assert plan.wanted_pods == {"config-a-b494b6-pod"}


def test_a_held_pod_waits_for_its_back_off() -> None:
    plan = run(instances=(instance(),), hold={"config-a-b494b6-pod": NOW + 8})
    assert plan.actions == ()
    assert plan.requeue_after == pytest.approx(8)
    expired = run(instances=(instance(),), hold={"config-a-b494b6-pod": NOW - 1})
    assert summary(expired) == [("create", "pods", "config-a-b494b6-pod")]


def test_a_pod_being_deleted_is_waited_for() -> None:
    inst = instance()
    going = pod_of(PODS, inst, "node-a", deletionTimestamp=iso(1))
    assert run(instances=(inst,), pods=(going,)).actions == ()


# --- what recreates a broker --------------------------------------------------------------


def test_changed_broker_spec_recreates() -> None:
    inst = instance()
    old = copy.deepcopy(PODS)
    old["spec"]["brokerSpec"]["brokerPodSpec"]["containers"][0]["image"] = "nginx:old"
    plan = run(instances=(inst,), pods=(pod_of(old, inst, "node-a"),))
    assert summary(plan) == [("delete", "pods", "config-a-b494b6-pod")]
    assert "changed" in plan.actions[0].why


def test_changed_broker_properties_recreate() -> None:
    inst = instance()
    old = copy.deepcopy(inst)
    old["spec"]["brokerProperties"] = {"SITE": "old"}
    plan = run(instances=(inst,), pods=(pod_of(PODS, old, "node-a"),))
    assert summary(plan) == [("delete", "pods", "config-a-b494b6-pod")]


@pytest.mark.parametrize(
    "change",
    [
        {"capacity": 7},
        {"instanceServiceSpec": {"ports": [{"port": 1}]}},
        {"discoveryHandler": {"name": "debugEcho", "discoveryDetails": "descriptions: [z]"}},
    ],
)
def test_other_configuration_changes_leave_brokers_running(change: dict[str, Any]) -> None:
    inst = instance()
    running = pod_of(PODS, inst, "node-a")
    changed = copy.deepcopy(PODS)
    changed["spec"].update(change)
    changed["metadata"]["generation"] = 2
    assert [a for a in run(changed, (inst,), (running,)).actions if a.kind == "pods"] == []


def test_pods_without_a_hash_are_adopted() -> None:
    inst = instance()
    akris = pod_of(PODS, inst, "node-a")
    del akris["metadata"]["annotations"]
    assert run(instances=(inst,), pods=(akris,)).actions == ()


# --- capacity, ownership ------------------------------------------------------------------


def test_brokers_are_capped_at_capacity_keeping_the_running_ones() -> None:
    shared = instance("config-a-359973", nodes=("a", "b", "c"), shared=True, capacity=2)
    on_c = pod_of(PODS, shared, "c")
    assert summary(run(instances=(shared,), pods=(on_c,))) == [
        ("create", "pods", "a-config-a-359973-pod")
    ]
    lowered = instance("config-a-359973", nodes=("a", "b", "c"), shared=True, capacity=1)
    on_a = pod_of(PODS, shared, "a")
    plan = run(instances=(lowered,), pods=(on_c, on_a))
    assert summary(plan) == [("delete", "pods", "c-config-a-359973-pod")]
    assert "capacity" in plan.actions[0].why
    assert run(instances=(instance(capacity=0),)).actions == ()


def test_an_unshared_instance_gets_one_broker_whatever_its_nodes() -> None:
    odd = instance(nodes=("node-b", "node-a"))
    assert summary(run(instances=(odd,))) == [("create", "pods", "config-a-b494b6-pod")]


def test_pods_that_are_not_ours_are_never_touched() -> None:
    inst = instance()
    stranger = pod_of(PODS, inst, "node-a", phase="Failed")
    del stranger["metadata"]["ownerReferences"]
    other_owner = pod_of(PODS, inst, "node-z", phase="Failed")
    other_owner["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": True, "uid": "rs"}
    ]
    plan = run(config=None, instances=(), pods=(stranger, other_owner))
    assert plan.actions == ()
    # A stranger holding the broker's name: we still try to create (the apiserver says 409,
    # the controller reports NameTaken), never delete it.
    assert summary(run(instances=(inst,), pods=(stranger,))) == [
        ("create", "pods", "config-a-b494b6-pod")
    ]


def test_a_pod_of_an_earlier_instance_with_the_same_name_goes() -> None:
    inst = instance()
    stale = pod_of(PODS, inst, "node-a")
    stale["metadata"]["ownerReferences"][0]["uid"] = "an-older-uid"
    plan = run(instances=(inst,), pods=(stale,))
    # Created again once the old one is gone (its DELETED event queues the Configuration).
    assert summary(plan) == [("delete", "pods", "config-a-b494b6-pod")]


@pytest.mark.parametrize(
    "config",
    [
        None,
        configuration(),  # no broker any more
        {**PODS, "metadata": {**PODS["metadata"], "deletionTimestamp": "2024-01-01T00:00:00Z"}},
    ],
)
def test_everything_goes_without_a_live_configuration_with_a_broker(
    config: dict[str, Any] | None,
) -> None:
    inst = instance()
    pod = pod_of(PODS, inst, "node-a")
    assert summary(run(config, (inst,), (pod,))) == [("delete", "pods", "config-a-b494b6-pod")]


def test_an_instance_being_deleted_loses_its_broker() -> None:
    going = instance(deletionTimestamp="2024-01-01T00:00:00Z")
    pod = pod_of(PODS, instance(), "node-a")
    assert summary(run(instances=(going,), pods=(pod,))) == [
        ("delete", "pods", "config-a-b494b6-pod")
    ]


def test_one_instance_that_cannot_be_built_does_not_hold_up_the_others() -> None:
    bad = instance("config-a-" + "x" * 70)  # too long for the akri.sh/instance label
    good = instance("config-a-123456")
    plan = run(instances=(bad, good))
    assert summary(plan) == [("create", "pods", "config-a-123456-pod")]
    assert [p.instance for p in plan.problems] == [objects.name_of(bad)]


def test_a_malformed_broker_spec_is_a_problem_and_nothing_is_deleted() -> None:
    inst = instance()
    pod = pod_of(PODS, inst, "node-a")
    broken = configuration(brokerSpec={"brokerPodSpec": {"containers": "x"}})
    plan = run(broken, (inst,), (pod,))
    assert plan.actions == ()
    assert plan.problems[0].error.field == "spec.brokerSpec.brokerPodSpec.containers"


# --- jobs ------------------------------------------------------------------------------------


def job_of(config: dict[str, Any], inst: dict[str, Any], **meta: Any) -> dict[str, Any]:
    job = objects.broker_job(config, inst)
    job["metadata"]["uid"] = f"{job['metadata']['name']}-uid"
    job["metadata"].update(meta)
    return job


def test_one_job_per_instance() -> None:
    plan = run(JOBS, (instance(), instance("config-a-123456")))
    assert sorted(summary(plan)) == [
        ("create", "jobs", "config-a-123456-1-job"),
        ("create", "jobs", "config-a-b494b6-1-job"),
    ]


def test_a_job_is_kept_across_generations_until_its_spec_changes() -> None:
    inst = instance()
    done = job_of(JOBS, inst)
    done["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    newer = copy.deepcopy(JOBS)
    newer["metadata"]["generation"] = 2
    newer["spec"]["capacity"] = 9
    assert run(newer, (inst,), jobs=(done,)).actions == ()
    changed = copy.deepcopy(newer)
    changed["spec"]["brokerSpec"]["brokerJobSpec"]["parallelism"] = 3
    assert summary(run(changed, (inst,), jobs=(done,))) == [
        ("delete", "jobs", "config-a-b494b6-1-job"),
        ("create", "jobs", "config-a-b494b6-2-job"),
    ]


def test_a_job_being_deleted_under_the_desired_name_is_waited_for() -> None:
    inst = instance()
    changed = copy.deepcopy(JOBS)
    changed["spec"]["brokerSpec"]["brokerJobSpec"]["parallelism"] = 3
    going = job_of(JOBS, inst, deletionTimestamp=iso(1))
    assert run(changed, (inst,), jobs=(going,)).actions == ()


def test_jobs_of_gone_instances_and_switched_brokers_go() -> None:
    inst = instance()
    job = job_of(JOBS, inst)
    assert summary(run(JOBS, (), jobs=(job,))) == [("delete", "jobs", "config-a-b494b6-1-job")]
    assert summary(run(PODS, (inst,), jobs=(job,))) == [
        ("delete", "jobs", "config-a-b494b6-1-job"),
        ("create", "pods", "config-a-b494b6-pod"),
    ]


# --- services --------------------------------------------------------------------------------

SERVICES = configuration(
    brokerSpec={"brokerPodSpec": POD_SPEC},
    instanceServiceSpec={"ports": [{"port": 80}]},
    configurationServiceSpec={"ports": [{"port": 81}]},
)


def with_uid(obj: dict[str, Any] | None) -> dict[str, Any]:
    assert obj is not None
    obj["metadata"]["uid"] = f"{obj['metadata']['name']}-uid"
    return obj


def test_services_follow_instances() -> None:
    a, b = instance(), instance("config-a-123456")
    plan = run(SERVICES, (a, b))
    assert sorted(x for x in summary(plan) if x[1] == "services") == [
        ("create", "services", "config-a-123456-svc"),
        ("create", "services", "config-a-b494b6-svc"),
        ("create", "services", "config-a-svc"),
    ]
    svc_a = with_uid(objects.instance_service(SERVICES, a))
    svc_config = with_uid(objects.configuration_service(SERVICES))
    # The last Instance gone: both its Service and the Configuration's go.
    assert summary(run(SERVICES, (), services=(svc_a, svc_config))) == [
        ("delete", "services", "config-a-b494b6-svc"),
        ("delete", "services", "config-a-svc"),
    ]
    # No broker, no services (Akri created them only for running brokers).
    no_broker = configuration(instanceServiceSpec={"ports": [{"port": 80}]})
    assert run(no_broker, (a,)).actions == ()


def test_a_changed_service_spec_updates_in_place() -> None:
    a = instance()
    old = with_uid(objects.instance_service(SERVICES, a))
    old["metadata"]["resourceVersion"] = "7"
    old["spec"]["clusterIP"] = "10.96.0.10"
    changed = copy.deepcopy(SERVICES)
    changed["spec"]["instanceServiceSpec"] = {"ports": [{"port": 8080}]}
    config_svc = with_uid(objects.configuration_service(changed))
    pod = pod_of(changed, a, "node-a")
    plan = run(changed, (a,), (pod,), services=(old, config_svc))
    assert summary(plan) == [("update", "services", "config-a-b494b6-svc")]
    body = plan.actions[0].body
    assert body["spec"]["ports"] == [{"port": 8080}]
    assert body["spec"]["clusterIP"] == "10.96.0.10"
    assert body["metadata"]["resourceVersion"] == "7"


def test_services_of_an_earlier_configuration_incarnation_go() -> None:
    a = instance()
    old = with_uid(objects.configuration_service(SERVICES))
    old["metadata"]["ownerReferences"][0]["uid"] = "previous"
    plan = run(SERVICES, (a,), (pod_of(SERVICES, a, "node-a"),), services=(old,))
    # The name is still taken while it goes: the next pass (its DELETED event) creates it.
    assert summary(plan) == [
        ("delete", "services", "config-a-svc"),
        ("create", "services", "config-a-b494b6-svc"),
    ]
