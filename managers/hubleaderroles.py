"""The ClusterRole ``yurt-hub-multiplexer``: list/watch of every pool-scoped resource of every
NodePool (reference §8.2, OpenYurt's ``hubleaderrbac``).

PURE. Rules are one per API group (sorted), resources sorted, verbs ``list`` and ``watch``;
the defaults (services, endpointslices) are always in, so hubs keep their grants when no pool
exists. ``manifests/manager/rbac.yaml`` binds the role to the hubs (group ``system:nodes``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from managers import nodepools

NAME = "yurt-hub-multiplexer"
MANAGED_BY = "edgehub-manager"


def rules(scopes: Iterable[Iterable[str]]) -> list[dict[str, Any]]:
    groups: dict[str, set[str]] = {}
    for scope in [nodepools.DEFAULT_SCOPE, *scopes]:
        for gvr in scope:
            group, _, rest = gvr.partition("/")
            _, _, resource = rest.partition("/")
            groups.setdefault(group, set()).add(resource)
    return [
        {"apiGroups": [group], "resources": sorted(resources), "verbs": ["list", "watch"]}
        for group, resources in sorted(groups.items())
    ]


def desired(scopes: Iterable[Iterable[str]]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": NAME,
            "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
        },
        "rules": rules(scopes),
    }


def update(existing: Mapping[str, Any], want: Mapping[str, Any]) -> dict[str, Any] | None:
    """``existing`` with ``want``'s rules (its metadata kept), or None when equal."""
    if existing.get("rules") == want["rules"]:
        return None
    return {
        **existing,
        "apiVersion": want["apiVersion"],
        "kind": want["kind"],
        "rules": want["rules"],
    }
