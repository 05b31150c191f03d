"""Reading an OpenYurt node's YurtHub cache (a file per object) into this hub's cache.

YurtHub keeps ``/etc/kubernetes/cache/<component>/<resource>.<version>.<group>/[<ns>/]<name>``,
one JSON object per file, and answers offline lists with whatever files a directory holds
(reference ``yurthub-behaviour.md`` §1.4, §3.7). ``edgehub cache import-yurthub`` reads such a
tree so a node switched from YurtHub to edgehub keeps its offline answers from the first
second, before its components have listed through the new hub:

- every object file becomes the object (``store.PutObject``), under the same component (as
  this hub names it: kubemark's ``hollow-kubelet`` directory is kubelet's,
  ``requestinfo.COMPONENT_ALIASES``, so a hollow node's YurtHub cache answers its kubelet);
- every ``<component>/<resource>`` directory becomes one whole list of what it holds
  (``store.PutList``, all namespaces, no selector): offline it answers what YurtHub would have
  answered (for kubelet: its node's pods), filtered by the request's selectors as usual. The
  next list through the hub replaces it;
- ``version`` becomes ``/version``; YurtHub's discovery files, ``_internal/`` (its REST mapper),
  partial-object-metadata views, legacy-layout directories (no ``.`` in the resource
  directory), symlinks, files over ``MAX_FILE_BYTES`` and files that are not one JSON object
  of the directory's kind are skipped and counted, never guessed at.

The YurtHub tree is only read: rolling back to YurtHub finds it as it was. ``walk`` and
``parse`` are pure over names; ``read`` touches the disk (call it off the event loop).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
from collections.abc import Iterator

import orjson

from yurthub import migrationplans, requestinfo
from yurthub.cache import eventjournal, keys, keysealing, store, tpmsealing
from yurthub.outages import history

MAX_FILE_BYTES = 16 << 20
SKIPPED_TOP = frozenset({"_internal"})
PARTIAL = "partialobjectmetadatas.v1.meta.k8s.io"


@dataclasses.dataclass(frozen=True, slots=True)
class Located:
    """Where a YurtHub file sits: its scope, namespace ("" cluster-scoped) and name."""

    scope: keys.Scope
    namespace: str
    name: str


def parse(parts: tuple[str, ...]) -> Located | None:
    """The object a path (relative to the cache root, split) holds; None: not an object file
    this hub imports. Pure."""
    if len(parts) not in (3, 4) or parts[0] in SKIPPED_TOP or parts[0].startswith("."):
        return None
    component, gvr = requestinfo.COMPONENT_ALIASES.get(parts[0], parts[0]), parts[1]
    if gvr == PARTIAL:
        return None
    resource, dot, rest = gvr.partition(".")
    version, dot2, group = rest.partition(".")
    if not (dot and dot2 and resource and version and group):
        return None  # legacy layout (<component>/<resource>/...): no version to key it by
    group = "" if group == keys.CORE_GROUP else group
    if len(parts) == 4:
        namespace, name = parts[2], parts[3]
        if resource == "namespaces":
            return None  # YurtHub keys namespaces cluster-scoped: a 4-level one is not its
    else:
        namespace, name = "", parts[2]
    if not name or name.startswith("."):
        return None  # hidden: YurtHub's temporary files
    return Located(keys.Scope(component, resource, version, group), namespace, name)


@dataclasses.dataclass
class Tree:
    """What ``read`` found."""

    objects: dict[keys.Scope, list[tuple[Located, bytes]]] = dataclasses.field(default_factory=dict)
    version: bytes | None = None
    skipped: list[str] = dataclasses.field(default_factory=list)
    """Relative paths not imported, with why."""


def walk(root: pathlib.Path) -> Iterator[tuple[pathlib.Path, tuple[str, ...]]]:
    """Regular files under ``root`` (symlinks never followed), with their relative parts."""
    for directory, subdirs, files in os.walk(root, followlinks=False):
        subdirs.sort()
        base = pathlib.Path(directory)
        for name in sorted(files):
            path = base / name
            yield path, path.relative_to(root).parts


OWN_FILES = frozenset(
    (
        *store.DB_FILES,
        *(eventjournal.FILE_NAME + suffix for suffix in ("", "-wal", "-shm", "-journal")),
        *(history.FILE_NAME + suffix for suffix in ("", "-wal", "-shm", "-journal")),
        keysealing.KEY_FILE,
        tpmsealing.PUBLIC,
        tpmsealing.PRIVATE,
        migrationplans.MARKER,
    )
)
"""The top-level names edgehub writes in its cache directory, which may be YurtHub's too (a
migrated node shares ``/etc/kubernetes/cache``): never read as YurtHub's."""


