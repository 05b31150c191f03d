"""Content negotiation: which representation an ``Accept`` header asks for, which body format a
``Content-Type`` names. Pure string parsing.

Output representations: plain JSON (or YAML), a ``meta.k8s.io`` Table, metadata-only
``PartialObjectMetadata(List)``, and for discovery the aggregated
``APIGroupDiscoveryList``. Clauses are tried in order (highest ``q`` first):
the first one the sim can serve wins, so kubectl's "Table, else JSON" and the
kubelet's "protobuf, */*" both get an answer. Only a header that admits
nothing but protobuf (or other unknown types) is refused with 406.
"""

from __future__ import annotations

import dataclasses
import enum

from yurthub import statuses
from yurthub.testing.sim import errors


class Form(enum.Enum):
    OBJECT = "object"
    TABLE = "table"
    PARTIAL = "partial"
    DISCOVERY_V2 = "discovery-v2"


@dataclasses.dataclass(frozen=True, slots=True)
class MediaType:
    type: str
    params: dict[str, str]

    @property
    def essence(self) -> str:
        return self.type


@dataclasses.dataclass(frozen=True, slots=True)
class Negotiated:
    form: Form = Form.OBJECT
    yaml: bool = False
    # meta.k8s.io or apidiscovery.k8s.io version of Table / PartialObjectMetadata / discovery.
    version: str = "v1"
    # The Accept named PartialObjectMetadataList (for a list) rather than the single form.
    as_list: bool = False

    @property
    def content_type(self) -> str:
        if self.form is Form.DISCOVERY_V2:
            return (
                f"application/json;g=apidiscovery.k8s.io;v={self.version};as=APIGroupDiscoveryList"
            )
        return "application/yaml" if self.yaml else "application/json"


def parse_media_types(header: str | None) -> list[MediaType]:
    """Clauses of an Accept header, highest ``q`` first (stable for equal q)."""
    if not header or not header.strip():
        return [MediaType("*/*", {})]
    found: list[tuple[float, int, MediaType]] = []
    for index, clause in enumerate(header.split(",")):
        parts = [p.strip() for p in clause.split(";")]
        if not parts[0]:
            continue
        params: dict[str, str] = {}
        for p in parts[1:]:
            k, sep, v = p.partition("=")
            if sep:
                params[k.strip().lower()] = v.strip().strip('"')
        try:
            q = float(params.pop("q", "1"))
        except ValueError:
            q = 1.0
        if q <= 0:
            continue
        found.append((-q, index, MediaType(parts[0].lower(), params)))
    found.sort(key=lambda t: (t[0], t[1]))
    return [m for _, _, m in found]


_JSONISH = frozenset({"application/json", "*/*", "application/*"})
_META_VERSIONS = frozenset({"v1", "v1beta1"})


def negotiate(
    accept: str | None,
    *,
    table: bool = False,
    partial: bool = False,
    discovery: bool = False,
) -> Negotiated:
    """Pick the representation; raises a 406 ApiError when nothing acceptable is on offer."""
    for m in parse_media_types(accept):
        as_ = m.params.get("as")
        group, version = m.params.get("g", ""), m.params.get("v", "")
        if m.type == "application/yaml" and not as_:
            return Negotiated(yaml=True)
        if m.type not in _JSONISH:
            continue
        if as_ is None:
            return Negotiated()
        if as_ == "Table" and group == "meta.k8s.io" and version in _META_VERSIONS:
            if table:
                return Negotiated(Form.TABLE, version=version)
            continue
        if (
            as_ in ("PartialObjectMetadata", "PartialObjectMetadataList")
            and group == "meta.k8s.io"
            and version in _META_VERSIONS
        ):
            if partial:
                return Negotiated(
                    Form.PARTIAL, version=version, as_list=as_ == "PartialObjectMetadataList"
                )
            continue
        if (
            as_ == "APIGroupDiscoveryList"
            and group == "apidiscovery.k8s.io"
            and version in ("v2", "v2beta1")
        ):
            if discovery:
                return Negotiated(Form.DISCOVERY_V2, version=version)
            continue
    raise errors.ApiError(
        statuses.failure(
            406,
            "only the following media types are accepted: application/json, application/yaml, "
            "application/json;as=Table;v=v1;g=meta.k8s.io, "
            "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
        )
    )


class BodyFormat(enum.Enum):
    JSON = "json"
    YAML = "yaml"
    MERGE_PATCH = "merge"
    STRATEGIC_PATCH = "strategic"
    JSON_PATCH = "json-patch"
    APPLY_PATCH = "apply"
    PROTOBUF = "protobuf"


_PATCH_TYPES = {
    "application/merge-patch+json": BodyFormat.MERGE_PATCH,
    "application/strategic-merge-patch+json": BodyFormat.STRATEGIC_PATCH,
    "application/json-patch+json": BodyFormat.JSON_PATCH,
    "application/apply-patch+yaml": BodyFormat.APPLY_PATCH,
}


def body_format(content_type: str | None, *, patch: bool) -> BodyFormat:
    """The format of a request body; raises 415 for anything the sim does not read."""
    essence = (content_type or "").split(";", 1)[0].strip().lower()
    if patch:
        found = _PATCH_TYPES.get(essence)
        if found is None:
            raise errors.ApiError(
                statuses.failure(
                    415,
                    f"the body of the request was in an unknown format - accepted media types "
                    f"include: {', '.join(_PATCH_TYPES)}",
                )
            )
        return found
    if essence in ("", "application/json", "*/*"):
        return BodyFormat.JSON
    if essence in ("application/yaml", "application/x-yaml", "text/yaml"):
        return BodyFormat.YAML
    if essence == "application/vnd.kubernetes.protobuf":
        return BodyFormat.PROTOBUF
    raise errors.ApiError(
        statuses.failure(
            415,
            f'the body of the request was in an unknown format ("{essence}") - accepted media '
            "types include: application/json, application/yaml, "
            "application/vnd.kubernetes.protobuf",
        )
    )
