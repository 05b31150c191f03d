"""``discardcloudservice``: services only the cloud can serve never reach the edge kube-proxy.

PURE. Dropped (reference §6): a ``LoadBalancer`` Service annotated
``svc.openyurt.io/discard: "true"`` (a cloud load balancer an edge node cannot route to), and
``kube-system/x-tunnel-server-internal-svc`` (the tunnel server's in-cloud address).
"""

from __future__ import annotations

from yurthub.filters import inputs, objects

DISCARD_ANNOTATION = "svc.openyurt.io/discard"
CLOUD_ONLY = frozenset({("kube-system", "x-tunnel-server-internal-svc")})


def apply(obj: objects.Obj, kind: str, world: inputs.Inputs) -> objects.Obj | None:
    if kind != "Service":
        return obj
    if (
        objects.spec(obj).get("type") == "LoadBalancer"
        and objects.annotation(obj, DISCARD_ANNOTATION) == "true"
    ):
        return None
    if objects.namespace_name(obj) in CLOUD_ONLY:
        return None
    return obj
