"""Who may have how many requests in flight: the proxy's admission decisions.

PURE: counters and decisions, no I/O, no clock (``Admission`` is mutated on the event loop only).

- Long-running requests (watches, logs, exec, proxies: ``RequestInfo.is_long_running``) have a
  limit of their own: a process holding many watches cannot use up the room of short requests
  (before, kubelet's node GET and lease PUT were answered 429 behind someone's watches).
- Each client has a share of each limit. A client is its component (the User-Agent's product)
  and, when it sends a Bearer token, that token (a pod's ServiceAccount): two pods that both say
  ``python-requests`` are two clients. The proxy authenticates nobody, so a process can claim to
  be kubelet; it then competes with kubelet, not with everyone else.
- Never refused (``exempt``): the hub's own requests, and kubelet's heartbeat: its get and
  update (or patch) of its own node's Lease and of its own Node, which come one at a time. "Own"
  is never a header a caller sends: the hub's own clients reach the proxy over its own socket
  (``listening``, only this process may use it), and the router passes that as ``own``; "its
  own node" is the hub's ``--node-name``, not anything in the request. A User-Agent buys
  nothing: before, ``yurthub/...``, ``edgehub/...`` and kubelet's lease *watches* were never
  counted, so any local process could hold 300 watches against a limit of 6. A process calling
  itself kubelet can still send those few single-object requests uncounted; every watch and
  list it sends is counted.

Over a limit the router answers 429 with ``Retry-After`` (client-go backs off and retries).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib

from yurthub import requestinfo

LEASE_NAMESPACE = "kube-node-lease"
LEASE_GROUP = "coordination.k8s.io"
HEARTBEAT_VERBS = frozenset({"get", "update", "patch"})
"""What kubelet does to its Lease and Node to stay Ready; never watch or list."""


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


def exempt(info: requestinfo.RequestInfo, node_name: str, *, own: bool) -> bool:
    """Never refused: the hub's own requests (``own``: they came over the hub's own socket),
    and kubelet's get/update of this node's Lease (``kube-node-lease/<node_name>``) and Node
    (and its ``status``)."""
    if own:
        return True
    if info.component != "kubelet" or not info.is_resource_request or not node_name:
        return False
    if info.verb not in HEARTBEAT_VERBS or info.name != node_name:
        return False
    if info.resource == "leases":
        return (
            info.group == LEASE_GROUP and info.namespace == LEASE_NAMESPACE and not info.subresource
        )
    return (
        info.resource == "nodes"
        and not info.group
        and not info.namespace
        and info.subresource in ("", "status")
    )


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
