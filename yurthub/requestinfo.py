"""Request classification: plain HTTP request data -> a frozen ``RequestInfo``.

PURE: no aiohttp, no sockets, no clock. The router, the cache and the filters all decide from
the ``RequestInfo`` built here, so the rules live in one place and get table tests.

The resource part follows the Kubernetes apiserver's ``RequestInfoFactory`` (API prefixes
``api``/``apis``, ``api`` is groupless): verbs from the HTTP method, the ``watch``/``proxy``
path prefixes, the ``namespaces/<ns>`` shift (except the ``status``/``finalize`` namespace
subresources), ``list``/``watch`` for a GET without a name, a ``metadata.name`` field selector
becoming the name, ``deletecollection`` for a DELETE without a name. On top of that, what YurtHub
derives (reference ``yurthub-behaviour.md`` §2.2-2.4): the component from the User-Agent, the
content type from ``Accept``, partial-object-metadata requests, the list selector string and the
request deadline.

Decisions that differ from YurtHub on purpose (the reference calls them quirks or leaves them
open):

- Undecodable parameters (``timeoutSeconds=abc``, ``timeout=5x``, a label selector that does
  not parse) raise ``BadRequestError``; the router answers 400 for every verb, where YurtHub only
  checks list requests and the apiserver silently falls back to ``list``.
- A path the apiserver cannot interpret (``/api/v1/watch`` with nothing after the special verb)
  is a ``BadRequestError`` too (the apiserver answers 500 there).
- The request content type keeps the bare media type of the first ``Accept`` clause, lower-cased,
  without parameters (YurtHub keeps parameters unless one is ``as=``).
- kubemark's hollow components (User-Agent ``hollow-kubelet``, ``hollow-proxy``) run kubelet's
  and kube-proxy's own code and are treated as ``kubelet`` and ``kube-proxy``
  (``COMPONENT_ALIASES``): scale tests of a hub with kubemark see what real nodes see.
- Undecodable bytes in the User-Agent or path (aiohttp hands them over as lone surrogates) are
  replaced by U+FFFD, so every later encode (metrics labels, logs) is safe.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping

from yurthub.cache import selectors

API_PREFIXES = frozenset({"api", "apis"})
GROUPLESS_PREFIXES = frozenset({"api"})
SPECIAL_VERBS = frozenset({"proxy", "watch"})
SPECIAL_VERBS_NO_SUBRESOURCES = frozenset({"proxy"})
NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})

_METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}

# Verbs the apiserver itself knows. Anything else on a resource path is "unknown verb".
KNOWN_VERBS = frozenset(
    {
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
        "proxy",
    }
)

PARTIAL_OBJECT_METADATA_KINDS = frozenset({"PartialObjectMetadata", "PartialObjectMetadataList"})

PROTOBUF_MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
JSON_MEDIA_TYPE = "application/json"

# YurtHub's deadline adjustments (proxy/util/util.go:313-352): a watch gets a grace period after
# the apiserver's own timeout so a missed close cannot hang it (issue #130); list/get leave the
# hub 2 s to fall back to the cache before the client gives up.
WATCH_DEADLINE_GRACE = 15.0
LIST_GET_DEADLINE_MARGIN = 2.0

LONG_RUNNING_VERBS = frozenset({"watch", "proxy"})
LONG_RUNNING_SUBRESOURCES = frozenset({"attach", "exec", "proxy", "log", "portforward"})
"""The apiserver's own long-running request check: these may stay open (and idle) for long."""

COMPONENT_ALIASES = {"hollow-kubelet": "kubelet", "hollow-proxy": "kube-proxy"}
"""User-Agent products that are another component under a different name."""


def component_of(user_agent: str) -> str:
    """The component a User-Agent names: its product (before the first ``/``), aliased."""
    product = user_agent.split("/", 1)[0]
    return COMPONENT_ALIASES.get(product, product)


