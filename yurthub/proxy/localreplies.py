"""What every offline answer (``proxy/local.py`` and its siblings) is built from: ``Reader``
(the store, the response filters, the clock), Status and body replies, request bodies read
within the apiserver's limit, and the choice of wire format.

Errors are Kubernetes Status objects. A bad request body raises ``Reply`` from deep inside an
answer; ``local.Answerer.answer`` sends its response.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from inputbounds import nesting
from yurthub import requestinfo, statuses
from yurthub.cache import cacheability, framing, keys, store
from yurthub.kubeproto import converting
from yurthub.proxy import seams

JSON = "application/json"
PROTOBUF = requestinfo.PROTOBUF_MEDIA_TYPE
MAX_REQUEST_BODY = 3 << 20
"""The apiserver's own request body limit (3 MiB)."""


class Reader:
    """The cache an answer reads, the response filters it passes (the cache stores what the
    cloud sent; offline answers are filtered as online ones) and the clock."""

    def __init__(self, cache: store.Store, clock: Callable[[], float]) -> None:
        self.store = cache
        self.clock = clock
        self.filters: seams.ResponseFilter | None = None
        """Set by the assembly; None: unfiltered."""

    def stored(self, info: requestinfo.RequestInfo) -> seams.StoredObjects | None:
        """The request's filters for objects from the cache, or None when none apply."""
        return self.filters.stored(info) if self.filters is not None else None

    def filtered(self, info: requestinfo.RequestInfo, body: bytes) -> bytes:
        stored = self.stored(info)
        return body if stored is None else stored.object(body)

    async def read(self, key: keys.ObjectKey, *, as_stored: bool = False) -> bytes | None:
        if self.store.entry(key) is None:
            return None
        return await self.store.body(key, as_stored=as_stored)


def object_key(info: requestinfo.RequestInfo, partial: str = "") -> keys.ObjectKey:
    scope = keys.Scope(info.owner, info.resource, info.version, info.group, partial)
    return keys.object_key(scope, info.namespace, info.name)


def scopes(info: requestinfo.RequestInfo, media: cacheability.MediaType) -> list[keys.Scope]:
    """Scopes that can answer, best first: a view is built from full objects when cached,
    else from the metadata-only objects kubectl's Tables carried."""
    full = keys.Scope(info.owner, info.resource, info.version, info.group)
    if media.representation is cacheability.Representation.PARTIAL:
        return [dataclasses.replace(full, partial=media.partial_version), full]
    if media.representation is cacheability.Representation.TABLE:
        return [full, dataclasses.replace(full, partial="v1")]
    return [full]


class Reply(Exception):
    """Raised with a finished answer from deep inside (bad request bodies)."""

    def __init__(self, response: web.StreamResponse) -> None:
        super().__init__(response.status)
        self.response = response


def decoded(
    info: requestinfo.RequestInfo, body: bytes, converter: converting.Converter
) -> dict[str, Any]:
    """A request body as a JSON-shaped dict: JSON, or protobuf (what Go clients send by
    default: kubelet's lease renewals and TokenRequests). ``ValueError`` when unreadable."""
    if info.body_content_type == PROTOBUF:
        obj = converter.object(body)
    else:
        try:
            obj = framing.parse_object(body)
        except framing.BadBody as e:
            raise ValueError(f"not JSON: {e}") from e
    nesting.check(obj)  # a ValueError: it is re-encoded, and orjson stops at 254 levels
    return obj


def status(code: int, message: str, details: statuses.StatusDetails | None = None) -> web.Response:
    return json(code, statuses.encode(statuses.failure(code, message, details=details)))


def unavailable(message: str) -> web.Response:
    """503 ServiceUnavailable with ``Retry-After``: clients retry, and get the real answer
    once the cloud is back."""
    resp = status(503, message)
    resp.headers["Retry-After"] = "10"
    return resp


def unreachable_path(path: str) -> web.Response:
    shown = path if len(path) <= 200 else path[:200] + "..."
    return unavailable(
        f"the cloud is unreachable: {shown} is answered only by the apiserver (offline the hub "
        "serves /version and the discovery documents it cached)"
    )


OFFLINE_LIST_MISS = "not in the hub's offline cache (never listed while online)"
OFFLINE_LIST_LOST = (
    "not in the hub's offline cache (the list was read online but could not be stored: {})"
)
OFFLINE_OBJECT_MISS = "not in the hub's offline cache (never read while online, or deleted since)"


def not_found(
    info: requestinfo.RequestInfo, name: str | None = None, *, lost: str = ""
) -> web.Response:
    """The apiserver's NotFound (clients read ``reason``), its message saying why: offline a 404
    is a cache miss, not a deletion the cloud reported. ``lost``: why the list that would answer
    was not stored (its write failed: a full disk)."""
    what = info.name if name is None else name
    found = statuses.not_found(info.resource, what, info.group)
    why = OFFLINE_OBJECT_MISS if what else OFFLINE_LIST_MISS
    if lost and not what:
        why = OFFLINE_LIST_LOST.format(lost)
    found["message"] = f"{found['message']}: {why}"
    return json(404, statuses.encode(found))


def json(code: int, body: bytes) -> web.Response:
    resp = web.Response(status=code, body=body)
    resp.headers["Content-Type"] = JSON
    return resp


def protobuf(body: bytes) -> web.Response:
    resp = web.Response(status=200, body=body)
    resp.headers["Content-Type"] = PROTOBUF
    return resp


def requested(
    info: requestinfo.RequestInfo, reason: seams.LocalReason
) -> cacheability.MediaType | None:
    """What to answer with; None when only the cloud could answer this client (not JSON).

    Offline that is a 406. Otherwise the request goes (or went) upstream, which speaks protobuf
    (kubelet's get-node) or whose failure is the truer answer (a transport error).
    """
    media = cacheability.requested_media(info)
    if media.representation is not cacheability.Representation.OTHER:
        return media
    if protobuf_first(info):
        # Protobuf only: answered when the cache holds the objects as protobuf (else a 406).
        return cacheability.MediaType(cacheability.Representation.OBJECT)
    response = unacceptable(reason)
    if response is not None:
        raise Reply(response)
    return None


NOT_ACCEPTABLE = (
    "offline, the hub answers from what it cached: JSON, or protobuf for what came as "
    "protobuf; accept application/json"
)


def protobuf_first(info: requestinfo.RequestInfo) -> bool:
    return info.content_type == PROTOBUF and info.partial_object_metadata is None


def wants_protobuf(info: requestinfo.RequestInfo, media: cacheability.MediaType) -> bool:
    """Whole objects for a client that prefers protobuf (kubelet, kube-proxy: what they
    asked for, and what the cache holds for them as received)."""
    return media.representation is cacheability.Representation.OBJECT and protobuf_first(info)


def unacceptable(reason: seams.LocalReason) -> web.Response | None:
    """A protobuf-only client asking for what the cache holds as JSON: offline a 406, else
    left to the cloud."""
    return status(406, NOT_ACCEPTABLE) if reason is seams.LocalReason.OFFLINE else None


def flag(value: str) -> bool:
    return value not in ("", "0") and value.lower() != "false"


def api_version(info: requestinfo.RequestInfo) -> str:
    return f"{info.group}/{info.version}" if info.group else info.version


async def read_body(request: web.Request) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await request.content.read(64 << 10)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_REQUEST_BODY:
            raise Reply(status(413, f"request body larger than {MAX_REQUEST_BODY} bytes"))
        chunks.append(chunk)


async def read_json(request: web.Request) -> Any:
    body = await read_body(request)
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise Reply(status(400, f"the patch is not JSON: {e}")) from e
