"""Which cached list makes an offline list answerable, and what a list replacement may remove.

PURE: list keys, parsed selectors and index entries in, answers out; no I/O.

Why: kubelet reads a pod missing from its pod list as deleted and kills it. An offline list must
therefore be complete or a 404, never a partial list served as whole. A list record (made only
by a whole list response, ``store``) says "this list was seen whole"; it answers a request only
when it covers it:

- its namespace is all namespaces or the request's;
- every requirement of its label selector and every term of its field selector is also one of
  the request's (compared parsed and canonical, never as strings), so the request is at least as
  restrictive. This is sound, not complete: ``app=a`` does not cover ``app in (a)`` although
  both select the same objects; the cost of a miss is a 404, never a wrong list.

And a whole list is authoritative for what its selector matches in its namespace: a cached
object of its scope it matches (on stored labels and field values) but lacks is gone from the
cloud or no longer matches, so the stored version is stale either way (``applying``).

Danger: the field values stored per object are those ``selectors.field_values`` knows for the
kind (metadata only for metadata-only objects). A selector on any other field cannot be decided
on stored values (a missing field reads as ``""``, so ``f!=x`` would match everything): such a
list has no authority beyond its own members (``authority`` returns None).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable

from yurthub.cache import entries, keys, selectors

Matcher = Callable[[str, str, entries.Entry], bool]
"""True when a stored object (namespace, name, index entry) matches a list's selectors."""

_METADATA_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


@dataclasses.dataclass(frozen=True, slots=True)
class Selection:
    """A list key's selectors, parsed."""

    labels: selectors.LabelSelector
    fields: selectors.FieldSelector


@functools.lru_cache(maxsize=4096)
def selection(list_key: keys.ListKey) -> Selection:
    """The parsed selectors of ``list_key`` (memoised: records are few and asked often).

    Raises ``selectors.SelectorError`` for a stored key whose selector no longer parses.
    """
    return Selection(
        selectors.parse_labels(list_key.label_selector),
        selectors.parse_fields(list_key.field_selector),
    )


def _selection(list_key: keys.ListKey) -> Selection | None:
    try:
        return selection(list_key)
    except selectors.SelectorError:
        return None


def covers(
    list_key: keys.ListKey,
    namespace: str,
    labels: selectors.LabelSelector,
    fields: selectors.FieldSelector,
) -> bool:
    """Does the whole list ``list_key`` hold every object a list in ``namespace`` with these
    selectors would return (the list's scope is the caller's to match)."""
    if list_key.namespace and list_key.namespace != namespace:
        return False
    cached = _selection(list_key)
    if cached is None:
        return False
    return all(r in labels.requirements for r in cached.labels.requirements) and all(
        t in fields.terms for t in cached.fields.terms
    )


def best(
    records: Iterable[tuple[keys.ListKey, entries.ListRecord]],
    wanted: keys.ListKey,
    namespace: str,
    labels: selectors.LabelSelector,
    fields: selectors.FieldSelector,
) -> tuple[keys.ListKey, entries.ListRecord] | None:
    """The record that answers ``wanted`` best: ``wanted``'s own, else the covering one with the
    highest resourceVersion (its snapshot is the newest). None when no record covers."""
    found: tuple[keys.ListKey, entries.ListRecord] | None = None
    for list_key, record in records:
        if list_key == wanted:
            return list_key, record
        if (found is None or record.rv > found[1].rv) and covers(
            list_key, namespace, labels, fields
        ):
            found = list_key, record
    return found


def decidable_fields(scope: keys.Scope) -> frozenset[str]:
    """Fields whose stored values are the object's own for ``scope``'s objects."""
    if scope.partial:
        return _METADATA_FIELDS  # metadata-only objects: no spec, no status
    return selectors.supported_fields(scope.resource)


def authority(list_key: keys.ListKey) -> Matcher | None:
    """What a whole list of ``list_key`` may remove beyond its own members: the objects of its
    scope (the caller's to pick, with its namespace) its selectors match on stored values.

    None when its selectors cannot be decided on stored values: a field the cache does not keep
    for the kind, or a stored selector that no longer parses.
    """
    cached = _selection(list_key)
    if cached is None or not cached.fields.fields <= decidable_fields(list_key.scope):
        return None
    return matcher(cached.labels, cached.fields)


def matcher(labels: selectors.LabelSelector, fields: selectors.FieldSelector) -> Matcher:
    """These selectors as a test of stored objects (their name and namespace are their key's).

    Compiled once per list: a list replacement tests every object of its scope with it.
    """
    label_test = labels.matches if labels.requirements else None
    terms = tuple((t.field, t.value, t.operator is selectors.Operator.EQUALS) for t in fields.terms)

    def matches(namespace: str, name: str, entry: entries.Entry) -> bool:
        if label_test is not None and not label_test(entry.labels):
            return False
        for field, value, equal in terms:
            if field == "metadata.name":
                found = name
            elif field == "metadata.namespace":
                found = namespace
            else:
                found = entry.fields.get(field, "")
            if (found == value) != equal:
                return False
        return True

    return matches
