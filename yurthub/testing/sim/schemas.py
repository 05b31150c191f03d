"""Structural-schema defaulting and pruning for custom resources, as the apiserver does on write.

For a CRD version with an ``openAPIV3Schema``: fields the schema does not
declare are dropped (unless ``x-kubernetes-preserve-unknown-fields`` or
``additionalProperties`` allow them) and declared ``default`` values fill absent
fields of objects that are present. ``apiVersion``, ``kind`` and ``metadata``
at the root are never pruned.

Pruned paths are returned so the HTTP layer can apply ``fieldValidation``:
``Strict`` (kubectl's default) refuses the write with 400 ``strict decoding error:
unknown field "spec.x"``, ``Warn`` (the server default) answers with a
``Warning`` header, ``Ignore`` says nothing.

Not done: validation (types, enums, patterns, CEL rules); a CR that violates its
schema is stored as sent. Pure: mutates the given dict only.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from yurthub.testing.sim import resources

_ROOT_KEEP = frozenset({"apiVersion", "kind", "metadata"})


def apply(rt: resources.ResourceType, obj: dict[str, Any]) -> list[str]:
    """Default and prune ``obj`` in place; returns the pruned paths (``spec.items[0].x``)."""
    pruned: list[str] = []
    if rt.schema is not None:
        _walk(rt.schema, obj, "", pruned, root=True)
    return pruned


def _walk(
    schema: Mapping[str, Any], value: Any, path: str, pruned: list[str], *, root: bool = False
) -> None:
    if isinstance(value, dict):
        _object(schema, value, path, pruned, root)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                _walk(items, item, f"{path}[{index}]", pruned)


def _object(
    schema: Mapping[str, Any], value: dict[str, Any], path: str, pruned: list[str], root: bool
) -> None:
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
        where = f"{path}.{key}" if path else key
        if isinstance(sub, Mapping):
            _walk(sub, value[key], where, pruned)
        elif isinstance(additional, Mapping):
            _walk(additional, value[key], where, pruned)
        elif additional is True or preserve:
            continue
        else:
            del value[key]
            pruned.append(where)
