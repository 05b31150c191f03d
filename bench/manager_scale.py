"""Benchmark: ``edgehub manager`` and OpenYurt's yurt-manager at fleet size, side by side.

    .venv/bin/python bench/manager_scale.py [--quick] [--nodes N --pods M --pools P]
                                            [--no-yurt-manager] [--no-pod-status] [--keep]

Sizes: the default (500 nodes, 5,000 pods, 20 pools) fits ``make bench``; ``--quick`` is 100 /
1,000 / 10; the issue's size is ``--nodes 5000 --pods 50000 --pools 100``. Needs the test bed
(``make cluster-bins``) and yurt-manager (``make yurt-manager-bin``: built from the same
OpenYurt pin as YurtHub, bench/yurtmanager/go.mod); ``make bench`` builds both. All loopback.

Set-up: the real control plane (``yurthub.testing.realcluster``) with kube-controller-manager
running only its ServiceAccount and CSR-signing controllers (no node lifecycle: no kubelet
renews these nodes' leases; no garbage collector: the pods' owners are named, not created);
the NodePool CRD (manifests/crds). A bounded generator (``yurthub.testing.fleetobjects``, 48
requests in flight, as the admin) creates N Nodes with a kubelet's status (Ready, InternalIP,
images), M Pods bound to them by ``spec.nodeName`` (one DaemonSet pod a node, the rest
ReplicaSets' pods with two containers each; DefaultTolerationSeconds gives them their two
NoExecute tolerations) and each pod's Running status. Objects only: no kubelet, no hub.

The two managers, each its own processes, one after the other on the same objects, both with
the admin kubeconfig and their default leader election (15/10/2 s); yurt-manager's controllers
act with a ServiceAccount each (it mints their tokens with the admin client), bound by its own
chart's RBAC (charts/yurt-manager/templates/yurt-manager-auto-generated.yaml of the pinned
module, applied for kube-system). The controllers both have, in pairs:

    csrapprover     <-> csr-approver-controller   (hub client CSRs)
    autonomy        <-> pod-binding-controller    (pod tolerations of autonomous nodes)
    hubleader       <-> hubleader-controller      (NodePool leaders)
    hubleaderconfig <-> hubleaderconfig-controller (ConfigMap leader-hub-<pool>)
    hubleaderrbac   <-> hubleaderrbac-controller  (ClusterRole yurt-hub-multiplexer)

(``yurtstaticset`` is left out: yurt-manager's needs its admission webhook served with
certificates, and edgehub's is off by default.) What yurt-manager v1.7.0 needs on a plain
apiserver: the NodePool CRD (apps.openyurt.io/v1beta2; a controller whose CRD is missing
logs "will perform noops"); its chart's RBAC without the chart's webhook configurations (with
them every NodePool write calls a webhook nobody serves); ``--disable-independent-webhooks=*``
and no controller that has a webhook (nodepool, yurtstaticset, yurtappset, platformadmin,
gatewaypickup), else it wants certificates, its webhook configurations and a Service;
``--controllers`` naming the set; its metrics, health and webhook ports moved to free loopback
ports.

Measured for each, absolute and as edgehub / yurt-manager:

* RSS and CPU: on the empty cluster (baseline), then at size: time from start to leading
  with synced caches, CPU seconds and time until its first pass over every object is done
  (CPU quiet), RSS of the leader and of a standby replica, steady-state CPU (millicores over
  a window); per-pod bytes = (RSS at size - baseline RSS) / pods;
* autonomy: one node's ``node.openyurt.io/autonomy-duration`` set (and then removed) to all
  its non-DaemonSet pods' two tolerations updated (as observed by listing them), over
  several nodes (median and max);
* a hub client CSR (as the node, with its certificate) to Approved (median);
* leaders for P pools: from creating the P NodePools to every one with a leader in its
  status, and to every ``leader-hub-<pool>`` ConfigMap naming it;
* failover: the leading replica killed (SIGKILL) to the standby approving a CSR created at
  the kill (and to it holding the Lease).

And, in this process, what edgehub's informers hold per object (tracemalloc over a real list
through ``kubecontrol``'s reflector with the manager's shapes, against whole objects).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import pathlib
import re
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from yurthub.testing import ports

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
DURATION = "node.openyurt.io/autonomy-duration"
NR, UR = "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"
CONFIGMAP_LABEL = "openyurt.io/configmap-name"
EDGEHUB_CONTROLLERS = "csrapprover,autonomy,hubleader,hubleaderconfig,hubleaderrbac"
YURT_MANAGER_CONTROLLERS = {
    "csrapprover": "csr-approver-controller",
    "podbinding": "pod-binding-controller",
    "hubleader": "hubleader-controller",
    "hubleaderconfig": "hubleaderconfig-controller",
    "hubleaderrbac": "hubleaderrbac-controller",
}
SIZES = {"quick": (100, 1000, 10), "default": (500, 5000, 20)}


# --- processes -----------------------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> float:
    """Seconds until ``check`` holds (polled every 25 ms); RuntimeError after ``timeout``."""
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{what}: not within {timeout:.0f} s")
        await asyncio.sleep(0.025)
    return time.monotonic() - started


async def settle(pid: int, quiet: float = 0.02, step: float = 0.5, within: float = 600) -> float:
    """Wait until the process uses less than ``quiet`` CPU seconds in ``step`` seconds (its
    first pass over every object done); returns its CPU seconds then."""
    last = cpu_seconds(pid)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        await asyncio.sleep(step)
        now = cpu_seconds(pid)
        if now - last < quiet:
            return now
        last = now
    return last


class Replica:
    """One manager process; its output in a log file."""

    def __init__(self, party: Party, index: int, logs: pathlib.Path) -> None:
        self.party = party
        self.index = index
        self.port = ports.free_port()
        self.log = logs / f"{party.name}-{index}.log"
        self.argv, env = party.command(self)
        self.started = time.monotonic()
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv, stdout=out, stderr=out, env={**os.environ, **env}
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(sig)
        try:
            self.popen.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()

    def tail(self) -> str:
        return "\n".join(self.text().splitlines()[-15:])


class Party:
    name = ""
    lease = ""

    def __init__(self, kubeconfig: pathlib.Path, workdir: pathlib.Path) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir

    def command(self, replica: Replica) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    async def leading(self, replica: Replica, session: aiohttp.ClientSession) -> bool:
        raise NotImplementedError

    async def ready(self, replica: Replica, session: aiohttp.ClientSession) -> bool:
        """Caches synced and leading: its controllers act."""
        raise NotImplementedError


class Edgehub(Party):
    name = "edgehub"
    lease = "edgehub-manager"

    def command(self, replica: Replica) -> tuple[list[str], dict[str, str]]:
        return [
            EDGEHUB,
            "manager",
            f"--kubeconfig={self.kubeconfig}",
            f"--controllers={EDGEHUB_CONTROLLERS}",
            "--bind-address=127.0.0.1",
            f"--health-port={replica.port}",
            "--leader-elect-namespace=kube-system",
        ], {}

    async def _get(self, replica: Replica, session: aiohttp.ClientSession, path: str) -> str:
        try:
            async with session.get(f"http://127.0.0.1:{replica.port}{path}") as r:
                return await r.text() if r.status == 200 else ""
        except aiohttp.ClientError:
            return ""

    async def leading(self, replica: Replica, session: aiohttp.ClientSession) -> bool:
        return "\nedgehub_manager_leader 1.0" in await self._get(replica, session, "/metrics")

    async def ready(self, replica: Replica, session: aiohttp.ClientSession) -> bool:
        return bool(await self._get(replica, session, "/readyz")) and await self.leading(
            replica, session
        )


class YurtManager(Party):
    name = "yurt-manager"
    lease = "yurt-manager"

    def __init__(self, kubeconfig: pathlib.Path, workdir: pathlib.Path, binary: str) -> None:
        super().__init__(kubeconfig, workdir)
        self.binary = binary

    def command(self, replica: Replica) -> tuple[list[str], dict[str, str]]:
        certs = self.workdir / f"yurt-manager-certs-{replica.index}"
        certs.mkdir(exist_ok=True)
        return [
            self.binary,
            f"--kubeconfig={self.kubeconfig}",
            f"--controllers={','.join(YURT_MANAGER_CONTROLLERS)}",
            "--disable-independent-webhooks=*",
            f"--metrics-addr=127.0.0.1:{ports.free_port()}",
            f"--health-probe-addr=127.0.0.1:{replica.port}",
            f"--webhook-port={ports.free_port()}",
            "--working-namespace=kube-system",
            "--leader-elect=true",
        ], {"WEBHOOK_CERT_DIR": str(certs)}

    async def leading(self, replica: Replica, session: aiohttp.ClientSession) -> bool:
        return "successfully acquired lease" in replica.text()

    async def ready(self, replica: Replica, session: aiohttp.ClientSession) -> bool:
        text = replica.text()
        if "successfully acquired lease" not in text:
            return False
        started = re.findall(r'Starting workers.*?"controller": "([^"]+)"', text)
        return set(YURT_MANAGER_CONTROLLERS.values()) <= set(started)


# --- the apiserver -------------------------------------------------------------------------------


class Api:
    def __init__(self, cluster: Any, session: aiohttp.ClientSession) -> None:
        self.base = cluster.url
        self.session = session
        self.ssl = cluster.admin_ssl_context()

    async def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body)
        async with self.session.request(
            method,
            self.base + path,
            data=data,
            ssl=self.ssl,
            headers={"Content-Type": content_type},
        ) as r:
            text = await r.text()
            try:
                return r.status, json.loads(text) if text else None
            except ValueError:
                return r.status, text

    async def get(self, path: str) -> Any:
        status, body = await self.call("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {str(body)[:200]}")
        return body

    async def merge(self, path: str, body: Any) -> None:
        status, answer = await self.call("PATCH", path, body, "application/merge-patch+json")
        if status != 200:
            raise RuntimeError(f"PATCH {path}: {status} {str(answer)[:200]}")

    async def delete(self, path: str) -> None:
        await self.call("DELETE", path)


# --- measurements --------------------------------------------------------------------------------


def hub_csr(name: str, node: str) -> dict[str, Any]:
    """A hub client CSR as YurtHub makes it (both approvers recognise this shape)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "openyurt:yurthub"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}"),
        ]
    )
    request = (
        x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    )
    pem = request.public_bytes(serialization.Encoding.PEM)
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64.b64encode(pem).decode(),
            "signerName": "kubernetes.io/kube-apiserver-client",
            "usages": ["digital signature", "key encipherment", "client auth"],
        },
    }


