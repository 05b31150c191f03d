"""Small accessors shared by the filters: JSON-shaped Kubernetes objects, read defensively.

PURE. A filter sees objects as the apiserver sent them, decoded (``dict``/``list``/scalars), or
the protobuf subset ``protobodies`` decodes into the same shape. Anything may be missing or of
the wrong type (a hostile or broken upstream, an older API version): the accessors answer
empty values instead of raising, and the filters leave what they do not understand unchanged.

Filters never change the object they are given: they build a copy of the parts they change
, so a filter that fails half-way has changed nothing and the chain can hand the
original on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]


def mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def sequence(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(obj.get("metadata"))


def namespace_name(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = metadata(obj)
    namespace, name = meta.get("namespace"), meta.get("name")
    return (
        namespace if isinstance(namespace, str) else "",
        name if isinstance(name, str) else "",
    )


def annotation(obj: Mapping[str, Any], key: str) -> str | None:
    value = mapping(metadata(obj).get("annotations")).get(key)
    return value if isinstance(value, str) else None


def label(obj: Mapping[str, Any], key: str) -> str | None:
    value = mapping(metadata(obj).get("labels")).get(key)
    return value if isinstance(value, str) else None


def spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(obj.get("spec"))
