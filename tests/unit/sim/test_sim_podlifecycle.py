"""The simulated scheduler's node choice: nodeSelector and required node affinity."""

from __future__ import annotations

from typing import Any

import pytest

from yurthub.testing.sim import podlifecycle


def node(name: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(*terms: dict[str, Any], selector: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if terms:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
            }
        }
    if selector:
        spec["nodeSelector"] = selector
    return {"metadata": {"name": "p"}, "spec": spec}


def name_in(*names: str) -> dict[str, Any]:
    return {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(names)}]}


def label(key: str, operator: str, *values: str) -> dict[str, Any]:
    requirement: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        requirement["values"] = list(values)
    return {"matchExpressions": [requirement]}


A = node("a", zone="z1", rank="3")
B = node("b", zone="z2")


@pytest.mark.parametrize(
    ("spec", "fits_a", "fits_b"),
    [
        (pod(), True, True),
        (pod(name_in("b")), False, True),
        (pod(name_in("a"), name_in("b")), True, True),  # terms are ORed
        (pod({**name_in("a"), **label("zone", "In", "z2")}), False, False),  # within: ANDed
        (pod(label("zone", "NotIn", "z1")), False, True),
        (pod(label("rank", "Exists")), True, False),
        (pod(label("rank", "DoesNotExist")), False, True),
        (pod(label("rank", "Gt", "2")), True, False),
        (pod(label("rank", "Lt", "2")), False, False),
        (pod({}), False, False),  # an empty term selects nothing
        (pod(name_in("a"), selector={"zone": "z2"}), False, False),
    ],
)
def test_fits(spec: dict[str, Any], fits_a: bool, fits_b: bool) -> None:
    assert podlifecycle.fits(spec, A) is fits_a
    assert podlifecycle.fits(spec, B) is fits_b
    expected = "a" if fits_a else ("b" if fits_b else None)
    assert podlifecycle.pick_node(spec, [A, B], {}) == expected
