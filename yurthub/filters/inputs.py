"""What the filters know about the world: the hub's address, the node, its pool, the services.

PURE: the collections here are fed decoded objects by ``filters.following`` (list results via
``replace``, watch events via ``apply``) and read by the filters; no I/O, no clock.

Memory stays small whatever the cluster's size: of the services only those carrying the
topology annotation are kept (name -> annotation value); of the NodePools and NodeBuckets only
their node names; of the node only its pool label.

Unknown is not empty: ``pool_nodes`` answers ``None`` for a pool it has not seen (not synced,
no such NodePool, the CRD not installed), and the filters then leave the object unchanged
rather than drop endpoints because a lookup failed.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
from collections.abc import Callable, Iterable, Mapping
from typing import Any

TOPOLOGY_ANNOTATION = "openyurt.io/topologyKeys"
POOL_LABEL = "apps.openyurt.io/nodepool"
BUCKET_POOL_LABEL = "openyurt.io/pool-name"


class PoolTopology(enum.StrEnum):
    """Where a pool's node list comes from (``--enable-node-pool``,
    ``--enable-pool-service-topology``; the latter wins, as in YurtHub)."""

    NONE = "none"
    """Pool topology off: ``openyurt.io/nodepool`` / ``kubernetes.io/zone`` leave slices as
    they are."""
    NODEPOOL = "nodepool"
    """``NodePool`` (apps.openyurt.io/v1beta2) ``status.nodes``."""
    NODEBUCKET = "nodebucket"
    """``NodeBucket`` objects labelled ``openyurt.io/pool-name=<pool>``."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _str_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


class Collection:
    """A followed collection (``following.Target``): a full list replaces the state, watch
    events change one object. Subclasses keep only what the filters read."""

    synced = False
    """True once a list (or a definitive "there is none": 404/403) has been applied."""
    on_commit: Callable[[], None] | None = None
    """Called after each list is applied (the runtime wakes what waits for the inputs)."""

    def begin(self) -> None:
        self._pending = self._empty()

    def add(self, obj: Mapping[str, Any]) -> None:
        self._put(self._pending, "ADDED", obj)

    def commit(self) -> None:
        self._state = self._pending
        self._pending = self._empty()
        self.synced = True
        if self.on_commit is not None:
            self.on_commit()

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        self._put(self._state, event_type, obj)

    def mark_absent(self) -> None:
        """The collection cannot be read (no such resource, not allowed): empty, but synced."""
        self.replace(())

    def replace(self, objects: Iterable[Mapping[str, Any]]) -> None:
        self.begin()
        for obj in objects:
            self.add(obj)
        self.commit()

    def _empty(self) -> dict[Any, Any]:
        return {}

    def _put(self, state: dict[Any, Any], event_type: str, obj: Mapping[str, Any]) -> None:
        raise NotImplementedError

    _state: dict[Any, Any]
    _pending: dict[Any, Any]


class ServiceTopologies(Collection):
    """``(namespace, name)`` -> ``openyurt.io/topologyKeys`` of the services that have one."""

    def __init__(self) -> None:
        self._state = self._pending = {}

    @property
    def keys(self) -> dict[tuple[str, str], str]:
        return self._state

    def _put(self, state: dict[Any, Any], event_type: str, obj: Mapping[str, Any]) -> None:
        meta = _meta(obj)
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        value = _str_map(meta.get("annotations")).get(TOPOLOGY_ANNOTATION)
        if event_type == "DELETED" or not isinstance(value, str):
            state.pop(key, None)
        else:
            state[key] = value


class NodeLabel(Collection):
    """This node's ``apps.openyurt.io/nodepool`` label (the node is followed by name)."""

    def __init__(self, node_name: str) -> None:
        self.node_name = node_name
        self._state = self._pending = {}

    @property
    def pool(self) -> str:
        return str(self._state.get("pool", ""))

    def _put(self, state: dict[Any, Any], event_type: str, obj: Mapping[str, Any]) -> None:
        meta = _meta(obj)
        if meta.get("name") != self.node_name:
            return
        value = _str_map(meta.get("labels")).get(POOL_LABEL)
        if event_type == "DELETED" or not isinstance(value, str):
            state.pop("pool", None)
        else:
            state["pool"] = value


class NodePools(Collection):
    """NodePool name -> its ``status.nodes``."""

    def __init__(self) -> None:
        self._state = self._pending = {}

    @property
    def nodes(self) -> dict[str, frozenset[str]]:
        return self._state

    def _put(self, state: dict[Any, Any], event_type: str, obj: Mapping[str, Any]) -> None:
        name = str(_meta(obj).get("name") or "")
        if not name:
            return
        if event_type == "DELETED":
            state.pop(name, None)
            return
        nodes = _str_map(obj.get("status")).get("nodes")
        state[name] = frozenset(
            n for n in (nodes if isinstance(nodes, list) else ()) if isinstance(n, str)
        )


