"""The toleration rules as tables: what a pod on an (un)autonomous node gets, what is left alone,
and that every update is one the apiserver accepts (only tolerationSeconds change, tolerations
are only added)."""

from __future__ import annotations

from typing import Any

import pytest

from managers import tolerating as t
from nodeautonomy import marking as m

NR, UR = t.NOT_READY, t.UNREACHABLE
DEFAULTS = t.Defaults()
FOREVER = m.Autonomous(None, m.DURATION_ANNOTATION)
HOUR = m.Autonomous(3600, m.DURATION_ANNOTATION)
LEGACY = m.Autonomous(None, m.LEGACY_ANNOTATION)
BOTH = f"{NR},{UR}"


def tol(key: str, seconds: int | None = 300, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": "Exists", "effect": "NoExecute"}
    if seconds is not None:
        out["tolerationSeconds"] = seconds
    out.update(extra)
    return out


DEFAULT_TOLS = [tol(NR), tol(UR)]
OWN_NOSCHEDULE = {"key": "dedicated", "operator": "Equal", "value": "edge", "effect": "NoSchedule"}


def pod(
    tolerations: list[dict[str, Any]] | None = None,
    *,
    managed: str | None = None,
    node: str = "edge-1",
    phase: str = "Running",
    **meta: Any,
) -> dict[str, Any]:
    annotations = dict(meta.pop("annotations", {}))
    if managed is not None:
        annotations[t.MANAGED_ANNOTATION] = managed
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if node:
        spec["nodeName"] = node
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "resourceVersion": "7",
            "uid": "u1",
            "annotations": annotations,
            **meta,
        },
        "spec": spec,
        "status": {"phase": phase},
    }


