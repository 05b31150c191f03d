"""The ``leader-hub-<pool>`` ConfigMap a NodePool should have (reference §8.2).

PURE. Data, as the hubs read it (``yurthub.pool.leaderconfigs``):

- ``leaders``: the pool's ``status.leaderEndpoints`` as ``<node>/<address>``, sorted, comma
  joined;
- ``pool-scoped-metadata``: ``spec.poolScopeMetadata`` as sorted ``group/version/resource``;
- ``interconnectivity``, ``enable-leader-election``: ``"true"``/``"false"``.

Labelled ``openyurt.io/configmap-name=leader-hub-<pool>`` and owned by the NodePool (controller
owner reference), so deleting the pool deletes it. A spec with problems keeps the ConfigMap as
it is (the hubs keep their last good configuration too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from managers import hubleaderelecting, nodepools

PREFIX = "leader-hub-"
LABEL = "openyurt.io/configmap-name"
MAX_NAME = 253


def name_for(pool: str) -> str:
    return f"{PREFIX}{pool}"


def data(
    spec: nodepools.PoolSpec, leaders: tuple[hubleaderelecting.Endpoint, ...]
) -> dict[str, str]:
    return {
        "leaders": ",".join(f"{e.node}/{e.address}" for e in sorted(leaders) if e.address),
        "pool-scoped-metadata": ",".join(sorted(spec.scope)),
        "interconnectivity": "true" if spec.interconnectivity else "false",
        "enable-leader-election": "true" if spec.enable_leader_election else "false",
    }


def desired(pool: Mapping[str, Any], namespace: str) -> dict[str, Any] | None:
    """The whole ConfigMap for ``pool`` (None: the name would be too long)."""
    spec = nodepools.read_pool(pool)
    name = name_for(spec.name)
    if len(name) > MAX_NAME:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL: name},
            "ownerReferences": [
                {
                    "apiVersion": nodepools.NODE_POOLS.api_version,
                    "kind": "NodePool",
                    "name": spec.name,
                    "uid": spec.uid,
                    "controller": True,
                }
            ],
        },
        "data": data(spec, hubleaderelecting.current(pool)),
    }


def update(existing: Mapping[str, Any], want: Mapping[str, Any]) -> dict[str, Any] | None:
    """``existing`` changed to carry ``want``'s data, label and owner (its other labels,
    annotations and owners kept), or None when it already does."""
    meta = dict(existing.get("metadata") or {})
    want_meta = want["metadata"]
    labels = dict(meta.get("labels") or {})
    owners = [
        o
        for o in (meta.get("ownerReferences") or [])
        if isinstance(o, Mapping) and o.get("uid") != want_meta["ownerReferences"][0]["uid"]
    ]
    owners = [o for o in owners if not o.get("controller")]
    new_owners = [*owners, *want_meta["ownerReferences"]]
    new_labels = {**labels, **want_meta["labels"]}
    if (
        existing.get("data") == want["data"]
        and labels == new_labels
        and (meta.get("ownerReferences") or []) == new_owners
    ):
        return None
    meta["labels"] = new_labels
    meta["ownerReferences"] = new_owners
    return {
        **existing,
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": want["data"],
    }
