"""NodePools (apps.openyurt.io/v1beta2) and the Nodes in them, read for the hub-leader
controllers.

PURE: JSON dicts in, frozen values out; problems are named, never raised.

A node is in pool ``p`` when it carries the label ``apps.openyurt.io/nodepool=p``. A spec field
that is absent takes the CRD's default (``manifests/crds``: strategy ``random``, one leader,
services and endpointslices); a value of the wrong shape is a ``problem`` the controller
reports as a Warning Event on the NodePool, and leader election of that pool is left as it was.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Mapping
from typing import Any

from kubecontrol import kubeapi, timestamps

NODE_POOLS = kubeapi.Resource("apps.openyurt.io", "v1beta2", "nodepools")
NODES = kubeapi.Resource("", "v1", "nodes")
POOL_LABEL = "apps.openyurt.io/nodepool"

RANDOM = "random"
MARK = "mark"
STRATEGIES = (RANDOM, MARK)
DEFAULT_REPLICAS = 1
MAX_REPLICAS = 64
"""Hubs honour at most this many leaders (``yurthub.pool.leaderconfigs.MAX_LEADERS``)."""
DEFAULT_SCOPE = ("/v1/services", "discovery.k8s.io/v1/endpointslices")

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@dataclasses.dataclass(frozen=True, slots=True)
class PoolSpec:
    name: str
    uid: str
    enable_leader_election: bool = False
    strategy: str = RANDOM
    leader_replicas: int = DEFAULT_REPLICAS
    leader_node_label_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    scope: tuple[str, ...] = DEFAULT_SCOPE
    """Pool-scoped resources as sorted ``group/version/resource`` strings."""
    interconnectivity: bool = False
    problems: tuple[str, ...] = ()
    """What in the spec cannot be used (each names the field)."""


@dataclasses.dataclass(frozen=True, slots=True)
class NodeFacts:
    name: str
    pool: str
    ready: bool
    internal_ip: str
    labels: Mapping[str, str]
    deleting: bool = False
    """The node carries a ``deletionTimestamp``."""
    not_ready_since: datetime.datetime | None = None
    """When a NotReady node's Ready condition last changed (None: Ready, or not said)."""
    ready_since: datetime.datetime | None = None
    """When a Ready node's Ready condition last changed (None: NotReady, or not said)."""


def read_pool(obj: Mapping[str, Any]) -> PoolSpec:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        spec = {}
    problems: list[str] = []

    def flag(key: str) -> bool:
        value = spec.get(key, False)
        if isinstance(value, bool):
            return value
        problems.append(f"spec.{key}: not a boolean")
        return False

    strategy = spec.get("leaderElectionStrategy") or RANDOM
    if strategy not in STRATEGIES:
        problems.append(
            f"spec.leaderElectionStrategy: {str(strategy)[:32]!r} is neither random nor mark"
        )
    replicas = spec.get("leaderReplicas", DEFAULT_REPLICAS)
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        problems.append("spec.leaderReplicas: not an integer")
        replicas = DEFAULT_REPLICAS
    elif not 1 <= replicas <= MAX_REPLICAS:
        problems.append(f"spec.leaderReplicas: {replicas} is not within 1..{MAX_REPLICAS}")
        replicas = max(1, min(replicas, MAX_REPLICAS))
    selector = spec.get("leaderNodeLabelSelector") or {}
    if not isinstance(selector, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in selector.items()
    ):
        problems.append("spec.leaderNodeLabelSelector: not a map of strings")
        selector = {}
    if strategy == MARK and not selector:
        problems.append("spec.leaderNodeLabelSelector: the mark strategy needs one")
    return PoolSpec(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        enable_leader_election=flag("enableLeaderElection"),
        strategy=str(strategy),
        leader_replicas=replicas,
        leader_node_label_selector=dict(selector),
        scope=_scope(spec.get("poolScopeMetadata"), problems),
        interconnectivity=flag("interConnectivity"),
        problems=tuple(problems),
    )


def _scope(value: object, problems: list[str]) -> tuple[str, ...]:
    if value is None:
        return DEFAULT_SCOPE
    if not isinstance(value, list):
        problems.append("spec.poolScopeMetadata: not a list")
        return DEFAULT_SCOPE
    out: set[str] = set()
    for index, item in enumerate(value):
        field = f"spec.poolScopeMetadata[{index}]"
        if not isinstance(item, Mapping):
            problems.append(f"{field}: not an object")
            continue
        group, version, resource = (item.get(k, "") for k in ("group", "version", "resource"))
        if not all(isinstance(x, str) for x in (group, version, resource)):
            problems.append(f"{field}: group, version and resource must be strings")
            continue
        assert isinstance(group, str) and isinstance(version, str) and isinstance(resource, str)
        if group and not _DNS_SUBDOMAIN.fullmatch(group):
            problems.append(f"{field}.group: {group[:64]!r} is not a DNS subdomain")
        elif not _DNS_LABEL.fullmatch(version):
            problems.append(f"{field}.version: {version[:64]!r} is not a version")
        elif not _DNS_LABEL.fullmatch(resource):
            problems.append(f"{field}.resource: {resource[:64]!r} is not a resource name")
        else:
            out.add(f"{group}/{version}/{resource}")
    return tuple(sorted(out))


def read_node(obj: Mapping[str, Any]) -> NodeFacts:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    if not isinstance(labels, Mapping):
        labels = {}
    status = obj.get("status") or {}
    ready = False
    changed: datetime.datetime | None = None
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
            changed = timestamps.parse(cond.get("lastTransitionTime"))
    deleting = bool(meta.get("deletionTimestamp"))
    if deleting:
        ready = False
    internal_ip = ""
    for address in status.get("addresses") or []:
        if isinstance(address, Mapping) and address.get("type") == "InternalIP":
            internal_ip = str(address.get("address") or "")
            if internal_ip:
                break
    return NodeFacts(
        name=str(meta.get("name") or ""),
        pool=str(labels.get(POOL_LABEL) or ""),
        ready=ready,
        internal_ip=internal_ip,
        labels={str(k): str(v) for k, v in labels.items()},
        deleting=deleting,
        not_ready_since=None if ready else changed,
        ready_since=changed if ready else None,
    )