class NodeBuckets(Collection):
    """NodeBucket name -> (pool, node names); a pool's nodes are the union of its buckets."""

    def __init__(self) -> None:
        self._state = self._pending = {}

    @property
    def buckets(self) -> dict[str, tuple[str, frozenset[str]]]:
        return self._state

    def pool_nodes(self, pool: str) -> frozenset[str] | None:
        found = [nodes for owner, nodes in self._state.values() if owner == pool]
        if not found:
            return None
        return frozenset().union(*found)

    def _put(self, state: dict[Any, Any], event_type: str, obj: Mapping[str, Any]) -> None:
        name = str(_meta(obj).get("name") or "")
        if not name:
            return
        if event_type == "DELETED":
            state.pop(name, None)
            return
        pool = _str_map(_meta(obj).get("labels")).get(BUCKET_POOL_LABEL)
        nodes = obj.get("nodes")
        names = frozenset(
            n["name"]
            for n in (nodes if isinstance(nodes, list) else ())
            if isinstance(n, dict) and isinstance(n.get("name"), str)
        )
        state[name] = (pool if isinstance(pool, str) else "", names)


@dataclasses.dataclass(frozen=True, slots=True)
class Address:
    """Where pods reach the apiserver through the hub (reference §6 "master service")."""

    host: str
    port: int

    @property
    def family(self) -> str:
        """``IPv4`` or ``IPv6`` (the EndpointSlice ``addressType`` it fits); ``""`` for a
        host name, which fits no slice."""
        try:
            return "IPv6" if ipaddress.ip_address(self.host).version == 6 else "IPv4"
        except ValueError:
            return ""


NO_SECURE_PORT = (
    "the hub serves no secure port (no serving certificate with --kubeconfig or without an "
    "identity: it requests one with --join-token, --bootstrap-file or "
    "--bootstrap-mode=kubeletcertificate)"
)


def pods_cannot_reach(address: Address, *, secure_port_served: bool) -> str:
    """PURE. Why a pod could not reach the hub's secure port at ``address``; "" when it can.

    Every problem is named, ``; ``-separated. A pod has its own network namespace: a loopback
    address (all of 127.0.0.0/8, ``::1``, an IPv4-mapped one) is the pod itself, the
    unspecified address (``0.0.0.0``, ``::``) is nowhere, and a name cannot be a Service's
    ``clusterIP``. Port 0 (``--proxy-secure-port=0``) is picked at start, too late for what
    kubelet hands its pods. Without a served secure port there is nothing to reach at all.
    """
    problems: list[str] = []
    host = address.host
    if not host:
        problems.append("no address")
    else:
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            problems.append(f"{host!r} is not an IP address")
        else:
            mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
            seen = mapped or ip
            if seen.is_loopback:
                problems.append(
                    f"{host} is a loopback address (in a pod's network namespace, the pod itself)"
                )
            elif seen.is_unspecified:
                problems.append(f"{host} is the unspecified address (no one can dial it)")
    if address.port == 0:
        problems.append("the secure port is picked at start (--proxy-secure-port=0)")
    if not secure_port_served:
        problems.append(NO_SECURE_PORT)
    return "; ".join(problems)


class Inputs:
    """Everything the filters read, live."""

    def __init__(
        self,
        *,
        node_name: str,
        hub_address: Address,
        pool_flag: str = "",
        pool_topology: PoolTopology = PoolTopology.NODEPOOL,
    ) -> None:
        self.node_name = node_name
        self.hub_address = hub_address
        self.pool_flag = pool_flag
        self.pool_topology = pool_topology
        self.services = ServiceTopologies()
        self.node = NodeLabel(node_name)
        self.node_pools = NodePools()
        self.node_buckets = NodeBuckets()

    def pool_name(self) -> str:
        """``--nodepool-name``, else the node's ``apps.openyurt.io/nodepool`` label, else ""."""
        return self.pool_flag or self.node.pool

    def pool_nodes(self, pool: str) -> frozenset[str] | None:
        """The nodes of ``pool``; None when unknown (pool topology off, or never seen)."""
        if self.pool_topology is PoolTopology.NODEBUCKET:
            return self.node_buckets.pool_nodes(pool)
        if self.pool_topology is PoolTopology.NODEPOOL:
            return self.node_pools.nodes.get(pool)
        return None

    def service_topology(self, namespace: str, name: str) -> str | None:
        """The service's ``openyurt.io/topologyKeys``; None when it has none (or is unknown)."""
        return self.services.keys.get((namespace, name))