class BadRequestError(ValueError):
    """The request cannot be classified; the router answers 400 with this message."""


@dataclasses.dataclass(frozen=True, slots=True)
class PartialObjectMetadata:
    """An ``Accept: ...;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`` request."""

    kind: str
    """``PartialObjectMetadata`` or ``PartialObjectMetadataList``."""
    group: str
    """Always ``meta.k8s.io``."""
    version: str
    """``v1`` or ``v1beta1``."""


@dataclasses.dataclass(frozen=True, slots=True)
class RequestInfo:
    """Everything the hub decides from, derived once per request."""

    method: str
    """HTTP method, upper-case."""
    path: str
    """URL path as received (percent-decoding is the caller's business)."""
    verb: str
    """Kubernetes verb (``get``, ``list``, ``watch``, ...); lower-cased method for non-resources."""
    is_resource_request: bool
    api_prefix: str = ""
    """``api`` or ``apis``; empty for non-resource requests."""
    group: str = ""
    """API group; empty for the core group."""
    version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    parts: tuple[str, ...] = ()
    """Path parts after group/version (and after ``namespaces/<ns>`` unless status/finalize)."""
    user_agent: str = ""
    """Full User-Agent, lower-cased (metrics label ``client``)."""
    component: str = ""
    """User-Agent lower-cased and cut at the first ``/``: cache keys, filters, routing."""
    accept: str = ""
    """Raw ``Accept`` header."""
    content_type: str = ""
    """Bare media type of the first Accept clause, resource requests only."""
    body_content_type: str = ""
    """Bare media type of the request's ``Content-Type``."""
    partial_object_metadata: PartialObjectMetadata | None = None
    label_selector: str = ""
    """``labelSelector`` query value as sent."""
    field_selector: str = ""
    """``fieldSelector`` query value as sent."""
    list_selector: str = ""
    """Canonical ``<labels>&<fields>`` for list requests without a name (YurtHub §2.4)."""
    timeout_seconds: int | None = None
    """``timeoutSeconds`` query parameter, when given."""
    deadline: float | None = None
    """Seconds the hub allows this request (see module docstring); None = no hub deadline."""
    resource_version: str = ""
    list_continue: str | None = None
    """``continue`` token of a list page; None when the request carried none (a first or
    only page). The cache assembles a chunked list from its pages by this."""
    limit: int | None = None
    """``limit`` query parameter, when given."""
    allow_watch_bookmarks: bool = False
    send_initial_events: bool = False
    """A streaming list (client-go's WatchListClient): the watch starts with the whole state as
    ADDED events, ended by a BOOKMARK annotated ``k8s.io/initial-events-end``."""
    is_upgrade: bool = False
    """``Connection: upgrade`` (exec/attach/port-forward over SPDY or WebSocket)."""
    partition: str | None = ""
    """Whose cache partition this request reads and writes (set by the router from the caller,
    ``yurthub.authn``): "" the node's own (the component's, as in YurtHub); a ServiceAccount
    subject for a request that proved it with its Bearer token; None for a Bearer token the
    hub could not verify (never cached, never answered from the cache)."""

    @property
    def owner(self) -> str:
        """The first segment of this request's cache keys: ``<component>`` for the node's own
        identity, ``<component>@<subject>`` for a verified ServiceAccount. An ``@`` in a
        User-Agent is escaped, so no node-identity request can name a ServiceAccount's
        partition."""
        if self.partition:
            return f"{self.component}@{self.partition}"
        return self.component.replace("@", "%40")

    @property
    def is_watch(self) -> bool:
        return self.verb == "watch"

    @property
    def is_long_running(self) -> bool:
        """May legitimately stay open and silent for long (a watch, logs, exec, a proxy): no
        idle bound, and a limit of its own (``LONG_RUNNING_*``, as the apiserver's)."""
        return (
            self.is_upgrade
            or self.verb in LONG_RUNNING_VERBS
            or self.subresource in LONG_RUNNING_SUBRESOURCES
        )

    @property
    def is_known_verb(self) -> bool:
        return not self.is_resource_request or self.verb in KNOWN_VERBS

    def describe(self) -> str:
        """Short log form, e.g. ``watch pods for /api/v1/pods`` (never carries headers)."""
        if self.is_resource_request:
            what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
            return f"{self.verb} {what} for {self.path}"
        return f"{self.verb} {self.path}"


