"""Seed clusters: ``none``, ``demo`` (a small realistic edge cluster) and ``scale:N``.

``none``: what every apiserver creates at start: namespaces default, kube-system,
kube-public, kube-node-lease (each with its default ServiceAccount and
kube-root-ca.crt ConfigMap) and the ``default/kubernetes`` service (10.96.0.1:443).

``demo``: all of ``none``, and nodes
edge-node-1 and edge-node-2 (node pool ``edge-pool``) and cloud-node-1
(``cloud-pool``, control plane), Ready, with InternalIPs 127.0.1.1-3; a kube-proxy
DaemonSet with one pod per node; coredns (Deployment, ReplicaSet, two pods) and
the ``kube-system/kube-dns`` service; the ``web`` Deployment (a pod per node) and
the ``sensor-reader`` DaemonSet on edge nodes in ``default``; services
``default/kubernetes`` (10.96.0.1:443) and ``default/web`` with EndpointSlices
whose endpoints name their node; the ``kube-system/kube-proxy`` ConfigMap; a few
Secrets; node Leases; some Events and container log lines.

``scale:N``: the demo objects plus N Running pods (``default/scale-<i>``,
``app=scale``) spread round-robin over the nodes.

Objects are created through ``State.create_object`` so they get uids,
resourceVersions and defaults exactly like API-created ones.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from yurthub.testing.sim import objectmeta, storage

NODES = (
    # name, pool, internal IP, edge?
    ("edge-node-1", "edge-pool", "127.0.1.1", True),
    ("edge-node-2", "edge-pool", "127.0.1.2", True),
    ("cloud-node-1", "cloud-pool", "127.0.1.3", False),
)
KUBE_PROXY_CONF = """apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
clientConnection:
  acceptContentTypes: ""
  burst: 0
  contentType: ""
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: 10.244.0.0/16
kind: KubeProxyConfiguration
mode: iptables
"""
KUBE_PROXY_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    namespace: default
    user: default
  name: default
current-context: default
users:
- name: default
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
"""
COREFILE = """.:53 {
    errors
    health
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
    cache 30
    loop
    reload
}
"""


@dataclasses.dataclass(frozen=True, slots=True)
class Seed:
    demo: bool
    scale: int = 0


def parse(text: str) -> Seed:
    """``demo``, ``none`` or ``scale:N``; raises ValueError with the accepted forms."""
    if text == "demo":
        return Seed(demo=True)
    if text == "none":
        return Seed(demo=False)
    if text.startswith("scale:"):
        try:
            count = int(text.partition(":")[2])
        except ValueError:
            count = -1
        if count >= 0:
            return Seed(demo=True, scale=count)
    raise ValueError(f"unknown seed {text!r}: use demo, none or scale:N")


def apply(state: storage.State, seed: Seed) -> None:
    demo = _Demo(state)
    demo.bootstrap()
    if seed.demo:
        demo.build()
    if seed.scale:
        scale_pods(state, seed.scale)


def _hash(text: str, n: int = 10) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest[:n])


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def owner(obj: dict[str, Any], *, controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def running_pod(
    *,
    name: str,
    namespace: str,
    node: str,
    node_ip: str,
    pod_ip: str,
    labels: dict[str, str],
    containers: list[dict[str, Any]],
    now: str,
    owners: list[dict[str, Any]] | None = None,
    host_network: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if owners:
        meta["ownerReferences"] = owners
    spec: dict[str, Any] = {"nodeName": node, "containers": containers}
    if host_network:
        spec["hostNetwork"] = True
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": now, "lastProbeTime": None}
        for t in (
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
        )
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": node_ip,
            "hostIPs": [{"ip": node_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": now,
            "qosClass": "BestEffort",
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": f"{c['image']}@sha256:{_digest(c['image'])}",
                    "containerID": f"containerd://{_digest(name + c['name'])}",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                    "lastState": {},
                }
                for c in containers
            ],
        },
    }


