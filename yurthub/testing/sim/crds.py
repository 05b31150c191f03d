"""CRD acceptance: what the apiextensions controllers check and record on a CRD write.

``accept`` validates the names, scope and versions and sets the status the controllers
would (NamesAccepted and Established at once, storedVersions kept); ``name_clash`` says
why a plural is taken. PURE apart from reading the registry; raises ``ApiError`` 422.
"""

from __future__ import annotations

from typing import Any

from yurthub.testing.sim import errors, resources


def accept(crd: dict[str, Any], now: str, registry: resources.Registry) -> None:
    """Validate a CRD and set the status the apiextensions controllers would."""
    meta, spec = crd["metadata"], crd.get("spec")
    name = str(meta.get("name"))
    if not isinstance(spec, dict):
        raise errors.invalid("CustomResourceDefinition", name, "spec: Required value", "")
    names = spec.get("names") or {}
    group, plural, kind = spec.get("group"), names.get("plural"), names.get("kind")
    problems = []
    if not group:
        problems.append("spec.group: Required value")
    if not plural:
        problems.append("spec.names.plural: Required value")
    if not kind:
        problems.append("spec.names.kind: Required value")
    if plural and group and name != f"{plural}.{group}":
        problems.append(
            f'metadata.name: Invalid value: "{name}": must be spec.names.plural+"."+spec.group'
        )
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        problems.append('spec.scope: Unsupported value: must be "Namespaced" or "Cluster"')
    versions = spec.get("versions") or []
    if not versions:
        problems.append("spec.versions: Required value")
    elif sum(1 for v in versions if v.get("storage")) != 1:
        problems.append("spec.versions: Invalid value: must have exactly one storage version")
    if problems:
        raise errors.invalid(
            "CustomResourceDefinition", name, "; ".join(problems), "apiextensions.k8s.io"
        )
    clash = name_clash(registry, name, str(group), str(plural))
    if clash:
        raise errors.invalid("CustomResourceDefinition", name, clash, "apiextensions.k8s.io")
    accepted = dict(names)
    accepted.setdefault("singular", str(kind).lower())
    accepted.setdefault("listKind", f"{kind}List")
    storage_version = next(str(v.get("name")) for v in versions if v.get("storage"))
    status = crd.setdefault("status", {})
    stored_versions = list(status.get("storedVersions") or [])
    if storage_version not in stored_versions:
        stored_versions.append(storage_version)
    crd["status"] = {
        "acceptedNames": accepted,
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": now,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": now,
            },
        ],
        "storedVersions": stored_versions,
    }


def name_clash(registry: resources.Registry, name: str, group: str, plural: str) -> str | None:
    """Why another resource already holds ``group``/``plural``, or None."""
    for rt in registry:
        if rt.group == group and rt.resource == plural and rt.crd_name not in (None, name):
            return f'spec.names.plural: Invalid value: "{plural}": is already in use'
        if rt.group == group and not rt.custom and rt.resource == plural:
            return f'spec.names.plural: Invalid value: "{plural}": is a built-in resource'
    return None
