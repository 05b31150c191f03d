"""Offline creates (``local.Answerer``'s create answers): an echo, a token, or a 503.

- A create that asks the apiserver for a decision (Subject/Self/LocalSubjectAccessReview,
  TokenReview, SelfSubjectRulesReview, CertificateSigningRequest) or acts through a subresource
  (an eviction, a binding) is a 503 Status naming why (YurtHub echoes 201: a review without a
  decision, an eviction that never happened).
- A ServiceAccount TokenRequest gets a short-lived token of the hub's own (``_token``) when
  the apiserver would have granted it: to the node, bound to a pod of this node (the pod as
  kubelet cached it) running as that account (``authn.tokengranting``); else a 403 Status
  saying why. A Bearer caller never gets one offline.
- Anything else: a 201 echo of the body; Events are also cached, and journaled for the cloud
  (``localevents``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from aiohttp import web

from yurthub import requestinfo
from yurthub.authn import callers, offlinetokens, tokengranting
from yurthub.cache import agents, cacheability, framing, keys, store
from yurthub.proxy import headers, localevents, localreplies

log = logging.getLogger(__name__)

TOKEN_REQUEST = ("serviceaccounts", "token")
KUBELET_PODS = keys.Scope("kubelet", "pods", "v1")
"""This node's pods as kubelet read them (its pod list is of ``spec.nodeName=<node>``)."""
TOLD_LIMIT = 64
"""Distinct refusals logged as a warning (then at debug level)."""


class Creates:
    """The create answers over one ``localreplies.Reader``."""

    def __init__(
        self,
        reader: localreplies.Reader,
        agent_set: agents.AgentSet,
        tokens: Callable[[], offlinetokens.OfflineTokens],
        node_name: str,
        events: localevents.Events,
    ) -> None:
        """``tokens``: the offline token issuer now (the assembly replaces the answerer's with
        the hub verifier's, so a pod holding one is recognised); ``events``: the Event
        journal's door."""
        self._events = events
        self._reader = reader
        self._agents = agent_set
        self._tokens = tokens
        self._node_name = node_name
        self._told: set[str] = set()

    async def answer(
        self, request: web.Request, info: requestinfo.RequestInfo
    ) -> web.StreamResponse:
        if info.resource in cacheability.NEVER_CACHED_RESOURCES or (
            info.subresource and (info.resource, info.subresource) != TOKEN_REQUEST
        ):
            what = f"{info.resource}/{info.subresource}" if info.subresource else info.resource
            return localreplies.unavailable(
                f"the cloud is unreachable: only the apiserver can answer a create of {what} "
                "(the hub does not make up its decision)"
            )
        body = await localreplies.read_body(request)
        if (info.resource, info.subresource) == TOKEN_REQUEST:
            return await self._token(request, info, body)
        api = self._events.journals(request, info)
        if api is not None:
            try:
                event = localreplies.decoded(info, body, self._reader.store.transcoder.converter)
            except ValueError as e:
                return localreplies.status(400, f"the Event body cannot be read: {e}")
            await self._events.created(api, info, event)
        if (
            info.resource == "events"
            and not info.subresource
            and info.body_content_type == localreplies.JSON
            and cacheability.is_cacheable_request(info, self._agents.allows)
        ):
            scope = keys.Scope(info.owner, info.resource, info.version, info.group)
            self._reader.store.submit(store.PutObject(scope, body, info.namespace))
        resp = web.Response(status=201, body=body)
        resp.content_type = info.body_content_type or localreplies.JSON
        return resp

    async def _token(
        self, request: web.Request, info: requestinfo.RequestInfo, body: bytes
    ) -> web.StreamResponse:
        """A TokenRequest answered offline.

        kubelet needs a token to start (or restart) a pod with a projected service-account
        volume. Like YurtHub we answer with a token of our own; unlike YurtHub only when the
        apiserver would have granted it (``authn.tokengranting``), and it is signed with a
        random per-process key (``authn.offlinetokens``: nobody can verify it but this hub,
        nobody can forge one from a well-known key) and lives one minute, so kubelet swaps it
        for a real one soon after the cloud comes back. The pod reaches the hub with it and
        reads its ServiceAccount's cache partition; the real apiserver rejects it, which is
        right.
        """
        converter = self._reader.store.transcoder.converter
        try:
            request_obj = localreplies.decoded(info, body, converter) if body else {}
        except ValueError as e:
            return localreplies.status(400, f"the TokenRequest body cannot be read: {e}")
        spec = request_obj.get("spec") if isinstance(request_obj.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        bearer = headers.bearer_token(request.headers.get("Authorization", ""))
        caller = callers.Kind.TOKEN if bearer or info.partition else callers.Kind.NODE
        name = tokengranting.pod_name(spec)
        pod = await self._cached_pod(info.namespace, name) if caller is callers.Kind.NODE else None
        decision = tokengranting.decide(
            caller=caller,
            node_name=self._node_name,
            namespace=info.namespace,
            account=info.name,
            spec=spec,
            pod=pod,
        )
        if isinstance(decision, tokengranting.Refusal):
            self._tell(info, decision.message)
            return localreplies.status(decision.code, decision.message)
        token, expiry = self._tokens().mint(
            info.namespace,
            info.name,
            decision.audiences,
            self._reader.clock(),
            lifetime=decision.lifetime,
            pod=(decision.pod_name, decision.pod_uid),
        )
        expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expiry))
        answer = {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": info.name, "namespace": info.namespace},
            "spec": {**spec, "expirationSeconds": decision.lifetime},
            "status": {"token": token, "expirationTimestamp": expires},
        }
        return localreplies.json(201, orjson.dumps(answer))

    async def _cached_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """Pod ``namespace/name`` as kubelet last read it, or None (not cached, unreadable)."""
        if not name or not namespace:
            return None
        try:
            body = await self._reader.read(keys.object_key(KUBELET_PODS, namespace, name))
            return framing.parse_object(body) if body is not None else None
        except (store.CorruptRead, framing.BadBody):
            return None

    def _tell(self, info: requestinfo.RequestInfo, message: str) -> None:
        """One warning per distinct refusal (bounded), then debug: kubelet retries."""
        told = message in self._told or len(self._told) >= TOLD_LIMIT
        if not told:
            self._told.add(message)
        log.log(
            logging.DEBUG if told else logging.WARNING,
            "offline TokenRequest for ServiceAccount %s/%s (%s) refused: %s",
            info.namespace,
            info.name,
            info.component or "no User-Agent",
            message,
        )
