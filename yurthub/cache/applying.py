"""How a response changes the cache: pure decisions over index entries.

PURE: takes the current entries (through a lookup function) and an incoming object, list or
watch event, returns the writes and removals to make. ``store`` carries them out in one SQLite
transaction and only then updates its in-memory index.

Rules (DESIGN.md "The cache", reference §3.3-3.5, and what we do beyond YurtHub):

- One object (get/create/update/patch, watch ADDED/MODIFIED, list item) replaces the stored one
  only if its resourceVersion is not older (an older one still records which list saw it).
- A whole list is authoritative for what its selector matches in its namespace (``coverage``):
  an object of its scope there that it matches on stored labels and fields but lacks is
  removed, whoever brought it in (a get, another list, a watch): it was deleted in the cloud or
  no longer matches, so the stored version is stale either way. Left alone otherwise, it would
  be a ghost in every offline list that matches it. An object it does not match but owned
  only loses that claim, and is removed when no other list (or a direct get) still owns it. So
  lists with different selectors coexist. Either way an object newer than the list's snapshot
  stays: a watch event already overtook it.
- A watch DELETED under a list that cannot lose objects except by deletion (no selector, or only
  ``metadata.name``/``metadata.namespace``) removes the object for every owner. Under a selector
  it may only mean "no longer matches" (the apiserver sends the previous object in both cases),
  so only that list's claim goes, plus any direct-get claim (a get says nothing about the
  present); other lists keep the object until their own watch says otherwise.
- A list is stored whole or not at all: every item is stored (a pod without ``spec.nodeName``
  too: YurtHub refuses those everywhere, reference §3.3 **[quirk]**, so a ``kubectl get pods -A``
  answered offline lacked the pending pods the cloud had listed), and a list with an item the
  cache cannot store (no name, a Status) or outside the list's namespace is not stored at all.
- An object whose body names another object than the request's URL (name, or namespace) is not
  stored: it would answer for the wrong key offline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from yurthub.cache import coverage, entries, keys, selectors

Lookup = Callable[[keys.ObjectKey], entries.Entry | None]


@dataclasses.dataclass(frozen=True, slots=True)
class Item:
    """An incoming object, decoded once, with its bytes to store."""

    key: keys.ObjectKey
    entry: entries.Entry
    """Owners are filled by the decision."""
    body: entries.Body


@dataclasses.dataclass(frozen=True, slots=True)
class Write:
    key: keys.ObjectKey
    entry: entries.Entry
    body: entries.Body | None
    """None: keep the stored body, rewrite only the header (the owners changed)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Remove:
    key: keys.ObjectKey


Change = Write | Remove


class NotStorable(ValueError):
    """An object the cache refuses (no name, a Status, another object than the URL's...)."""


class WrongObject(NotStorable):
    """The body names another object (name or namespace) than the request it answers."""


def check_identity(item: Item, name: str, namespace: str) -> None:
    """Raise ``WrongObject`` unless ``item`` is the object a request for ``namespace``/``name``
    may answer with (empty: not given by the URL)."""
    if name and item.key.name != name:
        raise WrongObject(f"the body names {item.key.name!r}, the URL {name!r}")
    # ``namespaces`` objects have no namespace level in their key (their URL names them twice).
    if namespace and item.key.namespace and item.key.namespace != namespace:
        raise WrongObject(
            f"the body is in namespace {item.key.namespace!r}, the URL in {namespace!r}"
        )


def is_newer_or_same(incoming: entries.Entry, current: entries.Entry) -> bool:
    """The RV guard. Opaque (non-decimal) versions cannot be ordered: the newest write wins."""
    if incoming.rv < 0 or current.rv < 0:
        return True
    return incoming.rv >= current.rv


def exhaustive(list_key: keys.ListKey) -> bool:
    """True when an object can leave this list only by being deleted."""
    if list_key.label_selector:
        return False
    if not list_key.field_selector:
        return True
    fields = selectors.parse_fields(list_key.field_selector).fields
    return fields <= {"metadata.name", "metadata.namespace"}


