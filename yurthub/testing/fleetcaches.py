"""Whether a hub's disk cache equals the apiserver, object by object.

A hub caches, per component (kubelet, kube-proxy, ``multiplexer-proxy-<node>``...), the
objects its clients read. After a storm every cached copy of the kinds compared here must be
the apiserver's current version of that object (same resourceVersion), none may be an object
the apiserver no longer has, and nothing the node needs may be missing: its Node, its pods, the
ConfigMaps and Secrets those pods mount (projected ones included), every Service and every
EndpointSlice (kubelet and kube-proxy read all of them).

The apiserver is read first, then each cache, seconds apart while the fleet still writes (the
kubelets' pod statuses after a heal): a copy newer than the read (a higher resourceVersion than
the one listed, or an object created after its kind's list) is the hub being ahead of the
read, not behind the cloud, and is no difference (``Cloud.newer``). A copy older than the read,
or missing, is.

Readers: ``edgehub_copies`` (the hub's SQLite cache, read-only beside the running hub, through
``yurthub.cache.verifying``) and ``yurthub_copies`` (YurtHub's file per object; a file that is
not JSON counts as a copy of unknown version). ``Cloud.read`` lists the compared kinds from the
apiserver once. ``differences`` is PURE.

Leases and Events are not compared: a lease changes every 10 s by design, events are
write-only for a node.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import orjson

from yurthub.cache import entries, verifying

COMPARED: Mapping[str, str] = {
    "nodes.v1.core": "/api/v1/nodes",
    "pods.v1.core": "/api/v1/pods",
    "configmaps.v1.core": "/api/v1/configmaps",
    "secrets.v1.core": "/api/v1/secrets",
    "services.v1.core": "/api/v1/services",
    "endpointslices.v1.discovery.k8s.io": "/apis/discovery.k8s.io/v1/endpointslices",
}
"""The kinds compared (as the cache keys name them) and where the apiserver lists them."""

ObjectId = tuple[str, str, str]
"""(resource.version.group, namespace or "", name)."""
UNKNOWN = "?"


@dataclasses.dataclass(frozen=True, slots=True)
class Copy:
    component: str
    oid: ObjectId
    resource_version: str


def parse_key(key: str) -> tuple[str, ObjectId] | None:
    """(component, object id) of a cache key ``<component>/<gvr>/[<ns>/]<name>``; None for a
    list record, a document or a kind not compared. PURE."""
    if "?" in key:
        return None
    parts = key.split("/")
    if len(parts) == 3:
        component, gvr, name = parts
        namespace = ""
    elif len(parts) == 4:
        component, gvr, namespace, name = parts
    else:
        return None
    if gvr not in COMPARED or not name:
        return None
    return component, (gvr, namespace, name)


def edgehub_copies(cache_dir: pathlib.Path) -> list[Copy]:
    con = verifying.connect(cache_dir)
    try:
        found: list[Copy] = []
        for row in verifying.rows(con):
            if row.kind != "object" or row.value is None:
                continue
            parsed = parse_key(row.key)
            if parsed is None:
                continue
            try:
                rv = entries.decode_header(row.value).resource_version
            except ValueError:
                rv = UNKNOWN
            found.append(Copy(parsed[0], parsed[1], rv))
        return found
    finally:
        con.close()


def yurthub_copies(cache_dir: pathlib.Path) -> list[Copy]:
    found: list[Copy] = []
    for directory, _, files in os.walk(cache_dir, followlinks=False):
        base = pathlib.Path(directory)
        for name in files:
            path = base / name
            parsed = parse_key("/".join(path.relative_to(cache_dir).parts))
            if parsed is None:
                continue
            try:
                doc = orjson.loads(path.read_bytes())
                rv = str(doc["metadata"]["resourceVersion"])
            except (OSError, ValueError, KeyError, TypeError):
                rv = UNKNOWN
            found.append(Copy(parsed[0], parsed[1], rv))
    return found


class Lister(Protocol):
    def get(self, path: str, **query: str) -> dict[str, Any]: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Cloud:
    """The apiserver's objects of the compared kinds: id -> resourceVersion, each pod's node
    and mounted ConfigMaps/Secrets, and the resourceVersion each kind's list was read at."""

    versions: Mapping[ObjectId, str]
    pods_by_node: Mapping[str, tuple[ObjectId, ...]]
    mounts: Mapping[ObjectId, tuple[ObjectId, ...]]
    listed_at: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Per compared kind, its list's resourceVersion (absent: not a number)."""

    @classmethod
    def read(cls, api: Lister) -> Cloud:
        versions: dict[ObjectId, str] = {}
        pods_by_node: dict[str, list[ObjectId]] = {}
        mounts: dict[ObjectId, tuple[ObjectId, ...]] = {}
        listed_at: dict[str, int] = {}
        for gvr, path in COMPARED.items():
            doc = api.get(path)
            at = _number(str((doc.get("metadata") or {}).get("resourceVersion") or ""))
            if at is not None:
                listed_at[gvr] = at
            for obj in doc.get("items") or []:
                meta = obj.get("metadata") or {}
                oid = (gvr, str(meta.get("namespace") or ""), str(meta.get("name")))
                versions[oid] = str(meta.get("resourceVersion"))
                if gvr == "pods.v1.core":
                    node = (obj.get("spec") or {}).get("nodeName")
                    if node:
                        pods_by_node.setdefault(str(node), []).append(oid)
                    mounts[oid] = pod_mounts(obj)
        return cls(versions, {k: tuple(v) for k, v in pods_by_node.items()}, mounts, listed_at)

    def newer(self, copy: Copy) -> bool:
        """Whether ``copy`` is newer than what this read saw: the object changed (or was
        created) after its kind was listed, and the hub has the change. A copy ahead of the
        read is no stale copy; it only says the read is older than the cache."""
        cached = _number(copy.resource_version)
        if cached is None:
            return False
        want = _number(self.versions.get(copy.oid, ""))
        if want is not None:
            return cached > want
        listed = self.listed_at.get(copy.oid[0])
        return listed is not None and cached > listed

    def needed_by(self, node: str) -> set[ObjectId]:
        """What a node's kubelet and kube-proxy read: its Node, its pods and their mounts,
        every Service and EndpointSlice."""
        need: set[ObjectId] = {("nodes.v1.core", "", node)}
        for pod in self.pods_by_node.get(node, ()):
            need.add(pod)
            need.update(self.mounts.get(pod, ()))
        need.update(
            oid
            for oid in self.versions
            if oid[0] in ("services.v1.core", "endpointslices.v1.discovery.k8s.io")
        )
        return need


