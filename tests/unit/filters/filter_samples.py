"""Objects the filter tests are made of (the shapes of reference §10.4's fixtures)."""

from __future__ import annotations

from typing import Any

from yurthub.filters import inputs

HUB = inputs.Address("169.251.2.1", 10268)


def world(
    *,
    node: str = "node1",
    pool_flag: str = "",
    pool_label: str | None = None,
    pools: dict[str, list[str]] | None = None,
    topology: inputs.PoolTopology = inputs.PoolTopology.NODEPOOL,
    services: dict[tuple[str, str], str] | None = None,
    hub: inputs.Address = HUB,
) -> inputs.Inputs:
    w = inputs.Inputs(node_name=node, hub_address=hub, pool_flag=pool_flag, pool_topology=topology)
    if pool_label is not None:
        w.node.replace([{"metadata": {"name": node, "labels": {inputs.POOL_LABEL: pool_label}}}])
    if pools is not None:
        w.node_pools.replace(
            [{"metadata": {"name": p}, "status": {"nodes": nodes}} for p, nodes in pools.items()]
        )
    if services is not None:
        w.services.replace(
            [
                {
                    "metadata": {
                        "namespace": ns,
                        "name": name,
                        "annotations": {inputs.TOPOLOGY_ANNOTATION: value},
                    }
                }
                for (ns, name), value in services.items()
            ]
        )
    return w


def service(
    name: str,
    namespace: str = "default",
    *,
    type_: str = "ClusterIP",
    annotations: dict[str, str] | None = None,
    cluster_ip: str = "10.96.0.10",
    ports: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": "7"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {
        "kind": "Service",
        "apiVersion": "v1",
        "metadata": meta,
        "spec": {
            "type": type_,
            "clusterIP": cluster_ip,
            "clusterIPs": [cluster_ip],
            "ports": ports if ports is not None else [{"name": "http", "port": 80}],
        },
    }


def kubernetes_service() -> dict[str, Any]:
    return service(
        "kubernetes",
        cluster_ip="10.96.0.1",
        ports=[{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
    )


def endpoint(node: str | None, ip: str = "10.0.0.1") -> dict[str, Any]:
    e: dict[str, Any] = {"addresses": [ip], "conditions": {"ready": True}}
    if node is not None:
        e["nodeName"] = node
    return e


def slice_(
    name: str,
    service_name: str | None,
    nodes: list[str | None],
    namespace: str = "default",
    *,
    address_type: str = "IPv4",
) -> dict[str, Any]:
    labels = {"kubernetes.io/service-name": service_name} if service_name else {}
    return {
        "kind": "EndpointSlice",
        "apiVersion": "discovery.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "addressType": address_type,
        "endpoints": [endpoint(n, f"10.0.0.{i + 1}") for i, n in enumerate(nodes)],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
    }


def pod(
    containers: list[list[tuple[str, str]]], *, init: list[list[tuple[str, str]]] | None = None
) -> dict[str, Any]:
    def container(i: int, env: list[tuple[str, str]], prefix: str) -> dict[str, Any]:
        c: dict[str, Any] = {"name": f"{prefix}{i}", "image": "busybox"}
        if env:
            c["env"] = [{"name": k, "value": v} for k, v in env]
        return c

    spec: dict[str, Any] = {"containers": [container(i, e, "c") for i, e in enumerate(containers)]}
    if init:
        spec["initContainers"] = [container(i, e, "init") for i, e in enumerate(init)]
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": spec,
    }


def pod_list() -> dict[str, Any]:
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [pod([[]])]}
