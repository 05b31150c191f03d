"""``staticsethalts`` and the halting part of ``staticsetplanning.plan``: a node whose kubelet
is not seen back after its swap, or a failed worker, halts the whole YurtStaticSet until an
operator resumes it (the annotation removed) or changes the template."""

from __future__ import annotations

from typing import Any

import pytest

from managers import staticsethalts, staticsetplanning

UID = "yss-uid"
TEMPLATE = {
    "metadata": {"labels": {"k8s-app": "edgehub-hub"}},
    "spec": {"containers": [{"name": "hub", "image": "edgehub:2"}]},
}
LATEST = staticsetplanning.template_hash(TEMPLATE)
NOW = 1767225600.0  # 2026-01-01T00:00:00Z
ENDED = "2025-12-31T23:59:00Z"  # NOW - 60
T_ENDED = NOW - 60


def yss(annotations: dict[str, str] | None = None) -> staticsetplanning.Spec:
    return staticsetplanning.read_spec(
        {
            "metadata": {
                "name": "hub",
                "namespace": "kube-system",
                "uid": UID,
                "generation": 2,
                "annotations": annotations or {},
            },
            "spec": {
                "staticPodManifest": "edgehub-hub",
                "upgradeStrategy": {"type": "AdvancedRollingUpdate", "maxUnavailable": 1},
                "template": TEMPLATE,
            },
        }
    )


def node(name: str, ready: bool = True) -> dict[str, Any]:
    status = "True" if ready else "False"
    return {
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": status}]},
    }


def mirror(name: str, digest: str = "old") -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"hub-{name}",
            "annotations": {
                "kubernetes.io/config.mirror": "x",
                staticsetplanning.HASH_ANNOTATION: digest,
            },
        },
        "spec": {"nodeName": name},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def worker(name: str, phase: str, *, ended: str | None = ENDED) -> dict[str, Any]:
    annotations = {staticsetplanning.HASH_ANNOTATION: LATEST}
    status: dict[str, Any] = {"phase": phase}
    if ended is not None:
        status["containerStatuses"] = [
            {"state": {"terminated": {"exitCode": 0 if phase == "Succeeded" else 1,
                                      "finishedAt": ended}}}
        ]  # fmt: skip
    return {
        "metadata": {
            "name": staticsetplanning.worker_name("hub", name, LATEST),
            "uid": f"w-{name}",
            "annotations": annotations,
            "ownerReferences": [{"kind": "YurtStaticSet", "uid": UID, "name": "hub"}],
        },
        "spec": {"nodeName": name},
        "status": status,
    }


NODES = {n: node(n) for n in ("a", "b", "c")}


def plan(
    pods: list[dict[str, Any]],
    *,
    halt: staticsethalts.Halt | None = None,
    renewals: dict[str, float | None] | None = None,
    nodes: dict[str, dict[str, Any]] | None = None,
    seen: dict[str, float] | None = None,
    halted_by: frozenset[str] = frozenset(),
) -> staticsetplanning.Plan:
    facts = staticsetplanning.Facts(
        now=NOW,
        halt=halt,
        halted_by=halted_by,
        renewals=renewals or {},
        seen_ended=seen or {},
        ready_timeout=120.0,
    )
    return staticsetplanning.plan(yss(), (nodes or NODES).get, pods, facts)


def test_a_node_seen_back_is_done_and_the_next_one_starts() -> None:
    decided = plan(
        [mirror("a", LATEST), mirror("b"), worker("a", "Succeeded")], renewals={"a": T_ENDED + 5}
    )
    assert [w.node for w in decided.delete] == ["a"]
    assert decided.create == ("b",) and decided.halt is None and decided.verifying == ()


# (what, pods, renewals, nodes) -> the node is still awaited, its slot held
AWAITED = [
    ("no renewal since the swap", [mirror("a", LATEST)], {"a": T_ENDED - 1}, NODES),
    ("no Lease at all", [mirror("a", LATEST)], {"a": None}, NODES),
    ("the Node is not Ready", [mirror("a", LATEST)], {"a": T_ENDED + 5},
     {**NODES, "a": node("a", ready=False)}),
    ("kubelet has not posted the new mirror Pod", [mirror("a")], {"a": T_ENDED + 5}, NODES),
]  # fmt: skip