def classify(
    method: str,
    path: str,
    query: Iterable[tuple[str, str]] | Mapping[str, str],
    headers: Mapping[str, str],
) -> RequestInfo:
    """Classify one request. ``headers`` must be case-insensitive (e.g. a CIMultiDict).

    Raises ``BadRequestError`` for a path or parameter the apiserver could not interpret.
    """
    method = method.upper()
    path = _printable(path)
    pairs = list(query.items()) if isinstance(query, Mapping) else list(query)
    params: dict[str, list[str]] = {}
    for key, value in pairs:
        params.setdefault(key, []).append(value)

    user_agent = _printable(headers.get("User-Agent", "")).lower()
    accept = headers.get("Accept", "")
    connection = headers.get("Connection", "")
    body_content_type = _bare_media_type(headers.get("Content-Type", ""))
    is_upgrade = "upgrade" in _tokens(connection) and bool(headers.get("Upgrade"))

    def non_resource() -> RequestInfo:
        return RequestInfo(
            method=method,
            path=path,
            verb=method.lower(),
            is_resource_request=False,
            user_agent=user_agent,
            accept=accept,
            body_content_type=body_content_type,
            is_upgrade=is_upgrade,
        )

    parts = _split_path(path)
    if len(parts) < 3 or parts[0] not in API_PREFIXES:
        return non_resource()
    api_prefix, parts = parts[0], parts[1:]
    group = ""
    if api_prefix not in GROUPLESS_PREFIXES:
        if len(parts) < 3:
            return non_resource()
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]

    if parts[0] in SPECIAL_VERBS:
        if len(parts) < 2:
            raise BadRequestError(f"unable to determine kind and namespace from url {path}")
        verb, parts = parts[0], parts[1:]
    else:
        verb = _METHOD_VERBS.get(method, "")

    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in NAMESPACE_SUBRESOURCES:
            parts = parts[2:]

    resource = parts[0]
    name = parts[1] if len(parts) >= 2 else ""
    subresource = parts[2] if len(parts) >= 3 and verb not in SPECIAL_VERBS_NO_SUBRESOURCES else ""

    label_selector = _first(params, "labelSelector")
    field_selector = _first(params, "fieldSelector")
    labels, fields = _selectors(label_selector, field_selector)

    if not name and verb == "get":
        verb = "watch" if _bool_param(params, "watch") else "list"
        exact = fields.name
        if exact and _is_valid_path_segment(exact):
            name = exact
    if not name and verb == "delete":
        verb = "deletecollection"

    list_selector = ""
    if verb == "list" and not name:
        list_selector = canonical_list_selector(labels, fields)

    timeout_seconds = _int_param(params, "timeoutSeconds")
    # A watch has its own bound (timeoutSeconds); logs, exec and proxies none of the client's.
    streams = verb == "proxy" or subresource in LONG_RUNNING_SUBRESOURCES
    deadline = None if streams else _deadline(verb, timeout_seconds, _first(params, "timeout"))

    return RequestInfo(
        method=method,
        path=path,
        verb=verb,
        is_resource_request=True,
        api_prefix=api_prefix,
        group=group,
        version=version,
        namespace=namespace,
        resource=resource,
        subresource=subresource,
        name=name,
        parts=tuple(parts),
        component=component_of(user_agent),
        content_type=_bare_media_type(accept.split(",", 1)[0]),
        partial_object_metadata=_partial_object_metadata(accept, verb),
        label_selector=label_selector,
        field_selector=field_selector,
        list_selector=list_selector,
        timeout_seconds=timeout_seconds,
        deadline=deadline,
        resource_version=_first(params, "resourceVersion"),
        list_continue=params["continue"][0] if params.get("continue") else None,
        limit=_int_param(params, "limit"),
        allow_watch_bookmarks=_bool_param(params, "allowWatchBookmarks"),
        send_initial_events=verb == "watch" and _bool_param(params, "sendInitialEvents"),
        user_agent=user_agent,
        accept=accept,
        body_content_type=body_content_type,
        is_upgrade=is_upgrade,
    )


