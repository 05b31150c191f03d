"""``masterservice``: the ``default/kubernetes`` Service, as kubelet sees it, points at the hub.

PURE. kubelet gives every pod ``KUBERNETES_SERVICE_HOST``/``_PORT`` from this Service (and
pods using InClusterConfig follow them), so pointing it at the hub makes in-cluster clients
reach the apiserver through the hub, online and offline (reference §6).

Change: ``spec.clusterIP`` and ``spec.clusterIPs`` become ``[host]``, the first port named
``https`` gets the hub's secure port. Every other object is returned as it came.

Kept off where pods cannot reach the hub's secure port: with the CLI's defaults the hub's
address is 127.0.0.1, which in a pod's network namespace is the pod itself, so every
in-cluster client would lose the apiserver (``registry.POINTING_AT_THE_HUB``,
``inputs.pods_cannot_reach``; ``runtime.Filters.inactive`` says why in ``/v1/status``).
"""

from __future__ import annotations

from yurthub.filters import inputs, objects

NAMESPACE, NAME, PORT_NAME = "default", "kubernetes", "https"


def apply(obj: objects.Obj, kind: str, world: inputs.Inputs) -> objects.Obj | None:
    if kind != "Service" or objects.namespace_name(obj) != (NAMESPACE, NAME):
        return obj
    host, port = world.hub_address.host, world.hub_address.port
    spec = dict(objects.spec(obj))
    ports = objects.sequence(spec.get("ports"))
    new_ports = list(ports)
    for i, item in enumerate(ports):
        if isinstance(item, dict) and item.get("name") == PORT_NAME:
            new_ports[i] = {**item, "port": port}
            break
    if spec.get("clusterIP") == host and spec.get("clusterIPs") == [host] and new_ports == ports:
        return obj  # already the hub: nothing to re-encode
    spec["clusterIP"] = host
    spec["clusterIPs"] = [host]
    if ports:
        spec["ports"] = new_ports
    return {**obj, "spec": spec}