def read(root: pathlib.Path, *, skip: frozenset[str] = frozenset()) -> Tree:
    """Read YurtHub's tree at ``root``; ``skip``: top-level names to leave alone (this hub's own
    database files when both share the directory)."""
    tree = Tree()
    seen: set[Located] = set()
    for path, parts in walk(root):
        if parts[0] in skip:
            continue
        shown = "/".join(parts)
        if path.is_symlink():
            tree.skipped.append(f"{shown}: a symlink")
            continue
        if parts == ("version",):
            tree.version = path.read_bytes()[:MAX_FILE_BYTES]
            continue
        located = parse(parts)
        if located is None:
            tree.skipped.append(f"{shown}: not an object file of YurtHub's layout")
            continue
        if path.stat().st_size > MAX_FILE_BYTES:
            tree.skipped.append(f"{shown}: larger than {MAX_FILE_BYTES} bytes")
            continue
        body = path.read_bytes()
        problem = _problem(body, located)
        if problem:
            tree.skipped.append(f"{shown}: {problem}")
            continue
        if located in seen:
            tree.skipped.append(f"{shown}: the same object under another name of its component")
            continue
        seen.add(located)
        tree.objects.setdefault(located.scope, []).append((located, body))
    return tree


def _problem(body: bytes, located: Located) -> str:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "not JSON"
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        return "not a Kubernetes object"
    meta = obj["metadata"]
    if meta.get("name") != located.name:
        return f"names {meta.get('name')!r}, not its file name"
    if located.namespace and meta.get("namespace") not in (None, located.namespace):
        return f"in namespace {meta.get('namespace')!r}, not its directory's"
    return ""


def list_body(members: list[tuple[Located, bytes]]) -> bytes:
    """A list response made of a directory's objects: what YurtHub answered offline."""
    items = [orjson.loads(body) for _, body in members]
    versions = [
        int(rv)
        for item in items
        if str(rv := item["metadata"].get("resourceVersion", "")).isdigit()
    ]
    first = items[0] if items else {}
    kind = str(first.get("kind") or "")
    return orjson.dumps(
        {
            "kind": f"{kind}List" if kind else "List",
            "apiVersion": str(first.get("apiVersion") or "v1"),
            "metadata": {"resourceVersion": str(max(versions)) if versions else ""},
            "items": items,
        }
    )


def digest(tree: Tree) -> str:
    """A digest of what ``read`` found (names and bytes), to record what an import read."""
    h = hashlib.sha256()
    for scope, members in sorted(tree.objects.items(), key=lambda kv: str(kv[0].prefix())):
        for located, body in members:
            h.update(f"{scope.prefix()}|{located.namespace}|{located.name}|{len(body)}|".encode())
            h.update(body)
    h.update(tree.version or b"")
    return h.hexdigest()


def count(tree: Tree) -> int:
    return sum(len(members) for members in tree.objects.values())


async def fill(
    path: pathlib.Path,
    tree: Tree,
    key_source: keysealing.Source | None = None,
    *,
    data_keys: store.Keys | None = None,
) -> None:
    """Write ``tree`` into the hub's cache at ``path`` (the hub not running on it): every object,
    a whole list per directory, ``/version``, sealed as ``key_source`` (as the hub will open
    it: no plaintext is written where a sealed cache goes), or with ``data_keys`` already opened
    (the hub's start: its data keys are then left for it to retire). Raises
    ``store.StoreError``."""
    cache = await store.Store.open(
        path, key_source=key_source, keys=data_keys, retire=data_keys is None
    )

    async def put(job: store.Job) -> None:
        # The write queue is bounded: wait for it to drain before giving up on a job.
        if not cache.submit(job):
            await cache.flush()
            if not cache.submit(job):
                raise store.StoreError(f"the cache's write queue refused {job.size} bytes")

    try:
        for scope, members in sorted(tree.objects.items(), key=lambda kv: str(kv[0].prefix())):
            for located, body in members:
                await put(store.PutObject(scope, body, located.namespace, name=located.name))
            list_key = keys.list_key(scope, "", "", "")
            await put(store.PutList(list_key, list_body(members)))
        if tree.version is not None:
            await put(
                store.PutDocument(
                    keys.nonresource_key("/version"), "application/json", tree.version
                )
            )
        await cache.flush()
    finally:
        await cache.close()