@pytest.mark.parametrize(
    ("pods", "renewals", "nodes"), [c[1:] for c in AWAITED], ids=[c[0] for c in AWAITED]
)
def test_a_node_not_seen_back_holds_its_slot_until_the_deadline(
    pods: list[dict[str, Any]], renewals: dict[str, float | None], nodes: dict[str, Any]
) -> None:
    decided = plan([*pods, mirror("b"), worker("a", "Succeeded")], renewals=renewals, nodes=nodes)
    assert decided.verifying == ("a",) and decided.create == () and decided.delete == ()
    assert decided.recheck == staticsethalts.RECHECK_SECONDS and decided.halt is None


def test_past_the_deadline_the_whole_yurtstaticset_halts() -> None:
    late = worker("a", "Succeeded", ended="2025-12-31T23:57:00Z")  # NOW - 180 > 120
    decided = plan([mirror("a", LATEST), mirror("b"), mirror("c"), late], renewals={"a": None})
    halt = decided.halt
    assert halt is not None and decided.halted == halt
    assert (halt.hash, halt.node, halt.reason) == (LATEST, "a", staticsethalts.NODE_NOT_READY)
    assert halt.worker == late["metadata"]["name"]
    assert "within 120 s" in halt.message and "Lease was not renewed" in halt.message
    assert decided.create == () and [w.node for w in decided.mark] == ["a"]
    assert decided.halted_by == {"w-a"}  # recorded with the halt
    assert decided.delete == ()  # kept: its log says what it saw


def test_a_worker_without_an_end_time_is_timed_from_when_it_was_first_seen() -> None:
    done = worker("a", "Succeeded", ended=None)
    name = done["metadata"]["name"]
    fresh = plan([mirror("a", LATEST), done], renewals={"a": None}, seen={name: NOW - 10})
    assert fresh.verifying == ("a",) and fresh.halt is None
    stale = plan([mirror("a", LATEST), done], renewals={"a": None}, seen={name: NOW - 500})
    assert stale.halt is not None and stale.halt.node == "a"


def test_a_recorded_halt_starts_nobody_and_marks_what_fails_meanwhile() -> None:
    halt = staticsethalts.Halt(hash=LATEST, node="a", reason="WorkerFailed", message="m")
    decided = plan(
        [mirror("a"), mirror("b"), mirror("c"), worker("a", "Failed"), worker("b", "Failed")],
        halt=halt,
        halted_by=frozenset({"w-a"}),
    )
    assert decided.create == () and decided.delete == () and decided.halt is None
    assert decided.halted == halt and [w.node for w in decided.mark] == ["b"]
    assert decided.halted_by == {"w-a", "w-b"}  # b recorded beside a
    assert decided.waiting == 3
    again = plan([mirror("a"), worker("a", "Failed")], halt=halt, halted_by=frozenset({"w-a"}))
    assert again.halted_by is None  # recorded already: nothing to write


def test_removing_the_annotation_resumes_deleting_the_marked_workers() -> None:
    decided = plan(
        [mirror("a"), mirror("b", LATEST), mirror("c"), worker("a", "Failed"),
         worker("b", "Succeeded")],
        halted_by=frozenset({"w-a", "w-b"}),
    )  # fmt: skip
    assert sorted(w.node for w in decided.delete) == ["a", "b"]
    assert sorted(w.node for w in decided.resumed) == ["a", "b"]
    assert decided.halted_by == frozenset()  # the record goes with them
    # a keeps its slot: it is tried again once its old worker (same name) is gone.
    assert decided.create == () and decided.halted is None


def test_a_halt_of_another_template_is_removed() -> None:
    halt = staticsethalts.Halt(hash="older", node="a", reason="NodeNotReady")
    decided = plan([mirror("a"), mirror("b")], halt=halt)
    assert decided.clear_halt and decided.halted is None and decided.create == ("a",)


def test_an_operators_pause_holds_every_template() -> None:
    pause = staticsethalts.read({staticsethalts.HALT_ANNOTATION: "maintenance window"})
    assert pause is not None and pause.hash == staticsethalts.ANY_HASH
    assert pause.message == "paused by an operator: maintenance window"
    decided = plan([mirror("a"), mirror("b")], halt=pause)
    assert decided.create == () and not decided.clear_halt and decided.halted == pause