# --- pool scope (reference §2.4; the multiplexer that serves it is a later issue) --------------

DEFAULT_POOL_SCOPE_RESOURCES = frozenset({"/v1/services", "discovery.k8s.io/v1/endpointslices"})


def pool_scope(info: RequestInfo, resources: frozenset[str], node_name: str) -> tuple[bool, bool]:
    """(is pool scoped, forwarded by this hub's own multiplexer) for a request.

    Only list/watch of a ``group/version/resource`` in ``resources`` is pool scoped; a request
    is "forwarded" when its User-Agent is exactly ``multiplexer-proxy-<node_name>``.
    """
    if not info.is_resource_request or info.verb not in ("list", "watch"):
        return False, False
    gvr = f"{info.group}/{info.version}/{info.resource}"
    return gvr in resources, info.user_agent == f"multiplexer-proxy-{node_name}"


# --- Accept / media types ---------------------------------------------------------------------


def media_ranges(accept: str) -> list[tuple[str, dict[str, str]]]:
    """``Accept`` clauses in order as (lower-cased bare type, params); blanks skipped."""
    ranges = []
    for clause in accept.split(","):
        pieces = [p.strip() for p in clause.split(";")]
        media = pieces[0].lower()
        if not media:
            continue
        params: dict[str, str] = {}
        for piece in pieces[1:]:
            key, sep, value = piece.partition("=")
            if sep:
                params[key.strip().lower()] = value.strip().strip('"')
        ranges.append((media, params))
    return ranges


def accepts_json(accept: str) -> bool:
    """True if some clause admits JSON (``application/json``, ``application/*``, ``*/*``)."""
    return any(
        media in (JSON_MEDIA_TYPE, "application/*", "*/*") and params.get("q", "1") not in _ZERO_Q
        for media, params in media_ranges(accept)
    )


def accepts_protobuf(accept: str) -> bool:
    return any(media == PROTOBUF_MEDIA_TYPE for media, _ in media_ranges(accept))


_ZERO_Q = frozenset({"0", "0.0", "0.00", "0.000"})


