"""``resourcekinds``: which kind the hub names for a resource it answers offline (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from yurthub import resourcekinds
from yurthub.cache import keys
from yurthub.proxy import localkinds

WIDGET = ("example.com", "v1", "widgets")
DISCOVERED = {WIDGET: "Widget", ("example.com", "v2", "widgets"): "WidgetV2"}


@pytest.mark.parametrize(
    ("group", "version", "resource", "known", "kind"),
    [
        # Kubernetes' own: known without anything cached, whatever the cache says
        ("", "v1", "nodes", {}, "Node"),
        ("", "v1", "nodes", {"listed": "Bogus", "stored": ["Bogus"]}, "Node"),
        ("coordination.k8s.io", "v1", "leases", {}, "Lease"),
        ("events.k8s.io", "v1", "events", {}, "Event"),
        ("autoscaling", "v2", "horizontalpodautoscalers", {}, "HorizontalPodAutoscaler"),
        ("apps.openyurt.io", "v1beta2", "nodepools", {}, "NodePool"),
        # a resource of a built-in name in another group is not the built-in one
        ("example.com", "v1", "nodes", {}, ""),
        # a custom resource: the list's own kind, then discovery, then what is stored
        (*WIDGET, {"listed": "Gadget", "discovered": DISCOVERED}, "Gadget"),
        (*WIDGET, {"discovered": DISCOVERED, "stored": ["Stored"]}, "Widget"),
        ("example.com", "v2", "widgets", {"discovered": DISCOVERED}, "WidgetV2"),
        ("example.com", "v3", "widgets", {"discovered": DISCOVERED, "stored": ["", "S"]}, "S"),
        (*WIDGET, {"stored": ["", ""]}, ""),
        (*WIDGET, {}, ""),
    ],
)
def test_kind_for(
    group: str, version: str, resource: str, known: dict[str, Any], kind: str
) -> None:
    assert resourcekinds.kind_for(group, version, resource, **known) == kind


def test_stored_kinds_are_read_only_until_one_names_the_kind() -> None:
    read: list[str] = []

    def stored() -> Any:
        for kind in ("", "Widget", "Other"):
            read.append(kind)
            yield kind

    assert resourcekinds.kind_for(*WIDGET, stored=stored()) == "Widget"
    assert read == ["", "Widget"]


AGGREGATED: dict[str, Any] = {
    "kind": "APIGroupDiscoveryList",
    "items": [
        {
            "metadata": {"name": "example.com"},
            "versions": [
                {
                    "version": "v1",
                    "resources": [
                        {
                            "resource": "widgets",
                            "responseKind": {"kind": "Widget"},
                            "subresources": [{"subresource": "status"}],
                        },
                        {"resource": "nokind"},
                        {"resource": "", "responseKind": {"kind": "Empty"}},
                        "not a resource",
                    ],
                },
                {"resources": [{"resource": "noversion", "responseKind": {"kind": "X"}}]},
            ],
        },
        {
            "metadata": {},
            "versions": [
                {
                    "version": "v1",
                    "resources": [{"resource": "pods", "responseKind": {"kind": "Pod"}}],
                }
            ],
        },
        {"metadata": {"name": 7}, "versions": []},
    ],
}


@pytest.mark.parametrize(
    ("document", "found"),
    [
        (AGGREGATED, {WIDGET: "Widget", ("", "v1", "pods"): "Pod"}),
        (
            {
                "kind": "APIResourceList",
                "groupVersion": "example.com/v1",
                "resources": [
                    {"name": "widgets", "kind": "Widget"},
                    {"name": "widgets/status", "kind": "Widget"},
                    {"name": "gadgets"},
                ],
            },
            {WIDGET: "Widget"},
        ),
        (
            {
                "kind": "APIResourceList",
                "groupVersion": "v1",
                "resources": [{"name": "nodes", "kind": "Node"}],
            },
            {("", "v1", "nodes"): "Node"},
        ),
        ({"kind": "APIResourceList", "resources": [{"name": "a", "kind": "A"}]}, {}),
        ({"items": "no"}, {}),
        ([], {}),
        ("text", {}),
        (None, {}),
    ],
)
def test_discovered(document: Any, found: dict[tuple[str, str, str], str]) -> None:
    assert resourcekinds.discovered(document) == found


def test_discovered_is_bounded() -> None:
    many = {
        "kind": "APIResourceList",
        "groupVersion": "example.com/v1",
        "resources": [
            {"name": f"r{i}", "kind": f"K{i}"} for i in range(resourcekinds.MAX_DISCOVERED + 5)
        ],
    }
    assert len(resourcekinds.discovered(many)) == resourcekinds.MAX_DISCOVERED


AS = "as=APIGroupDiscoveryList;g=apidiscovery.k8s.io"
"""The profile the tee stores aggregated discovery under (``cache.teeing``)."""


@pytest.mark.parametrize(
    ("group", "version", "wanted"),
    [
        (
            "example.com",
            "v1",
            [
                "/apis/example.com/v1",
                keys.nonresource_key("/apis", f"{AS};v=v2"),
                keys.nonresource_key("/apis", f"{AS};v=v2beta1"),
            ],
        ),
        (
            "",
            "v1",
            [
                "/api/v1",
                keys.nonresource_key("/api", f"{AS};v=v2"),
                keys.nonresource_key("/api", f"{AS};v=v2beta1"),
            ],
        ),
    ],
)
def test_document_keys(group: str, version: str, wanted: list[str]) -> None:
    assert localkinds.document_keys(group, version) == wanted
