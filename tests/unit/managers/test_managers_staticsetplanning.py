"""``staticsetplanning``: the YurtStaticSet decisions as tables (spec, nodes, mirror Pods and
workers -> workers to create and delete, PodNeedUpgrade conditions, status)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from managers import registry, staticsetplanning

UID = "yss-uid"
TEMPLATE = {
    "metadata": {"labels": {"k8s-app": "edgehub-hub"}},
    "spec": {"containers": [{"name": "hub", "image": "edgehub:2"}]},
}


def yss(strategy: str = "AdvancedRollingUpdate", max_unavailable: Any = 1, **extra: Any) -> Any:
    upgrade: dict[str, Any] = {"type": strategy}
    if max_unavailable is not None:
        upgrade["maxUnavailable"] = max_unavailable
    return {
        "metadata": {"name": "hub", "namespace": "kube-system", "uid": UID, "generation": 3},
        "spec": {
            "staticPodManifest": "edgehub-hub",
            "upgradeStrategy": upgrade,
            "template": TEMPLATE,
            **extra,
        },
    }


SPEC = staticsetplanning.read_spec(yss())
LATEST = staticsetplanning.template_hash(TEMPLATE)


def node(name: str, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def mirror(
    node_name: str, digest: str | None = "old", ready: bool = True, need: str = ""
) -> dict[str, Any]:
    annotations = {"kubernetes.io/config.mirror": "x"}
    if digest is not None:
        annotations[staticsetplanning.HASH_ANNOTATION] = digest
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if need:
        conditions.append({"type": "PodNeedUpgrade", "status": need})
    return {
        "metadata": {
            "name": f"hub-{node_name}",
            "namespace": "kube-system",
            "annotations": annotations,
        },
        "spec": {"nodeName": node_name, "containers": [{"name": "hub", "image": "edgehub:1"}]},
        "status": {"conditions": conditions},
    }


def worker(node_name: str, phase: str, digest: str = LATEST) -> dict[str, Any]:
    return {
        "metadata": {
            "name": staticsetplanning.worker_name("hub", node_name, digest),
            "namespace": "kube-system",
            "uid": f"w-{node_name}",
            "annotations": {staticsetplanning.HASH_ANNOTATION: digest},
            "ownerReferences": [{"kind": "YurtStaticSet", "uid": UID, "name": "hub"}],
        },
        "spec": {"nodeName": node_name},
        "status": {"phase": phase},
    }


def nodes_of(*items: dict[str, Any]) -> Any:
    table = {n["metadata"]["name"]: n for n in items}
    return table.get


# name, spec, nodes, pods -> created, deleted, status (total, ready, upgraded)
ROLLING = [
    (
        "one at a time with maxUnavailable 1, in node order",
        yss(),
        [node("a"), node("b"), node("c")],
        [mirror("a"), mirror("b"), mirror("c")],
        ("a",),
        (),
        (3, 3, 0),
    ),
    (
        "a running worker holds the only slot",
        yss(),
        [node("a"), node("b")],
        [mirror("a"), mirror("b"), worker("a", "Running")],
        (),
        (),
        (2, 2, 0),
    ),
    (
        "a NotReady node takes no slot and is skipped",
        yss(),
        [node("a", ready=False), node("b"), node("c")],
        [mirror("a", ready=False), mirror("b"), mirror("c")],
        ("b",),
        (),
        (3, 2, 0),
    ),
    (
        "a worker stuck on a node that went NotReady holds no slot",
        yss(),
        [node("a", ready=False), node("b")],
        [mirror("a", ready=False), mirror("b"), worker("a", "Pending")],
        ("b",),
        (),
        (2, 1, 0),
    ),
    (
        "a Succeeded worker holds its slot until its node's kubelet is seen back",
        yss(),
        [node("a"), node("b")],
        [mirror("a", LATEST), mirror("b"), worker("a", "Succeeded")],
        (),
        (),
        (2, 2, 1),
    ),
    (
        "a worker of an older template is deleted and holds its slot until gone",
        yss(),
        [node("a"), node("b")],
        [mirror("a"), mirror("b"), worker("a", "Running", digest="old")],
        (),
        ("a",),
        (2, 2, 0),
    ),
    (
        "a percentage is of the nodes, rounded up",
        yss(max_unavailable="50%"),
        [node("a"), node("b"), node("c")],
        [mirror("a"), mirror("b"), mirror("c")],
        ("a", "b"),
        (),
        (3, 3, 0),
    ),
    (
        "maxUnavailable absent means one",
        yss(max_unavailable=None),
        [node("a"), node("b")],
        [mirror("a"), mirror("b")],
        ("a",),
        (),
        (2, 2, 0),
    ),
    (
        "nothing to do when every node runs the latest template",
        yss(),
        [node("a"), node("b")],
        [mirror("a", LATEST), mirror("b", LATEST, ready=False)],
        (),
        (),
        (2, 1, 2),
    ),
    (
        "a mirror Pod without a hash that carries the template is upgraded already",
        yss(),
        [node("a")],
        [
            {
                **mirror("a", None),
                "metadata": {
                    **mirror("a", None)["metadata"],
                    "labels": {"k8s-app": "edgehub-hub"},
                },
                "spec": {"nodeName": "a", **TEMPLATE["spec"]},
            }
        ],
        (),
        (),
        (1, 1, 1),
    ),
    (
        "a mirror Pod without a hash and another spec needs the upgrade",
        yss(),
        [node("a")],
        [mirror("a", None)],
        ("a",),
        (),
        (1, 1, 0),
    ),
    (
        "a Pod named like a mirror Pod but not one is not counted",
        yss(),
        [node("a")],
        [{**mirror("a"), "metadata": {"name": "hub-a", "namespace": "kube-system"}}],
        (),
        (),
        (0, 0, 0),
    ),
    (
        "a Node that does not exist is not Ready",
        yss(),
        [],
        [mirror("gone")],
        (),
        (),
        (1, 1, 0),
    ),
]


@pytest.mark.parametrize(
    ("spec", "nodes", "pods", "created", "deleted", "status"),
    [case[1:] for case in ROLLING],
    ids=[case[0] for case in ROLLING],
)
def test_advanced_rolling_update(
    spec: Any, nodes: Any, pods: Any, created: Any, deleted: Any, status: Any
) -> None:
    read = staticsetplanning.read_spec(spec)
    assert read.problems == ()
    plan = staticsetplanning.plan(read, nodes_of(*nodes), pods)
    assert plan.create == created
    assert tuple(w.node for w in plan.delete) == deleted
    assert plan.status == {
        "totalNumber": status[0],
        "readyNumber": status[1],
        "upgradedNumber": status[2],
        "observedGeneration": 3,
    }
    assert plan.conditions == ()


def test_a_failed_worker_halts_the_rollout_and_is_kept() -> None:
    failed = worker("a", "Failed")
    failed["status"]["containerStatuses"] = [
        {"state": {"terminated": {"exitCode": 1, "message": "x\nerror: not ready within 2 s"}}}
    ]
    plan = staticsetplanning.plan(
        SPEC,
        nodes_of(node("a"), node("b")),
        [mirror("a"), mirror("b"), failed],
        staticsetplanning.Facts(now=NOW),
    )
    assert plan.create == () and plan.delete == ()
    assert [w.node for w in plan.failed] == ["a"] and [w.node for w in plan.mark] == ["a"]
    assert plan.halt is not None and plan.halt == plan.halted
    assert (plan.halt.hash, plan.halt.node, plan.halt.reason) == (LATEST, "a", "WorkerFailed")
    assert plan.halt.message == "error: not ready within 2 s"
    assert plan.halt.since == "2026-01-01T00:00:05Z"
    assert plan.waiting == 2


def test_a_failed_worker_of_an_older_template_is_deleted() -> None:
    plan = staticsetplanning.plan(
        SPEC, nodes_of(node("a")), [mirror("a"), worker("a", "Failed", digest="old")]
    )
    assert [w.node for w in plan.delete] == ["a"] and plan.failed == ()


def test_a_worker_name_over_253_characters_is_reported_not_created() -> None:
    long = "n" * 240
    plan = staticsetplanning.plan(
        SPEC, nodes_of(node(long), node("b")), [mirror(long), mirror("b")]
    )
    assert plan.too_long == (long,) and plan.create == ("b",)


def test_workers_of_another_yss_are_not_ours() -> None:
    other = worker("a", "Running")
    other["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    plan = staticsetplanning.plan(SPEC, nodes_of(node("a")), [mirror("a"), other])
    assert plan.create == ("a",)


# OTA: (mirror pods) -> conditions written
OTA = [
    (
        "needs upgrade -> True, upgraded -> False",
        [mirror("a"), mirror("b", LATEST)],
        (("hub-a", "True"), ("hub-b", "False")),
    ),
    ("already marked: nothing written", [mirror("a", need="True")], ()),
    (
        "upgraded, still marked True: back to False",
        [mirror("a", LATEST, need="True")],
        (("hub-a", "False"),),
    ),
    ("NotReady nodes are marked too", [mirror("c")], (("hub-c", "True"),)),
]


@pytest.mark.parametrize(("pods", "conditions"), [c[1:] for c in OTA], ids=[c[0] for c in OTA])
def test_ota_marks_pods_upgradable(pods: Any, conditions: Any) -> None:
    spec = staticsetplanning.read_spec(yss(strategy="ota"))
    assert spec.strategy == "OTA" and spec.problems == ()
    plan = staticsetplanning.plan(spec, nodes_of(node("a"), node("b"), node("c", False)), pods)
    assert plan.conditions == conditions
    assert plan.create == ()


PROBLEMS = [
    ("no manifest", yss(staticPodManifest=""), "spec.staticPodManifest"),
    ("a path", yss(staticPodManifest="../etc/passwd"), "spec.staticPodManifest"),
    ("a hidden file", yss(staticPodManifest=".x"), "spec.staticPodManifest"),
    ("unknown strategy", yss(strategy="Recreate"), "spec.upgradeStrategy.type"),
    ("negative", yss(max_unavailable=-1), "spec.upgradeStrategy.maxUnavailable"),
    ("not a percentage", yss(max_unavailable="half"), "spec.upgradeStrategy.maxUnavailable"),
    ("a boolean", yss(max_unavailable=True), "spec.upgradeStrategy.maxUnavailable"),
    ("no template", yss(template=None), "spec.template"),
]


@pytest.mark.parametrize(("obj", "field"), [c[1:] for c in PROBLEMS], ids=[c[0] for c in PROBLEMS])
def test_problems_name_the_field(obj: Any, field: str) -> None:
    problems = staticsetplanning.read_spec(obj).problems
    assert len(problems) == 1 and problems[0].startswith(field + ":")


def test_hash_is_stable_and_follows_the_template() -> None:
    same = {
        "spec": dict(reversed(list(TEMPLATE["spec"].items()))),
        "metadata": TEMPLATE["metadata"],
    }
    assert staticsetplanning.template_hash(same) == LATEST
    changed = {**TEMPLATE, "spec": {"containers": [{"name": "hub", "image": "edgehub:3"}]}}
    assert staticsetplanning.template_hash(changed) != LATEST
    assert set(LATEST) <= set("bcdfghjklmnpqrstvwxz2456789")


def test_manifest_and_configmap_carry_the_hash() -> None:
    cm = staticsetplanning.desired_configmap(SPEC, LATEST)
    assert cm["metadata"]["name"] == "yurt-static-set-hub"
    assert cm["metadata"]["annotations"] == {staticsetplanning.HASH_ANNOTATION: LATEST}
    assert cm["metadata"]["ownerReferences"][0]["uid"] == UID
    pod = yaml.safe_load(cm["data"]["edgehub-hub"])
    assert pod["kind"] == "Pod" and pod["spec"] == TEMPLATE["spec"]
    assert pod["metadata"]["annotations"] == {staticsetplanning.HASH_ANNOTATION: LATEST}
    assert pod["metadata"]["labels"] == {"k8s-app": "edgehub-hub"}
    # Up to date: nothing to write; another hash: updated, foreign annotations kept.
    assert staticsetplanning.configmap_update(cm, cm) is None
    stale = {**cm, "metadata": {**cm["metadata"], "annotations": {"x": "y"}}, "data": {}}
    updated = staticsetplanning.configmap_update(stale, cm)
    assert updated is not None and updated["data"] == cm["data"]
    assert updated["metadata"]["annotations"] == {
        "x": "y",
        staticsetplanning.HASH_ANNOTATION: LATEST,
    }


def test_worker_pod_runs_static_pod_upgrade_on_its_node() -> None:
    template = staticsetplanning.WorkerTemplate(image="mirror/edgehub:9", timeout=30)
    pod = staticsetplanning.worker_pod(SPEC, "edge-1", LATEST, template)
    assert pod["metadata"]["name"] == f"yss-upgrade-worker-hub-edge-1-{LATEST}"
    assert pod["metadata"]["annotations"] == {staticsetplanning.HASH_ANNOTATION: LATEST}
    spec = pod["spec"]
    assert spec["nodeName"] == "edge-1" and spec["restartPolicy"] == "Never"
    assert spec["hostNetwork"] is True and spec["automountServiceAccountToken"] is False
    container = spec["containers"][0]
    assert container["image"] == "mirror/edgehub:9"
    assert container["command"] == [
        "edgehub",
        "static-pod-upgrade",
        "--name=hub-edge-1",
        "--namespace=kube-system",
        "--manifest=edgehub-hub",
        f"--hash={LATEST}",
        "--mode=auto",
        "--static-pod-path=/etc/kubernetes/manifests",
        "--configmap-dir=/data",
        "--timeout=30s",
    ]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["hostpath"]["hostPath"]["path"] == "/etc/kubernetes/manifests"
    assert volumes["configmap"]["configMap"]["name"] == "yurt-static-set-hub"


LEASES = [
    ("absent", None, False),
    (
        "no holder",
        {"spec": {"renewTime": "2026-01-01T00:00:00Z", "leaseDurationSeconds": 15}},
        False,
    ),
    (
        "renewed within its duration",
        {
            "spec": {
                "holderIdentity": "ym",
                "renewTime": "2026-01-01T00:00:00.000000Z",
                "leaseDurationSeconds": 15,
            }
        },
        True,
    ),
    (
        "expired",
        {
            "spec": {
                "holderIdentity": "ym",
                "renewTime": "2025-12-31T23:59:00Z",
                "leaseDurationSeconds": 15,
            }
        },
        False,
    ),
    ("held, no times", {"spec": {"holderIdentity": "ym"}}, True),
]
NOW = 1767225605.0  # 2026-01-01T00:00:05Z


@pytest.mark.parametrize(("lease", "active"), [c[1:] for c in LEASES], ids=[c[0] for c in LEASES])
def test_yurt_manager_lease(lease: Any, active: bool) -> None:
    assert staticsetplanning.lease_active(lease, NOW) is active


OWNER = [
    ("edgehub runs it", "*", "edgehub", True),
    ("yurt-manager: left out of *", "*", "yurt-manager", False),
]


@pytest.mark.parametrize(
    ("spec", "owner", "runs"), [c[1:] for c in OWNER], ids=[c[0] for c in OWNER]
)
def test_owner_switch_selects_the_controller(spec: str, owner: str, runs: bool) -> None:
    chosen = registry.for_owner(registry.select(spec), spec, owner)
    assert ("yurtstaticset" in chosen) is runs
    assert "csrapprover" in chosen


def test_owner_switch_refuses_a_contradiction() -> None:
    with pytest.raises(registry.UnknownController, match="only one controller may own"):
        registry.for_owner(registry.select("yurtstaticset"), "yurtstaticset", "yurt-manager")
    with pytest.raises(registry.UnknownController, match="must be one of"):
        registry.for_owner(registry.select("*"), "*", "both")
