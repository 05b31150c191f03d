"""The templates a YurtStaticSet has rolled out, kept for a rollback (``edgehub rollout undo``).

PURE: JSON dicts in, frozen values and objects out.

Each template the ``yurtstaticset`` controller rolls out is recorded as a ControllerRevision
(apps/v1, as a DaemonSet's are) named ``<yss>-<hash>``, owned by the YurtStaticSet, labelled
with its uid and the template hash, ``data`` ``{"spec": {"template": ...}}``, ``revision`` one
more than the newest. Going back to a template already recorded renumbers that revision as
the newest (the same object, as Kubernetes does for a DaemonSet). Beyond
``spec.revisionHistoryLimit`` (10 when absent; OpenYurt's field, which its controller does not
use), the oldest revisions other than the current one are deleted.

The first time the controller sees a YurtStaticSet with no revision at all, and ConfigMap
``yurt-static-set-<yss>`` (written by yurt-manager before the hand-over) holds a manifest of
another template, that template is recorded first: rolling back then returns to what
yurt-manager last rolled out (YurtHub, on a cluster moving from OpenYurt), even when the
template was changed in the same request that handed the YurtStaticSet over.

Undo (``previous``): the newest revision whose template is not the current one, or the one
numbered ``--to-revision``; written back into ``spec.template``, it is rolled out by the same
strategy as any other change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from kubecontrol import kubeapi
from managers import staticsetplanning

CONTROLLER_REVISIONS = kubeapi.Resource("apps", "v1", "controllerrevisions")
UID_LABEL = "edgehub.io/yurtstaticset-uid"
HASH_LABEL = "edgehub.io/static-pod-hash"
DEFAULT_HISTORY = 10


@dataclasses.dataclass(frozen=True, slots=True)
class Revision:
    name: str
    hash: str
    number: int
    template: Mapping[str, Any]
    uid: str = ""
    created: str = ""


def read(obj: Mapping[str, Any]) -> Revision | None:
    meta = obj.get("metadata") or {}
    data = obj.get("data")
    template = (
        ((data or {}).get("spec") or {}).get("template") if isinstance(data, Mapping) else None
    )
    number = obj.get("revision")
    if not isinstance(template, Mapping) or not isinstance(number, int):
        return None
    labels = meta.get("labels") or {}
    return Revision(
        name=str(meta.get("name") or ""),
        hash=str(labels.get(HASH_LABEL) or staticsetplanning.template_hash(template)),
        number=number,
        template=template,
        uid=str(meta.get("uid") or ""),
        created=str(meta.get("creationTimestamp") or ""),
    )


def owned(items: Iterable[Mapping[str, Any]], yss_uid: str) -> list[Revision]:
    """The revisions of the YurtStaticSet ``yss_uid``, oldest first."""
    out = []
    for obj in items:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if yss_uid and labels.get(UID_LABEL) == yss_uid:
            revision = read(obj)
            if revision is not None:
                out.append(revision)
    return sorted(out, key=lambda r: (r.number, r.name))


def name(yss: str, digest: str) -> str:
    # A ControllerRevision name is a DNS subdomain (253); the uid label tells them apart.
    return f"{yss[: staticsetplanning.MAX_NAME - len(digest) - 1]}-{digest}"


def revision_object(
    spec: staticsetplanning.Spec, template: Mapping[str, Any], digest: str, number: int
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": name(spec.name, digest),
            "namespace": spec.namespace,
            "labels": {UID_LABEL: spec.uid, HASH_LABEL: digest},
            "ownerReferences": [staticsetplanning.owner_reference(spec)],
        },
        "data": {"spec": {"template": dict(template)}},
        "revision": number,
    }


def renumbered(obj: Mapping[str, Any], number: int) -> dict[str, Any]:
    return {**obj, "apiVersion": "apps/v1", "kind": "ControllerRevision", "revision": number}


def template_of_manifest(text: str) -> dict[str, Any] | None:
    """The template a ``yurt-static-set-<yss>`` manifest was made from (its metadata without
    the hash annotation, and its spec); None when it is not a Pod manifest."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(doc, Mapping) or not isinstance(doc.get("spec"), Mapping):
        return None
    metadata = dict(doc.get("metadata") or {})
    annotations = {
        k: v
        for k, v in (metadata.get("annotations") or {}).items()
        if k != staticsetplanning.HASH_ANNOTATION
    }
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
    return {"metadata": metadata, "spec": dict(doc["spec"])}


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    create: tuple[dict[str, Any], ...] = ()
    renumber: tuple[tuple[Revision, int], ...] = ()
    prune: tuple[Revision, ...] = ()


def plan(
    spec: staticsetplanning.Spec,
    digest: str,
    existing: list[Revision],
    history_limit: int,
    handed_over: Mapping[str, Any] | None = None,
) -> Plan:
    """What to write so that the current template is the newest revision. ``handed_over``:
    the template yurt-manager's ConfigMap holds, recorded first when there is no revision."""
    newest = max((r.number for r in existing), default=0)
    create: list[dict[str, Any]] = []
    if not existing and handed_over is not None:
        before = staticsetplanning.template_hash(handed_over)
        if before != digest:
            create.append(revision_object(spec, handed_over, before, 1))
            newest = 1
    mine = next((r for r in existing if r.hash == digest), None)
    renumber: tuple[tuple[Revision, int], ...] = ()
    kept = list(existing)
    if mine is None:
        create.append(revision_object(spec, spec.template, digest, newest + 1))
        count = len(existing) + len(create)
    else:
        if mine.number != newest:
            renumber = ((mine, newest + 1),)
        count = len(existing)
    limit = max(1, history_limit)
    excess = count - limit
    old = [r for r in sorted(kept, key=lambda r: r.number) if r.hash != digest]
    prune = tuple(old[: max(0, excess)])
    return Plan(create=tuple(create), renumber=renumber, prune=prune)


def history_limit(obj: Mapping[str, Any]) -> int:
    value = (obj.get("spec") or {}).get("revisionHistoryLimit")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return DEFAULT_HISTORY


def previous(
    revisions: list[Revision], current: str, to_revision: int | None = None
) -> Revision | str:
    """The revision to roll back to, or why there is none."""
    if to_revision is not None:
        found = next((r for r in revisions if r.number == to_revision), None)
        if found is None:
            numbers = ", ".join(str(r.number) for r in revisions) or "none"
            return f"no revision {to_revision} (revisions: {numbers})"
        if found.hash == current:
            return f"revision {to_revision} is the current template already"
        return found
    older = [r for r in revisions if r.hash != current]
    if not older:
        return "no earlier template recorded (the controller records each one it rolls out)"
    return max(older, key=lambda r: r.number)


def images(template: Mapping[str, Any]) -> str:
    """The template's container images, comma separated (for ``history``)."""
    spec = template.get("spec") or {}
    names = [
        str(c.get("image") or "") for c in spec.get("containers") or [] if isinstance(c, Mapping)
    ]
    return ",".join(names)
