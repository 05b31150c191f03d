"""Pure: the shape of a test fleet (who is where) and the load it carries (what exists).

A fleet of ``N`` hollow nodes in ``P`` NodePools on one machine. Each node is named after a
loopback address of its own (``127.<subnet>.<i // 250>.<i % 250 + 1>``): kubelet reports a name
that is an IP as the Node's InternalIP, so the leaders the manager elects are addresses a
leader hub can bind its multiplexer port on, the same port number on every node, as on a real
pool. Nodes are given to pools in contiguous blocks whose sizes differ by one at most.

The load (``LoadSpec``) is what a small real cluster holds: namespaces, ConfigMaps and Secrets,
Services with a Deployment each (the ReplicaSet controller makes the pods, the scheduler places
them, the hollow kubelets "run" them), the pods mounting a ConfigMap and a Secret of their
namespace. ``objects`` yields them in the order the apiserver needs (namespaces first) and is
bounded by the spec's counts, never by the cluster's size. Every object carries
``LABEL=<prefix>``, and the pods a ``nodeSelector`` on the fleet's node label, so a fleet in a
shared cluster only lands on its own nodes and can be told apart.

PURE: no I/O; tests table-test it (``tests/unit/testbed/test_testbed_fleetplans.py``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterator
from typing import Any

POOL_LABEL = "apps.openyurt.io/nodepool"
LABEL = "fleet.edgehub.io/name"
"""On every object of a fleet's load and on its nodes: the fleet's prefix."""
AUTONOMY = "node.openyurt.io/autonomy-duration"
ZONE = "topology.kubernetes.io/zone"
CLOUD_ZONE = "cloud"
PER_OCTET = 250
MAX_NODES = 250 * 250
IMAGE = "registry.k8s.io/pause:3.10"


def node_address(subnet: int, index: int) -> str:
    """The loopback address (and so the name) of node ``index`` of a fleet in ``subnet``."""
    if not 1 <= subnet <= 254:
        raise ValueError(f"subnet must be 1..254 (127.<subnet>.x.y), not {subnet}")
    if not 0 <= index < MAX_NODES:
        raise ValueError(f"a fleet has at most {MAX_NODES} nodes; index {index}")
    address = f"127.{subnet}.{index // PER_OCTET}.{index % PER_OCTET + 1}"
    assert ipaddress.ip_address(address).is_loopback
    return address


def pool_index(index: int, nodes: int, pools: int) -> int:
    """The pool of node ``index``: contiguous blocks, sizes differing by one at most."""
    if not 1 <= pools <= nodes:
        raise ValueError(f"need 1 <= pools <= nodes, not {pools} pools of {nodes} nodes")
    if not 0 <= index < nodes:
        raise ValueError(f"index {index} is not a node of {nodes}")
    return index * pools // nodes


def pool_name(prefix: str, pool: int) -> str:
    return f"{prefix}-pool-{pool}"


@dataclasses.dataclass(frozen=True, slots=True)
class Placement:
    index: int
    name: str
    pool: str


def placements(prefix: str, subnet: int, nodes: int, pools: int) -> list[Placement]:
    return [
        Placement(i, node_address(subnet, i), pool_name(prefix, pool_index(i, nodes, pools)))
        for i in range(nodes)
    ]


def node_labels(prefix: str, pool: str) -> dict[str, str]:
    """What each hollow kubelet registers with (``--node-labels``). A pool is a zone of its
    own (a region behind its own links), so kube-controller-manager judges an outage per
    pool, as on a real fleet: a zone whose nodes all went silent while another zone (the
    cloud node's) is fine is tainted at the normal rate, its pods evicted once their
    tolerations run out; only when every zone is silent does it assume its own network broke
    and evict nothing."""
    return {POOL_LABEL: pool, LABEL: prefix, ZONE: pool}


def cloud_node_address(subnet: int) -> str:
    """The fleet's one cloud node (no link, no hub, no pods): the last address of the subnet."""
    return node_address(subnet, MAX_NODES - 1)


def node_pool(name: str, *, leader_replicas: int = 1) -> dict[str, Any]:
    """A NodePool with leader election, as docs/pool.md sets one up."""
    return {
        "apiVersion": "apps.openyurt.io/v1beta2",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "type": "Edge",
            "enableLeaderElection": True,
            "interConnectivity": True,
            "leaderReplicas": leader_replicas,
            "leaderElectionStrategy": "random",
        },
    }


