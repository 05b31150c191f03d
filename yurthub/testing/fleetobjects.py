"""A fleet of objects without kubelets, for the manager at fleet size: N Nodes, M Pods bound to
them, P NodePools, created in a real apiserver with a bounded number of requests in flight.

``Fleet(nodes, pods, pools)`` is the plan (pure: the builders give the exact objects, so a
test and a bench make the same fleet); ``create(cluster, fleet)`` writes it as the admin.
Nothing runs on the nodes: a Node is created with the status its kubelet would have posted
(Ready, an InternalIP, capacity, images), a Pod with ``spec.nodeName`` set (no scheduler
involved) and then the status a kubelet would report (Running, its conditions and container
statuses), so the objects are the size and shape a real fleet's are. Addresses are loopback
(127.64.0.0/10), which nothing ever connects to here.

The shape of the fleet:

* node ``i`` is ``<prefix>-node-<i>``, in pool ``<prefix>-pool-<i mod P>`` (label
  ``apps.openyurt.io/nodepool``), labelled ``openyurt.io/is-edge-worker=true`` and with the
  labels a kubelet and a cloud give (arch, os, hostname, instance type, zone, region);
* the pods spread evenly over the nodes; the first pod of every node is a DaemonSet's (an
  agent, as kube-proxy), the others are ReplicaSets' (``app-<k>``, ten pods a ReplicaSet), in
  ``namespaces`` namespaces; each has two containers with env, ports, probes and resources,
  and gets DefaultTolerationSeconds' two NoExecute tolerations (300 s) from the apiserver;
* owners are named but not created: the garbage collector must be off (``KCM_CONTROLLERS``),
  and so must the node lifecycle controller (no kubelet renews these nodes' leases).

Danger: ``create`` writes tens of thousands of objects; run it only against a cluster made for
it (``realcluster`` with ``KCM_CONTROLLERS``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import aiohttp

POOL_LABEL = "apps.openyurt.io/nodepool"
EDGE_WORKER_LABEL = "openyurt.io/is-edge-worker"
KCM_CONTROLLERS = "serviceaccount,serviceaccount-token,csrsigning"
"""kube-controller-manager's controllers for such a cluster: ServiceAccounts (pods need their
namespace's ``default``) and CSR signing; no garbage collector (the owners are not there), no
node lifecycle (no kubelet renews a lease: every node would be tainted and its pods evicted),
no TTL controller (it would write every node)."""
CREATED_AT = "2026-01-01T00:00:00Z"
IMAGES = (
    ("registry.example/edge/agent", 41_000_000),
    ("registry.example/edge/proxy", 35_000_000),
    ("registry.example/apps/app", 72_000_000),
    ("registry.example/apps/sidecar", 18_000_000),
    ("registry.k8s.io/pause", 320_000),
)


class Cluster(Protocol):
    @property
    def url(self) -> str: ...

    def admin_ssl_context(self) -> ssl.SSLContext: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Fleet:
    nodes: int
    pods: int
    pools: int
    namespaces: int = 10
    prefix: str = "fleet"
    with_status: bool = True
    """Write each pod's status as a kubelet would (one more request per pod)."""

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.pools < 1 or self.namespaces < 1 or self.pods < 0:
            raise ValueError("a fleet has at least one node, pool and namespace")
        if self.pools > self.nodes:
            raise ValueError("more pools than nodes: some pools would be empty")

    # -- names

    def node_name(self, i: int) -> str:
        return f"{self.prefix}-node-{i:05}"

    def pool_name(self, p: int) -> str:
        return f"{self.prefix}-pool-{p:03}"

    def namespace(self, n: int) -> str:
        return f"{self.prefix}-ns-{n:02}"

    def pool_of(self, i: int) -> str:
        return self.pool_name(i % self.pools)

    def pods_on(self, i: int) -> int:
        """How many pods node ``i`` gets (the pods spread evenly)."""
        base, extra = divmod(self.pods, self.nodes)
        return base + (1 if i < extra else 0)

    def pod_names(self, i: int) -> list[tuple[str, str]]:
        """(namespace, name) of node ``i``'s pods; the first is its DaemonSet pod."""
        base, extra = divmod(self.pods, self.nodes)
        start = base * i + min(i, extra)
        out = []
        for k in range(self.pods_on(i)):
            seq = start + k
            namespace = self.namespace(seq % self.namespaces)
            name = f"agent-{self.node_name(i)}" if k == 0 else f"app-{seq // 10:05}-{seq % 10}"
            out.append((namespace, name))
        return out

    def addresses(self, i: int) -> str:
        return f"127.{64 + i // 65536}.{(i // 256) % 256}.{i % 256}"

    # -- objects

    def node(self, i: int) -> dict[str, Any]:
        name = self.node_name(i)
        capacity = {"cpu": "4", "memory": "8048440Ki", "pods": "110", "ephemeral-storage": "61Gi"}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "beta.kubernetes.io/arch": "amd64",
                    "beta.kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/hostname": name,
                    "node.kubernetes.io/instance-type": "edge.medium",
                    "topology.kubernetes.io/region": "region-1",
                    "topology.kubernetes.io/zone": f"zone-{i % 3}",
                    POOL_LABEL: self.pool_of(i),
                    EDGE_WORKER_LABEL: "true",
                },
                "annotations": {
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                    "node.alpha.kubernetes.io/ttl": "0",
                },
            },
            "spec": {"podCIDR": f"10.{64 + i // 256}.{i % 256}.0/24"},
            "status": {
                "capacity": capacity,
                "allocatable": {**capacity, "cpu": "3800m"},
                "conditions": [
                    _condition(kind, "False", f"Kubelet{reason}")
                    for kind, reason in (
                        ("MemoryPressure", "HasSufficientMemory"),
                        ("DiskPressure", "HasNoDiskPressure"),
                        ("PIDPressure", "HasSufficientPID"),
                    )
                ]
                + [_condition("Ready", "True", "KubeletReady")],
                "addresses": [
                    {"type": "InternalIP", "address": self.addresses(i)},
                    {"type": "Hostname", "address": name},
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "machineID": f"{i:032x}",
                    "systemUUID": f"{i:08x}-0000-4000-8000-{i:012x}",
                    "bootID": f"{i:08x}-1111-4000-8000-{i:012x}",
                    "kernelVersion": "6.1.0-edge",
                    "osImage": "Debian GNU/Linux 12 (bookworm)",
                    "containerRuntimeVersion": "containerd://1.7.24",
                    "kubeletVersion": "v1.37.2",
                    "kubeProxyVersion": "",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                },
                "images": [
                    {"names": [f"{image}@sha256:{i % 97:064x}", f"{image}:1.0"], "sizeBytes": size}
                    for image, size in IMAGES
                ],
            },
        }

    def pod(self, i: int, namespace: str, name: str) -> dict[str, Any]:
        node = self.node_name(i)
        agent = name.startswith("agent-")
        app = "agent" if agent else name.rsplit("-", 1)[0]
        kind, owner_name = (
            ("DaemonSet", f"{self.prefix}-agent") if agent else ("ReplicaSet", f"{app}-5d4f8c")
        )
        owner: dict[str, Any] = {
            "apiVersion": "apps/v1",
            "kind": kind,
            "name": owner_name,
            "uid": _uid(owner_name),
            "controller": True,
            "blockOwnerDeletion": True,
        }
        labels = {"app": app, "tier": "edge" if agent else "backend"}
        if not agent:
            labels["pod-template-hash"] = "5d4f8c"
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": [owner],
            },
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": part,
                        "image": f"registry.example/apps/{part}:1.{i % 7}",
                        "args": ["--port=8080", "--log-level=info"],
                        "env": [{"name": f"VAR_{j}", "value": f"value-{j}"} for j in range(6)],
                        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                        "resources": {
                            "requests": {"cpu": "50m", "memory": "64Mi"},
                            "limits": {"memory": "128Mi"},
                        },
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
                    }
                    for part in ("app", "sidecar")
                ],
            },
        }

    def pod_status(self, i: int, namespace: str, name: str) -> dict[str, Any]:
        """The status a kubelet reports for a started pod (a merge patch of ``status``)."""
        ip = f"10.{64 + i // 256}.{i % 256}.{int(_digest(namespace + name)[:4], 16) % 250 + 2}"
        return {
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": kind, "status": "True", "lastTransitionTime": CREATED_AT}
                    for kind in (
                        "PodReadyToStartContainers",
                        "Initialized",
                        "Ready",
                        "ContainersReady",
                        "PodScheduled",
                    )
                ],
                "hostIP": self.addresses(i),
                "hostIPs": [{"ip": self.addresses(i)}],
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "startTime": CREATED_AT,
                "containerStatuses": [
                    {
                        "name": part,
                        "state": {"running": {"startedAt": CREATED_AT}},
                        "ready": True,
                        "restartCount": 0,
                        "image": f"registry.example/apps/{part}:1.{i % 7}",
                        "imageID": f"registry.example/apps/{part}@sha256:{i % 7:064x}",
                        "containerID": f"containerd://{_uid(name + part).replace('-', '')}",
                        "started": True,
                    }
                    for part in ("app", "sidecar")
                ],
            }
        }

    def nodepool(self, p: int) -> dict[str, Any]:
        return {
            "apiVersion": "apps.openyurt.io/v1beta2",
            "kind": "NodePool",
            "metadata": {"name": self.pool_name(p)},
            "spec": {
                "type": "Edge",
                "enableLeaderElection": True,
                "leaderElectionStrategy": "random",
                "leaderReplicas": 1,
                "interConnectivity": True,
                "poolScopeMetadata": [
                    {"group": "", "version": "v1", "resource": "services"},
                    {"group": "discovery.k8s.io", "version": "v1", "resource": "endpointslices"},
                ],
            },
        }

    def every_pod(self) -> Iterator[tuple[int, str, str]]:
        """(node index, namespace, name) of every pod, node by node."""
        for i in range(self.nodes):
            for namespace, name in self.pod_names(i):
                yield i, namespace, name


