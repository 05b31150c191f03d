"""Header rules of the proxy: hop-by-hop removal, identity choice, wire-format rewrite.

PURE: takes and returns plain (name, value) pairs; no aiohttp. Names compare case-insensitively.

- Hop-by-hop (RFC 9110 §7.6.1): ``Connection`` and every header it names, plus ``Keep-Alive``,
  ``Proxy-Connection``, ``Proxy-Authenticate``, ``Proxy-Authorization``, ``TE``, ``Trailer``,
  ``Transfer-Encoding``, ``Upgrade`` are dropped in both directions; aiohttp frames each side
  itself. An upgrade request keeps ``Connection: Upgrade`` and ``Upgrade`` (the upgrade is the
  point of the request) and the 101 answer keeps them too.
- Identity: a request carrying ``Authorization: Bearer`` is forwarded with that token and no
  client certificate (a pod's ServiceAccount authenticates itself). Every other request is sent
  with the hub's identity: its ``Authorization`` (Basic, a broken header) is dropped, and so are
  ``Impersonate-*`` headers, so that a local process cannot borrow the hub's rights through them.
- Wire format (DESIGN.md): a client gets the content type it asked for from the apiserver:
  kubelet's and kube-proxy's ``protobuf, json`` is forwarded as it is, the protobuf answer
  reaches them unchanged (the cache converts its copy to JSON, ``cache.transcoding``). One
  exception: a get/list/watch that accepts JSON and asks for a protobuf *view* (``as=`` a
  PartialObjectMetadata(List) or Table, metadata informers) asks upstream for JSON by
  dropping its protobuf clauses, because views are cached only from JSON.
"""

from __future__ import annotations

from collections.abc import Iterable

from yurthub import requestinfo

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)

# Set by the client library on the upstream side; forwarding the client's would be wrong.
_REQUEST_DROP = frozenset({"host", "content-length"})

Header = tuple[str, str]

CACHEABLE_SHAPED_VERBS = frozenset({"get", "list", "watch"})


def bearer_token(authorization: str) -> str:
    """The token of ``Bearer <token>`` (scheme case-insensitive), else ""."""
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return ""
    return token.strip()


def _connection_named(headers: Iterable[Header]) -> set[str]:
    named: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            named.update(t.strip().lower() for t in value.split(",") if t.strip())
    return named


def request_headers(
    headers: Iterable[Header],
    *,
    upgrade: bool,
    own_identity: bool,
    accept: str | None = None,
) -> list[Header]:
    """Headers to send upstream.

    ``own_identity``: the hub authenticates (drop client Authorization and Impersonate-*).
    ``accept``: replacement Accept value (see ``upstream_accept``), None keeps the client's.
    Content-Length is left to the caller, which knows whether the body is streamed.
    """
    items = list(headers)
    named = _connection_named(items) - {"upgrade"}
    out: list[Header] = []
    for name, value in items:
        lower = name.lower()
        if lower in _REQUEST_DROP or lower in named:
            continue
        if lower in HOP_BY_HOP and not (upgrade and lower == "upgrade"):
            continue
        if own_identity and (lower == "authorization" or lower.startswith("impersonate-")):
            continue
        if accept is not None and lower == "accept":
            continue
        out.append((name, value))
    if upgrade:
        out.append(("Connection", "Upgrade"))
    if accept is not None:
        out.append(("Accept", accept))
    return out


def response_headers(headers: Iterable[Header], *, upgrade: bool = False) -> list[Header]:
    """Headers to send to the client (``Content-Length`` kept: aiohttp frames by it)."""
    items = list(headers)
    named = _connection_named(items) - {"upgrade"}
    out: list[Header] = []
    for name, value in items:
        lower = name.lower()
        if lower in named:
            continue
        if lower in HOP_BY_HOP and not (upgrade and lower == "upgrade"):
            continue
        out.append((name, value))
    if upgrade:
        out.append(("Connection", "Upgrade"))
    return out


def upstream_accept(info: requestinfo.RequestInfo) -> str | None:
    """The Accept to send upstream, or None to keep the client's untouched."""
    if not info.is_resource_request or info.verb not in CACHEABLE_SHAPED_VERBS:
        return None
    accept = info.accept
    if not requestinfo.accepts_protobuf(accept) or not requestinfo.accepts_json(accept):
        return None
    ranges = requestinfo.media_ranges(accept)
    if not any(m == requestinfo.PROTOBUF_MEDIA_TYPE and p.get("as") for m, p in ranges):
        return None  # plain protobuf: the client gets what it asked for
    clauses = [c.strip() for c in accept.split(",") if c.strip()]
    kept = [
        c for c in clauses if c.split(";", 1)[0].strip().lower() != requestinfo.PROTOBUF_MEDIA_TYPE
    ]
    # Only wildcards left ("*/*"): say JSON explicitly, or the apiserver might still pick
    # protobuf for a wildcard.
    if not any(c.split(";", 1)[0].strip().lower() == requestinfo.JSON_MEDIA_TYPE for c in kept):
        kept.insert(0, requestinfo.JSON_MEDIA_TYPE)
    return ", ".join(kept)
