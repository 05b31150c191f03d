"""How a write turns the request body and the stored object into the new object.

PURE: ``merge_update`` is PUT's "what the client may change" (server fields kept, status
kept on the main resource, only their part on status-like subresources);
``validate_fields`` turns pruned paths into a 400 or ``Warning`` lines per
``fieldValidation``; ``spec_part``/``same_ignoring_rv`` decide generation bumps and no-ops;
``owner_uids`` is what the garbage collector follows.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from yurthub.testing.sim import errors, objects, resources


def spec_part(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def owner_uids(obj: Mapping[str, Any]) -> list[str]:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return [str(r.get("uid")) for r in refs if isinstance(r, dict) and r.get("uid")]


def same_ignoring_rv(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    ma = {k: v for k, v in (a.get("metadata") or {}).items() if k != "resourceVersion"}
    mb = {k: v for k, v in (b.get("metadata") or {}).items() if k != "resourceVersion"}
    if ma != mb:
        return False
    return {k: v for k, v in a.items() if k != "metadata"} == {
        k: v for k, v in b.items() if k != "metadata"
    }


def validate_fields(
    pruned: list[str], field_validation: str | None, warnings: list[str] | None
) -> None:
    if not pruned:
        return
    mode = field_validation or "Warn"
    if mode == "Strict":
        unknown = ", ".join(f'unknown field "{p}"' for p in pruned)
        raise errors.bad_request(f"strict decoding error: {unknown}")
    if mode == "Warn" and warnings is not None:
        warnings.extend(f'unknown field "{p}"' for p in pruned)


def merge_update(
    rt: resources.ResourceType,
    old: objects.Stored,
    body: dict[str, Any],
    subresource: str | None,
    full: bool,
) -> dict[str, Any]:
    if subresource in ("status", "approval", "finalize"):
        # Status-like writes keep everything but their own part (ResetObjectMetaForStatus).
        new = old.copy()
        if subresource == "status":
            if "status" in body:
                new["status"] = body["status"]
            else:
                new.pop("status", None)
        elif subresource == "approval":
            conditions = (body.get("status") or {}).get("conditions")
            new.setdefault("status", {})["conditions"] = conditions or []
        else:
            new.setdefault("spec", {})["finalizers"] = (body.get("spec") or {}).get(
                "finalizers"
            ) or []
        return new
    new = body
    meta = new["metadata"]
    for field in (
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
    ):
        if field in old.meta:
            meta[field] = old.meta[field]
        else:
            meta.pop(field, None)
    meta["name"] = old.meta["name"]
    meta.pop("managedFields", None)
    meta.pop("selfLink", None)
    if rt.has_status and not full:
        if "status" in old.obj:
            new["status"] = copy.deepcopy(old.obj["status"])
        else:
            new.pop("status", None)
    return new


def keep_cluster_ip(old: Mapping[str, Any], new: dict[str, Any]) -> None:
    old_spec = old.get("spec") or {}
    spec = new.setdefault("spec", {})
    for field in ("clusterIP", "clusterIPs"):
        if not spec.get(field) and old_spec.get(field):
            spec[field] = old_spec[field]
