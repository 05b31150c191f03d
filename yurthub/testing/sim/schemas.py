"""Structural-schema defaulting and pruning for custom resources, as the apiserver does on write.

For a CRD version with an ``openAPIV3Schema``: fields the schema does not
declare are dropped (unless ``x-kubernetes-preserve-unknown-fields`` or
``additionalProperties`` allow them) and declared ``default`` values fill absent
fields of objects that are present. ``apiVersion``, ``kind`` and ``metadata``
at the root are never pruned.

Not done: validation (types, enums, patterns, CEL rules); a CR that violates its
schema is stored as sent. Pure: mutates the given dict only.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from yurthub.testing.sim import resources

_ROOT_KEEP = frozenset({"apiVersion", "kind", "metadata"})


def apply(rt: resources.ResourceType, obj: dict[str, Any]) -> None:
    if rt.schema is None:
        return
    _walk(rt.schema, obj, root=True)


def _walk(schema: Mapping[str, Any], value: Any, *, root: bool = False) -> None:
    if isinstance(value, dict):
        _object(schema, value, root)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for item in value:
                _walk(items, item)


def _object(schema: Mapping[str, Any], value: dict[str, Any], root: bool) -> None:
    props = schema.get("properties")
    additional = schema.get("additionalProperties")
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    embedded = bool(schema.get("x-kubernetes-embedded-resource"))
    if isinstance(props, Mapping):
        for key, sub in props.items():
            if key not in value and isinstance(sub, Mapping) and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
    for key in list(value):
        if root and key in _ROOT_KEEP:
            continue
        if embedded and key in _ROOT_KEEP:
            continue
        sub = props.get(key) if isinstance(props, Mapping) else None
        if isinstance(sub, Mapping):
            _walk(sub, value[key])
        elif isinstance(additional, Mapping):
            _walk(additional, value[key])
        elif additional is True or preserve:
            continue
        else:
            del value[key]
