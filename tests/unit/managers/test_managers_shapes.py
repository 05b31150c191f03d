"""The manager's informers keep what its controllers read, and no more: every pure read of a
Pod or a Node gives the same answer on the trimmed object as on the whole one, over real
objects (captured from kube-apiserver, tests/data/kubeproto) and their variants; and the
autonomy controller's merge patch, sent from a trimmed pod, changes the whole pod exactly as
its former PUT of the whole pod did."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from kubecontrol import decoding, kubeapi, trimming
from managers import nodeleaving, nodepools, shapes, staticsetplanning, staticsets, tolerating
from nodeautonomy import marking
from yurthub.testing.sim import patching

DATA = Path(__file__).resolve().parents[2] / "data" / "kubeproto"
NR, UR = tolerating.NOT_READY, tolerating.UNREACHABLE


def items(name: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads((DATA / f"{name}.json").read_text())["items"]
    return found


def with_meta(obj: dict[str, Any], **meta: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for key, value in meta.items():
        if value is None:
            out["metadata"].pop(key, None)
        else:
            out["metadata"][key] = value
    return out


def _pod_variants() -> list[dict[str, Any]]:
    real = items("pods")
    base = real[2]  # a ReplicaSet's pod with the default tolerations
    annotated = {**(base["metadata"].get("annotations") or {}), "big": "x" * 4096}
    variants = [
        *real,
        with_meta(base, annotations={**annotated, tolerating.MANAGED_ANNOTATION: f"{NR},{UR}"}),
        with_meta(base, annotations={tolerating.MIRROR_ANNOTATION: "abc"}),
        with_meta(
            base,
            ownerReferences=[
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}
                | {"controller": True, "blockOwnerDeletion": True}
            ],
        ),
        with_meta(base, deletionTimestamp="2026-01-01T00:00:00Z"),
        with_meta(base, ownerReferences=None, annotations=None),
    ]
    finished = copy.deepcopy(base)
    finished["status"]["phase"] = "Succeeded"
    forever = copy.deepcopy(base)
    for toleration in forever["spec"]["tolerations"]:
        toleration.pop("tolerationSeconds", None)
    own = copy.deepcopy(base)
    own["spec"]["tolerations"] = [{"operator": "Exists"}]
    bare = copy.deepcopy(base)
    bare["spec"].pop("tolerations")
    return [*variants, finished, forever, own, bare]


PODS = _pod_variants()
MARKINGS: list[marking.Marking | None] = [
    None,
    marking.UNMARKED,
    marking.Autonomous(None, marking.DURATION_ANNOTATION),
    marking.Autonomous(3600, marking.DURATION_ANNOTATION),
    marking.Autonomous(None, marking.LEGACY_ANNOTATION),
]


def trimmed(shape: trimming.Shape, obj: dict[str, Any]) -> dict[str, Any]:
    before = copy.deepcopy(obj)
    out = shape.trim(obj, trimming.Sharing())
    assert obj == before
    assert out is not None
    return out


@pytest.mark.parametrize("pod", PODS, ids=lambda p: p["metadata"]["name"])
@pytest.mark.parametrize("node", MARKINGS, ids=repr)
def test_the_autonomy_decision_is_the_same_on_the_trimmed_pod(
    pod: dict[str, Any], node: marking.Marking | None
) -> None:
    small = trimmed(shapes.AUTONOMY_POD, pod)
    for field in ("name", "namespace", "uid", "resourceVersion"):  # what a Warning Event names
        assert small["metadata"][field] == pod["metadata"][field]
    defaults = tolerating.Defaults()
    whole = tolerating.decide(pod, node, defaults)
    assert tolerating.decide(small, node, defaults) == whole
    if isinstance(whole, tolerating.Update):
        # The patch made from the trimmed pod does to the whole pod what the PUT of the whole
        # pod did (and carries the resourceVersion that makes it conditional).
        body = tolerating.patch(small, whole)
        assert body["metadata"]["resourceVersion"] == pod["metadata"]["resourceVersion"]
        assert patching.merge_patch(pod, body) == tolerating.apply(pod, whole)


def test_the_trimmed_pod_holds_no_more_than_the_autonomy_controller_reads() -> None:
    pod = PODS[1]  # a rich pod: annotations, own toleration, several containers
    small = trimmed(shapes.AUTONOMY_POD, pod)
    assert set(small) == {"metadata", "spec", "status"}
    assert set(small["spec"]) == {"nodeName", "tolerations"}
    assert small["spec"]["tolerations"] == pod["spec"]["tolerations"]
    assert small["status"] == {"phase": pod["status"]["phase"]}
    assert set(small["metadata"]) <= {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "deletionTimestamp",
        "annotations",
        "ownerReferences",
    }
    assert "annotations" not in small["metadata"]  # none of its annotations is read
    assert len(json.dumps(small)) * 4 < len(json.dumps(pod))


def test_pods_that_carry_equal_values_share_them() -> None:
    sharing = trimming.Sharing()
    a, b = (shapes.AUTONOMY_POD.trim(p, sharing) for p in items("pods")[2:4])
    assert a is not None and b is not None
    assert a["spec"] is b["spec"]  # same node, same tolerations
    assert a["status"] is b["status"]
    assert a["metadata"]["ownerReferences"] is b["metadata"]["ownerReferences"]
    assert a["metadata"]["name"] != b["metadata"]["name"]


def _node_variants() -> list[dict[str, Any]]:
    (base,) = items("nodes")
    annotations = base["metadata"].get("annotations") or {}
    variants = [base]
    for extra in (
        {marking.DURATION_ANNOTATION: "1h"},
        {marking.DURATION_ANNOTATION: "0"},
        {marking.DURATION_ANNOTATION: "soon"},
        {marking.LEGACY_ANNOTATION: "true"},
    ):
        variants.append(with_meta(base, annotations={**annotations, **extra}))
    cloud = with_meta(
        base, labels={**base["metadata"]["labels"], marking.EDGE_WORKER_LABEL: "false"}
    )
    pooled = with_meta(base, labels={**base["metadata"]["labels"], nodepools.POOL_LABEL: "p1"})
    deleting = with_meta(base, deletionTimestamp="2026-01-01T00:00:00Z")
    variants += [cloud, pooled, deleting]
    not_ready = copy.deepcopy(base)
    for condition in not_ready["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition.update(status="Unknown", lastTransitionTime="2026-12-01T10:00:00Z")
    no_ip = copy.deepcopy(base)
    no_ip["status"]["addresses"] = [{"type": "Hostname", "address": "h"}]
    bare = copy.deepcopy(base)
    bare.pop("status")
    return [*variants, not_ready, no_ip, bare]


@pytest.mark.parametrize("node", _node_variants(), ids=lambda n: str(n["metadata"]))
def test_every_read_of_a_node_is_the_same_on_the_trimmed_node(node: dict[str, Any]) -> None:
    small = trimmed(shapes.NODE, node)
    assert marking.of_node(small) == marking.of_node(node)
    assert nodepools.read_node(small) == nodepools.read_node(node)
    assert nodeleaving.ready_condition(small) == nodeleaving.ready_condition(node)
    assert nodeleaving.not_ready_since(small) == nodeleaving.not_ready_since(node)
    assert staticsetplanning.node_ready(small) == staticsetplanning.node_ready(node)
    for field in ("name", "uid", "resourceVersion"):  # what an Event names
        assert small["metadata"][field] == node["metadata"][field]
    assert "images" not in small.get("status", {})
    assert "managedFields" not in small["metadata"]


def _static_pod(name: str, node: str, **meta: Any) -> dict[str, Any]:
    pod = copy.deepcopy(items("pods")[2])
    pod["metadata"].update(name=name, namespace="kube-system", **meta)
    pod["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    pod["spec"]["nodeName"] = node
    return pod


@pytest.mark.parametrize(
    ("pod", "held"),
    [
        (_static_pod("hub-n1", "n1", annotations={staticsetplanning.MIRROR_ANNOTATION: "h"}), True),
        (
            _static_pod(
                "yurt-static-set-hub-upgrade-worker-n1",
                "n1",
                ownerReferences=[
                    {
                        "apiVersion": "apps.openyurt.io/v1alpha1",
                        "kind": staticsetplanning.KIND,
                        "name": "hub",
                        "uid": "u",
                    }
                ],
            ),
            True,
        ),
        (_static_pod("web-abc", "n1"), False),  # an ordinary pod
        (
            _static_pod("hub-n2", "n1", annotations={staticsetplanning.MIRROR_ANNOTATION: "h"}),
            False,
        ),
    ],
)
def test_the_yurtstaticset_controller_holds_only_its_pods(pod: dict[str, Any], held: bool) -> None:
    kept = staticsets.PODS.trim(pod, trimming.Sharing())
    if not held:
        assert kept is None
        return
    assert kept is not None and "managedFields" not in kept["metadata"]
    whole = {k: v for k, v in pod["metadata"].items() if k != "managedFields"}
    assert kept == {**pod, "metadata": whole}


@pytest.mark.parametrize(
    ("shape", "objects"),
    [
        (shapes.AUTONOMY_POD, PODS),
        (shapes.NODE, _node_variants()),
        (staticsets.PODS, [*PODS, _static_pod("hub-n1", "n1")]),
    ],
    ids=["pods", "nodes", "static-pods"],
)
def test_the_informers_decode_exactly_the_trimmed_objects(
    shape: trimming.Shape, objects: list[dict[str, Any]]
) -> None:
    """What the reflectors really store: lists and events decoded straight into the shape
    (``kubecontrol.decoding``), equal to the trimmed objects the tests above hold to the
    controllers' reads."""
    decoder = decoding.Decoder(shape, trimming.Sharing())
    body = json.dumps({"metadata": {"resourceVersion": "1"}, "items": objects}).encode()
    page = decoder.page(body).items
    events = [
        decoder.event(json.dumps({"type": "ADDED", "object": obj}).encode(), "/p")
        for obj in objects
    ]
    for obj, listed, event in zip(objects, page, events, strict=True):
        assert event is not None
        want = shape.trim(obj, trimming.Sharing())
        for got in (listed, event.object):
            if want is None:  # refused: handed on as its identity, and refused again
                assert not shape.keeps(got)
                assert got["metadata"]["name"] == obj["metadata"]["name"]
            else:
                assert got == want


