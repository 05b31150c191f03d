"""Version conversion between how an object is stored and how a request asked for it.

Two cases exist in the sim:

- events: stored as core/v1 ``Event``; events.k8s.io/v1 renames fields
  (``involvedObject`` <-> ``regarding``, ``message`` <-> ``note``, ...);
- custom resources: CRD versions use the ``None`` conversion strategy, so only
  ``apiVersion`` changes.

The hot path (a type read in the version it was written in) returns the stored
bytes untouched; only a real conversion decodes and re-encodes.
"""

from __future__ import annotations

from typing import Any

import orjson

from yurthub.testing.sim import resources

# core/v1 field -> events.k8s.io/v1 field
_EVENT_FIELDS = {
    "involvedObject": "regarding",
    "message": "note",
    "source": "deprecatedSource",
    "firstTimestamp": "deprecatedFirstTimestamp",
    "lastTimestamp": "deprecatedLastTimestamp",
    "count": "deprecatedCount",
    "reportingComponent": "reportingController",
}
_EVENT_FIELDS_BACK = {v: k for k, v in _EVENT_FIELDS.items()}


def _rename(obj: dict[str, Any], mapping: dict[str, str], api_version: str) -> dict[str, Any]:
    out = {mapping.get(k, k): v for k, v in obj.items()}
    out["apiVersion"] = api_version
    return out


def to_storage(rt: resources.ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as stored, from a request body of type ``rt``."""
    if rt.group == "events.k8s.io":
        return _rename(obj, _EVENT_FIELDS_BACK, "v1")
    return obj


def needs_conversion(rt: resources.ResourceType, obj: dict[str, Any]) -> bool:
    return obj.get("apiVersion") != rt.api_version


def from_storage(rt: resources.ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """The stored object as type ``rt`` shows it (a new dict when converted)."""
    if obj.get("apiVersion") == rt.api_version:
        return obj
    if rt.group == "events.k8s.io":
        return _rename(obj, _EVENT_FIELDS, rt.api_version)
    out = dict(obj)
    out["apiVersion"] = rt.api_version
    return out


def encode(rt: resources.ResourceType, obj: dict[str, Any], raw: bytes) -> bytes:
    if obj.get("apiVersion") == rt.api_version:
        return raw
    return orjson.dumps(from_storage(rt, obj))
