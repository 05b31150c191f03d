"""What the offline Event journal keeps and what it posts after the heal.

PURE. While the cloud is away, kubelet (and any component the hub answers for) still records
Events: client-go's recorder POSTs a new one, and PATCHes a repeated one (strategic merge of
``count``, ``lastTimestamp`` and ``message``; events.k8s.io/v1's recorder patches ``series``),
naming it by the name its create carried. The hub answers with an echo and journals them
(``eventjournal``); after the heal ``eventposting`` posts them. This module decides:

- ``key``: which Events are one (client-go's own aggregation key: source, involved object,
  type, reason, message; for events.k8s.io/v1 the reporting controller and instance, the
  regarding object, type, reason, action and note). A second create with the key of a
  journaled Event (kubelet restarted offline, its recorder's memory gone) is folded into it:
  counts add up, the first ``firstTimestamp`` and the last ``lastTimestamp`` stay.
- ``patched``: a PATCH of a journaled Event applied to it (RFC 7386 merge, which for the
  scalar fields and the ``series`` map client-go patches is what a strategic merge does); its
  identity (name, namespace) is not the patch's to change.
- ``evictions``: oldest first out past ``Bounds`` (1,000 Events, 1 MiB of JSON by default);
  the journal counts what it dropped and ``summary`` builds the one Warning Event on the Node
  that says so.
- ``for_create`` / ``for_patch``: the body posted for an entry (its original timestamps and
  count, stripped of what only the apiserver sets); a 409 on the create means the cloud has
  the Event (created online before the cut), so the count and times are PATCHed onto it.
- ``outcome``: what an answer means for the entry (posted, drop it, try later).

Dangers: everything here is bounded by the caller's ``Bounds``; a body that does not look like
an Event (no object reference) still gets a key (its JSON fields), never an exception.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from yurthub import eventnames
from yurthub.cache import patching

CORE = "v1"
EVENTS = "events.k8s.io/v1"
APIS = (CORE, EVENTS)

SUMMARY_REASON = "OfflineEventsDropped"
SUMMARY_COMPONENT = "edgehub"

_ONLY_THE_APISERVER_SETS = (
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
_PATCHED_FIELDS = {
    CORE: ("count", "lastTimestamp", "message", "series"),
    EVENTS: ("series", "note", "deprecatedCount", "deprecatedLastTimestamp"),
}


@dataclasses.dataclass(frozen=True, slots=True)
class Bounds:
    """What one outage's journal keeps (oldest first out past either bound)."""

    events: int = 1000
    bytes: int = 1 << 20


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _ref(value: Any) -> list[Any]:
    ref = _dict(value)
    return [ref.get(f) for f in ("kind", "namespace", "name", "fieldPath", "uid", "apiVersion")]


def key(api: str, namespace: str, event: Mapping[str, Any]) -> str:
    """The aggregation key: two Events with the same key are one, counted."""
    if api == EVENTS:
        fields: list[Any] = [
            event.get("reportingController"),
            event.get("reportingInstance"),
            _ref(event.get("regarding")),
            event.get("type"),
            event.get("reason"),
            event.get("action"),
            event.get("note"),
        ]
    else:
        source = _dict(event.get("source"))
        fields = [
            source.get("component"),
            source.get("host"),
            _ref(event.get("involvedObject")),
            event.get("type"),
            event.get("reason"),
            event.get("message"),
            event.get("reportingComponent"),
            event.get("reportingInstance"),
        ]
    return orjson.dumps([api, namespace, *fields], option=orjson.OPT_NON_STR_KEYS).decode()


