"""Server-side printing: ``meta.k8s.io`` Tables, as ``kubectl get`` asks for them.

Columns follow the apiserver's printers for the common kinds (pods, nodes,
services, namespaces, configmaps, secrets, events, leases, deployments, jobs,
...), CRD ``additionalPrinterColumns`` (a small JSONPath subset:
``.a.b``, ``[N]``, ``[*]``, ``[?(@.k=="v")]``), and otherwise the generic
"Name, Created At" pair. Column names are title case; kubectl upper-cases them.

Pure: objects and a clock reading in, plain dicts out.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from yurthub.cache import tables as cache_tables
from yurthub.testing.sim import objectmeta, resources

Obj = Mapping[str, Any]
Cell = str | int | float | bool | None

_NAME_DESC = (
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_CREATED_DESC = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC."
)


# kubectl's HumanDuration, shared with the hub's offline tables (one rendering of AGE).
human_duration = cache_tables.human_duration


def age(timestamp: Any, now: float) -> str:
    if not isinstance(timestamp, str):
        return "<unknown>"
    when = objectmeta.parse_timestamp(timestamp)
    return "<unknown>" if when is None else human_duration(now - when)


@dataclasses.dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str
    cell: Callable[[Obj, float], Cell]
    priority: int = 0
    format: str = ""
    description: str = ""

    def definition(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        }


def _g(obj: Any, *path: str | int) -> Any:
    cur = obj
    for p in path:
        if isinstance(p, int):
            if not isinstance(cur, list) or len(cur) <= p:
                return None
            cur = cur[p]
        else:
            if not isinstance(cur, Mapping):
                return None
            cur = cur.get(p)
    return cur


def _name(o: Obj, _: float) -> Cell:
    return str(_g(o, "metadata", "name") or "")


def _age(o: Obj, now: float) -> Cell:
    return age(_g(o, "metadata", "creationTimestamp"), now)


NAME = Column("Name", "string", _name, format="name", description=_NAME_DESC)
AGE = Column("Age", "string", _age, description=_CREATED_DESC)
CREATED_AT = Column(
    "Created At",
    "date",
    lambda o, _: str(_g(o, "metadata", "creationTimestamp") or ""),
    description=_CREATED_DESC,
)


def _none(values: Iterable[str]) -> str:
    joined = ",".join(v for v in values if v)
    return joined or "<none>"


# --- pods ------------------------------------------------------------------------------------


def _pod_ready(o: Obj, _: float) -> Cell:
    statuses = _g(o, "status", "containerStatuses") or []
    total = len(_g(o, "spec", "containers") or [])
    ready = sum(1 for s in statuses if isinstance(s, dict) and s.get("ready"))
    return f"{ready}/{total}"


def _pod_status(o: Obj, _: float) -> Cell:
    reason = str(_g(o, "status", "reason") or _g(o, "status", "phase") or "Unknown")
    for s in _g(o, "status", "containerStatuses") or []:
        if not isinstance(s, dict):
            continue
        waiting = _g(s, "state", "waiting", "reason")
        terminated = _g(s, "state", "terminated", "reason")
        if waiting:
            reason = str(waiting)
        elif terminated:
            reason = str(terminated)
    if _g(o, "metadata", "deletionTimestamp"):
        reason = "Terminating"
    return reason


def _pod_restarts(o: Obj, _: float) -> Cell:
    return sum(
        int(s.get("restartCount") or 0)
        for s in _g(o, "status", "containerStatuses") or []
        if isinstance(s, dict)
    )


POD_COLUMNS = [
    NAME,
    Column("Ready", "string", _pod_ready, description="The aggregate readiness state of this pod"),
    Column("Status", "string", _pod_status, description="The aggregate status of the pod"),
    Column("Restarts", "string", _pod_restarts, description="The number of container restarts"),
    AGE,
    Column("IP", "string", lambda o, _: _g(o, "status", "podIP") or "<none>", priority=1),
    Column("Node", "string", lambda o, _: _g(o, "spec", "nodeName") or "<none>", priority=1),
    Column(
        "Nominated Node",
        "string",
        lambda o, _: _g(o, "status", "nominatedNodeName") or "<none>",
        priority=1,
    ),
    Column(
        "Readiness Gates",
        "string",
        lambda o, _: _none(
            str(g.get("conditionType", "")) for g in _g(o, "spec", "readinessGates") or []
        ),
        priority=1,
    ),
]

# --- nodes -----------------------------------------------------------------------------------


def _node_status(o: Obj, _: float) -> Cell:
    status = "Unknown"
    for c in _g(o, "status", "conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Ready":
            status = "Ready" if c.get("status") == "True" else "NotReady"
    if _g(o, "spec", "unschedulable"):
        status += ",SchedulingDisabled"
    return status


def _node_roles(o: Obj, _: float) -> Cell:
    labels = _g(o, "metadata", "labels") or {}
    roles = sorted(k.partition("/")[2] for k in labels if k.startswith("node-role.kubernetes.io/"))
    if labels.get("kubernetes.io/role"):
        roles.append(str(labels["kubernetes.io/role"]))
    return _none(roles)


def _node_address(kind: str) -> Callable[[Obj, float], Cell]:
    def cell(o: Obj, _: float) -> Cell:
        for a in _g(o, "status", "addresses") or []:
            if isinstance(a, dict) and a.get("type") == kind:
                return str(a.get("address"))
        return "<none>"

    return cell


NODE_COLUMNS = [
    NAME,
    Column("Status", "string", _node_status),
    Column("Roles", "string", _node_roles),
    AGE,
    Column("Version", "string", lambda o, _: _g(o, "status", "nodeInfo", "kubeletVersion") or ""),
    Column("Internal-IP", "string", _node_address("InternalIP"), priority=1),
    Column("External-IP", "string", _node_address("ExternalIP"), priority=1),
    Column(
        "OS-Image",
        "string",
        lambda o, _: _g(o, "status", "nodeInfo", "osImage") or "<unknown>",
        priority=1,
    ),
    Column(
        "Kernel-Version",
        "string",
        lambda o, _: _g(o, "status", "nodeInfo", "kernelVersion") or "<unknown>",
        priority=1,
    ),
    Column(
        "Container-Runtime",
        "string",
        lambda o, _: _g(o, "status", "nodeInfo", "containerRuntimeVersion") or "<unknown>",
        priority=1,
    ),
]

# --- services --------------------------------------------------------------------------------


def _svc_external(o: Obj, _: float) -> Cell:
    kind = _g(o, "spec", "type") or "ClusterIP"
    external = list(_g(o, "spec", "externalIPs") or [])
    if kind == "ExternalName":
        return str(_g(o, "spec", "externalName") or "<none>")
    if kind == "LoadBalancer":
        ingress = _g(o, "status", "loadBalancer", "ingress") or []
        found = [str(i.get("ip") or i.get("hostname") or "") for i in ingress] + external
        return _none(found) if found else "<pending>"
    return _none(external)


def _svc_ports(o: Obj, _: float) -> Cell:
    out = []
    for p in _g(o, "spec", "ports") or []:
        if not isinstance(p, dict):
            continue
        node_port = f":{p['nodePort']}" if p.get("nodePort") else ""
        out.append(f"{p.get('port')}{node_port}/{p.get('protocol', 'TCP')}")
    return _none(out)


SERVICE_COLUMNS = [
    NAME,
    Column("Type", "string", lambda o, _: _g(o, "spec", "type") or "ClusterIP"),
    Column("Cluster-IP", "string", lambda o, _: _g(o, "spec", "clusterIP") or "<none>"),
    Column("External-IP", "string", _svc_external),
    Column("Port(s)", "string", _svc_ports),
    AGE,
    Column(
        "Selector",
        "string",
        lambda o, _: _none(f"{k}={v}" for k, v in (_g(o, "spec", "selector") or {}).items()),
        priority=1,
    ),
]

# --- the rest --------------------------------------------------------------------------------


def _count(*path: str) -> Callable[[Obj, float], Cell]:
    return lambda o, _: len(_g(o, *path) or {})


def _endpoints(o: Obj, _: float) -> Cell:
    found = []
    for subset in _g(o, "subsets") or []:
        ports = [p.get("port") for p in subset.get("ports") or []] or [None]
        for a in subset.get("addresses") or []:
            for port in ports:
                found.append(f"{a.get('ip')}:{port}" if port else str(a.get("ip")))
    if len(found) > 3:
        return ",".join(found[:3]) + f" + {len(found) - 3} more..."
    return _none(found)


def _slice_endpoints(o: Obj, _: float) -> Cell:
    found = [str(a) for e in _g(o, "endpoints") or [] for a in e.get("addresses") or []]
    if len(found) > 3:
        return ",".join(found[:3]) + f" + {len(found) - 3} more..."
    return _none(found)


def _slice_ports(o: Obj, _: float) -> Cell:
    return _none(str(p.get("port")) for p in _g(o, "ports") or [] if p.get("port") is not None)


def _event_object(o: Obj, _: float) -> Cell:
    kind = str(_g(o, "involvedObject", "kind") or "").lower()
    return f"{kind}/{_g(o, 'involvedObject', 'name') or ''}"


def _event_last_seen(o: Obj, now: float) -> Cell:
    when = _g(o, "lastTimestamp") or _g(o, "eventTime") or _g(o, "metadata", "creationTimestamp")
    return age(when, now)


def _replicas(path: tuple[str, ...], spec: tuple[str, ...]) -> Callable[[Obj, float], Cell]:
    return lambda o, _: f"{_g(o, *path) or 0}/{_g(o, *spec) or 0}"


def _csr_condition(o: Obj, _: float) -> Cell:
    found = [
        str(c.get("type"))
        for c in _g(o, "status", "conditions") or []
        if isinstance(c, dict) and c.get("status", "True") == "True"
    ]
    if _g(o, "status", "certificate"):
        found.append("Issued")
    return ",".join(found) or "Pending"


def _job_status(o: Obj, _: float) -> Cell:
    for c in _g(o, "status", "conditions") or []:
        if (
            isinstance(c, dict)
            and c.get("status") == "True"
            and c.get("type")
            in (
                "Complete",
                "Failed",
                "Suspended",
            )
        ):
            return str(c["type"])
    return "Running"


def _containers(o: Obj, _: float) -> Cell:
    return _none(str(c.get("name")) for c in _g(o, "spec", "template", "spec", "containers") or [])


def _images(o: Obj, _: float) -> Cell:
    return _none(str(c.get("image")) for c in _g(o, "spec", "template", "spec", "containers") or [])


def _selector(o: Obj, _: float) -> Cell:
    return _none(f"{k}={v}" for k, v in (_g(o, "spec", "selector", "matchLabels") or {}).items())


WORKLOAD_EXTRA = [
    Column("Containers", "string", _containers, priority=1),
    Column("Images", "string", _images, priority=1),
    Column("Selector", "string", _selector, priority=1),
]

BUILTIN: dict[tuple[str, str], list[Column]] = {
    ("", "pods"): POD_COLUMNS,
    ("", "nodes"): NODE_COLUMNS,
    ("", "services"): SERVICE_COLUMNS,
    ("", "namespaces"): [
        NAME,
        Column("Status", "string", lambda o, _: _g(o, "status", "phase") or ""),
        AGE,
    ],
    ("", "configmaps"): [NAME, Column("Data", "integer", _count("data")), AGE],
    ("", "secrets"): [
        NAME,
        Column("Type", "string", lambda o, _: _g(o, "type") or ""),
        Column("Data", "integer", _count("data")),
        AGE,
    ],
    ("", "serviceaccounts"): [NAME, Column("Secrets", "integer", _count("secrets")), AGE],
    ("", "endpoints"): [NAME, Column("Endpoints", "string", _endpoints), AGE],
    ("", "events"): [
        Column("Last Seen", "string", _event_last_seen),
        Column("Type", "string", lambda o, _: _g(o, "type") or ""),
        Column("Reason", "string", lambda o, _: _g(o, "reason") or ""),
        Column("Object", "string", _event_object),
        Column(
            "Subobject",
            "string",
            lambda o, _: _g(o, "involvedObject", "fieldPath") or "",
            priority=1,
        ),
        Column(
            "Source",
            "string",
            lambda o, _: _g(o, "source", "component") or _g(o, "reportingComponent") or "",
            priority=1,
        ),
        Column("Message", "string", lambda o, _: _g(o, "message") or ""),
        Column(
            "First Seen",
            "string",
            lambda o, now: age(_g(o, "firstTimestamp"), now),
            priority=1,
        ),
        Column("Count", "string", lambda o, _: _g(o, "count") or 1, priority=1),
        dataclasses.replace(NAME, priority=1),
    ],
    ("coordination.k8s.io", "leases"): [
        NAME,
        Column("Holder", "string", lambda o, _: _g(o, "spec", "holderIdentity") or ""),
        AGE,
    ],
    ("discovery.k8s.io", "endpointslices"): [
        NAME,
        Column("AddressType", "string", lambda o, _: _g(o, "addressType") or ""),
        Column("Ports", "string", _slice_ports),
        Column("Endpoints", "string", _slice_endpoints),
        AGE,
    ],
    ("certificates.k8s.io", "certificatesigningrequests"): [
        NAME,
        AGE,
        Column("SignerName", "string", lambda o, _: _g(o, "spec", "signerName") or ""),
        Column("Requestor", "string", lambda o, _: _g(o, "spec", "username") or ""),
        Column(
            "RequestedDuration",
            "string",
            lambda o, _: (
                human_duration(int(_g(o, "spec", "expirationSeconds")))
                if _g(o, "spec", "expirationSeconds")
                else "<none>"
            ),
        ),
        Column("Condition", "string", _csr_condition),
    ],
    ("apps", "deployments"): [
        NAME,
        Column("Ready", "string", _replicas(("status", "readyReplicas"), ("spec", "replicas"))),
        Column("Up-to-date", "integer", lambda o, _: _g(o, "status", "updatedReplicas") or 0),
        Column("Available", "integer", lambda o, _: _g(o, "status", "availableReplicas") or 0),
        AGE,
        *WORKLOAD_EXTRA,
    ],
    ("apps", "daemonsets"): [
        NAME,
        Column("Desired", "integer", lambda o, _: _g(o, "status", "desiredNumberScheduled") or 0),
        Column("Current", "integer", lambda o, _: _g(o, "status", "currentNumberScheduled") or 0),
        Column("Ready", "integer", lambda o, _: _g(o, "status", "numberReady") or 0),
        Column(
            "Up-to-date", "integer", lambda o, _: _g(o, "status", "updatedNumberScheduled") or 0
        ),
        Column("Available", "integer", lambda o, _: _g(o, "status", "numberAvailable") or 0),
        Column(
            "Node Selector",
            "string",
            lambda o, _: _none(
                f"{k}={v}"
                for k, v in (_g(o, "spec", "template", "spec", "nodeSelector") or {}).items()
            ),
        ),
        AGE,
        *WORKLOAD_EXTRA,
    ],
    ("batch", "jobs"): [
        NAME,
        Column("Status", "string", _job_status),
        Column(
            "Completions",
            "string",
            _replicas(("status", "succeeded"), ("spec", "completions")),
        ),
        Column("Duration", "string", lambda o, _: ""),
        AGE,
        *WORKLOAD_EXTRA,
    ],
}

# --- CRD printer columns (JSONPath subset) ---------------------------------------------------

_STEP_RE = re.compile(
    r"\.([^.\[]+)|\[(\d+)\]|\[\*\]|\[\?\(@\.([\w.-]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]"
)


def json_path(obj: Any, path: str) -> list[Any]:
    """Values at ``path`` (``.a.b``, ``[0]``, ``[*]``, ``[?(@.type=="Ready")]``)."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    if text.startswith("$"):
        text = text[1:]
    current = [obj]
    pos = 0
    while pos < len(text):
        m = _STEP_RE.match(text, pos)
        if m is None:
            return []
        pos = m.end()
        nxt: list[Any] = []
        for value in current:
            if m.group(1) is not None:
                if isinstance(value, Mapping) and m.group(1) in value:
                    nxt.append(value[m.group(1)])
            elif m.group(2) is not None:
                if isinstance(value, list) and int(m.group(2)) < len(value):
                    nxt.append(value[int(m.group(2))])
            elif m.group(3) is not None:
                if isinstance(value, list):
                    nxt.extend(
                        v
                        for v in value
                        if isinstance(v, Mapping)
                        and str(_g(v, *m.group(3).split("."))) == m.group(4)
                    )
            elif isinstance(value, list):
                nxt.extend(value)
            elif isinstance(value, Mapping):
                nxt.extend(value.values())
        current = nxt
    return current