def _condition(kind: str, status: str, reason: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "lastHeartbeatTime": CREATED_AT,
        "lastTransitionTime": CREATED_AT,
        "reason": reason,
        "message": f"kubelet says {reason}",
    }


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _uid(name: str) -> str:
    d = _digest(name)
    return f"{d[:8]}-{d[8:12]}-4{d[13:16]}-8{d[17:20]}-{d[20:32]}"


# --- writing it ------------------------------------------------------------------------------


class WriteFailed(Exception):
    pass


@dataclasses.dataclass
class Progress:
    done: int = 0
    total: int = 0
    started: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def rate(self) -> float:
        return self.done / max(1e-9, time.monotonic() - self.started)


_RETRY = (429, 500, 502, 503, 504)


async def _send(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    body: dict[str, Any],
    *,
    content_type: str = "application/json",
    ok: tuple[int, ...] = (200, 201),
    attempts: int = 30,
) -> None:
    import orjson  # the test bed's JSON (a test dependency)

    data = orjson.dumps(body)
    for attempt in range(attempts):
        try:
            async with session.request(
                method, url, data=data, headers={"Content-Type": content_type}
            ) as r:
                if r.status in ok:
                    return
                text = (await r.text())[:300]
                if r.status not in _RETRY:
                    raise WriteFailed(f"{method} {url}: {r.status} {text}")
        except (TimeoutError, aiohttp.ClientConnectionError) as e:
            text = str(e)
        await asyncio.sleep(min(5.0, 0.1 * 2**attempt))
    raise WriteFailed(f"{method} {url}: still failing after {attempts} attempts: {text}")