class _Demo:
    def __init__(self, state: storage.State) -> None:
        self.state = state
        self.now = objectmeta.timestamp(state.clock())
        self.micro_now = objectmeta.micro_timestamp(state.clock())

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.state.create(obj)

    def bootstrap(self) -> None:
        """What every apiserver creates at start: the system namespaces, default/kubernetes."""
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            if not self._exists(ns):
                self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        if not any(s.meta.get("name") == "kubernetes" for s in self.state.objects("services")):
            self.create(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {
                        "name": "kubernetes",
                        "namespace": "default",
                        "labels": {"component": "apiserver", "provider": "kubernetes"},
                    },
                    "spec": {
                        "clusterIP": "10.96.0.1",
                        "ports": [
                            {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}
                        ],
                    },
                }
            )

    def build(self) -> None:
        for index, (name, pool, ip, edge) in enumerate(NODES):
            self.node(index, name, pool, ip, edge)
            self.lease(name)
        self.kube_proxy()
        self.coredns()
        self.web()
        self.sensor_reader()
        self.kubernetes_service()
        self.configs()

    def _exists(self, ns: str) -> bool:
        return any(s.meta.get("name") == ns for s in self.state.objects("namespaces"))

    def node(self, index: int, name: str, pool: str, ip: str, edge: bool) -> None:
        labels = {
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "apps.openyurt.io/nodepool": pool,
            "openyurt.io/is-edge-worker": "true" if edge else "false",
        }
        if not edge:
            labels["node-role.kubernetes.io/control-plane"] = ""
        conditions = [
            {
                "type": t,
                "status": "False",
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": self.now,
                "lastTransitionTime": self.now,
            }
            for t, reason, message in (
                (
                    "MemoryPressure",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            )
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": self.now,
                "lastTransitionTime": self.now,
            }
        )
        capacity = {
            "cpu": "4",
            "memory": "8148392Ki",
            "pods": "110",
            "ephemeral-storage": "61202244Ki",
        }
        self.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": labels,
                    "annotations": {
                        "node.alpha.kubernetes.io/ttl": "0",
                        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                    },
                },
                "spec": {"podCIDR": f"10.244.{index}.0/24", "podCIDRs": [f"10.244.{index}.0/24"]},
                "status": {
                    "capacity": capacity,
                    "allocatable": capacity,
                    "conditions": conditions,
                    "addresses": [
                        {"type": "InternalIP", "address": ip},
                        {"type": "Hostname", "address": name},
                    ],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                    "nodeInfo": {
                        "machineID": _hash(name + "machine", 32),
                        "systemUUID": _hash(name + "uuid", 32),
                        "bootID": _hash(name + "boot", 32),
                        "kernelVersion": "6.1.0-18-amd64",
                        "osImage": "Debian GNU/Linux 12 (bookworm)",
                        "containerRuntimeVersion": "containerd://1.7.24",
                        "kubeletVersion": "v1.32.4",
                        "kubeProxyVersion": "v1.32.4",
                        "operatingSystem": "linux",
                        "architecture": "amd64",
                    },
                },
            }
        )

    def lease(self, node: str) -> None:
        self.create(
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": node, "namespace": "kube-node-lease"},
                "spec": {
                    "holderIdentity": node,
                    "leaseDurationSeconds": 40,
                    "renewTime": self.micro_now,
                },
            }
        )

    def _daemonset(
        self,
        name: str,
        namespace: str,
        labels: dict[str, str],
        image: str,
        *,
        edge_only: bool = False,
    ) -> dict[str, Any]:
        template_spec: dict[str, Any] = {"containers": [{"name": name, "image": image}]}
        if edge_only:
            template_spec["nodeSelector"] = {"openyurt.io/is-edge-worker": "true"}
        nodes = [n for n in NODES if n[3] or not edge_only]
        count = len(nodes)
        ds = self.create(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": template_spec},
                },
                "status": {
                    "currentNumberScheduled": count,
                    "desiredNumberScheduled": count,
                    "numberAvailable": count,
                    "numberReady": count,
                    "updatedNumberScheduled": count,
                    "numberMisscheduled": 0,
                    "observedGeneration": 1,
                },
            }
        )
        return ds

    def kube_proxy(self) -> None:
        labels = {"k8s-app": "kube-proxy"}
        image = "registry.k8s.io/kube-proxy:v1.32.4"
        ds = self._daemonset("kube-proxy", "kube-system", labels, image)
        for name, _pool, ip, _edge in NODES:
            pod_name = f"kube-proxy-{_hash(name, 5)}"
            self.create(
                running_pod(
                    name=pod_name,
                    namespace="kube-system",
                    node=name,
                    node_ip=ip,
                    pod_ip=ip,
                    labels={
                        **labels,
                        "controller-revision-hash": "7b9c8d6f5",
                        "pod-template-generation": "1",
                    },
                    containers=[
                        {
                            "name": "kube-proxy",
                            "image": image,
                            "command": [
                                "/usr/local/bin/kube-proxy",
                                "--config=/var/lib/kube-proxy/config.conf",
                                f"--hostname-override={name}",
                            ],
                        }
                    ],
                    now=self.now,
                    owners=[owner(ds)],
                    host_network=True,
                )
            )
            self.state.logs.append(
                "kube-system",
                pod_name,
                "kube-proxy",
                f'I0101 00:00:00.000000 1 server_linux.go:66] "Using iptables proxy" node="{name}"',
            )
            self.event(
                "kube-system", "Pod", pod_name, "Started", "Started container kube-proxy", name
            )

    def _deployment(
        self,
        name: str,
        namespace: str,
        labels: dict[str, str],
        image: str,
        replicas: int,
        ports: list[dict[str, Any]] | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        container: dict[str, Any] = {"name": name, "image": image}
        if ports:
            container["ports"] = ports
        template = {"metadata": {"labels": labels}, "spec": {"containers": [container]}}
        status = {
            "replicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "updatedReplicas": replicas,
            "observedGeneration": 1,
        }
        deploy = self.create(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": labels},
                    "template": template,
                },
                "status": status,
            }
        )
        rs_hash = _hash(name + namespace, 10)
        rs = self.create(
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": f"{name}-{rs_hash}",
                    "namespace": namespace,
                    "labels": {**labels, "pod-template-hash": rs_hash},
                    "ownerReferences": [owner(deploy)],
                },
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {**labels, "pod-template-hash": rs_hash}},
                    "template": template,
                },
                "status": {
                    "replicas": replicas,
                    "readyReplicas": replicas,
                    "availableReplicas": replicas,
                    "fullyLabeledReplicas": replicas,
                    "observedGeneration": 1,
                },
            }
        )
        return deploy, rs

    def coredns(self) -> None:
        labels = {"k8s-app": "kube-dns"}
        image = "registry.k8s.io/coredns/coredns:v1.11.3"
        ports = [
            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
            {"name": "metrics", "containerPort": 9153, "protocol": "TCP"},
        ]
        _, rs = self._deployment("coredns", "kube-system", labels, image, 2, ports)
        endpoints = []
        for i, (node, _pool, ip, _edge) in enumerate((NODES[2], NODES[0])):
            index = [n[0] for n in NODES].index(node)
            pod_ip = f"10.244.{index}.{2 + i}"
            pod_name = f"{rs['metadata']['name']}-{_hash(node + 'dns', 5)}"
            self.create(
                running_pod(
                    name=pod_name,
                    namespace="kube-system",
                    node=node,
                    node_ip=ip,
                    pod_ip=pod_ip,
                    labels={
                        **labels,
                        "pod-template-hash": rs["metadata"]["labels"]["pod-template-hash"],
                    },
                    containers=[
                        {
                            "name": "coredns",
                            "image": image,
                            "args": ["-conf", "/etc/coredns/Corefile"],
                            "ports": ports,
                        }
                    ],
                    now=self.now,
                    owners=[owner(rs)],
                )
            )
            self.state.logs.append("kube-system", pod_name, "coredns", ".:53")
            self.state.logs.append(
                "kube-system",
                pod_name,
                "coredns",
                "[INFO] plugin/reload: Running configuration SHA512 = " + _digest("Corefile"),
            )
            self.state.logs.append("kube-system", pod_name, "coredns", "CoreDNS-1.11.3")
            endpoints.append(self._endpoint(pod_ip, node, "kube-system", pod_name))
        svc = self.create(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": "kube-dns",
                    "namespace": "kube-system",
                    "labels": {
                        "k8s-app": "kube-dns",
                        "kubernetes.io/cluster-service": "true",
                        "kubernetes.io/name": "CoreDNS",
                    },
                },
                "spec": {
                    "clusterIP": "10.96.0.10",
                    "selector": labels,
                    "ports": [
                        {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                        {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                        {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153},
                    ],
                },
            }
        )
        self.slice(
            svc,
            endpoints,
            [
                {"name": "dns", "port": 53, "protocol": "UDP"},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                {"name": "metrics", "port": 9153, "protocol": "TCP"},
            ],
        )

    @staticmethod
    def _endpoint(ip: str, node: str, namespace: str, pod: str) -> dict[str, Any]:
        return {
            "addresses": [ip],
            "conditions": {"ready": True, "serving": True, "terminating": False},
            "nodeName": node,
            "targetRef": {"kind": "Pod", "namespace": namespace, "name": pod},
        }

    def slice(
        self, svc: dict[str, Any], endpoints: list[dict[str, Any]], ports: list[dict[str, Any]]
    ) -> None:
        name = svc["metadata"]["name"]
        self.create(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"{name}-{_hash(name + 'slice', 5)}",
                    "namespace": svc["metadata"]["namespace"],
                    "labels": {
                        "kubernetes.io/service-name": name,
                        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                    },
                    "ownerReferences": [owner(svc)],
                },
                "addressType": "IPv4",
                "endpoints": endpoints,
                "ports": ports,
            }
        )

    def web(self) -> None:
        labels = {"app": "web"}
        image = "nginx:1.27"
        ports = [{"name": "http", "containerPort": 80, "protocol": "TCP"}]
        _, rs = self._deployment("web", "default", labels, image, len(NODES), ports)
        endpoints = []
        for index, (node, _pool, ip, _edge) in enumerate(NODES):
            pod_ip = f"10.244.{index}.10"
            pod_name = f"{rs['metadata']['name']}-{_hash(node + 'web', 5)}"
            self.create(
                running_pod(
                    name=pod_name,
                    namespace="default",
                    node=node,
                    node_ip=ip,
                    pod_ip=pod_ip,
                    labels={
                        **labels,
                        "tier": "frontend",
                        "pod-template-hash": rs["metadata"]["labels"]["pod-template-hash"],
                    },
                    containers=[
                        {
                            "name": "web",
                            "image": image,
                            "ports": ports,
                            "env": [{"name": "NODE_NAME", "value": node}],
                        }
                    ],
                    now=self.now,
                    owners=[owner(rs)],
                )
            )
            for line in (
                "/docker-entrypoint.sh: Configuration complete; ready for start up",
                f'10.244.{index}.1 - - "GET / HTTP/1.1" 200 615 "-" "curl/8.5.0"',
            ):
                self.state.logs.append("default", pod_name, "web", line)
            endpoints.append(self._endpoint(pod_ip, node, "default", pod_name))
            self.event(
                "default",
                "Pod",
                pod_name,
                "Scheduled",
                f"Successfully assigned default/{pod_name} to {node}",
                node,
                source="default-scheduler",
            )
        svc = self.create(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": "default", "labels": labels},
                "spec": {
                    "selector": labels,
                    "ports": [{"name": "http", "port": 80, "targetPort": 80}],
                },
            }
        )
        self.slice(svc, endpoints, [{"name": "http", "port": 80, "protocol": "TCP"}])

    def sensor_reader(self) -> None:
        labels = {"app": "sensor-reader"}
        image = "busybox:1.36"
        ds = self._daemonset("sensor-reader", "default", labels, image, edge_only=True)
        for index, (node, _pool, ip, edge) in enumerate(NODES):
            if not edge:
                continue
            pod_name = f"sensor-reader-{_hash(node + 'sensor', 5)}"
            self.create(
                running_pod(
                    name=pod_name,
                    namespace="default",
                    node=node,
                    node_ip=ip,
                    pod_ip=f"10.244.{index}.20",
                    labels={**labels, "tier": "edge"},
                    containers=[
                        {
                            "name": "reader",
                            "image": image,
                            "command": ["sh", "-c", "while true; do cat /dev/ttyUSB0; done"],
                            "env": [{"name": "DEVICE", "value": "/dev/ttyUSB0"}],
                        }
                    ],
                    now=self.now,
                    owners=[owner(ds)],
                )
            )
            self.state.logs.append("default", pod_name, "reader", f"reading /dev/ttyUSB0 on {node}")

    def kubernetes_service(self) -> None:
        """Endpoints of ``default/kubernetes`` (made by bootstrap): the control-plane node."""
        svc = self.state.get("services", "default", "kubernetes")
        self.create(
            {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {
                    "name": "kubernetes",
                    "namespace": "default",
                    "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"},
                },
                "subsets": [
                    {
                        "addresses": [{"ip": "127.0.1.3"}],
                        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
                    }
                ],
            }
        )
        self.create(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": "kubernetes",
                    "namespace": "default",
                    "labels": {
                        "kubernetes.io/service-name": "kubernetes",
                        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                    },
                    "ownerReferences": [owner(svc)],
                },
                "addressType": "IPv4",
                "endpoints": [
                    {
                        "addresses": ["127.0.1.3"],
                        "conditions": {"ready": True},
                        "nodeName": "cloud-node-1",
                    }
                ],
                "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
            }
        )

    def configs(self) -> None:
        self.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "kube-proxy",
                    "namespace": "kube-system",
                    "labels": {"app": "kube-proxy"},
                },
                "data": {"config.conf": KUBE_PROXY_CONF, "kubeconfig.conf": KUBE_PROXY_KUBECONFIG},
            }
        )
        self.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "coredns", "namespace": "kube-system"},
                "data": {"Corefile": COREFILE},
            }
        )
        self.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "web-config",
                    "namespace": "default",
                    "labels": {"app": "web"},
                },
                "data": {"index.html": "<h1>edgehub demo</h1>\n", "LOG_LEVEL": "info"},
            }
        )
        self.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": "web-credentials",
                    "namespace": "default",
                    "labels": {"app": "web"},
                },
                "type": "Opaque",
                "stringData": {"username": "admin", "password": "s3cr3t-demo"},
            }
        )
        self.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "registry-pull", "namespace": "default"},
                "type": "kubernetes.io/dockerconfigjson",
                "stringData": {
                    ".dockerconfigjson": '{"auths":{"registry.example.com":'
                    '{"auth":"ZGVtbzpkZW1v"}}}'
                },
            }
        )
        self.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "bootstrap-token-abcdef", "namespace": "kube-system"},
                "type": "bootstrap.kubernetes.io/token",
                "stringData": {
                    "token-id": "abcdef",
                    "token-secret": "0123456789abcdef",
                    "usage-bootstrap-authentication": "true",
                    "usage-bootstrap-signing": "true",
                    "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token,"
                    "system:bootstrappers:openyurt:yurthub",
                },
            }
        )
        for lease in ("kube-controller-manager", "kube-scheduler"):
            self.create(
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": lease, "namespace": "kube-system"},
                    "spec": {
                        "holderIdentity": f"cloud-node-1_{_hash(lease, 8)}",
                        "leaseDurationSeconds": 15,
                        "acquireTime": self.micro_now,
                        "renewTime": self.micro_now,
                        "leaseTransitions": 0,
                    },
                }
            )

    def _uid(self, kind: str, namespace: str, name: str) -> str:
        found = self.state.get(kind.lower() + "s", namespace, name)
        return str(found["metadata"]["uid"])

    def event(
        self,
        namespace: str,
        kind: str,
        name: str,
        reason: str,
        message: str,
        node: str,
        *,
        source: str = "kubelet",
    ) -> None:
        self.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{name}.{_hash(reason + name, 16)}", "namespace": namespace},
                "involvedObject": {
                    "kind": kind,
                    "namespace": namespace,
                    "name": name,
                    "uid": self._uid(kind, namespace, name),
                    "apiVersion": "v1",
                },
                "reason": reason,
                "message": message,
                "source": {"component": source, "host": node}
                if source == "kubelet"
                else {"component": source},
                "firstTimestamp": self.now,
                "lastTimestamp": self.now,
                "count": 1,
                "type": "Normal",
                "reportingComponent": source,
                "reportingInstance": node if source == "kubelet" else "",
            }
        )


def scale_pods(state: storage.State, count: int, *, namespace: str = "default") -> None:
    """Add ``count`` Running pods ``<namespace>/scale-<i>`` spread over the demo nodes."""
    now = objectmeta.timestamp(state.clock())
    image = "registry.k8s.io/pause:3.10"
    for i in range(count):
        index = i % len(NODES)
        node, _pool, ip, _edge = NODES[index]
        state.create(
            running_pod(
                name=f"scale-{i}",
                namespace=namespace,
                node=node,
                node_ip=ip,
                pod_ip=f"10.{100 + index}.{(i // 250) % 250}.{i % 250 + 1}",
                labels={"app": "scale", "shard": str(i % 10)},
                containers=[{"name": "pause", "image": image}],
                now=now,
            )
        )