class _Reads(dict[str, Any]):
    """A mapping that notes every path read of it (a key looked up or tested, ``*`` for the
    keys iterated), so a test can hold the paths a controller's code reads to a shape."""

    def __init__(self, value: dict[str, Any], path: tuple[str, ...], seen: set[tuple[str, ...]]):
        super().__init__(value)
        self._path = path
        self._seen = seen

    def _wrap(self, key: str, value: Any) -> Any:
        path = (*self._path, key)
        if isinstance(value, dict):
            return _Reads(value, path, self._seen)
        if isinstance(value, list):
            item = (*path, "[]")
            return [_Reads(v, item, self._seen) if isinstance(v, dict) else v for v in value]
        return value

    def get(self, key: str, default: Any = None) -> Any:
        self._seen.add((*self._path, key))
        return (
            self._wrap(key, dict.__getitem__(self, key))
            if dict.__contains__(self, key)
            else default
        )

    def __getitem__(self, key: str) -> Any:
        self._seen.add((*self._path, key))
        return self._wrap(key, dict.__getitem__(self, key))

    def __contains__(self, key: object) -> bool:
        self._seen.add((*self._path, str(key)))
        return dict.__contains__(self, key)

    def __iter__(self) -> Any:
        self._seen.add((*self._path, "*"))
        return dict.__iter__(self)

    def items(self) -> Any:
        self._seen.add((*self._path, "*"))
        return [(k, self[k]) for k in dict.__iter__(self)]

    def values(self) -> Any:
        self._seen.add((*self._path, "*"))
        return [self[k] for k in dict.__iter__(self)]


