"""Views of cached objects for clients that ask for one: Table and PartialObjectMetadata.

PURE: decoded objects in, JSON-ready dicts out; ``now`` is passed in.

``kubectl get`` asks for ``application/json;as=Table;v=v1;g=meta.k8s.io``. Offline we build the
Table from the cached objects: NAME and AGE for every kind, and for pods the columns a person
looks at first (READY, STATUS, RESTARTS). ``row.object`` follows ``includeObject`` (default
``Metadata``: a PartialObjectMetadata, as the apiserver does). Controllers that only need
metadata ask for ``as=PartialObjectMetadata[List]``; a cached full object answers that too.

These are views, never stored as such: from a Table response the tee keeps the objects its
rows carry, and PartialObjectMetadata is stored under its own partial scope.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

META_V1 = "meta.k8s.io/v1"

_NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace.",
    "priority": 0,
}
_AGE_COLUMN = {
    "name": "Age",
    "type": "string",
    "format": "",
    "description": "CreationTimestamp is the time the object was created.",
    "priority": 0,
}
_POD_COLUMNS = [
    _NAME_COLUMN,
    {
        "name": "Ready",
        "type": "string",
        "format": "",
        "description": "Ready containers / all containers.",
        "priority": 0,
    },
    {
        "name": "Status",
        "type": "string",
        "format": "",
        "description": "The aggregate pod status.",
        "priority": 0,
    },
    {
        "name": "Restarts",
        "type": "string",
        "format": "",
        "description": "Container restarts.",
        "priority": 0,
    },
    _AGE_COLUMN,
]


def human_duration(seconds: float) -> str:
    """Kubernetes' ``duration.HumanDuration`` (``5s``, ``3m20s``, ``2d3h``, ``4y``).

    Like kubectl, a second of clock skew (an object "created" just ahead of this node's clock)
    reads ``0s``; only more is ``<invalid>``.
    """
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = (s % 3600) // 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24 - 365 * (hours // 24 // 365)
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(created: str, now: float) -> str:
    if not created:
        return "<unknown>"
    try:
        when = datetime.datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    return human_duration(now - when.timestamp())


def _metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return dict(meta) if isinstance(meta, Mapping) else {}


def partial(obj: Mapping[str, Any], version: str = "v1") -> dict[str, Any]:
    """An object's PartialObjectMetadata (metadata only)."""
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": _metadata(obj),
    }


def partial_list(
    objects: Iterable[Mapping[str, Any]], resource_version: str, version: str = "v1"
) -> dict[str, Any]:
    return {
        "kind": "PartialObjectMetadataList",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": {"resourceVersion": resource_version},
        "items": [partial(o, version) for o in objects],
    }


def _pod_cells(pod: Mapping[str, Any]) -> list[Any]:
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    assert isinstance(spec, Mapping) and isinstance(status, Mapping)
    containers = spec.get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if isinstance(c, Mapping) and c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses if isinstance(c, Mapping))
    reason = str(status.get("reason") or status.get("phase") or "Unknown")
    for c in statuses:
        state = c.get("state") if isinstance(c, Mapping) else None
        if isinstance(state, Mapping):
            waiting = state.get("waiting")
            terminated = state.get("terminated")
            if isinstance(waiting, Mapping) and waiting.get("reason"):
                reason = str(waiting["reason"])
            elif isinstance(terminated, Mapping) and terminated.get("reason"):
                reason = str(terminated["reason"])
    if _metadata(pod).get("deletionTimestamp"):
        reason = "Terminating"
    return [f"{ready}/{len(containers)}", reason, str(restarts)]


def table(
    resource: str,
    objects: Sequence[Mapping[str, Any]],
    *,
    resource_version: str,
    now: float,
    include_object: str = "Metadata",
) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of ``objects`` (all of one ``resource``).

    Pods get READY/STATUS/RESTARTS only from full objects; metadata-only objects (what kubectl's
    own Tables carried) give NAME and AGE.
    """
    full = all(o.get("kind") != "PartialObjectMetadata" for o in objects)
    view = table_head(resource, full_objects=full, resource_version=resource_version)
    view["rows"] = [
        table_row(resource, o, full_objects=full, now=now, include_object=include_object)
        for o in objects
    ]
    return view


def table_head(resource: str, *, full_objects: bool, resource_version: str) -> dict[str, Any]:
    """A Table without rows; ``rows`` is its last member, so a writer can stream them in."""
    pods = resource == "pods" and full_objects
    return {
        "kind": "Table",
        "apiVersion": META_V1,
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": _POD_COLUMNS if pods else [_NAME_COLUMN, _AGE_COLUMN],
        "rows": [],
    }


def table_row(
    resource: str,
    obj: Mapping[str, Any],
    *,
    full_objects: bool,
    now: float,
    include_object: str = "Metadata",
) -> dict[str, Any]:
    """One row of ``table_head``'s Table (``full_objects`` as given there)."""
    meta = _metadata(obj)
    name = str(meta.get("name") or "")
    created = str(meta.get("creationTimestamp") or "")
    pods = resource == "pods" and full_objects
    cells: list[Any] = [name, *(_pod_cells(obj) if pods else ()), age(created, now)]
    row: dict[str, Any] = {"cells": cells}
    if include_object == "Object":
        row["object"] = dict(obj)
    elif include_object != "None":
        row["object"] = partial(obj)
    return row
