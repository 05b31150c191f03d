"""Metric label bounds: known values pass, everything else is ``other``."""

from __future__ import annotations

from typing import Any

import pytest

from yurthub import labels


@pytest.mark.parametrize(
    ("method", "value", "bounded"),
    [
        ("component", "kubelet", "kubelet"),
        ("component", "kubectl", "kubectl"),
        ("component", "my-operator", "other"),
        ("component", "", "other"),
        ("component", "extra-agent", "extra-agent"),  # a configured cache agent
        ("component", "multiplexer-proxy-n1", "multiplexer-proxy-n1"),
        ("verb", "list", "list"),
        ("verb", "post", "post"),
        ("verb", "brew", "other"),
        ("resource", "pods", "pods"),
        ("resource", "", ""),
        ("resource", "podz", "other"),
        ("subresource", "status", "status"),
        ("subresource", "", ""),
        ("subresource", "x" * 300, "other"),
    ],
)
def test_bounds(method: str, value: str, bounded: str) -> None:
    bounds = labels.Bounds(["extra-agent", "multiplexer-proxy-n1", "*"])
    assert getattr(bounds, method)(value) == bounded


@pytest.mark.parametrize(
    ("code", "bounded"), [(200, "200"), (599, "599"), (0, "other"), (600, "other")]
)
def test_codes(code: int, bounded: str) -> None:
    assert labels.Bounds.code(code) == bounded


def discovery(*resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "APIGroupDiscoveryList",
        "items": [
            {"metadata": {"name": "example.com"}, "versions": [{"version": "v1",
                                                                  "resources": list(resources)}]},
            {"metadata": {"name": "broken"}, "versions": "not a list"},
        ],
    }  # fmt: skip


def test_discovery_names_are_learned() -> None:
    doc = discovery(
        {"resource": "widgets", "subresources": [{"subresource": "frobnicate"}, {"x": 1}]},
        {"resource": 5},
    )
    resources, subresources = labels.aggregated_names(doc)
    assert resources == {"widgets"} and subresources == {"frobnicate"}
    bounds = labels.Bounds()
    bounds.learn(resources | {"bad name\n", "UPPER_case"}, subresources)
    assert (
        bounds.resource("widgets") == "widgets" and bounds.subresource("frobnicate") == "frobnicate"
    )
    assert bounds.resource("bad name\n") == "other" and bounds.resource("UPPER_case") == "other"
    assert labels.aggregated_names(["not", "a", "document"]) == (set(), set())


def test_learning_is_bounded() -> None:
    bounds = labels.Bounds()
    bounds.learn((f"crd{i}" for i in range(labels.MAX_LEARNED * 2)), ())
    learned = bounds.resources - labels.BUILTIN_RESOURCES
    assert len(learned) == labels.MAX_LEARNED
    bounds.learn(["one-more"], ())
    assert bounds.resource("one-more") == "other" and bounds.resource("pods") == "pods"