def item_from_object(
    scope: keys.Scope,
    obj: Mapping[str, Any],
    body: entries.Body,
    *,
    fallback_namespace: str = "",
    cells: tuple[Any, ...] | None = None,
) -> Item:
    """Decode-side checks and the index entry of one object; raises ``NotStorable``."""
    if obj.get("kind") == "Status":
        raise NotStorable("a Status is not an object")
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise NotStorable("object has no metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise NotStorable("object has no name")
    namespace = meta.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        namespace = fallback_namespace
    fields = selectors.field_values(scope.resource, obj)
    entry = entries.entry_from_object(obj, fields, frozenset(), entries.body_size(body), cells)
    return Item(keys.object_key(scope, namespace, name), entry, body)


def apply_object(
    current: entries.Entry | None, item: Item, owner: str, *, same_version_differs: bool = False
) -> Change | None:
    """Store one object for ``owner`` (a list key string or ``entries.DIRECT``).

    The same resourceVersion means the same object, so it is not rewritten, unless
    ``same_version_differs``: a body the hub made itself offline (kubelet's lease renewal keeps
    the version it was given).
    """
    if current is None:
        return Write(item.key, item.entry.with_owners(frozenset((owner,))), item.body)
    owners = current.owners | {owner}
    same_version = 0 <= item.entry.rv == current.rv
    new_cells = item.entry.cells is not None and current.cells is None
    if same_version and owner in current.owners and not same_version_differs and not new_cells:
        return None  # the same version, already claimed: nothing to write
    if same_version and not same_version_differs and not new_cells:
        # The same object for another list: only the claim is new. The stored body stays, in
        # the form it came (protobuf for kubelet's own lists, whoever relists it as JSON).
        return Write(item.key, current.with_owners(owners), None)
    if is_newer_or_same(item.entry, current):
        entry = item.entry.with_owners(owners)
        if same_version and entry.cells is None and current.cells is not None:
            # The same version without a Table row: the row printed for it still holds.
            entry = entry.with_cells(current.cells)
        return Write(item.key, entry, item.body)
    if owners != current.owners:
        return Write(item.key, current.with_owners(owners), None)
    return None


def apply_deleted(
    current: entries.Entry | None, key: keys.ObjectKey, list_key: keys.ListKey
) -> Change | None:
    """A watch DELETED event seen by the watch continuing ``list_key``."""
    if current is None:
        return None
    if exhaustive(list_key):
        return Remove(key)
    remaining = current.owners - {str(list_key), entries.DIRECT}
    if not remaining:
        return Remove(key)
    return Write(key, current.with_owners(remaining), None)


def adopt(
    current: entries.Entry | None, key: keys.ObjectKey, list_key: keys.ListKey, direct: bool
) -> Change | None:
    """An earlier page's item, claimed for its list at the list's last page; ``direct``: the
    direct claim it holds was only the page's, and goes."""
    if current is None:
        return None
    owners = current.owners | {str(list_key)}
    if direct:
        owners -= {entries.DIRECT}
    if owners == current.owners:
        return None
    return Write(key, current.with_owners(owners), None)


def concerned(list_key: keys.ListKey) -> coverage.Matcher:
    """The objects of its scope and namespace a whole list of ``list_key`` may change: its own
    members, and what its selector matches (``coverage.authority``)."""
    owner = str(list_key)
    matches = coverage.authority(list_key)
    if matches is None:
        return lambda namespace, name, entry: owner in entry.owners
    return lambda namespace, name, entry: owner in entry.owners or matches(namespace, name, entry)


def replace_list(
    lookup: Lookup,
    candidates: Iterable[tuple[keys.ObjectKey, entries.Entry]],
    items: Iterable[Item],
    list_key: keys.ListKey,
    list_rv: int = -1,
    keep: Collection[keys.ObjectKey] = (),
) -> list[Change]:
    """A whole list response: its items, and what it no longer holds let go.

    ``candidates``: cached objects with their current entries, at least those of the list's
    scope and namespace it is ``concerned`` with (others are ignored). ``keep``: objects the
    list holds that are not among ``items`` (earlier pages, items unchanged). Each candidate
    it lacks goes if the list's selector matches it, else only loses the list's claim; unless
    it is newer than the list (``rv > list_rv``, e.g. added by a watch event after the
    snapshot a lagging apiserver served): the snapshot says nothing about it.
    """
    owner = str(list_key)
    changes: list[Change] = []
    seen: set[keys.ObjectKey] = set()
    for item in items:
        seen.add(item.key)
        change = apply_object(lookup(item.key), item, owner)
        if change is not None:
            changes.append(change)
    matches = coverage.authority(list_key)
    for key, current in candidates:
        if key in seen or key in keep:
            continue
        if list_rv >= 0 and current.rv > list_rv:
            continue
        if (
            matches is not None
            and key.scope == list_key.scope
            and list_key.covers_namespace(key.namespace)
            and matches(key.namespace, key.name, current)
        ):
            changes.append(Remove(key))
        elif owner in current.owners:
            remaining = current.owners - {owner}
            changes.append(
                Remove(key) if not remaining else Write(key, current.with_owners(remaining), None)
            )
    return changes