def test_several_failures_halt_once_naming_the_first() -> None:
    decided = plan(
        [mirror("a"), mirror("b"), worker("a", "Failed"), worker("b", "Failed")],
        nodes=NODES,
    )
    assert decided.halt is not None and decided.halt.node == "a"
    assert decided.halt.message.endswith("(also: b)")
    assert [w.node for w in decided.mark] == ["a", "b"]


def test_the_workers_that_halted_it_are_recorded_on_the_yurtstaticset() -> None:
    obj = staticsethalts.with_halted_by({"metadata": {"annotations": {"x": "y"}}},
                                        frozenset({"u2", "u1"}))  # fmt: skip
    annotations = obj["metadata"]["annotations"]
    assert annotations == {"x": "y", staticsethalts.HALTED_BY_ANNOTATION: "u1,u2"}
    assert staticsethalts.halted_by(annotations) == {"u1", "u2"}
    cleared = staticsethalts.with_halted_by(obj, frozenset())
    assert cleared["metadata"]["annotations"] == {"x": "y"}
    many = {staticsethalts.HALTED_BY_ANNOTATION: ",".join(f"u{i}" for i in range(500))}
    assert len(staticsethalts.halted_by(many)) == staticsethalts.MAX_HALTED_BY


def test_the_halt_annotation_round_trips_and_is_bounded() -> None:
    halt = staticsethalts.Halt(
        hash=LATEST, node="a", worker="w", reason="NodeNotReady", message="m" * 5000, since="s"
    )
    obj = staticsethalts.with_halt({"metadata": {"annotations": {"x": "y"}}}, halt)
    read = staticsethalts.read(obj["metadata"]["annotations"])
    assert read is not None and read.node == "a" and len(read.message) == 1024
    assert obj["metadata"]["annotations"]["x"] == "y"
    cleared = staticsethalts.with_halt(obj, None)
    assert cleared["metadata"]["annotations"] == {"x": "y"}
    assert staticsethalts.read(cleared["metadata"]["annotations"]) is None
    assert staticsethalts.read(None) is None


# (previous conditions, halt) -> written conditions (None: nothing to write)
HALT = staticsethalts.Halt(hash="h", node="n1", reason="NodeNotReady", message="gone")
CONDITIONS = [
    ("never halted: nothing written", [], None, None),
    ("halted: True, naming the node", [], HALT,
     [{"type": "Halted", "status": "True", "reason": "NodeNotReady", "message": "node n1: gone",
       "lastTransitionTime": "T"}]),
    ("the same halt again: nothing", [{"type": "Halted", "status": "True", "reason": "NodeNotReady",
                                       "message": "node n1: gone"}], HALT, None),
    ("resumed: False", [{"type": "Other"}, {"type": "Halted", "status": "True"}], None,
     [{"type": "Other"}, {"type": "Halted", "status": "False", "reason": "Resumed", "message": "",
                          "lastTransitionTime": "T"}]),
    ("False already: nothing", [{"type": "Halted", "status": "False"}], None, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("previous", "halt", "want"), [c[1:] for c in CONDITIONS], ids=[c[0] for c in CONDITIONS]
)
def test_the_halted_condition(previous: Any, halt: Any, want: Any) -> None:
    assert staticsethalts.condition(halt, previous, "T") == want


def test_a_failed_workers_message_is_its_last_line_or_its_exit_code() -> None:
    def pod(terminated: dict[str, Any]) -> dict[str, Any]:
        return {"status": {"containerStatuses": [{"state": {"terminated": terminated}}]}}

    assert staticsethalts.failure_message(pod({"message": "a\nb\n"})) == "b"
    assert staticsethalts.failure_message(pod({"reason": "Error", "exitCode": 3})) == (
        "Error, exit code 3"
    )
    assert staticsethalts.failure_message({"status": {}}) == "no termination reported"
    assert staticsethalts.finished_at(pod({"finishedAt": ENDED})) == T_ENDED
    assert staticsethalts.finished_at({}) is None