def _printer_cell(col: resources.PrinterColumn) -> Callable[[Obj, float], Cell]:
    def cell(o: Obj, now: float) -> Cell:
        found = json_path(o, col.json_path)
        if not found:
            return None
        value = found[0]
        if col.type == "date":
            return age(value, now)
        if isinstance(value, dict | list):
            return orjson.dumps(value).decode()
        if col.type == "integer" and isinstance(value, int | float):
            return int(value)
        if col.type == "number" and isinstance(value, int | float):
            return value
        if col.type == "boolean" and isinstance(value, bool):
            return value
        return str(value) if not isinstance(value, bool) else ("true" if value else "false")

    return cell


def columns_for(rt: resources.ResourceType) -> list[Column]:
    if rt.custom:
        if not rt.printer_columns:
            return [NAME, AGE]
        return [NAME] + [
            Column(
                c.name,
                c.type if c.type != "date" else "date",
                _printer_cell(c),
                priority=c.priority,
                format=c.format,
                description=c.description,
            )
            for c in rt.printer_columns
        ]
    return BUILTIN.get(rt.storage, [NAME, CREATED_AT])


def partial(obj: Obj, version: str = "v1") -> dict[str, Any]:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": obj.get("metadata") or {},
    }


def row(
    columns: list[Column], obj: Obj, now: float, include: str, version: str = "v1"
) -> dict[str, Any]:
    out: dict[str, Any] = {"cells": [c.cell(obj, now) for c in columns]}
    if include == "Object":
        out["object"] = obj
    elif include != "None":
        out["object"] = partial(obj, version)
    return out


def table(
    rt: resources.ResourceType,
    objects: Iterable[Obj],
    *,
    now: float,
    include: str = "Metadata",
    version: str = "v1",
    list_meta: Mapping[str, Any] | None = None,
    headers: bool = True,
) -> dict[str, Any]:
    columns = columns_for(rt)
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": dict(list_meta or {}),
        "columnDefinitions": [c.definition() for c in columns] if headers else [],
        "rows": [row(columns, o, now, include, version) for o in objects],
    }
