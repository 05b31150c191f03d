"""Offline answers from the cache (reference §4), the ``seams.LocalAnswerer`` implementation.

The router asks when no backend is healthy (``offline``), when a get/list failed with a transport
error (``upstream-error``: answered from the cache at once, or ``None`` so the router reports
the error), and for kubelet's own lease, always, and its ``get node`` once the router knows the
cache's copy current (``kubelet-lease`` / ``kubelet-node``: answered when the cache has the
object, else ``None`` and the router proxies).

Answers (decisions that differ from YurtHub are marked *):

- get: the cached object, or 404. Table / PartialObjectMetadata views when the client asks.
- list: complete or 404*. Answered only when a list the cache saw whole covers it: same
  component and resource, all namespaces or the request's, and every requirement
  of its label and field selectors among the request's (``cache.coverage``). Then the answer
  is the component's objects of that resource in the namespace filtered by the request's
  selectors* (YurtHub ignores selectors), at the covering list's resourceVersion (its record,
  advanced by watch events and bookmarks*; an object stored from a get or a patch may be newer,
  but a client resuming its watch from that would skip events the cache never saw; a list by
  name with no record: its object's). A view (Table,
  PartialObjectMetadata) is answered from the newest covering list whatever form it was
  fetched in (full objects, metadata only, a Table)*; a Table keeps the columns and cells the
  apiserver's Table had (``cache.tables``)*. Anything else is
  a 404 (YurtHub answers whatever files it has): a watch alone (a hub restarted on an empty
  cache), gets, a narrower or other-namespace list, hold some objects, not all, and kubelet
  reads a pod missing from its list as deleted and kills it. Except a ``metadata.name`` field
  selector, answered like a get (the object, else an empty list); and kubelet's empty pods
  list, always 404 (§3.7: kubelet must not kill pods after a wipe).
- watch: 200, held open; BOOKMARK events every ``bookmark_interval`` when the client allows
  them*; ``sendInitialEvents=true`` gets the cached objects as ADDED plus the end bookmark*,
  under the list rule (a list streamed as events: complete, or a 404 before the stream).
  Closed when ``timeoutSeconds`` elapses (absent or 0: ``min-request-timeout`` x (1+rand)),
  when the cloud is healthy again (so clients re-watch upstream), or at hub shutdown.
- create: 201 echo of the body; Events are also cached, and journaled to be posted after the
  heal with their original times and counts* (``localevents``, ``cache.eventjournal``). A
  ServiceAccount TokenRequest gets a short-lived token only the hub verifies*, and only as the
  apiserver grants one to the node: no Bearer caller, bound to a cached pod of this node
  running as that account; else a 403
  Status saying why* (``localcreates``, ``authn.tokengranting``). A create that asks the
  apiserver for a decision (Subject/Self/LocalSubjectAccessReview, TokenReview,
  SelfSubjectRulesReview, CertificateSigningRequest) or acts through a subresource (an
  eviction, a binding) is a 503 Status naming why*: YurtHub echoes 201, a review without a
  decision, an eviction that never happened.
- delete/deletecollection: 403 Status.
- update/patch: the cached object (the mutation goes nowhere and is not stored); a JSON merge
  patch is applied to the answer* so the client reads back what it set (``cache.patching``).
  A patch of an Event the journal holds (a repeat client-go counts) is folded into it and
  answered with it*.
- a component that is not a cache agent: 503* (YurtHub: 400), since the real cause is the cloud
  being away, and 503 makes clients retry rather than give up.
- ``/version`` and discovery documents: the cached document (aggregated or legacy, whichever the
  Accept header prefers and the cache holds); 404 for an uncached discovery path*. Any other
  non-resource request (``/healthz``, ``/openapi/v2``, a POST): a 503 Status naming the path and
  why* (YurtHub: 400 "local proxy does not support request").

Errors are Kubernetes Status objects. Bodies are spliced from stored bytes, never re-encoded
(except for views, which are built, and objects a response filter changes: the cache stores
what the cloud sent, and offline answers go through the same filters as online ones).

Wire format: the cache holds each object as it came, JSON or protobuf (kubelet and kube-proxy
ask for protobuf). A get or list of whole objects by a client that lists protobuf first is
answered in protobuf when every object it returns is stored so: a list is the stored messages
concatenated in the list message (``kubeproto.enveloping``; byte for byte what the apiserver
sends for the same objects), never decoded unless a filter reads them; so is a streaming list
(``sendInitialEvents``: protobuf watch frames of the stored objects). Otherwise, and for JSON
clients, views and plain watches (offline they carry bookmarks only), the answer is JSON
(protobuf objects converted as they are read); a client that takes only protobuf then gets a
406 offline (online, the cloud answers), except a plain watch: protobuf bookmarks.

The answers live beside this module: ``locallists`` (list), ``localwatches`` (watch),
``localcreates`` (create, TokenRequest), over ``localreplies`` (Status and body replies, the
``Reader`` of the store, the filters and the clock).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from yurthub import requestinfo, statuses
from yurthub.authn import offlinetokens
from yurthub.cache import (
    agents,
    cacheability,
    eventjournal,
    framing,
    keys,
    patching,
    store,
    tables,
)
from yurthub.proxy import (
    localcreates,
    localevents,
    locallists,
    localreplies,
    localwatches,
    seams,
)

logger = logging.getLogger(__name__)

HealthView = Callable[[], bool]
"""True when some backend is healthy (``health.HealthChecker.any_healthy``)."""


READ_SETTLE = 0.5
"""Seconds a read from the cache offline waits, at most, for the writes queued before it."""
_SETTLE_FIRST = frozenset({seams.LocalReason.OFFLINE, seams.LocalReason.UPSTREAM_ERROR})


class Answerer:
    """``seams.LocalAnswerer`` over one ``store.Store``."""

    def __init__(
        self,
        cache: store.Store,
        agent_set: agents.AgentSet,
        *,
        node_name: str,
        min_request_timeout: float,
        bookmark_interval: float,
        heal_spread: float = 0.0,
        cloud_healthy: HealthView | None = None,
        clock: Callable[[], float] = time.time,
        tokens: offlinetokens.OfflineTokens | None = None,
        journal: eventjournal.Journal | None = None,
    ) -> None:
        """``node_name``: this node (offline tokens are for its pods only); ``tokens``: issues
        offline TokenRequest answers (shared with the hub's token verifier, so a pod holding
        one is recognised); ``journal``: where offline Events wait for the cloud (None: they
        are answered, not kept); ``heal_spread``: seconds within which a watch held open
        offline ends after the cloud is back (``localwatches``)."""
        self._store = cache
        self._agents = agent_set
        self.cloud_healthy: HealthView = cloud_healthy or (lambda: False)
        self.tokens = tokens or offlinetokens.OfflineTokens(lambda: ())
        self._reader = localreplies.Reader(cache, clock)
        self._lists = locallists.Lists(self._reader)
        self._watches = localwatches.Watches(
            self._reader,
            self._lists,
            min_request_timeout=min_request_timeout,
            bookmark_interval=bookmark_interval,
            heal_spread=heal_spread,
            cloud_healthy=lambda: self.cloud_healthy(),
        )
        self._events = localevents.Events(journal)
        self._creates = localcreates.Creates(
            self._reader, agent_set, lambda: self.tokens, node_name, self._events
        )

    @property
    def filters(self) -> seams.ResponseFilter | None:
        """The response filters: offline answers are filtered as online ones (set by the
        assembly; None: unfiltered)."""
        return self._reader.filters

    @filters.setter
    def filters(self, filters: seams.ResponseFilter | None) -> None:
        self._reader.filters = filters

    def close(self) -> None:
        """End every held watch now (hub shutdown)."""
        self._watches.close()

    async def answer(
        self, request: web.Request, info: requestinfo.RequestInfo, *, reason: str
    ) -> web.StreamResponse | None:
        why = seams.LocalReason(reason)
        if why in _SETTLE_FIRST and info.verb in ("get", "list", "watch"):
            # What the hub answered online a moment ago (a list kubelet read just before the
            # link dropped) may still be queued for the writer: read it, not a miss.
            await self._store.settled(READ_SETTLE)
        try:
            return await self._answer(request, info, why)
        except localreplies.Reply as reply:
            return reply.response
        except store.CorruptRead:
            # Counted and being dropped by the store: a cache miss like any other. Online the
            # request goes (or went) upstream; offline nothing else can answer.
            if why is not seams.LocalReason.OFFLINE:
                return None
            return localreplies.not_found(info, "" if info.verb == "list" else None)

    async def _answer(
        self, request: web.Request, info: requestinfo.RequestInfo, reason: seams.LocalReason
    ) -> web.StreamResponse | None:
        if reason is seams.LocalReason.KUBELET_LEASE:
            return await self._kubelet_lease(request, info)
        if reason is seams.LocalReason.KUBELET_NODE:
            if info.verb != "get" or not self._store.entry(localreplies.object_key(info)):
                return None
            return await self._get(request, info, reason)
        if not info.is_resource_request:
            return await self._document(info, reason)
        if info.partition is None:
            # A Bearer token the hub cannot verify proves no identity: its partition is
            # unknown, and the component's belongs to the node (THREAT_MODEL.md).
            if reason is seams.LocalReason.UPSTREAM_ERROR:
                return None
            return localreplies.status(
                401,
                "Unauthorized: the cloud is unreachable and the hub cannot verify this token "
                "offline (expired, another audience, or the issuer's keys are not known yet)",
            )
        verb = info.verb
        if verb == "watch":
            return await self._watches.hold(request, info)
        if reason is seams.LocalReason.UPSTREAM_ERROR and verb not in ("get", "list"):
            return None
        if verb == "create":
            return await self._creates.answer(request, info)
        if verb in ("delete", "deletecollection"):
            return localreplies.status(
                403,
                "delete request is not supported in local cache",
                details={"name": info.name, "group": info.group, "kind": info.resource},
            )
        if verb not in ("get", "list", "update", "patch"):
            return None
        patch: Any = None
        if verb == "patch" and (api := self._events.journals(request, info)) is not None:
            answered, patch = await self._events.patch(
                request, info, api, lambda: self._reader.read(localreplies.object_key(info))
            )
            if answered is not None:
                return answered
        if not cacheability.is_cacheable_request(info, self._agents.allows):
            if reason is seams.LocalReason.UPSTREAM_ERROR:
                return None
            return localreplies.status(
                503,
                f"the cloud is unreachable and the hub does not cache for component "
                f"{info.component!r} ({info.verb} {info.resource}); add it to --cache-agents "
                f"or the yurt-hub-cfg ConfigMap",
            )
        if verb == "list":
            return await self._lists.answer(request, info, reason)
        if verb == "get":
            return await self._get(request, info, reason)
        return await self._mutation(request, info, patch)

    # --- get / update / patch ------------------------------------------------------------------

    async def _get(
        self, request: web.Request, info: requestinfo.RequestInfo, reason: seams.LocalReason
    ) -> web.StreamResponse | None:
        media = localreplies.requested(info, reason)
        if media is None:
            return None
        body = None
        scope = None
        candidates = localreplies.scopes(info, media)
        protobuf = localreplies.wants_protobuf(info, media)
        for scope in candidates:
            key = keys.object_key(scope, info.namespace, info.name)
            body = await self._reader.read(key, as_stored=protobuf)
            if body is not None:
                break
        if body is None or scope is None:
            if reason is seams.LocalReason.UPSTREAM_ERROR:
                return None
            return localreplies.not_found(info)
        if protobuf:
            if store.is_protobuf(body):
                stored = self._reader.stored(info)
                return localreplies.protobuf(
                    body if stored is None else stored.protobuf_object(body)
                )
            if not requestinfo.accepts_json(info.accept):
                return localreplies.unacceptable(reason)
        if media.representation is cacheability.Representation.OBJECT:
            return localreplies.json(200, self._reader.filtered(info, body))
        if media.representation is cacheability.Representation.PARTIAL and scope.partial:
            return localreplies.json(200, body)
        obj = framing.parse_object(body)
        if media.representation is cacheability.Representation.PARTIAL:
            return localreplies.json(200, orjson.dumps(tables.partial(obj, media.partial_version)))
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        entry = self._store.entry(keys.object_key(scope, info.namespace, info.name))
        view = tables.table(
            info.resource,
            [obj],
            resource_version=rv,
            now=self._reader.clock(),
            include_object=request.query.get("includeObject", "Metadata"),
            columns=self._lists.columns(candidates),
            cells=[entry.cells if entry is not None else None],
        )
        return localreplies.json(200, orjson.dumps(view))

    async def _mutation(
        self, request: web.Request, info: requestinfo.RequestInfo, patch: Any = None
    ) -> web.StreamResponse:
        """``patch``: the patch when it was read already (an Event's)."""
        body = await self._reader.read(localreplies.object_key(info))
        if body is None:
            return localreplies.not_found(info)
        if info.verb == "patch" and info.body_content_type == patching.MERGE_PATCH:
            if patch is None:
                patch = await localreplies.read_json(request)
            cached = framing.parse_object(body)
            try:
                patched = patching.merge_patch(cached, patch)
            except patching.PatchError as e:
                logger.info("refused an offline merge patch of %s: %s", info.describe(), e)
                return localreplies.status(400, str(e))
            if isinstance(patched, dict):
                # The identity of the object is not the client's to change (nor its shape).
                meta = patched.get("metadata")
                patched["metadata"] = {
                    **(meta if isinstance(meta, dict) else {}),
                    **_identity(cached),
                }
                return localreplies.json(200, self._reader.filtered(info, orjson.dumps(patched)))
        return localreplies.json(200, self._reader.filtered(info, body))

    # --- kubelet's lease -------------------------------------------------------------------------

    async def _kubelet_lease(
        self, request: web.Request, info: requestinfo.RequestInfo
    ) -> web.StreamResponse | None:
        """kubelet's node lease, answered locally while the hub renews the real one (§2.5).

        With nothing cached and the cloud healthy we return None: the request goes upstream
        once and its answer is cached; from then on the hub answers.
        """
        if info.verb not in ("get", "update", "create", "patch") or (
            not info.name and info.verb != "create"
        ):
            return None
        key = localreplies.object_key(info)
        cached = self._store.entry(key) is not None
        if not cached and self.cloud_healthy():
            return None
        if info.verb == "get":
            body = await self._reader.read(key)
            if body is None:
                return localreplies.not_found(info)
            return localreplies.json(200, body)
        if info.verb == "patch":
            return await self._mutation(request, info)
        body = await localreplies.read_body(request)
        try:
            lease = localreplies.decoded(info, body, self._store.transcoder.converter)
        except ValueError as e:
            return localreplies.status(400, f"the Lease body cannot be read: {e}")
        # The cache keeps JSON (kubelet PUTs protobuf and accepts a JSON answer).
        body = orjson.dumps(lease) if info.body_content_type == localreplies.PROTOBUF else body
        if lease.get("kind") not in (None, "Lease"):
            return localreplies.status(400, f"the body is a {lease.get('kind')!r}, not a Lease")
        meta = lease.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name or (info.name and name != info.name):
            # It is stored under the name it carries: it has to be the one asked for.
            return localreplies.status(
                400, f"the Lease's metadata.name {name!r} must be set and match the URL's"
            )
        scope = keys.Scope(info.owner, info.resource, info.version, info.group)
        # A create is POSTed to the collection: the name to look for is the body's.
        if info.verb == "create" and self._store.entry(
            keys.object_key(scope, info.namespace, name)
        ):
            return localreplies.json(
                409, statuses.encode(statuses.already_exists(info.resource, name, info.group))
            )
        # kubelet's renewal is what the cloud would have stored: keep it so a later GET agrees.
        self._store.submit(store.PutObject(scope, body, info.namespace, local=True))
        return localreplies.json(201 if info.verb == "create" else 200, body)

    # --- non-resource documents -----------------------------------------------------------------

    async def _document(
        self, info: requestinfo.RequestInfo, reason: seams.LocalReason
    ) -> web.StreamResponse | None:
        path = info.path.rstrip("/") or "/"
        offline = reason is seams.LocalReason.OFFLINE
        if info.verb != "get":
            return localreplies.unreachable_path(path) if offline else None
        try:
            candidates = _document_keys(path, info.accept)
        except keys.BadKey:
            return localreplies.unreachable_path(path) if offline else None
        for key in candidates:
            found = await self._store.document(key)
            if found is not None:
                content_type, body = found
                resp = web.Response(status=200, body=body)
                resp.headers["Content-Type"] = content_type
                return resp
        if reason is seams.LocalReason.UPSTREAM_ERROR:
            return None
        if _is_discovery(path):
            return localreplies.status(
                404,
                f"the cloud is unreachable and {path} is not in the hub's offline cache (the hub "
                "keeps /version, /api and /apis; other discovery documents only once a client "
                "read them online)",
            )
        return localreplies.unreachable_path(path)


# --- helpers -------------------------------------------------------------------------------------


def _identity(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}


def _document_keys(path: str, accept: str) -> list[str]:
    """Stored documents that could answer, in the client's order of preference."""
    out: list[str] = []
    for media, params in requestinfo.media_ranges(accept) or [(localreplies.JSON, {})]:
        if media not in (localreplies.JSON, "application/*", "*/*"):
            continue
        profile = ";".join(f"{p}={params[p]}" for p in ("as", "g", "v") if p in params)
        key = keys.nonresource_key(path, profile)
        if key not in out:
            out.append(key)
    return out or [keys.nonresource_key(path)]


def _is_discovery(path: str) -> bool:
    parts = path.strip("/").split("/")
    return path == "/version" or (parts[0] in ("api", "apis") and len(parts) <= 3)
