"""Which TokenRequests the hub grants while the cloud is away: those the apiserver would grant
the node, decided from the hub's cache.

PURE: the caller, the request and the cached pod it names in; a ``Grant`` or a ``Refusal`` out.

A token the hub mints offline opens its ServiceAccount's offline cache partition
(``offlinetokens``), so minting one is handing out that account's cached reads: the hub must
not mint for anyone the apiserver would not. Online, a node (``system:node:<node>``, which is
the hub's identity too) gets a ServiceAccount token only

- for a ServiceAccount a pod bound to that node runs as (the Node authorizer);
- bound to that pod: ``boundObjectRef`` ``v1`` ``Pod`` with a name and a uid, the pod existing
  with that uid and scheduled on the node (NodeRestriction), and running as the requested
  ServiceAccount (the TokenRequest registry);
- for no audience (the API audiences) or one audience a projected ``serviceAccountToken``
  volume of that pod names (NodeRestriction's audience restriction, on by default since 1.33).

Offline the hub applies these rules to the pod as kubelet last read it through the hub (its
node-partition cache entry): the pod must be in that cache, on this node, with that uid and
that ServiceAccount. What the hub cannot check offline it refuses: audiences a CSI driver
asks for or an RBAC rule (``request-serviceaccounts-token-audience``) allows. The token lives
the shorter of ``offlinetokens.LIFETIME`` and the ``expirationSeconds`` asked for (default
3600, within the apiserver's 600 s .. 2^32 s).

Who "the node" is: a caller without a Bearer token. On the plain port (10261), which
authenticates nobody, that is any local process, as it is online (its requests go out with
the hub's node identity): it gets at most what the node could get, a token of an account a
pod on this node already runs as, bound to that pod. On the TLS port (10268) it is a caller
with this node's client certificate (no credentials there is a 401 before this). A Bearer
caller (a pod) is refused: online the apiserver judges its RBAC rights to ``create
serviceaccounts/token``, which the hub cannot evaluate offline.

Left unchecked (as for any offline answer): a pod or ServiceAccount deleted in the cloud while
the node is away still counts until the cloud is back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from yurthub.authn import callers, offlinetokens

DEFAULT_EXPIRATION = 3600
"""The apiserver's ``expirationSeconds`` when a request gives none."""
MIN_EXPIRATION = 600
MAX_EXPIRATION = 1 << 32


@dataclasses.dataclass(frozen=True, slots=True)
class Grant:
    audiences: tuple[str, ...]
    """As asked (empty: the API audiences)."""
    lifetime: int
    """Seconds the token lives."""
    pod_name: str
    pod_uid: str


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    code: int
    """403 Forbidden; 400/422 for a request the apiserver would not accept from anyone."""
    message: str


def pod_name(spec: Mapping[str, Any]) -> str:
    """The pod a TokenRequest's ``boundObjectRef`` names ("" when it names none): the one
    cached pod the decision needs."""
    ref = spec.get("boundObjectRef")
    if not isinstance(ref, Mapping) or ref.get("kind") != "Pod":
        return ""
    name = ref.get("name")
    return name if isinstance(name, str) else ""


def decide(
    *,
    caller: callers.Kind,
    node_name: str,
    namespace: str,
    account: str,
    spec: Mapping[str, Any],
    pod: Mapping[str, Any] | None,
    lifetime: int = offlinetokens.LIFETIME,
) -> Grant | Refusal:
    """The offline answer to a TokenRequest for ServiceAccount ``namespace/account``.

    ``spec``: the request's ``spec``; ``pod``: the cached pod ``namespace/pod_name(spec)``
    (None when not cached or no pod is named); ``lifetime``: the longest offline token.
    """
    if caller is not callers.Kind.NODE:
        return Refusal(
            403,
            "the cloud is unreachable: offline the hub issues ServiceAccount tokens only to the "
            "node (kubelet, with no Bearer token), for the pods it runs; whether this token "
            "may request one is for the apiserver to decide",
        )
    audiences = spec.get("audiences")
    if audiences is None:
        audiences = []
    if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
        return Refusal(400, "spec.audiences must be a list of strings")
    expiration = spec.get("expirationSeconds", DEFAULT_EXPIRATION)
    if expiration is None:
        expiration = DEFAULT_EXPIRATION
    if isinstance(expiration, bool) or not isinstance(expiration, int):
        return Refusal(400, "spec.expirationSeconds must be an integer")
    if not MIN_EXPIRATION <= expiration <= MAX_EXPIRATION:
        return Refusal(
            422,
            f"spec.expirationSeconds: {expiration} must be between {MIN_EXPIRATION} (10 "
            "minutes) and 2^32 seconds",
        )
    ref = spec.get("boundObjectRef")
    if (
        not isinstance(ref, Mapping)
        or ref.get("apiVersion") != "v1"
        or ref.get("kind") != "Pod"
        or not pod_name(spec)
    ):
        return _forbidden("node requested token not bound to a pod")
    name = pod_name(spec)
    uid = ref.get("uid")
    if not isinstance(uid, str) or not uid:
        return _forbidden("node requested token with a pod binding without a uid")
    if pod is None:
        return _forbidden(
            f"pod {namespace}/{name} is not in the hub's cache of this node's pods (offline "
            "the hub knows only the pods kubelet read while online)"
        )
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    pod_spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    assert isinstance(meta, Mapping) and isinstance(pod_spec, Mapping)
    if meta.get("uid") != uid:
        return _forbidden(
            f"the UID in the bound object reference ({uid}) does not match the UID of pod "
            f"{namespace}/{name} in the hub's cache: the pod may have been deleted and created "
            "again"
        )
    if pod_spec.get("nodeName") != node_name:
        return _forbidden(
            f"node requested token bound to pod {namespace}/{name}, which is scheduled on "
            "another node"
        )
    runs_as = pod_spec.get("serviceAccountName") or ""
    if runs_as != account:
        return _forbidden(
            f"pod {namespace}/{name} runs as ServiceAccount {runs_as!r}, not {account!r}: the "
            "node may request tokens only for the ServiceAccount of a pod it runs"
        )
    if len(audiences) > 1:
        return _forbidden("node may only request 0 or 1 audiences")
    audience = audiences[0] if audiences else ""
    if audience not in projected_audiences(pod_spec):
        return _forbidden(
            f"audience {audience!r} is not in a projected serviceAccountToken volume of pod "
            f"{namespace}/{name} (offline the hub cannot check CSI drivers' audiences or "
            "RBAC's request-serviceaccounts-token-audience)"
        )
    return Grant(tuple(audiences), min(lifetime, expiration), name, uid)


def projected_audiences(pod_spec: Mapping[str, Any]) -> frozenset[str]:
    """The audiences the pod's projected ``serviceAccountToken`` sources name ("" for none)."""
    found: set[str] = set()
    volumes = pod_spec.get("volumes")
    for volume in volumes if isinstance(volumes, list) else ():
        projected = volume.get("projected") if isinstance(volume, Mapping) else None
        sources = projected.get("sources") if isinstance(projected, Mapping) else None
        for source in sources if isinstance(sources, list) else ():
            token = source.get("serviceAccountToken") if isinstance(source, Mapping) else None
            if isinstance(token, Mapping):
                audience = token.get("audience")
                found.add(audience if isinstance(audience, str) else "")
    return frozenset(found)


def _forbidden(why: str) -> Refusal:
    return Refusal(403, f"the cloud is unreachable and the hub refuses this token: {why}")
