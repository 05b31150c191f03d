"""What the scheduler and the kubelets would do to a new pod, as pure functions over dicts.

The sim runs no nodes, but a pod that stays Pending forever makes ``kubectl run``
followed by ``kubectl wait --for=condition=Ready`` (or a controller waiting for
its broker pod) hang. So ``storage`` applies these right after a pod is created,
as two more writes that watchers see in the real order:

1. scheduling: a pod without ``spec.nodeName`` is bound to a Ready, schedulable
   node whose labels satisfy its ``nodeSelector`` and its required node affinity
   (``matchExpressions`` on labels, ``matchFields`` on ``metadata.name``; fewest
   pods first; taints, preferences, pod affinity and resources are not
   evaluated); with no such node it gets ``PodScheduled=False`` /
   ``Unschedulable`` and stays Pending;
2. starting: a pod bound to an existing Ready node becomes Running with a pod IP
   from the node's podCIDR (the node IP for ``hostNetwork``), Ready conditions
   and one ready, started container status per container.

Pods bound to a node that does not exist or is NotReady stay Pending, as they
would. Turn it all off with ``SimApiserver(simulate_kubelets=False)``.
"""

from __future__ import annotations

import copy
import hashlib
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

Obj = Mapping[str, Any]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def node_ready(node: Obj) -> bool:
    for c in (node.get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def node_ip(node: Obj) -> str:
    for a in (node.get("status") or {}).get("addresses") or ():
        if isinstance(a, dict) and a.get("type") == "InternalIP":
            return str(a.get("address"))
    return ""


def _requirement_holds(requirement: Obj, value: str | None) -> bool:
    operator = requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or ()]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def _term_holds(term: Obj, node: Obj) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    fields = {"metadata.name": (node.get("metadata") or {}).get("name")}
    expressions = term.get("matchExpressions") or ()
    match_fields = term.get("matchFields") or ()
    if not expressions and not match_fields:
        return False  # an empty term selects no node, as the scheduler reads it
    return all(
        isinstance(r, Mapping) and _requirement_holds(r, labels.get(r.get("key")))
        for r in expressions
    ) and all(
        isinstance(r, Mapping) and _requirement_holds(r, fields.get(str(r.get("key"))))
        for r in match_fields
    )


def affinity_allows(pod: Obj, node: Obj) -> bool:
    """The pod's required node affinity: any of its node selector terms holds."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, Mapping):
        return True
    terms = required.get("nodeSelectorTerms") or ()
    return any(isinstance(t, Mapping) and _term_holds(t, node) for t in terms)


def fits(pod: Obj, node: Obj) -> bool:
    if not node_ready(node) or (node.get("spec") or {}).get("unschedulable"):
        return False
    wanted = (pod.get("spec") or {}).get("nodeSelector") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in wanted.items()) and affinity_allows(pod, node)


def pick_node(pod: Obj, nodes: Iterable[Obj], load: Mapping[str, int]) -> str | None:
    """The least loaded node the pod fits on (ties by name), or None."""
    candidates = [n for n in nodes if fits(pod, n)]
    if not candidates:
        return None
    best = min(
        candidates, key=lambda n: (load.get(n["metadata"]["name"], 0), n["metadata"]["name"])
    )
    return str(best["metadata"]["name"])


def unschedulable(pod: Obj, node_count: int, now: str) -> dict[str, Any]:
    out = copy.deepcopy(dict(pod))
    status = out.setdefault("status", {})
    status["phase"] = "Pending"
    status["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": f"0/{node_count} nodes are available: no node matches the pod's "
            "node selector or is Ready and schedulable.",
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
    ]
    return out


def bound(pod: Obj, node: str, now: str) -> dict[str, Any]:
    out = copy.deepcopy(dict(pod))
    out.setdefault("spec", {})["nodeName"] = node
    out.setdefault("status", {})["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
    ]
    return out


def pod_ip(node: Obj, index: int) -> str:
    cidr = (node.get("spec") or {}).get("podCIDR")
    try:
        network = ipaddress.ip_network(str(cidr))
    except ValueError:
        network = ipaddress.ip_network("10.244.0.0/24")
    # Skip the network, gateway and the addresses the demo seed hands out by hand (< .100).
    offset = 100 + index % max(1, network.num_addresses - 102)
    return str(network.network_address + offset)


def running(pod: Obj, node: Obj, ip: str, now: str) -> dict[str, Any]:
    out = copy.deepcopy(dict(pod))
    spec = out.get("spec") or {}
    host = node_ip(node)
    address = host if spec.get("hostNetwork") else ip
    status = out.setdefault("status", {})
    status.update(
        phase="Running",
        hostIP=host,
        hostIPs=[{"ip": host}] if host else [],
        podIP=address,
        podIPs=[{"ip": address}],
        startTime=now,
        conditions=[
            {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
            for t in (
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled",
            )
        ],
        containerStatuses=[
            {
                "name": c.get("name"),
                "image": c.get("image"),
                "imageID": "",
                "containerID": "containerd://"
                + _digest(f"{out['metadata'].get('uid')}/{c.get('name')}"),
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
                "lastState": {},
            }
            for c in spec.get("containers") or ()
            if isinstance(c, dict)
        ],
    )
    return out
