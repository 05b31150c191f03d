"""``servicetopology``: kube-proxy and coredns see only the endpoints of their node or pool.

PURE. The Service an endpoint object belongs to (an EndpointSlice's
``kubernetes.io/service-name`` label; an Endpoints object's own name) says, in annotation
``openyurt.io/topologyKeys`` (reference §6):

- ``kubernetes.io/hostname``: keep only the endpoints on this node;
- ``openyurt.io/nodepool`` or ``kubernetes.io/zone``, only while pool topology is on
  (``--enable-node-pool`` or ``--enable-pool-service-topology``): keep only the endpoints on the
  nodes of this node's pool (``--nodepool-name``, else the node's label; a node in no pool falls
  back to its own endpoints). The pool's nodes come from its NodePool or its NodeBuckets
  (``inputs``). With pool topology off such a Service is left as it is, on a node in no pool
  too: the switch is looked at before the pool, as YurtHub does.

An endpoint whose node is not known (no ``nodeName``, and for v1beta1 no
``kubernetes.io/hostname`` topology) is dropped when a topology applies. A slice left with no
endpoints is still sent, with ``endpoints: []`` (kube-proxy must learn that its endpoints went).

Left unchanged: no such Service known, no annotation or another value (YurtHub matches the
value exactly; a comma list is not a preference list here either, since a per-slice fallback
would mix local and pool endpoints of one Service), a pool whose nodes are not known (never
thins endpoints because a lookup failed).

Difference from YurtHub, on purpose: legacy ``Endpoints`` objects are filtered too (YurtHub
registers the filter for them but passes them through, its issue #2613), so clients that
still read Endpoints (older ingress controllers) see the same topology as kube-proxy. Their
subsets keep their ports; a subset left without any address is removed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from yurthub.filters import inputs, objects

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
HOSTNAME = "kubernetes.io/hostname"
NODEPOOL = "openyurt.io/nodepool"
ZONE = "kubernetes.io/zone"


def _nodes(value: str, world: inputs.Inputs) -> frozenset[str] | None:
    """The nodes whose endpoints stay; None: leave the object as it is."""
    if value == HOSTNAME:
        return frozenset({world.node_name})
    if value in (NODEPOOL, ZONE):
        if world.pool_topology is inputs.PoolTopology.NONE:
            return None  # checked first: a node in no pool must not fall back to its own
        pool = world.pool_name()
        if not pool:
            return frozenset({world.node_name})
        return world.pool_nodes(pool)
    return None


def _endpoint_node(endpoint: Mapping[str, Any]) -> str | None:
    node = endpoint.get("nodeName")
    if isinstance(node, str):
        return node
    for field in ("topology", "deprecatedTopology"):  # v1beta1 / v1's read-only copy
        found = objects.mapping(endpoint.get(field)).get(HOSTNAME)
        if isinstance(found, str):
            return found
    return None


def _address_node(address: Mapping[str, Any]) -> str | None:
    node = address.get("nodeName")
    return node if isinstance(node, str) else None


def _keep(items: list[Any], keep: Callable[[Mapping[str, Any]], bool]) -> list[Any]:
    return [item for item in items if isinstance(item, dict) and keep(item)]


def apply(obj: objects.Obj, kind: str, world: inputs.Inputs) -> objects.Obj | None:
    if kind == "EndpointSlice":
        service = objects.label(obj, SERVICE_NAME_LABEL)
    elif kind == "Endpoints":
        service = objects.namespace_name(obj)[1]
    else:
        return obj
    namespace = objects.namespace_name(obj)[0]
    if not service:
        return obj
    value = world.service_topology(namespace, service)
    if value is None:
        return obj
    nodes = _nodes(value, world)
    if nodes is None:
        return obj
    if kind == "EndpointSlice":
        endpoints = obj.get("endpoints")
        if not isinstance(endpoints, list):
            return obj
        kept = _keep(endpoints, lambda e: _endpoint_node(e) in nodes)
        if kept == endpoints:
            return obj
        return {**obj, "endpoints": kept}
    return _endpoints(obj, nodes)


def _endpoints(obj: objects.Obj, nodes: frozenset[str]) -> objects.Obj:
    subsets = objects.sequence(obj.get("subsets"))
    kept_subsets: list[Any] = []
    for subset in subsets:
        if not isinstance(subset, dict):
            continue
        fresh = dict(subset)
        for field in ("addresses", "notReadyAddresses"):
            if field in subset:
                addresses = objects.sequence(subset.get(field))
                fresh[field] = _keep(addresses, lambda a: _address_node(a) in nodes)
                if not fresh[field]:
                    del fresh[field]
        if fresh.get("addresses") or fresh.get("notReadyAddresses"):
            kept_subsets.append(fresh)
    if kept_subsets == subsets:
        return obj
    return {**obj, "subsets": kept_subsets}
