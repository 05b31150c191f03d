"""The caller of one proxied request: the listener's rule (``authn.callers``) carried out.

For every request the router asks ``Identifier.identify``: on the secure port (10268) a caller
without credentials gets 401 and a certificate of someone else 403 (``Status`` objects, before
anything is proxied or read from the cache); a Bearer token is verified
(``authn.verifying``) to find its cache partition, which is set on the ``RequestInfo``
(``partition``): the ServiceAccount subject, or None when the hub cannot verify it (the request
is still forwarded online as it came; only caching and offline answers depend on this).

The TLS layer has already verified a presented client certificate against the cluster CA
(``CERT_OPTIONAL``: an invalid certificate fails the handshake), so a peer certificate seen here
is genuine.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from aiohttp import web

from yurthub import requestinfo
from yurthub.authn import callers, verifying
from yurthub.proxy import headers, responses


class Identifier:
    def __init__(self, node_name: str, verifier: verifying.TokenVerifier) -> None:
        self.node_name = node_name
        self.verifier = verifier

    def identify(
        self, request: web.Request, info: requestinfo.RequestInfo, *, secure: bool
    ) -> requestinfo.RequestInfo | web.Response:
        bearer = headers.bearer_token(request.headers.get("Authorization", ""))
        decision = callers.decide(
            secure=secure,
            bearer=bearer,
            peer_common_name=peer_common_name(request) if secure else None,
            node_name=self.node_name,
        )
        if decision.kind is callers.Kind.UNAUTHENTICATED:
            resp = responses.status(401, decision.message)
            resp.headers["WWW-Authenticate"] = 'Bearer realm="edgehub"'
            return resp
        if decision.kind is callers.Kind.FORBIDDEN:
            return responses.status(403, decision.message)
        if decision.kind is callers.Kind.NODE:
            return info
        verdict = self.verifier.verify(bearer)
        partition = verdict.account.subject if verdict.account is not None else None
        return dataclasses.replace(info, partition=partition)


def peer_common_name(request: web.BaseRequest) -> str | None:
    """The commonName of the TLS peer's certificate; "" when it has none, None without one."""
    transport = request.transport
    if transport is None:
        return None
    cert: Any = transport.get_extra_info("peercert")
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""
