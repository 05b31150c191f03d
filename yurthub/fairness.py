"""Who may have how many requests in flight: the proxy's admission decisions.

PURE: counters and decisions, no I/O, no clock (``Admission`` is mutated on the event loop only).

- Long-running requests (watches, logs, exec, proxies: ``RequestInfo.is_long_running``) have a
  limit of their own: a process holding many watches cannot use up the room of short requests
  (before, kubelet's node GET and lease PUT were answered 429 behind someone's watches).
- Each client has a share of each limit. A client is its component (the User-Agent's product)
  and, when it sends a Bearer token, that token (a pod's ServiceAccount): two pods that both say
  ``python-requests`` are two clients. The proxy authenticates nobody, so a process can claim to
  be kubelet; it then competes with kubelet, not with everyone else.
- Never refused (``exempt``): the hub's own requests, and kubelet's heartbeat (its node lease and
  its own Node object, bounded in number by nature). Without them the node turns NotReady.

Over a limit the router answers 429 with ``Retry-After`` (client-go backs off and retries).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib

from yurthub import requestinfo

OWN_COMPONENTS = frozenset({"yurthub", "edgehub", "edgehub-heartbeat"})
LEASE_NAMESPACE = "kube-node-lease"


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    in_flight: int
    """Short requests in flight, all clients together."""
    long_running: int
    """Long-running requests in flight, all clients together."""
    in_flight_per_client: int
    long_running_per_client: int


def client_key(info: requestinfo.RequestInfo, bearer_token: str) -> str:
    """Who a request is for the per-client limits: its component, and its token if any (only a
    digest is kept: the key is never a credential)."""
    if not bearer_token:
        return info.component
    digest = hashlib.blake2b(bearer_token.encode("utf-8", "replace"), digest_size=8).hexdigest()
    return f"{info.component}#{digest}"


def exempt(info: requestinfo.RequestInfo, node_name: str, own_user_agent: str) -> bool:
    """Never refused: the hub's own requests and kubelet's heartbeat for this node."""
    if info.component in OWN_COMPONENTS or info.user_agent == own_user_agent:
        return True
    if info.component != "kubelet" or not info.is_resource_request:
        return False
    if info.resource == "leases":
        return info.namespace == LEASE_NAMESPACE
    return info.resource == "nodes" and info.name == node_name


class Admission:
    """In-flight counters per kind and per client; ``admit`` then ``release`` once."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.short = 0
        self.long = 0
        self._short_by: collections.Counter[str] = collections.Counter()
        self._long_by: collections.Counter[str] = collections.Counter()

    def admit(self, client: str, long_running: bool) -> str | None:
        """Count the request in; or the reason it is refused (nothing counted)."""
        limits = self.limits
        if long_running:
            if self.long >= limits.long_running:
                return "long-running"
            if self._long_by[client] >= limits.long_running_per_client:
                return "client-long-running"
            self.long += 1
            self._long_by[client] += 1
            return None
        if self.short >= limits.in_flight:
            return "in-flight"
        if self._short_by[client] >= limits.in_flight_per_client:
            return "client-in-flight"
        self.short += 1
        self._short_by[client] += 1
        return None

    def release(self, client: str, long_running: bool) -> None:
        by = self._long_by if long_running else self._short_by
        if long_running:
            self.long -= 1
        else:
            self.short -= 1
        by[client] -= 1
        if by[client] <= 0:
            del by[client]  # one entry per client in flight, never more

    def clients(self) -> int:
        return len(self._short_by.keys() | self._long_by.keys())