@dataclasses.dataclass(frozen=True, slots=True)
class LoadSpec:
    prefix: str
    pods: int
    """Total pods (``pods_per_node * nodes``)."""
    services: int = 200
    namespaces: int = 10
    configmaps: int = 20
    secrets: int = 20
    configmap_bytes: int = 1024
    secret_bytes: int = 256

    def __post_init__(self) -> None:
        if self.pods < 0 or self.services < 1 or self.namespaces < 1:
            raise ValueError("need pods >= 0, services >= 1 and namespaces >= 1")
        if self.configmaps < self.namespaces or self.secrets < self.namespaces:
            raise ValueError("need at least one ConfigMap and one Secret per namespace")
        if self.services < self.namespaces:
            raise ValueError("need at least one Service per namespace")


def replicas(total: int, services: int) -> list[int]:
    """``total`` pods over ``services`` Deployments, sizes differing by one at most."""
    base, extra = divmod(total, services)
    return [base + (1 if i < extra else 0) for i in range(services)]


def namespace_of(spec: LoadSpec, index: int) -> str:
    return f"{spec.prefix}-ns-{index % spec.namespaces}"


def mounts(spec: LoadSpec, service: int) -> tuple[str, str]:
    """The ConfigMap and Secret the pods of Deployment ``service`` mount (in its namespace)."""
    slot = service // spec.namespaces
    return (
        f"cfg-{slot % (spec.configmaps // spec.namespaces)}",
        f"sec-{slot % (spec.secrets // spec.namespaces)}",
    )


def _meta(spec: LoadSpec, name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {LABEL: spec.prefix}}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def objects(spec: LoadSpec) -> Iterator[dict[str, Any]]:
    """Every object of the load, namespaces first (yielded one by one: bounded memory)."""
    for n in range(spec.namespaces):
        yield {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": _meta(spec, namespace_of(spec, n)),
        }
    for n in range(spec.namespaces):
        ns = namespace_of(spec, n)
        for c in range(spec.configmaps // spec.namespaces):
            yield {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": _meta(spec, f"cfg-{c}", ns),
                "data": {"settings": "x" * spec.configmap_bytes},
            }
        for s in range(spec.secrets // spec.namespaces):
            yield {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": _meta(spec, f"sec-{s}", ns),
                "stringData": {"token": "s" * spec.secret_bytes},
            }
    for i, count in enumerate(replicas(spec.pods, spec.services)):
        yield service(spec, i)
        yield deployment(spec, i, count)


def service(spec: LoadSpec, index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(spec, f"svc-{index}", namespace_of(spec, index)),
        "spec": {
            "selector": {"app": f"svc-{index}"},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
        },
    }


def deployment(spec: LoadSpec, index: int, count: int) -> dict[str, Any]:
    configmap, secret = mounts(spec, index)
    labels = {"app": f"svc-{index}", LABEL: spec.prefix}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(spec, f"svc-{index}", namespace_of(spec, index)),
        "spec": {
            "replicas": count,
            "selector": {"matchLabels": {"app": f"svc-{index}"}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {LABEL: spec.prefix},
                    "containers": [
                        {
                            "name": "app",
                            "image": IMAGE,
                            "ports": [{"containerPort": 8080}],
                            "volumeMounts": [
                                {"name": "config", "mountPath": "/etc/app"},
                                {"name": "secret", "mountPath": "/etc/secret"},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "config", "configMap": {"name": configmap}},
                        {"name": "secret", "secret": {"secretName": secret}},
                    ],
                },
            },
        },
    }


def batches(items: Iterator[dict[str, Any]], size: int) -> Iterator[dict[str, Any]]:
    """``items`` as ``v1/List`` documents of at most ``size`` items (for ``kubectl apply``)."""
    if size < 1:
        raise ValueError("batch size must be >= 1")
    batch: list[dict[str, Any]] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield {"apiVersion": "v1", "kind": "List", "items": batch}
            batch = []
    if batch:
        yield {"apiVersion": "v1", "kind": "List", "items": batch}