def _bare_media_type(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


def _partial_object_metadata(accept: str, verb: str) -> PartialObjectMetadata | None:
    if verb not in ("get", "list", "watch") or "as=" not in accept:
        return None
    ranges = media_ranges(accept)
    if not ranges:
        return None
    params = ranges[0][1]
    kind = params.get("as", "")
    if kind not in PARTIAL_OBJECT_METADATA_KINDS or params.get("g") != "meta.k8s.io":
        return None
    version = params.get("v", "v1")
    if version not in ("v1", "v1beta1"):
        return None
    return PartialObjectMetadata(kind=kind, group="meta.k8s.io", version=version)


# --- query parameters -------------------------------------------------------------------------


# A repeated parameter counts by its first value, as in the apiserver's query conversion.


def _first(params: Mapping[str, list[str]], key: str) -> str:
    values = params.get(key)
    return values[0] if values else ""


def _bool_param(params: Mapping[str, list[str]], key: str) -> bool:
    # The apiserver's bool conversion: present and not "0"/"false" (any case) means true,
    # including an empty value ("?watch").
    values = params.get(key)
    if not values:
        return False
    return values[0] != "0" and values[0].lower() != "false"


_INT64_MAX = (1 << 63) - 1


def _int_param(params: Mapping[str, list[str]], key: str) -> int | None:
    raw = _first(params, key)
    if not raw:
        return None
    shown = raw if len(raw) <= 32 else raw[:32] + "..."
    try:
        value = int(raw)
    except ValueError as e:
        raise BadRequestError(f"invalid {key} {shown!r}: not an integer") from e
    if value < 0:
        raise BadRequestError(f"invalid {key} {shown!r}: must not be negative")
    if value > _INT64_MAX:  # an int64 on the apiserver; later float arithmetic would overflow
        raise BadRequestError(f"invalid {key} {shown!r}: out of range")
    return value


def _deadline(verb: str, timeout_seconds: int | None, timeout: str) -> float | None:
    """Seconds the hub allows a request (None: no bound of the client's own).

    ``timeout`` (a Go duration; kubectl's ``--request-timeout`` and client-go's request timeout
    send it on every request) bounds every verb but watch; a list's ``timeoutSeconds`` too,
    whichever is shorter. A get/list is given ``LIST_GET_DEADLINE_MARGIN`` less (YurtHub): the
    hub still has time to answer from the cache before the client gives up. Other verbs get
    the client's whole timeout: there is nothing to fall back to.
    """
    if verb == "watch":
        # timeoutSeconds=0 means "not given" to the apiserver (it picks 30-60 min itself).
        if not timeout_seconds:
            return None
        return timeout_seconds + WATCH_DEADLINE_GRACE
    bounds = []
    if timeout:
        seconds = parse_go_duration(timeout)
        if seconds > 0:
            bounds.append(seconds)
    if verb == "list" and timeout_seconds:
        bounds.append(float(timeout_seconds))
    if not bounds:
        return None
    limit = min(bounds)
    if verb in ("get", "list"):
        return limit - LIST_GET_DEADLINE_MARGIN if limit > LIST_GET_DEADLINE_MARGIN else None
    return limit


_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` (``1m30s``, ``500ms``, ``-2s``, ``0``) -> seconds."""
    raw = text
    sign = 1.0
    if text[:1] in "+-" and text:
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise BadRequestError(f"invalid duration {raw!r}")
    total = 0.0
    pos = 0
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if match is None:
            raise BadRequestError(f"invalid duration {raw!r}")
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if not math.isfinite(total):
        raise BadRequestError(f"invalid duration {raw!r}")
    return sign * total


# --- selectors --------------------------------------------------------------------------------


def _selectors(
    label_selector: str, field_selector: str
) -> tuple[selectors.LabelSelector, selectors.FieldSelector]:
    """Parse both selectors with the one parser the cache matches with (so the two can never
    read a selector differently); a bad one is the apiserver's 400."""
    try:
        return selectors.parse_labels(label_selector), selectors.parse_fields(field_selector)
    except selectors.SelectorError as e:
        raise BadRequestError(str(e)) from e


def canonical_list_selector(
    labels: selectors.LabelSelector, fields: selectors.FieldSelector
) -> str:
    """``<labels>&<fields>`` in k8s canonical form; one side alone has no ``&``."""
    label_text, field_text = labels.canonical(), fields.canonical()
    if label_text and field_text:
        return f"{label_text}&{field_text}"
    return label_text or field_text


# --- paths ------------------------------------------------------------------------------------


def _split_path(path: str) -> list[str]:
    trimmed = path.strip("/")
    return trimmed.split("/") if trimmed else []


def _is_valid_path_segment(name: str) -> bool:
    return name not in (".", "..") and "/" not in name and "%" not in name


def _printable(text: str) -> str:
    """Undecodable bytes arrive as lone surrogates (surrogateescape); they would break every
    later encode (metrics exposition, logs), so they become U+FFFD here, once."""
    if text.isascii():
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _tokens(header: str) -> set[str]:
    return {t.strip().lower() for t in header.split(",") if t.strip()}
