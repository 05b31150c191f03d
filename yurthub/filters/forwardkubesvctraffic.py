"""``forwardkubesvctraffic``: kube-proxy sends ``kubernetes.default`` traffic to the hub.

PURE. The EndpointSlice ``default/kubernetes`` (the apiservers' addresses) becomes one ready
endpoint, the hub's address, with the port named ``https`` set to the hub's secure port
(reference §6): pods that dial the ClusterIP of ``kubernetes`` reach the hub, which works
offline, instead of a cloud apiserver they cannot reach. Only a slice whose ``addressType``
is the hub address's family is changed (an IPv4 hub cannot stand in an IPv6 slice).
Kept off where pods cannot reach the hub's secure port (a loopback or unspecified address,
no serving certificate: ``registry.POINTING_AT_THE_HUB``, ``runtime.Filters.inactive``).
"""

from __future__ import annotations

from yurthub.filters import inputs, objects

NAMESPACE, NAME, PORT_NAME = "default", "kubernetes", "https"


def apply(obj: objects.Obj, kind: str, world: inputs.Inputs) -> objects.Obj | None:
    if kind != "EndpointSlice" or objects.namespace_name(obj) != (NAMESPACE, NAME):
        return obj
    address = world.hub_address
    if not address.family or obj.get("addressType") != address.family:
        return obj
    endpoints = [{"addresses": [address.host], "conditions": {"ready": True}}]
    ports = objects.sequence(obj.get("ports"))
    new_ports = list(ports)
    for i, item in enumerate(ports):
        if isinstance(item, dict) and item.get("name") == PORT_NAME:
            new_ports[i] = {**item, "port": address.port}
            break
    if obj.get("endpoints") == endpoints and new_ports == ports:
        return obj
    changed = {**obj, "endpoints": endpoints}
    if ports:
        changed["ports"] = new_ports
    return changed
