"""The cache's in-memory index: which objects, list records and documents the disk holds.

Role: answer "which objects of this component/resource/namespace match" without touching
SQLite: per scope, namespace and name, the entry's header (resourceVersion, labels, selectable
fields, owners); the list records; the document keys. Bodies stay on disk (``reading``).

Invariants: mutated only on the event loop, only with the outcome of a committed transaction
(``writing``), so it always describes a committed disk state. The writer thread reads it during
its hop (through its own overlay, ``batching``), the loop reads it any time, and a scrape
thread only takes ``len``: no lock is needed. Namespaces are interned (thousands of objects
share a few).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from yurthub.cache import entries, keys


class Index:
    def __init__(self) -> None:
        # scope -> namespace -> name -> entry.
        self.objects_by_scope: dict[keys.Scope, dict[str, dict[str, entries.Entry]]] = {}
        self.lists: dict[keys.ListKey, entries.ListRecord] = {}
        self.documents: set[str] = set()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def lookup(self, key: keys.ObjectKey) -> entries.Entry | None:
        namespaces = self.objects_by_scope.get(key.scope)
        if namespaces is None:
            return None
        names = namespaces.get(key.namespace)
        return None if names is None else names.get(key.name)

    def scopes(self) -> list[keys.Scope]:
        return list(self.objects_by_scope)

    def objects(
        self, scope: keys.Scope, namespace: str = "", *, ordered: bool = True
    ) -> Iterator[tuple[keys.ObjectKey, entries.Entry]]:
        """Entries of ``scope``; in ``namespace`` only when given. Sorted by namespace, name,
        unless ``ordered`` is False (the writer looking for a list's members needs no order)."""
        chosen = self.namespaces(scope, namespace)
        for ns, names in sorted(chosen) if ordered else chosen:
            for name in sorted(names) if ordered else names:
                yield keys.ObjectKey(scope, ns, name), names[name]

    def namespaces(
        self, scope: keys.Scope, namespace: str = ""
    ) -> list[tuple[str, dict[str, entries.Entry]]]:
        """The index of ``scope`` by namespace: ``namespace``'s only when given."""
        namespaces = self.objects_by_scope.get(scope)
        if not namespaces:
            return []
        if namespace and scope.namespaced_keys:
            return [(namespace, namespaces.get(namespace) or {})]
        return list(namespaces.items())

    def summary(self, scope: keys.Scope, namespace: str = "") -> tuple[int, int, str]:
        """(objects, highest resourceVersion or -1, the kind of one of them) of ``scope`` (in
        ``namespace`` when given), without making a key per object (an offline list of
        everything needs no more)."""
        count, best, kind = 0, -1, ""
        for _, names in self.namespaces(scope, namespace):
            count += len(names)
            for entry in names.values():
                if entry.rv > best:
                    best = entry.rv
                if not kind:
                    kind = entry.kind
        return count, best, kind

    def count(self, scope: keys.Scope, namespace: str = "") -> int:
        """Objects of ``scope`` (in ``namespace`` when given)."""
        namespaces = self.objects_by_scope.get(scope)
        if not namespaces:
            return 0
        if namespace and scope.namespaced_keys:
            return len(namespaces.get(namespace) or ())
        return sum(len(names) for names in namespaces.values())

    def list_records(
        self, scope: keys.Scope | None = None
    ) -> list[tuple[keys.ListKey, entries.ListRecord]]:
        return [(k, r) for k, r in self.lists.items() if scope is None or k.scope == scope]

    def set_entry(self, key: keys.ObjectKey, entry: entries.Entry) -> None:
        namespaces = self.objects_by_scope.setdefault(key.scope, {})
        names = namespaces.get(key.namespace)
        if names is None:
            names = namespaces[sys.intern(key.namespace)] = {}
        if key.name not in names:
            self._count += 1
        names[key.name] = entry

    def del_entry(self, key: keys.ObjectKey) -> None:
        namespaces = self.objects_by_scope.get(key.scope)
        if namespaces is None:
            return
        names = namespaces.get(key.namespace)
        if names is None or names.pop(key.name, None) is None:
            return
        self._count -= 1
        if not names:
            del namespaces[key.namespace]
            if not namespaces:
                del self.objects_by_scope[key.scope]
