"""Resource URL paths: ``/api/v1/namespaces/ns/pods/name/log`` -> group, version, namespace,
resource, name, subresource. Pure.

The namespace special cases follow the apiserver: ``/api/v1/namespaces/<name>`` is
the Namespace object itself and ``/api/v1/namespaces/<name>/status|finalize`` its
subresources; the deprecated ``/watch/`` path prefix turns a GET into a watch.
"""

from __future__ import annotations

import dataclasses

NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


@dataclasses.dataclass(frozen=True, slots=True)
class ResourcePath:
    group: str
    version: str
    resource: str
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    watch_prefix: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class GroupVersionPath:
    """``/api``, ``/api/v1``, ``/apis``, ``/apis/<g>`` or ``/apis/<g>/<v>``: a discovery request."""

    legacy: bool
    group: str | None
    version: str | None


def parse(path: str) -> ResourcePath | GroupVersionPath | None:
    """Classify ``path``; None for anything outside /api and /apis."""
    parts = [p for p in path.split("/") if p]
    if not parts or parts[0] not in ("api", "apis"):
        return None
    if parts[0] == "api":
        if len(parts) == 1:
            return GroupVersionPath(True, "", None)
        group, version, rest = "", parts[1], parts[2:]
        if not rest:
            return GroupVersionPath(True, "", version)
    else:
        if len(parts) <= 3:
            return GroupVersionPath(
                False, parts[1] if len(parts) > 1 else None, parts[2] if len(parts) > 2 else None
            )
        group, version, rest = parts[1], parts[2], parts[3:]
    watch = False
    if rest[0] == "watch":
        watch, rest = True, rest[1:]
        if not rest:
            return None
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3 and group == "":
        if len(rest) == 3 and rest[2] in NAMESPACE_SUBRESOURCES:
            return ResourcePath(group, version, "namespaces", None, rest[1], rest[2], watch)
        namespace, rest = rest[1], rest[2:]
    elif rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        return None
    return ResourcePath(
        group,
        version,
        rest[0],
        namespace,
        rest[1] if len(rest) > 1 else None,
        rest[2] if len(rest) > 2 else None,
        watch,
    )
