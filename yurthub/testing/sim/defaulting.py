"""Defaults the apiserver fills in on write, per kind, so objects look like a real cluster's.

Only what clients commonly read back is defaulted: pod spec/status basics,
service cluster IPs and ports, namespace phase and finalizer, secret type and
``stringData`` folding, deployment/daemonset/job knobs, CSR status. Values a
client sent are never overwritten.

Cluster IPs and node ports come from an ``Allocator`` owned by the state, so
apiservers over one state never hand out the same address twice.
"""

from __future__ import annotations

import base64
import ipaddress
from typing import Any

from yurthub.testing.sim import errors, resources


class Allocator:
    """Hands out service ClusterIPs (10.96.0.0/12) and node ports (30000-32767)."""

    def __init__(self) -> None:
        self._network = ipaddress.ip_network("10.96.0.0/12")
        self._next_ip = 10
        self._used_ips: set[str] = set()
        self._next_port = 30000
        self._used_ports: set[int] = set()

    def reserve_ip(self, ip: str) -> None:
        self._used_ips.add(ip)

    def release_ip(self, ip: str) -> None:
        self._used_ips.discard(ip)

    def cluster_ip(self) -> str:
        size = self._network.num_addresses
        for _ in range(size):
            candidate = str(self._network.network_address + self._next_ip)
            self._next_ip = self._next_ip + 1 if self._next_ip + 2 < size else 10
            if candidate not in self._used_ips:
                self._used_ips.add(candidate)
                return candidate
        raise errors.ApiError(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "Internal error occurred: failed to allocate a serviceIP: range is full",
                "reason": "InternalError",
                "code": 500,
            }
        )

    def reserve_port(self, port: int) -> None:
        self._used_ports.add(port)

    def release_port(self, port: int) -> None:
        self._used_ports.discard(port)

    def node_port(self) -> int:
        for _ in range(2768):
            candidate = self._next_port
            self._next_port = self._next_port + 1 if self._next_port < 32767 else 30000
            if candidate not in self._used_ports:
                self._used_ports.add(candidate)
                return candidate
        raise errors.bad_request("no node ports left in 30000-32767")


def _image_pull_policy(image: str) -> str:
    tail = image.rsplit("/", 1)[-1]
    if "@" in tail:
        return "IfNotPresent"
    if ":" not in tail or tail.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def _containers(spec: dict[str, Any]) -> None:
    for field in ("initContainers", "containers"):
        for c in spec.get(field) or ():
            if not isinstance(c, dict):
                continue
            c.setdefault("imagePullPolicy", _image_pull_policy(str(c.get("image", ""))))
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            c.setdefault("resources", {})
            for port in c.get("ports") or ():
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")


def _pod_spec(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    _containers(spec)


def _pod(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    if isinstance(spec, dict):
        _pod_spec(spec)
    status = obj.setdefault("status", {})
    if isinstance(status, dict):
        status.setdefault("phase", "Pending")
        status.setdefault("qosClass", "BestEffort")


def _template(obj: dict[str, Any]) -> None:
    template = (obj.get("spec") or {}).get("template")
    if isinstance(template, dict):
        tspec = template.setdefault("spec", {})
        if isinstance(tspec, dict):
            _pod_spec(tspec)
        template.setdefault("metadata", {})


def _service(obj: dict[str, Any], alloc: Allocator) -> None:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    kind = spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if kind != "ExternalName":
        ip = spec.get("clusterIP")
        if not ip:
            ip = alloc.cluster_ip()
            spec["clusterIP"] = ip
        elif ip != "None":
            alloc.reserve_ip(str(ip))
        spec.setdefault("clusterIPs", [ip])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or ():
        if not isinstance(port, dict):
            continue
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
        if kind in ("NodePort", "LoadBalancer"):
            if port.get("nodePort"):
                alloc.reserve_port(int(port["nodePort"]))
            else:
                port["nodePort"] = alloc.node_port()
    if kind in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    obj.setdefault("status", {"loadBalancer": {}})


def _namespace(obj: dict[str, Any]) -> None:
    name = str((obj.get("metadata") or {}).get("name", ""))
    labels = obj["metadata"].setdefault("labels", {})
    labels.setdefault("kubernetes.io/metadata.name", name)
    spec = obj.setdefault("spec", {})
    if isinstance(spec, dict):
        spec.setdefault("finalizers", ["kubernetes"])
    status = obj.setdefault("status", {})
    if isinstance(status, dict):
        status.setdefault("phase", "Active")


def _deployment(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    spec.setdefault(
        "strategy",
        {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
    )
    _template(obj)


def _daemonset(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault(
        "updateStrategy",
        {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
    )
    _template(obj)


def _job(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    template = spec.get("template")
    if isinstance(template, dict):
        tspec = template.get("spec")
        if isinstance(tspec, dict):
            tspec.setdefault("restartPolicy", "Never")
    _template(obj)


def _csr(obj: dict[str, Any]) -> None:
    # certificates.k8s.io/v1 defaults nothing in the spec: usages and signerName are required.
    obj.setdefault("status", {})


def on_create(rt: resources.ResourceType, obj: dict[str, Any], alloc: Allocator) -> None:
    """Fill defaults of a new object in place (after metadata is set)."""
    if rt.group == "":
        if rt.resource == "pods":
            _pod(obj)
        elif rt.resource == "services":
            _service(obj, alloc)
        elif rt.resource == "namespaces":
            _namespace(obj)
        elif rt.resource == "secrets":
            obj.setdefault("type", "Opaque")
    elif rt.group == "apps":
        if rt.resource in ("deployments", "replicasets", "statefulsets"):
            _deployment(obj) if rt.resource == "deployments" else _template(obj)
        elif rt.resource == "daemonsets":
            _daemonset(obj)
    elif rt.group == "batch" and rt.resource == "jobs":
        _job(obj)
    elif rt.group == "certificates.k8s.io":
        _csr(obj)
    on_write(rt, obj)


def on_write(rt: resources.ResourceType, obj: dict[str, Any]) -> None:
    """Normalisations every create and update gets."""
    if rt.group == "" and rt.resource == "secrets":
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict) and string_data:
            data = obj.setdefault("data", {})
            if isinstance(data, dict):
                for key, value in string_data.items():
                    data[str(key)] = base64.b64encode(str(value).encode()).decode()
