"""Offline creates (``local.Answerer``'s create answers): an echo, a token, or a 503.

- A create that asks the apiserver for a decision (Subject/Self/LocalSubjectAccessReview,
  TokenReview, SelfSubjectRulesReview, CertificateSigningRequest) or acts through a subresource
  (an eviction, a binding) is a 503 Status naming why (YurtHub echoes 201: a review without a
  decision, an eviction that never happened).
- A ServiceAccount TokenRequest gets a short-lived token of the hub's own (``_token``).
- Anything else: a 201 echo of the body; Events are also cached.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson
from aiohttp import web

from yurthub import requestinfo
from yurthub.authn import offlinetokens
from yurthub.cache import agents, cacheability, keys, store
from yurthub.proxy import localreplies

TOKEN_REQUEST = ("serviceaccounts", "token")


class Creates:
    """The create answers over one ``localreplies.Reader``."""

    def __init__(
        self,
        reader: localreplies.Reader,
        agent_set: agents.AgentSet,
        tokens: Callable[[], offlinetokens.OfflineTokens],
    ) -> None:
        """``tokens``: the offline token issuer now (the assembly replaces the answerer's with
        the hub verifier's, so a pod holding one is recognised)."""
        self._reader = reader
        self._agents = agent_set
        self._tokens = tokens

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
            return self._token(info, body)
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

    def _token(self, info: requestinfo.RequestInfo, body: bytes) -> web.StreamResponse:
        """A TokenRequest answered offline.

        kubelet needs a token to start (or restart) a pod with a projected service-account
        volume. Like YurtHub we answer with a token of our own; unlike YurtHub it is signed with
        a random per-process key (``authn.offlinetokens``: nobody can verify it but this hub,
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
        audiences = spec.get("audiences")
        wanted = [str(a) for a in audiences] if isinstance(audiences, list) else []
        token, expiry = self._tokens().mint(info.namespace, info.name, wanted, self._reader.clock())
        expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expiry))
        answer = {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": info.name, "namespace": info.namespace},
            "spec": {**spec, "expirationSeconds": offlinetokens.LIFETIME},
            "status": {"token": token, "expirationTimestamp": expires},
        }
        return localreplies.json(201, orjson.dumps(answer))