def _keeps(spec: Any, path: tuple[str, ...]) -> bool:
    """Whether a shape's ``spec`` keeps what ``path`` reads (``*``: every key of a mapping)."""
    if not path or spec is trimming.KEEP or spec is trimming.INTERN:
        return spec is not trimming.DROP
    if isinstance(spec, trimming.Shared):
        return _keeps(spec.inner, path)
    if isinstance(spec, trimming.Items):
        return path[0] == "[]" and _keeps(spec.item, path[1:])
    fields = trimming.fields_of(spec)
    if fields is None or path[0] == "[]":
        return False
    if path[0] == "*":
        return fields.rest not in (None, trimming.DROP) and not fields.fields
    sub = fields.fields.get(path[0], fields.rest)
    return sub is not None and sub is not trimming.DROP and _keeps(sub, path[1:])


def _reads(read: Any, objects: list[dict[str, Any]]) -> set[tuple[str, ...]]:
    seen: set[tuple[str, ...]] = set()
    for obj in objects:
        read(_Reads(obj, (), seen))
    return seen


def _event_fields(obj: dict[str, Any]) -> None:
    """What ``kubecontrol.events.Recorder.post`` reads of the object an Event is about."""
    meta = obj.get("metadata") or {}
    for field in ("uid", "namespace", "name", "resourceVersion"):
        meta.get(field)


@pytest.mark.parametrize(
    ("shape", "objects", "readers"),
    [
        (
            shapes.AUTONOMY_POD,
            PODS,
            [
                *(
                    lambda pod, node=node: tolerating.decide(pod, node, tolerating.Defaults())
                    for node in MARKINGS
                ),
                kubeapi.key_of,
                _event_fields,
                lambda pod: (pod.get("spec") or {}).get("nodeName"),  # autonomy's index
            ],
        ),
        (
            shapes.NODE,
            _node_variants(),
            [
                marking.of_node,
                nodepools.read_node,
                nodeleaving.ready_condition,
                nodeleaving.not_ready_since,
                lambda node: nodeleaving.observe(None, node, 1.9e9, seen=True),
                staticsetplanning.node_ready,
                kubeapi.key_of,
                _event_fields,
            ],
        ),
    ],
    ids=["pods", "nodes"],
)
def test_every_path_the_controllers_read_is_kept(
    shape: trimming.Shape, objects: list[dict[str, Any]], readers: list[Any]
) -> None:
    """The reads themselves, noted as the controllers' code makes them on whole objects: a
    field a controller starts to read that its shape drops fails here even when no test object
    carries it (the equality tests above need a variant that does)."""
    seen = set().union(*(_reads(read, objects) for read in readers))
    assert ("spec", "tolerations") in seen or ("metadata", "labels") in seen  # not vacuous
    dropped = sorted(path for path in seen if not _keeps(shape.fields, path))
    assert dropped == []
