"""Views of cached objects for clients that ask for one: Table and PartialObjectMetadata.

PURE: decoded objects in, JSON-ready dicts out; ``now`` is passed in.

``kubectl get`` asks for ``application/json;as=Table;v=v1;g=meta.k8s.io``. Offline we build the
Table from the cached objects. When the apiserver's own Table was cached (its column
definitions in the list record, each row's cells with its object), the offline Table has the
same columns and cells, AGE recomputed; cells of an object that came without a row are computed
where we know how (NAME, AGE, and a pod's READY/STATUS/RESTARTS from a full object), else
``<unknown>``. Without any cached Table: NAME and AGE for every kind, and for pods the columns a
person looks at first. ``row.object`` follows ``includeObject`` (default ``Metadata``: a
PartialObjectMetadata, as the apiserver does). Controllers that only need metadata ask for
``as=PartialObjectMetadata[List]``; a cached full object answers that too.

These are views, never stored as such: from a Table response the tee keeps the objects its
rows carry, and PartialObjectMetadata is stored under its own partial scope.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

UNKNOWN = "<unknown>"

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
    columns: Sequence[Mapping[str, Any]] | None = None,
    cells: Sequence[Sequence[Any] | None] | None = None,
) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of ``objects`` (all of one ``resource``).

    ``columns``: the apiserver's column definitions when known, ``cells`` the cached cells of
    each object's row (None where there are none). Without columns: pods get READY/STATUS/
    RESTARTS only from full objects; metadata-only objects give NAME and AGE.
    """
    full = all(o.get("kind") != "PartialObjectMetadata" for o in objects)
    view = table_head(
        resource, full_objects=full, resource_version=resource_version, columns=columns
    )
    view["rows"] = [
        table_row(
            resource,
            o,
            full_objects=full,
            now=now,
            include_object=include_object,
            columns=columns,
            cells=cells[i] if cells is not None else None,
        )
        for i, o in enumerate(objects)
    ]
    return view


def table_head(
    resource: str,
    *,
    full_objects: bool,
    resource_version: str,
    columns: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """A Table without rows; ``rows`` is its last member, so a writer can stream them in."""
    pods = resource == "pods" and full_objects
    if columns:
        definitions: list[Any] = [dict(c) for c in columns]
    else:
        definitions = _POD_COLUMNS if pods else [_NAME_COLUMN, _AGE_COLUMN]
    return {
        "kind": "Table",
        "apiVersion": META_V1,
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": [],
    }


def table_row(
    resource: str,
    obj: Mapping[str, Any],
    *,
    full_objects: bool,
    now: float,
    include_object: str = "Metadata",
    columns: Sequence[Mapping[str, Any]] | None = None,
    cells: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """One row of ``table_head``'s Table (``full_objects`` and ``columns`` as given there)."""
    meta = _metadata(obj)
    name = str(meta.get("name") or "")
    created = str(meta.get("creationTimestamp") or "")
    pods = resource == "pods" and full_objects
    if columns:
        known: dict[str, Any] = {"Name": name}
        if pods:
            known.update(zip(("Ready", "Status", "Restarts"), _pod_cells(obj), strict=True))
        stored = cells if cells is not None and len(cells) == len(columns) else None
        values: list[Any] = []
        for i, column in enumerate(columns):
            title = column.get("name")
            if title == "Age":
                values.append(age(created, now))  # a cached age is stale by the outage
            elif stored is not None:
                values.append(stored[i])
            else:
                values.append(known.get(str(title), UNKNOWN))
    else:
        values = [name, *(_pod_cells(obj) if pods else ()), age(created, now)]
    row: dict[str, Any] = {"cells": values}
    if include_object == "Object":
        row["object"] = dict(obj)
    elif include_object != "None":
        row["object"] = partial(obj)
    return row