async def run_bounded(
    jobs: Iterator[Callable[[], Any]], in_flight: int, progress: Progress | None = None
) -> None:
    """Run the coroutines ``jobs`` makes, at most ``in_flight`` at a time (the iterator is
    consumed lazily: memory stays bounded by ``in_flight``)."""
    lock = asyncio.Lock()

    async def worker() -> None:
        while True:
            async with lock:
                job = next(jobs, None)
            if job is None:
                return
            await job()
            if progress is not None:
                progress.done += 1

    async with asyncio.TaskGroup() as tg:
        for n in range(in_flight):
            tg.create_task(worker(), name=f"fleet writer {n}")


async def create(
    cluster: Cluster,
    fleet: Fleet,
    *,
    in_flight: int = 48,
    pools: bool = False,
    report: Callable[[str, Progress], None] | None = None,
) -> None:
    """Create the fleet's namespaces, nodes and pods (and, with ``pools``, its NodePools; their
    CRD must be installed); an object that exists already is left as it is (409), so a
    half-made fleet can be completed by running it again."""
    base = cluster.url
    # A connection the apiserver asked to close is closed gracefully (TLS close_notify, up to
    # 30 s); before Python 3.12.8 asyncio leaks it if the loop closes first (asyncio.run right
    # after this returns), and its socket's ResourceWarning surfaced later in whatever test
    # ran then. aiohttp's clean-up aborts such transports when the session closes.
    connector = aiohttp.TCPConnector(
        ssl=cluster.admin_ssl_context(),
        limit=in_flight,
        enable_cleanup_closed=bool(getattr(aiohttp.connector, "NEEDS_CLEANUP_CLOSED", False)),
    )
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        def post(path: str, body: dict[str, Any]) -> Callable[[], Any]:
            return lambda: _send(session, "POST", base + path, body, ok=(201, 409))

        steps: list[tuple[str, int, Iterator[Callable[[], Any]]]] = [
            (
                "namespaces",
                fleet.namespaces,
                (
                    post("/api/v1/namespaces", {"metadata": {"name": fleet.namespace(n)}})
                    for n in range(fleet.namespaces)
                ),
            ),
            (
                "nodes",
                fleet.nodes,
                (post("/api/v1/nodes", fleet.node(i)) for i in range(fleet.nodes)),
            ),
        ]
        if pools:
            steps.append(
                (
                    "nodepools",
                    fleet.pools,
                    (
                        post("/apis/apps.openyurt.io/v1beta2/nodepools", fleet.nodepool(p))
                        for p in range(fleet.pools)
                    ),
                )
            )
        for what, total, jobs in steps:
            progress = Progress(total=total)
            await run_bounded(jobs, in_flight, progress)
            if report is not None:
                report(what, progress)
        await _wait_for_accounts(session, base, fleet)

        def pod_job(i: int, namespace: str, name: str) -> Callable[[], Any]:
            async def job() -> None:
                await _send(
                    session,
                    "POST",
                    f"{base}/api/v1/namespaces/{namespace}/pods",
                    fleet.pod(i, namespace, name),
                    ok=(201, 409),
                )
                if fleet.with_status:
                    await _send(
                        session,
                        "PATCH",
                        f"{base}/api/v1/namespaces/{namespace}/pods/{name}/status",
                        fleet.pod_status(i, namespace, name),
                        content_type="application/merge-patch+json",
                    )

            return job

        progress = Progress(total=fleet.pods)
        await run_bounded(
            (pod_job(i, ns, name) for i, ns, name in fleet.every_pod()), in_flight, progress
        )
        if report is not None:
            report("pods", progress)


async def _wait_for_accounts(session: aiohttp.ClientSession, base: str, fleet: Fleet) -> None:
    """Pods need their namespace's ``default`` ServiceAccount (the ServiceAccount admission
    plugin refuses them until the controller made it)."""
    deadline = time.monotonic() + 120
    for n in range(fleet.namespaces):
        url = f"{base}/api/v1/namespaces/{fleet.namespace(n)}/serviceaccounts/default"
        while True:
            async with session.get(url) as r:
                if r.status == 200:
                    break
            if time.monotonic() > deadline:
                raise WriteFailed(f"no ServiceAccount default in {fleet.namespace(n)} after 120 s")
            await asyncio.sleep(0.2)