def name(event: Mapping[str, Any]) -> str:
    value = _dict(event.get("metadata")).get("name")
    return value if isinstance(value, str) else ""


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def folded(api: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A second create of the same Event folded into the journaled one: the counts add up, the
    first occurrence stays the old one's and the last becomes the new one's."""
    out = dict(old)
    if api == EVENTS:
        old_series = _dict(old.get("series"))
        new_series = _dict(new.get("series"))
        last = new_series.get("lastObservedTime") or new.get("eventTime")
        out["series"] = {
            **old_series,
            "count": _count(old_series.get("count")) + _count(new_series.get("count")),
            **({"lastObservedTime": last} if last else {}),
        }
        if new.get("note") is not None:
            out["note"] = new["note"]
        return out
    out["count"] = _count(old.get("count")) + _count(new.get("count"))
    last = new.get("lastTimestamp") or new.get("firstTimestamp")
    if last:
        out["lastTimestamp"] = last
    if not out.get("firstTimestamp") and new.get("firstTimestamp"):
        out["firstTimestamp"] = new["firstTimestamp"]
    if new.get("message") is not None:
        out["message"] = new["message"]
    return out


def patched(body: Mapping[str, Any], patch: Any) -> dict[str, Any]:
    """A PATCH applied to a journaled Event (``patching.PatchError`` when it cannot be)."""
    result = patching.merge_patch(dict(body), patch)
    if not isinstance(result, dict):
        raise patching.PatchError("the patch would replace the Event with a non-object")
    meta = _dict(body.get("metadata"))
    new_meta = _dict(result.get("metadata"))
    result["metadata"] = {
        **new_meta,
        **{k: meta[k] for k in ("name", "namespace") if k in meta},
    }
    return result


def for_create(body: Mapping[str, Any]) -> dict[str, Any]:
    """The body POSTed after the heal: as recorded, without what only the apiserver sets."""
    out = dict(body)
    meta = dict(_dict(body.get("metadata")))
    for field in _ONLY_THE_APISERVER_SETS:
        meta.pop(field, None)
    out["metadata"] = meta
    return out


def for_patch(api: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The strategic merge patch sent when the cloud already has the Event (a 409 to the
    create): its count, times and latest message as the journal holds them."""
    return {f: body[f] for f in _PATCHED_FIELDS.get(api, ()) if body.get(f) is not None}


def evictions(sizes: Sequence[tuple[int, int]], bounds: Bounds) -> list[int]:
    """Entries to drop, oldest first, so the rest fit ``bounds``. ``sizes``: (seq, bytes) of
    every journaled entry, oldest first. One Event larger than the byte bound alone goes
    first (it would otherwise push out everything before it, and still not fit)."""
    out = [seq for seq, size in sizes if size > bounds.bytes]
    kept = [(seq, size) for seq, size in sizes if size <= bounds.bytes]
    count = len(kept)
    total = sum(size for _, size in kept)
    for seq, size in kept:
        if count <= bounds.events and total <= bounds.bytes:
            break
        out.append(seq)
        count -= 1
        total -= size
    return out


def timestamp(when: float) -> str:
    """RFC 3339 with seconds, as core/v1 Events carry ``firstTimestamp``."""
    return datetime.datetime.fromtimestamp(int(when), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def summary(
    node: str, dropped: int, first: float, last: float, bounds: Bounds, *, unique: str
) -> dict[str, Any]:
    """The one Event saying how many Events the journal dropped during the outage (on the
    Node, in ``default``, as kubelet records Node Events). ``unique``: makes the name unique
    (the caller's clock); the name is valid whatever the node's length (``eventnames``)."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": eventnames.on_node(node, f"offline-events-dropped.{unique}"),
            "namespace": "default",
        },
        "involvedObject": {"kind": "Node", "name": node, "uid": node, "apiVersion": "v1"},
        "reason": SUMMARY_REASON,
        "message": (
            f"{dropped} Events recorded on node {node} while the cloud was unreachable were "
            f"dropped: the hub keeps at most {bounds.events} Events ({bounds.bytes} bytes) per "
            "outage, oldest first out"
        ),
        "type": "Warning",
        "source": {"component": SUMMARY_COMPONENT, "host": node},
        "count": 1,
        "firstTimestamp": timestamp(first),
        "lastTimestamp": timestamp(last),
        "reportingComponent": SUMMARY_COMPONENT,
        "reportingInstance": node,
    }


class Outcome(enum.Enum):
    POSTED = "posted"
    """The cloud has it: remove the entry."""
    EXISTS = "exists"
    """409 to a create: the cloud has an Event of that name; patch the count onto it."""
    REFUSED = "refused"
    """The cloud will never take it (invalid, forbidden, its namespace gone): drop it."""
    RETRY = "retry"
    """Try again later (transport error, throttled, the server failing)."""


def outcome(status: int, *, create: bool) -> Outcome:
    if 200 <= status < 300:
        return Outcome.POSTED
    if status == 409 and create:
        return Outcome.EXISTS
    if status == 0 or status == 429 or status >= 500 or status == 401:
        # 401: the hub's identity is being rotated or not yet accepted; it will be.
        return Outcome.RETRY
    return Outcome.REFUSED