def _number(rv: str) -> int | None:
    """A resourceVersion as the number etcd gives it (kube-apiserver's are etcd revisions;
    clients must treat them as opaque, the bench compares them against one etcd). PURE."""
    return int(rv) if rv.isascii() and rv.isdigit() else None


def pod_mounts(pod: Mapping[str, Any]) -> tuple[ObjectId, ...]:
    """The ConfigMaps and Secrets a pod's volumes name (projected sources too). PURE."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    found: list[ObjectId] = []
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        sources = [volume]
        sources += [s for s in (volume.get("projected") or {}).get("sources") or []]
        for source in sources:
            if name := (source.get("configMap") or {}).get("name"):
                found.append(("configmaps.v1.core", namespace, str(name)))
            if name := (source.get("secret") or {}).get("secretName"):
                found.append(("secrets.v1.core", namespace, str(name)))
            if name := (source.get("secret") or {}).get("name"):
                found.append(("secrets.v1.core", namespace, str(name)))
    return tuple(found)


def differences(copies: Iterable[Copy], cloud: Cloud, node: str, *, limit: int = 20) -> list[str]:
    """How a node's cached copies differ from the cloud (at most ``limit`` lines, then a
    count): stale or unknown versions, objects the cloud no longer has, needed ones missing.
    An empty list: the cache equals the apiserver. PURE."""
    problems: list[str] = []
    held: set[ObjectId] = set()
    for copy in copies:
        held.add(copy.oid)
        want = cloud.versions.get(copy.oid)
        shown = f"{copy.component}/{'/'.join(p for p in copy.oid if p)}"
        if cloud.newer(copy):
            continue
        if want is None:
            problems.append(f"{shown}: deleted in the cloud, cached at {copy.resource_version}")
        elif want != copy.resource_version:
            problems.append(f"{shown}: cached {copy.resource_version}, cloud {want}")
    for oid in sorted(cloud.needed_by(node) - held):
        problems.append(f"{'/'.join(p for p in oid if p)}: not cached")
    if len(problems) > limit:
        return [*problems[:limit], f"... and {len(problems) - limit} more"]
    return problems