# (pod, node marking) -> (new tolerations, managed keys) or None (left as it is)
CASES: list[tuple[str, dict[str, Any], m.Marking | None, tuple[list[Any], str] | None]] = [
    (
        "defaults extended forever",
        pod(DEFAULT_TOLS),
        FOREVER,
        ([tol(NR, None), tol(UR, None)], BOTH),
    ),
    (
        "legacy annotation: forever",
        pod(DEFAULT_TOLS),
        LEGACY,
        ([tol(NR, None), tol(UR, None)], BOTH),
    ),
    (
        "defaults set to the duration",
        pod(DEFAULT_TOLS),
        HOUR,
        ([tol(NR, 3600), tol(UR, 3600)], BOTH),
    ),
    (
        "other tolerations kept in place",
        pod([OWN_NOSCHEDULE, *DEFAULT_TOLS]),
        HOUR,
        ([OWN_NOSCHEDULE, tol(NR, 3600), tol(UR, 3600)], BOTH),
    ),
    ("already extended: nothing", pod([tol(NR, None), tol(UR, None)], managed=BOTH), FOREVER, None),
    (
        "duration changed",
        pod([tol(NR, None), tol(UR, None)], managed=BOTH),
        HOUR,
        ([tol(NR, 3600), tol(UR, 3600)], BOTH),
    ),
    (
        "duration shortened",
        pod([tol(NR, 3600), tol(UR, 3600)], managed=BOTH),
        m.Autonomous(600, m.DURATION_ANNOTATION),
        ([tol(NR, 600), tol(UR, 600)], BOTH),
    ),
    (
        "autonomy off: restored",
        pod([tol(NR, None), tol(UR, None)], managed=BOTH),
        m.UNMARKED,
        (DEFAULT_TOLS, ""),
    ),
    (
        "invalid duration: restored",
        pod([tol(NR, 3600), tol(UR, 3600)], managed=BOTH),
        m.Invalid("1d", "x"),
        (DEFAULT_TOLS, ""),
    ),
    (
        "cloud node: restored",
        pod([tol(NR, None), tol(UR, None)], managed=BOTH),
        m.CLOUD_NODE,
        (DEFAULT_TOLS, ""),
    ),
    ("not autonomous, defaults: nothing", pod(DEFAULT_TOLS), m.UNMARKED, None),
    ("not autonomous, no tolerations: nothing", pod([]), m.UNMARKED, None),
    ("no default tolerations: added", pod([]), FOREVER, ([tol(NR, None), tol(UR, None)], BOTH)),
    ("no tolerations field: added", pod(None), HOUR, ([tol(NR, 3600), tol(UR, 3600)], BOTH)),
    (
        "added ones restored to the default (cannot be removed)",
        pod([tol(NR, None), tol(UR, None)], managed=BOTH),
        m.UNMARKED,
        (DEFAULT_TOLS, ""),
    ),
    # The pod's own say, per key.
    (
        "own unreachable seconds kept",
        pod([tol(NR), tol(UR, 60)]),
        FOREVER,
        ([tol(NR, None), tol(UR, 60)], NR),
    ),
    ("own forever kept", pod([tol(NR), tol(UR, None)]), HOUR, ([tol(NR, 3600), tol(UR, None)], NR)),
    (
        "own 300 with a value field is not the default shape",
        pod(
            [
                tol(NR),
                {
                    "key": UR,
                    "operator": "Equal",
                    "value": "",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ]
        ),
        FOREVER,
        (
            [
                tol(NR, None),
                {
                    "key": UR,
                    "operator": "Equal",
                    "value": "",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            NR,
        ),
    ),
    (
        "own toleration without effect covers the key",
        pod([tol(NR), {"key": UR, "operator": "Exists"}]),
        FOREVER,
        ([tol(NR, None), {"key": UR, "operator": "Exists"}], NR),
    ),
    ("tolerate-everything: nothing", pod([{"operator": "Exists"}]), FOREVER, None),
    (
        "tolerate every NoExecute for 10 s: nothing",
        pod([{"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}]),
        FOREVER,
        None,
    ),
    (
        "two tolerations for a key: the pod's own",
        pod([tol(NR), tol(UR), tol(UR, 600)]),
        FOREVER,
        ([tol(NR, None), tol(UR), tol(UR, 600)], NR),
    ),
    (
        "NoSchedule toleration of the key does not cover it",
        pod([tol(NR), {"key": UR, "operator": "Exists", "effect": "NoSchedule"}, tol(UR)]),
        FOREVER,
        (
            [
                tol(NR, None),
                {"key": UR, "operator": "Exists", "effect": "NoSchedule"},
                tol(UR, None),
            ],
            BOTH,
        ),
    ),
    # The record: what the manager changed stays its own, and only that.
    (
        "managed key restored, own key untouched",
        pod([tol(NR, None), tol(UR, 60)], managed=NR),
        m.UNMARKED,
        ([tol(NR), tol(UR, 60)], ""),
    ),
    (
        "record of a key the pod now tolerates itself is dropped",
        pod([tol(NR, None), tol(UR), tol(UR, 600)], managed=BOTH),
        FOREVER,
        ([tol(NR, None), tol(UR), tol(UR, 600)], NR),
    ),
    (
        "unknown keys in the record are ignored",
        pod(DEFAULT_TOLS, managed="x,node.kubernetes.io/not-ready"),
        m.UNMARKED,
        (DEFAULT_TOLS, ""),
    ),
    (
        "managed toleration changed by someone: set again",
        pod([tol(NR, 5), tol(UR, 5)], managed=BOTH),
        FOREVER,
        ([tol(NR, None), tol(UR, None)], BOTH),
    ),
    (
        "stale record, defaults: only the record goes",
        pod(DEFAULT_TOLS, managed=BOTH),
        m.UNMARKED,
        (DEFAULT_TOLS, ""),
    ),
]


@pytest.mark.parametrize(
    ("pod_", "node", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_decide(
    pod_: dict[str, Any], node: m.Marking | None, expected: tuple[list[Any], str] | None
) -> None:
    decision = t.decide(pod_, node, DEFAULTS)
    if expected is None:
        assert isinstance(decision, t.Leave), decision
        return
    assert isinstance(decision, t.Update), decision
    tolerations, managed = expected
    assert decision.tolerations == tolerations
    assert t.format_managed(decision.managed) == managed
    after = t.apply(pod_, decision)
    assert_valid_pod_update(pod_, after)
    # Idempotent: the result is up to date.
    assert t.decide(after, node, DEFAULTS) == t.UP_TO_DATE


def assert_valid_pod_update(old: dict[str, Any], new: dict[str, Any]) -> None:
    """kube-apiserver's validateOnlyAddedTolerations: every old toleration is still there with
    only its tolerationSeconds possibly changed; and nothing else but annotations changed."""
    new_tols = new["spec"].get("tolerations") or []
    for before in old["spec"].get("tolerations") or []:
        shape = {k: v for k, v in before.items() if k != "tolerationSeconds"}
        assert any(
            {k: v for k, v in n.items() if k != "tolerationSeconds"} == shape for n in new_tols
        ), before
    for toleration in new_tols:
        if "tolerationSeconds" in toleration:
            assert toleration.get("effect") == "NoExecute"
    rest_old = {**old, "spec": {**old["spec"], "tolerations": None}}
    rest_new = {**new, "spec": {**new["spec"], "tolerations": None}}
    rest_old["metadata"] = {**old["metadata"], "annotations": None}
    rest_new["metadata"] = {**new["metadata"], "annotations": None}
    assert rest_old == rest_new
    assert new["metadata"]["resourceVersion"] == old["metadata"]["resourceVersion"]


@pytest.mark.parametrize(
    ("pod_", "reason"),
    [
        (pod(DEFAULT_TOLS, node=""), "not bound"),
        (pod(DEFAULT_TOLS, deletionTimestamp="2024-01-01T00:00:00Z"), "terminating"),
        (pod(DEFAULT_TOLS, phase="Succeeded"), "finished"),
        (pod(DEFAULT_TOLS, phase="Failed"), "finished"),
        (
            pod(
                [tol(NR, None), tol(UR, None)],
                ownerReferences=[
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": "ds",
                        "uid": "d",
                        "controller": True,
                    }
                ],
            ),
            "DaemonSet pod",
        ),
        (pod(DEFAULT_TOLS, annotations={t.MIRROR_ANNOTATION: "abc"}), "mirror pod"),
    ],
)
def test_pods_that_are_not_the_managers_business(pod_: dict[str, Any], reason: str) -> None:
    for node in (FOREVER, m.UNMARKED):
        assert t.decide(pod_, node, DEFAULTS) == t.Leave(reason)


def test_a_replicaset_pod_is_managed_and_a_non_controller_daemonset_ref_is_not_enough() -> None:
    owned = pod(
        DEFAULT_TOLS,
        ownerReferences=[
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "rs",
                "uid": "r",
                "controller": True,
            },
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "d"},
        ],
    )
    assert isinstance(t.decide(owned, FOREVER, DEFAULTS), t.Update)


def test_a_pod_of_a_deleted_node_is_left_to_the_pod_gc() -> None:
    managed = pod([tol(NR, None), tol(UR, None)], managed=BOTH)
    assert t.decide(managed, None, DEFAULTS) == t.Leave("node not found")


def test_the_cluster_default_decides_what_is_a_default_toleration() -> None:
    short = t.Defaults(not_ready=30, unreachable=40)
    defaults = [tol(NR, 30), tol(UR, 40)]
    update = t.decide(pod(defaults), FOREVER, short)
    assert isinstance(update, t.Update)
    assert update.tolerations == [tol(NR, None), tol(UR, None)]
    restored = t.decide(t.apply(pod(defaults), update), m.UNMARKED, short)
    assert isinstance(restored, t.Update)
    assert restored.tolerations == defaults
    # With the plugin's 300 s, a pod admitted under a 30 s default looks like its own choice.
    assert t.decide(pod(defaults), FOREVER, DEFAULTS) == t.UP_TO_DATE


def test_apply_records_and_clears_the_managed_keys_keeping_other_annotations() -> None:
    before = pod(DEFAULT_TOLS, annotations={"keep": "me"})
    update = t.decide(before, FOREVER, DEFAULTS)
    assert isinstance(update, t.Update)
    after = t.apply(before, update)
    assert after["metadata"]["annotations"] == {"keep": "me", t.MANAGED_ANNOTATION: BOTH}
    assert before["spec"]["tolerations"] == DEFAULT_TOLS  # the input is not mutated
    restore = t.decide(after, m.UNMARKED, DEFAULTS)
    assert isinstance(restore, t.Update)
    assert t.apply(after, restore)["metadata"]["annotations"] == {"keep": "me"}


def test_describe_names_each_change() -> None:
    update = t.decide(pod([tol(NR), tol(UR, 60)]), HOUR, DEFAULTS)
    assert isinstance(update, t.Update)
    assert t.describe(update) == f"{NR}=3600s"
    update = t.decide(pod(DEFAULT_TOLS), FOREVER, DEFAULTS)
    assert isinstance(update, t.Update)
    assert t.describe(update) == f"{NR}=forever, {UR}=forever"


@pytest.mark.parametrize(
    ("toleration", "key", "covered"),
    [
        (tol(UR), UR, True),
        ({"key": UR, "operator": "Exists"}, UR, True),
        ({"operator": "Exists"}, UR, True),
        ({"operator": "Exists", "effect": "NoExecute"}, NR, True),
        ({"operator": "Exists", "effect": "NoSchedule"}, NR, False),
        ({"key": UR, "operator": "Exists", "effect": "NoSchedule"}, UR, False),
        (tol(NR), UR, False),
        ({"key": "other", "operator": "Exists"}, UR, False),
    ],
)
def test_covers_as_default_toleration_seconds_counts(
    toleration: dict[str, Any], key: str, covered: bool
) -> None:
    assert t.covers(toleration, key) is covered


def test_negative_defaults_are_refused() -> None:
    with pytest.raises(ValueError):
        t.Defaults(not_ready=-1)