class Csrs:
    """CSRs submitted as a node, with its own client certificate (the requester the approvers
    check), and the time until the apiserver shows them Approved."""

    def __init__(self, cluster: Any, api: Api, node: str, workdir: pathlib.Path) -> None:
        self.api = api
        self.node = node
        cert, key = cluster.issue_identity(f"system:node:{node}", ["system:nodes"])
        pem = workdir / "node-client.pem"
        pem.write_bytes(cert + key)
        self.ssl = ssl.create_default_context(cafile=str(cluster.ca_path))
        self.ssl.load_cert_chain(str(pem))
        self.count = 0

    async def submit(self, tag: str) -> str:
        self.count += 1
        name = f"bench-{tag}-{self.count}"
        async with self.api.session.post(
            f"{self.api.base}/apis/certificates.k8s.io/v1/certificatesigningrequests",
            json=hub_csr(name, self.node),
            ssl=self.ssl,
        ) as r:
            if r.status != 201:
                raise RuntimeError(f"CSR {name}: {r.status} {(await r.text())[:200]}")
        return name

    async def approved(self, name: str) -> bool:
        csr = await self.api.get(f"/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}")
        conditions = (csr.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Approved" for c in conditions)

    async def round(self, tag: str, timeout: float = 120) -> float:
        started = time.monotonic()
        name = await self.submit(tag)
        await until(lambda: self.approved(name), timeout, f"CSR {name} approved")
        return time.monotonic() - started


async def autonomy_round(api: Api, fleet: Any, i: int, value: str | None, want: int) -> float:
    """Set (or remove) node ``i``'s autonomy duration; seconds until every one of its
    non-DaemonSet pods carries ``want`` as both tolerations' seconds."""
    node = fleet.node_name(i)
    mine = {name for _, name in fleet.pod_names(i) if not name.startswith("agent-")}
    path = f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}"

    async def done() -> bool:
        pods = (await api.get(path))["items"]
        updated = set()
        for pod in pods:
            seconds = {
                t.get("key"): t.get("tolerationSeconds")
                for t in pod["spec"].get("tolerations") or []
                if t.get("effect") == "NoExecute"
            }
            if seconds.get(NR) == want and seconds.get(UR) == want:
                updated.add(pod["metadata"]["name"])
        return mine <= updated

    started = time.monotonic()
    await api.merge(f"/api/v1/nodes/{node}", {"metadata": {"annotations": {DURATION: value}}})
    await until(done, 120, f"node {node}: pods' tolerations {want}")
    return time.monotonic() - started


