"""Whether a request's response may be cached, and in which scope (reference §2.6).

PURE: decides from a ``requestinfo.RequestInfo`` and the response's Content-Type; no I/O.

Rules (YurtHub's, minus its first-list-wins selector conflict, which our list records remove):

- the component (User-Agent cut at the first ``/``) is non-empty and a cache agent (or ``*``);
- a resource request whose verb is not delete/deletecollection/proxy and whose subresource is
  empty or ``status`` (a status response is the parent object);
- never credentials or reviews: CSRs, token/access reviews (their answers are per-caller
  decisions, not state), and no subresource such as ``serviceaccounts/token`` at all;
- only JSON bodies. A Table is a view and never stored as such: the objects its rows carry are
  (full objects with ``includeObject=Object``, else metadata only). PartialObjectMetadata is
  stored under its own partial scope so it never stands in for a full object.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable

from yurthub import requestinfo
from yurthub.cache import keys

NEVER_CACHED_RESOURCES = frozenset(
    {
        "certificatesigningrequests",
        "subjectaccessreviews",
        "selfsubjectaccessreviews",
        "localsubjectaccessreviews",
        "selfsubjectrulesreviews",
        "selfsubjectreviews",
        "tokenreviews",
    }
)
NEVER_CACHED_VERBS = frozenset({"delete", "deletecollection", "proxy"})
CACHED_SUBRESOURCES = frozenset({"", "status"})
JSON = "application/json"

AgentCheck = Callable[[str], bool]
"""``component -> bool``: is this component a cache agent right now."""


class Representation(enum.Enum):
    OBJECT = "object"
    """The object (or list/watch of objects) itself."""
    PARTIAL = "partial"
    """PartialObjectMetadata(List): metadata only."""
    TABLE = "table"
    """A Table view: never stored itself; the objects in its rows are."""
    OTHER = "other"
    """Not JSON (protobuf, CBOR, YAML) or an unknown ``as=``: never stored."""


@dataclasses.dataclass(frozen=True, slots=True)
class MediaType:
    representation: Representation
    partial_version: str = ""
    """``v1``/``v1beta1`` for PARTIAL."""


def classify_media(content_type: str) -> MediaType:
    """What a response (or the first Accept clause) carries, from its media type parameters."""
    ranges = requestinfo.media_ranges(content_type)
    if not ranges:
        return MediaType(Representation.OTHER)
    media, params = ranges[0]
    if media != JSON:
        return MediaType(Representation.OTHER)
    as_kind = params.get("as", "")
    if not as_kind:
        return MediaType(Representation.OBJECT)
    if as_kind == "Table":
        return MediaType(Representation.TABLE)
    if as_kind in requestinfo.PARTIAL_OBJECT_METADATA_KINDS and params.get("g") == keys.META_GROUP:
        version = params.get("v", "v1")
        if version in ("v1", "v1beta1"):
            return MediaType(Representation.PARTIAL, version)
    return MediaType(Representation.OTHER)


def requested_media(info: requestinfo.RequestInfo) -> MediaType:
    """What the client asked for: the first Accept clause (no Accept means JSON objects)."""
    if not info.accept.strip():
        return MediaType(Representation.OBJECT)
    first = info.accept.split(",", 1)[0]
    media = classify_media(first)
    # A client that lists protobuf first but also takes JSON gets JSON from the hub.
    if media.representation is Representation.OTHER and requestinfo.accepts_json(info.accept):
        for clause in info.accept.split(",")[1:]:
            candidate = classify_media(clause)
            if candidate.representation is not Representation.OTHER:
                return candidate
        return MediaType(Representation.OBJECT)
    return media


def is_cacheable_request(info: requestinfo.RequestInfo, is_agent: AgentCheck) -> bool:
    """§2.6 without the response: may this request's answer be cached / answered from cache.
    Never for a Bearer token the hub could not verify (``partition`` None): it would have no
    partition but the component's, which others can read."""
    if not info.is_resource_request or not info.component or info.partition is None:
        return False
    if info.verb in NEVER_CACHED_VERBS or info.subresource not in CACHED_SUBRESOURCES:
        return False
    if info.resource in NEVER_CACHED_RESOURCES:
        return False
    if not info.resource or not info.version:
        return False
    return is_agent(info.component)


def scope_of(info: requestinfo.RequestInfo, media: MediaType) -> keys.Scope:
    """The scope under the request's partition (``RequestInfo.owner``)."""
    return keys.Scope(
        component=info.owner,
        resource=info.resource,
        version=info.version,
        group=info.group,
        partial=media.partial_version if media.representation is Representation.PARTIAL else "",
    )