async def pools_round(api: Api, fleet: Any) -> tuple[float, float]:
    """Create every NodePool; seconds until each has a leader in its status, and until each
    ``leader-hub-<pool>`` ConfigMap names it."""
    names = {fleet.pool_name(p) for p in range(fleet.pools)}
    started = time.monotonic()
    sem = asyncio.Semaphore(16)

    async def create(p: int) -> None:
        async with sem:
            status, body = await api.call(
                "POST", "/apis/apps.openyurt.io/v1beta2/nodepools", fleet.nodepool(p)
            )
            if status != 201:
                raise RuntimeError(f"NodePool {p}: {status} {str(body)[:200]}")

    async with asyncio.TaskGroup() as tg:
        for p in range(fleet.pools):
            tg.create_task(create(p), name=f"nodepool {p}")

    async def elected() -> bool:
        pools = (await api.get("/apis/apps.openyurt.io/v1beta2/nodepools"))["items"]
        done = {
            p["metadata"]["name"] for p in pools if (p.get("status") or {}).get("leaderEndpoints")
        }
        return names <= done

    async def configured() -> bool:
        maps = (
            await api.get(
                f"/api/v1/namespaces/kube-system/configmaps?labelSelector={CONFIGMAP_LABEL}"
            )
        )["items"]
        done = {
            m["metadata"]["name"].removeprefix("leader-hub-")
            for m in maps
            if (m.get("data") or {}).get("leaders")
        }
        return names <= done

    await until(elected, 300, "every pool has a leader")
    leaders = time.monotonic() - started
    await until(configured, 300, "every leader-hub ConfigMap names it")
    return leaders, time.monotonic() - started


async def clean_pools(api: Api, fleet: Any) -> None:
    for p in range(fleet.pools):
        name = fleet.pool_name(p)
        await api.delete(f"/apis/apps.openyurt.io/v1beta2/nodepools/{name}")
        await api.delete(f"/api/v1/namespaces/kube-system/configmaps/leader-hub-{name}")


async def measure(
    party: Party,
    api: Api,
    csrs: Csrs,
    fleet: Any,
    nodes: list[int],
    logs: pathlib.Path,
    window: float,
    csr_rounds: int,
) -> dict[str, Any]:
    """One party at size: start, settle, steady state, a standby, autonomy, CSRs, pools,
    failover. Returns its figures."""
    out: dict[str, Any] = {}
    session = api.session
    await api.delete(f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{party.lease}")
    a = Replica(party, 0, logs)
    replicas = [a]
    try:
        print(
            f"  {party.name}: starting, waiting until it leads with synced caches ...", flush=True
        )
        out["ready_s"] = await until(lambda: party.ready(a, session), 900, f"{party.name} ready")
        settled_cpu = await settle(a.pid)
        out["settle_s"] = time.monotonic() - a.started
        out["settle_cpu_s"] = settled_cpu
        out["rss_mb"] = rss_mb(a.pid)
        c0, t0 = cpu_seconds(a.pid), time.monotonic()
        await asyncio.sleep(window)
        out["steady_mcores"] = 1000 * (cpu_seconds(a.pid) - c0) / (time.monotonic() - t0)
        out["rss_steady_mb"] = rss_mb(a.pid)

        b = Replica(party, 1, logs)
        replicas.append(b)
        await asyncio.sleep(3)
        await settle(b.pid)
        out["standby_rss_mb"] = rss_mb(b.pid)
        if await party.leading(b, session):
            raise RuntimeError(f"{party.name}: the standby leads while the leader lives")

        print(f"  {party.name}: autonomy, CSRs, pools ...", flush=True)
        extend, restore = [], []
        for i in nodes:
            extend.append(await autonomy_round(api, fleet, i, "2h", 7200))
            restore.append(await autonomy_round(api, fleet, i, None, 300))
        out["autonomy_s"], out["restore_s"] = extend, restore
        out["csr_s"] = [await csrs.round(party.name) for _ in range(csr_rounds)]
        out["pools_leaders_s"], out["pools_configmaps_s"] = await pools_round(api, fleet)
        out["rss_end_mb"] = rss_mb(a.pid)

        print(f"  {party.name}: failover (the leader killed) ...", flush=True)
        a.stop(signal.SIGKILL)
        killed = time.monotonic()
        name = await csrs.submit(f"{party.name}-failover")
        await until(lambda: csrs.approved(name), 180, f"{party.name}: failover CSR approved")
        out["failover_act_s"] = time.monotonic() - killed
        await until(lambda: party.leading(b, session), 60, f"{party.name}: the standby leads")
        out["failover_lead_s"] = time.monotonic() - killed
    except BaseException:
        for r in replicas:
            print(f"--- {r.log.name}:\n{r.tail()}", file=sys.stderr)
        raise
    finally:
        for r in replicas:
            r.stop()
        await clean_pools(api, fleet)
    return out


async def baseline(party: Party, api: Api, logs: pathlib.Path) -> float:
    """The party's RSS on the empty cluster (leading, caches synced, quiet)."""
    await api.delete(f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{party.lease}")
    r = Replica(party, 9, logs)
    try:
        await until(lambda: party.ready(r, api.session), 300, f"{party.name} ready (empty)")
        await settle(r.pid)
        return rss_mb(r.pid)
    except BaseException:
        print(f"--- {r.log.name}:\n{r.tail()}", file=sys.stderr)
        raise
    finally:
        r.stop()


async def store_bytes(kubeconfig: pathlib.Path) -> dict[str, float]:
    """What edgehub's informers hold per Pod and per Node: a reflector with the manager's shape
    (and, for pods, its index) lists them as the manager does, and the memory tracemalloc sees
    freed when it is dropped is what it held (store, index, shared values); whole objects as
    json decodes them (a page of up to 1,000) are measured the same way, for comparison."""
    import gc

    from kubecontrol import kubeapi, watching
    from managers import autonomy, shapes

    client = await kubeapi.connect(None, kubeconfig, "bench-manager-scale/0")
    api = kubeapi.KubeApi(client, request_timeout=120)
    out: dict[str, float] = {}

    def traced() -> int:
        client.last_response = None  # the client keeps the last answer it read
        gc.collect()
        return tracemalloc.get_traced_memory()[0]

    tracemalloc.start()
    try:
        for what, resource, shape, selector in (
            ("pod", autonomy.PODS, shapes.AUTONOMY_POD, autonomy.BOUND_UNFINISHED),
            ("node", autonomy.NODES, shapes.NODE, None),
        ):
            reflector = watching.Reflector(
                api,
                resource,
                lambda kind, obj: None,
                field_selector=selector,
                shape=shape,
            )
            if what == "pod":
                reflector.add_index(autonomy.BY_NODE, lambda p: (p["spec"]["nodeName"],))
            await reflector._list()  # the reflector's own list: pages, trimming, index
            count = len(reflector.store)
            held = traced()
            del reflector
            out[f"{what}_trimmed"] = (held - traced()) / max(1, count)
            out[f"{what}_count"] = count
            pages = api.list_pages(resource, field_selector=selector, limit=1000)
            items = (await pages.__anext__()).items
            await pages.aclose()
            held = traced()
            sample = len(items)
            del items
            out[f"{what}_whole"] = (held - traced()) / max(1, sample)
    finally:
        tracemalloc.stop()
        await client.close()
    return out


# --- the run -------------------------------------------------------------------------------------


async def run(args: argparse.Namespace, workdir: pathlib.Path) -> None:
    from yurthub.testing import fleetobjects, k8sbinaries, realcluster

    sys.path.insert(0, str(HERE / "yurtmanager"))
    import build as yurt_manager_build  # bench/yurtmanager/build.py

    size = "quick" if args.quick else "default"
    nodes, pods, pools = SIZES[size]
    fleet = fleetobjects.Fleet(
        nodes=args.nodes or nodes,
        pods=args.pods if args.pods is not None else pods,
        pools=args.pools or pools,
        with_status=not args.no_pod_status,
    )
    yurt_manager_bin = yurt_manager_build.binary()
    with_yurt_manager = not args.no_yurt_manager
    if with_yurt_manager and not yurt_manager_bin.is_file():
        raise SystemExit(f"{yurt_manager_bin} is missing: run `make yurt-manager-bin` first")
    logs = workdir / "logs"
    logs.mkdir()
    cluster = realcluster.RealCluster(
        workdir / "k8s",
        k8sbinaries.locate(),
        die_with_parent=True,
        extra_args={"kube-controller-manager": {"controllers": fleetobjects.KCM_CONTROLLERS}},
    )
    print("starting the control plane ...", flush=True)
    await asyncio.to_thread(cluster.up)
    try:
        await bench(
            args,
            workdir,
            logs,
            cluster,
            fleet,
            str(yurt_manager_bin) if with_yurt_manager else None,
        )
    finally:
        await asyncio.to_thread(cluster.down)


async def bench(
    args: argparse.Namespace,
    workdir: pathlib.Path,
    logs: pathlib.Path,
    cluster: Any,
    fleet: Any,
    yurt_manager_bin: str | None,
) -> None:
    from yurthub.testing import fleetobjects

    crd = REPO / "manifests" / "crds" / "nodepools.apps.openyurt.io.yaml"
    await asyncio.to_thread(cluster.kubectl, "apply", "-f", str(crd))
    await asyncio.to_thread(
        cluster.kubectl, "wait", "--for", "condition=established", "--timeout", "60s",
        "crd/nodepools.apps.openyurt.io",
    )  # fmt: skip
    kubeconfig = cluster.admin_kubeconfig
    parties: list[Party] = [Edgehub(kubeconfig, workdir)]
    if yurt_manager_bin is not None:
        parties.append(YurtManager(kubeconfig, workdir, yurt_manager_bin))
        import build as yurt_manager_build  # bench/yurtmanager/build.py (on sys.path: run)

        rendered = await asyncio.to_thread(yurt_manager_build.rbac)
        await asyncio.to_thread(cluster.kubectl, "apply", "-f", "-", input=rendered)
    quick = args.quick
    window = 5.0 if quick else 15.0
    rounds = 3 if quick else 5
    csr_rounds = 2 if quick else 3
    results: dict[str, dict[str, Any]] = {p.name: {} for p in parties}
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        api = Api(cluster, session)
        print("baselines on the empty cluster ...", flush=True)
        for party in parties:
            results[party.name]["baseline_mb"] = await baseline(party, api, logs)

        print(
            f"creating {fleet.nodes} nodes and {fleet.pods} pods "
            f"({'with' if fleet.with_status else 'without'} pod status) ...",
            flush=True,
        )

        def report(what: str, progress: Any) -> None:
            print(f"  {progress.done} {what} at {progress.rate:.0f}/s", flush=True)

        started = time.monotonic()
        await fleetobjects.create(cluster, fleet, report=report)
        seeded = time.monotonic() - started
        csrs = Csrs(cluster, api, fleet.node_name(0), workdir)
        for n, party in enumerate(parties):
            print(f"{party.name} at size ...", flush=True)
            chosen = [1 + n * rounds + k for k in range(rounds)]
            chosen = [i % fleet.nodes for i in chosen]
            results[party.name].update(
                await measure(party, api, csrs, fleet, chosen, logs, window, csr_rounds)
            )
        print("edgehub's informers per object (tracemalloc) ...", flush=True)
        held = await store_bytes(kubeconfig)
    print_report(fleet, results, held, seeded, window)


def print_report(
    fleet: Any,
    results: dict[str, dict[str, Any]],
    held: dict[str, float],
    seeded: float,
    window: float,
) -> None:
    names = list(results)

    def median(v: Any) -> float:
        return statistics.median(v) if isinstance(v, list) else float(v)

    def maximum(v: Any) -> float:
        return max(v) if isinstance(v, list) else float(v)

    for row in results.values():
        row["per_pod_bytes"] = (
            (row["rss_mb"] - row["baseline_mb"]) * 1024 * 1024 / max(1, fleet.pods)
        )

    rows: list[tuple[str, Callable[[dict[str, Any]], float], str]] = [
        ("RSS, empty cluster (MB)", lambda r: r["baseline_mb"], "{:.0f}"),
        ("RSS at size, leader (MB)", lambda r: r["rss_mb"], "{:.0f}"),
        ("RSS at size, standby (MB)", lambda r: r["standby_rss_mb"], "{:.0f}"),
        ("RSS after the rounds, leader (MB)", lambda r: r["rss_end_mb"], "{:.0f}"),
        ("RSS delta per pod (bytes)", lambda r: r["per_pod_bytes"], "{:.0f}"),
        ("start to leading, caches synced (s)", lambda r: r["ready_s"], "{:.1f}"),
        ("start to first pass done (s)", lambda r: r["settle_s"], "{:.1f}"),
        ("CPU to first pass done (s)", lambda r: r["settle_cpu_s"], "{:.1f}"),
        (f"steady CPU over {window:.0f} s (millicores)", lambda r: r["steady_mcores"], "{:.1f}"),
        ("autonomy set -> pods updated, median (s)", lambda r: median(r["autonomy_s"]), "{:.2f}"),
        ("autonomy set -> pods updated, max (s)", lambda r: maximum(r["autonomy_s"]), "{:.2f}"),
        ("autonomy removed -> restored, median (s)", lambda r: median(r["restore_s"]), "{:.2f}"),
        ("hub CSR -> Approved, median (s)", lambda r: median(r["csr_s"]), "{:.2f}"),
        (f"{fleet.pools} pools -> leaders elected (s)", lambda r: r["pools_leaders_s"], "{:.2f}"),
        (
            f"{fleet.pools} pools -> leader-hub ConfigMaps (s)",
            lambda r: r["pools_configmaps_s"],
            "{:.2f}",
        ),
        ("leader killed -> standby approves a CSR (s)", lambda r: r["failover_act_s"], "{:.1f}"),
        ("leader killed -> standby holds the Lease (s)", lambda r: r["failover_lead_s"], "{:.1f}"),
    ]
    width = max(len(label) for label, _, _ in rows) + 2
    header = "".join(f"{n:>14}" for n in names)
    ratio = "    edgehub/yurt-manager" if len(names) == 2 else ""
    print(
        f"\nmanager at fleet size: {fleet.nodes} nodes, {fleet.pods} pods, {fleet.pools} pools "
        f"(created in {seeded:.0f} s); load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'':<{width}}{header}{ratio}")
    for label, get, fmt in rows:
        values = [get(results[n]) for n in names]
        cells = "".join(f"{fmt.format(v):>14}" for v in values)
        extra = ""
        if len(values) == 2 and values[1]:
            extra = f"    {values[0] / values[1]:.2f}x"
        print(f"{label:<{width}}{cells}{extra}")
    if held:
        print("\nedgehub's informers (tracemalloc, this process, the manager's shapes):")
        for what in ("pod", "node"):
            kept, whole = held[f"{what}_trimmed"], held[f"{what}_whole"]
            print(
                f"  {what}: {kept:.0f} bytes held (store, index, shared values) vs {whole:.0f} "
                f"whole ({whole / kept:.1f}x); {held[f'{what}_count']:.0f} {what}s"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 nodes, 1,000 pods, 10 pools")
    parser.add_argument("--nodes", type=int, default=0, help="Nodes to create")
    parser.add_argument("--pods", type=int, default=None, help="Pods to create")
    parser.add_argument("--pools", type=int, default=0, help="NodePools to elect leaders for")
    parser.add_argument("--no-yurt-manager", action="store_true", help="edgehub only")
    parser.add_argument(
        "--no-pod-status", action="store_true", help="pods without a kubelet's status (faster)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="bench-mgrscale-"))
    try:
        asyncio.run(run(args, workdir))
    finally:
        if args.keep:
            print(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
