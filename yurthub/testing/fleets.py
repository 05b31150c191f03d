"""A fleet of edge nodes on one machine against a real control plane, for benches and tests.

    with realcluster.RealCluster(d) as cluster:
        fleet = fleets.Fleet(cluster, fleets.FleetSpec(nodes=6, pools=2), d / "fleet")
        fleet.prepare()                        # CRDs, RBAC, NodePools, edgehub manager
        fleet.start(fleets.Mode.EDGEHUB)       # links, hubs, hollow nodes; all Ready
        fleet.apply_load()                     # Services, Deployments... pods Running
        fleet.cut_all(); fleet.heal_all()
        fleet.stop(); ... fleet.start(fleets.Mode.YURTHUB) ...
        fleet.close()

Each node (``Member``) is, as ``edgenodes.EdgeNode`` for one node, a set of processes with
their logs under ``workdir/<mode>/<node>/``:

- its edge link, ``edgehub partition`` (``fleetplumbing.Link``): cut, healed, and counting
  the bytes it relays each way;
- in mode ``edgehub``, ``edgehub hub`` (the node's kubelet identity, its serving certificate
  requested and approved by the manager, so it may lead its pool; ``--nodepool-name``,
  ``--node-ip``, one ``--multiplexer-port`` for the whole fleet); in mode ``yurthub``,
  OpenYurt's YurtHub v1.7.0 with the same facts (``yurthubs``), behind ``agentshim`` (YurtHub
  knows kubelet only by its exact User-Agent, kubemark's say ``hollow-kubelet``); in mode
  ``direct``, nothing:
  the hollow node holds a client certificate and talks to the apiserver through its link;
- kubemark's hollow kubelet and kube-proxy (``hollownodes``).

Nodes are named after loopback addresses and given to pools by ``fleetplans``. The
control-plane side, set up once by ``prepare`` as docs/pool.md and docs/autonomy.md say: the
NodePool CRD, the hubs' and the manager's RBAC, ``yurt-hub-cfg``, one NodePool per pool with
leader election, and ``edgehub manager`` (``csrapprover``, ``hubleader``,
``hubleaderconfig``, ``hubleaderrbac``, ``autonomy``) with the manifests' identity. The nodes
are marked autonomous (``node.openyurt.io/autonomy-duration=0``) so an outage longer than the
default tolerations evicts nothing in any mode: what differs between modes is only what runs
on the nodes. YurtHub reads the same ``leader-hub-<pool>`` ConfigMaps (edgehub manager's
``hubleaderconfig`` stands in for yurt-manager's, writing the same keys and label).

The same node names are used in every mode, so the pods placed once stay on their nodes and a
mode's kubelets find them (``stop`` leaves the Node objects; the next ``start`` reuses them).

Invariant: ``stop`` ends every process of the members, ``close`` also the manager, also after a
failed start. Dangers: each member is 3-4 processes (~150-250 MiB); the machine bounds N.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import json
import os
import pathlib
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any

from yurthub.testing import (
    edgenodes,
    fleetplans,
    fleetplumbing,
    hollownodes,
    ports,
    processes,
    realcluster,
    yurthubs,
)

REPO_MANIFESTS = pathlib.Path(__file__).resolve().parents[2] / "manifests"
MANAGER_USER = "system:serviceaccount:edgehub-system:edgehub-manager"
MANAGER_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:edgehub-system")
MANAGER_CONTROLLERS = "csrapprover,hubleader,hubleaderconfig,hubleaderrbac,autonomy"
NODE_GROUPS = ("system:nodes", "openyurt:yurthub")
MAX_CRASHES = 20
"""A hub crashing more often than this fails the run (it would only crash again)."""
MANIFESTS = (
    "crds/nodepools.apps.openyurt.io.yaml",
    "crds/nodebuckets.apps.openyurt.io.yaml",
    "discovery/00-namespace.yaml",
    "hub/yurt-hub-cfg.yaml",
    "hub/rbac.yaml",
    "hub/multiplexer-rbac.yaml",
    "manager/rbac.yaml",
    "manager/hubleader-rbac.yaml",
    "manager/autonomy-rbac.yaml",
    "manager/autonomy-policy.yaml",
)
"""What ``kubectl apply -k manifests/`` would apply that a fleet needs (the discovery parts,
the manager's Deployment and the webhook are left out: the manager runs as a process)."""


class Mode(enum.StrEnum):
    DIRECT = "direct"
    EDGEHUB = "edgehub"
    YURTHUB = "yurthub"


@dataclasses.dataclass(frozen=True, slots=True)
class FleetSpec:
    nodes: int
    pools: int
    prefix: str = "fleet"
    subnet: int = 10
    """Nodes are 127.<subnet>.x.y."""
    pods_per_node: int = 30
    services: int = 200
    namespaces: int = 10
    configmaps: int = 20
    secrets: int = 20
    hub_args: tuple[str, ...] = ()
    """Extra ``edgehub hub`` flags."""
    yurthub_args: tuple[str, ...] = ()
    yurthub_binary: str | None = None
    """YurtHub v1.7.0 (``python3 bench/yurthub/build.py --print-path``), for mode yurthub."""
    manager_controllers: str = MANAGER_CONTROLLERS
    manager_args: tuple[str, ...] = ()
    """Extra ``edgehub manager`` flags (``--default-*-toleration-seconds`` must equal the
    apiserver's when those are changed)."""

    def placements(self) -> list[fleetplans.Placement]:
        return fleetplans.placements(self.prefix, self.subnet, self.nodes, self.pools)

    def pool_names(self) -> list[str]:
        return [fleetplans.pool_name(self.prefix, p) for p in range(self.pools)]

    def load(self) -> fleetplans.LoadSpec:
        return fleetplans.LoadSpec(
            prefix=self.prefix,
            pods=self.pods_per_node * self.nodes,
            services=self.services,
            namespaces=self.namespaces,
            configmaps=self.configmaps,
            secrets=self.secrets,
        )


class Member:
    """One node of the fleet in one mode: link, hub (unless direct), hollow kubelet + proxy."""

    def __init__(
        self,
        fleet: Fleet,
        placement: fleetplans.Placement,
        mode: Mode,
        workdir: pathlib.Path,
    ) -> None:
        cluster = fleet.cluster
        assert cluster.ports is not None
        self.fleet = fleet
        self.index = placement.index
        self.name = placement.name
        self.pool = placement.pool
        self.mode = mode
        self.workdir = workdir
        die = fleet.die_with_parent
        self.link = fleetplumbing.Link(
            self.name, cluster.ports.apiserver, workdir / "logs" / "link.log", die=die,
            ports=fleet.ports,
        )  # fmt: skip
        self.proxy_port, self.serve_port, self.secure_port, self.shim_port = fleet.ports.take(4)
        self.cache_dir = workdir / "cache"
        self.hub: processes.Process | None = None
        self.shim: processes.Process | None = None
        if mode is Mode.DIRECT:
            kubeconfig: str | None = cluster.write_kubeconfig(
                workdir / "node.kubeconfig",
                f"system:node:{self.name}",
                ("system:nodes",),
                server=self.link.url,
            ).read_text()
            server = self.link.url
        else:
            kubeconfig = None
            server = self.proxy_url
            self.hub = self._hub_process()
        if mode is Mode.YURTHUB:
            # YurtHub knows kubelet only by its exact User-Agent: kubemark's say
            # hollow-kubelet and hollow-proxy, renamed on the way (``agentshim``).
            self.shim = self._shim_process()
            server = f"http://127.0.0.1:{self.shim_port}"
        self.hollow = hollownodes.HollowNode(
            cluster.binaries,
            self.name,
            server=server,
            workdir=workdir / "hollow",
            labels=fleetplans.node_labels(fleet.spec.prefix, self.pool),
            die_with_parent=die,
            kubeconfig=kubeconfig,
            port=fleet.ports.one,
        )
        self.hub_killed = False
        self.crashes: list[str] = []
        """Each unexpected exit of the hub, with its log's last lines (bounded)."""

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.proxy_port}"

    @property
    def serve_url(self) -> str:
        return f"http://127.0.0.1:{self.serve_port}"

    @property
    def hub_log(self) -> pathlib.Path:
        return self.workdir / "logs" / "hub.log"

    def _hub_process(self) -> processes.Process:
        fleet = self.fleet
        if self.mode is Mode.EDGEHUB:
            identity = fleet.cluster.write_kubeconfig(
                self.workdir / "kubelet.kubeconfig", f"system:node:{self.name}", NODE_GROUPS
            )
            argv = edgenodes.edgehub_argv(
                "hub",
                "--server-addr",
                self.link.url,
                "--node-name",
                self.name,
                "--bootstrap-mode=kubeletcertificate",
                f"--kubelet-kubeconfig={identity}",
                f"--root-dir={self.workdir / 'root'}",
                "--disk-cache-path",
                str(self.cache_dir),
                "--proxy-port",
                str(self.proxy_port),
                "--serve-port",
                str(self.serve_port),
                "--proxy-secure-port=0",
                f"--nodepool-name={self.pool}",
                f"--node-ip={self.name}",
                f"--multiplexer-port={fleet.multiplexer_port}",
                "--migrate-from-yurthub=off",
                "--cache-key-source=none",
                *fleet.spec.hub_args,
            )
        else:
            binary = fleet.spec.yurthub_binary
            if not binary:
                raise processes.ProcessError("mode yurthub needs FleetSpec.yurthub_binary")
            root = yurthubs.lay_out_root(
                fleet.cluster, self.workdir / "yurthub", self.link.url, self.name, NODE_GROUPS
            )
            self.cache_dir = root / "cache"
            argv = yurthubs.argv(
                binary,
                root,
                self.link.url,
                self.name,
                self.pool,
                (self.serve_port, self.proxy_port, self.secure_port, fleet.multiplexer_port),
                node_ip=self.name,
                extra=fleet.spec.yurthub_args,
            )
        return processes.Process(
            f"{self.mode} hub {self.name}",
            argv,
            self.hub_log,
            # A crash in native code (signal 11) leaves every thread's Python stack in the log.
            env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1"),
            die_with_parent=fleet.die_with_parent,
        )

    def _shim_process(self) -> processes.Process:
        return processes.Process(
            f"agent shim {self.name}",
            [
                sys.executable,
                "-m",
                "yurthub.testing.agentshim",
                f"--listen=127.0.0.1:{self.shim_port}",
                f"--upstream=127.0.0.1:{self.proxy_port}",
                "--rename=hollow-kubelet=kubelet",
                "--rename=hollow-proxy=kube-proxy",
            ],
            self.workdir / "logs" / "shim.log",
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            die_with_parent=self.fleet.die_with_parent,
        )

    # --- life cycle ------------------------------------------------------------------------

    def hub_ready(self) -> bool:
        if self.hub is None:
            return True
        if not self.hub.alive:
            raise self.hub.failure("exited")
        try:
            return edgenodes.http("GET", f"{self.serve_url}/v1/readyz", timeout=2)[0] == 200
        except OSError:
            return False

    def kill_hub(self) -> None:
        """SIGKILL the hub (a crash); the hollow node keeps running, cut off."""
        if self.hub is not None:
            self.hub_killed = True
            self.hub.kill()

    def restart_hub(self) -> None:
        """Start a killed hub again (as kubelet restarts a crashed static pod)."""
        if self.hub is not None and not self.hub.alive:
            self.hub.start()
            self.hub_killed = False

    def components(self) -> dict[str, processes.Process]:
        found = {"link": self.link.process, **self.hollow.components()}
        if self.hub is not None:
            found["hub"] = self.hub
        if self.shim is not None:
            found["shim"] = self.shim
        return found

    def check_alive(self) -> None:
        """Raise if a process of this node is not running; a crashed hub instead, when the
        fleet restarts hubs (``Fleet(restart_hubs=True)``, as kubelet restarts a static
        pod), is recorded in ``crashes`` and started again."""
        for name, proc in self.components().items():
            if name == "hub" and self.hub_killed:
                continue
            if proc.returncode is None:
                continue
            if name == "hub" and self.fleet.restart_hubs and len(self.crashes) < MAX_CRASHES:
                # The log as it was at the crash (faulthandler's stacks at its end) is kept
                # apart: the restarted hub appends to the same log.
                kept = proc.log.with_name(f"{proc.log.stem}.crash{len(self.crashes) + 1}.log")
                shutil.copyfile(proc.log, kept)
                self.crashes.append(
                    f"{self.name}: exited with {proc.returncode}; the log to the crash (with "
                    f"faulthandler's stacks if it was a native crash): {kept}; last lines:\n"
                    f"{processes.tail(proc.log, 40)}"
                )
                self.fleet.log(
                    f"hub of {self.name} exited with {proc.returncode}: restarted (log: {kept})"
                )
                proc.start()
                continue
            raise proc.failure("is not running")

    def hub_metrics(self) -> str | None:
        if self.hub is None or not self.hub.alive:
            return None
        try:
            status, body = edgenodes.http("GET", f"{self.serve_url}/metrics", timeout=5)
        except OSError:
            return None
        return body.decode("utf-8", "replace") if status == 200 else None

    def stop(self) -> None:
        self.hollow.stop()
        for proc in (self.shim, self.hub):
            if proc is not None:
                proc.stop()
        self.link.stop()


# --- the fleet ---------------------------------------------------------------------------------


class Fleet:
    def __init__(
        self,
        cluster: realcluster.RealCluster,
        spec: FleetSpec,
        workdir: pathlib.Path,
        *,
        die_with_parent: bool = False,
        restart_hubs: bool = False,
        log: Callable[[str], None] = lambda _: None,
    ) -> None:
        """``restart_hubs``: a hub that dies is started again and recorded (``crashes``), as
        kubelet restarts a static pod, instead of failing the run (a bench at size; a test
        wants the failure)."""
        self.cluster = cluster
        self.restart_hubs = restart_hubs
        self.spec = spec
        self.workdir = workdir
        self.die_with_parent = die_with_parent
        self.log = log
        self.admin = fleetplumbing.Admin(cluster)
        self.placements = spec.placements()
        self.ports = ports.Ports()
        self.multiplexer_port = self.ports.one([p.name for p in self.placements])
        self.members: list[Member] = []
        self.mode: Mode | None = None
        self.manager: processes.Process | None = None
        self.manager_port = 0
        self.cloud_node: hollownodes.HollowNode | None = None

    # --- the control-plane side ------------------------------------------------------------

    def prepare(self) -> None:
        """CRDs, RBAC, ``yurt-hub-cfg``, the NodePools, and ``edgehub manager`` running."""
        cluster = self.cluster
        for manifest in MANIFESTS:
            cluster.kubectl("apply", "-f", str(REPO_MANIFESTS / manifest))
        edgenodes.eventually(
            lambda: cluster.kubectl("get", "nodepools", check=False).returncode == 0,
            60,
            "the NodePool CRD served",
        )
        items = [fleetplans.node_pool(name) for name in self.spec.pool_names()]
        doc = {"apiVersion": "v1", "kind": "List", "items": items}
        cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
        self.start_manager()
        self.start_cloud_node()

    def start_cloud_node(self) -> None:
        """One hollow kubelet in the cloud's zone, straight to the apiserver and never cut: a
        zone that stays healthy, so kube-controller-manager treats a fleet-wide outage as the
        fleet's (taints its nodes) rather than its own (``fleetplans.node_labels``)."""
        name = fleetplans.cloud_node_address(self.spec.subnet)
        workdir = self.workdir / "cloud-node"
        kubeconfig = self.cluster.write_kubeconfig(
            workdir / "node.kubeconfig", f"system:node:{name}", ("system:nodes",)
        ).read_text()
        self.cloud_node = hollownodes.HollowNode(
            self.cluster.binaries,
            name,
            server=self.cluster.url,
            workdir=workdir / "hollow",
            labels={fleetplans.ZONE: fleetplans.CLOUD_ZONE},
            proxy=False,
            die_with_parent=self.die_with_parent,
            kubeconfig=kubeconfig,
            port=self.ports.one,
        )
        self.cloud_node.start()

        def ready() -> bool:
            node = self.admin.get(f"/api/v1/nodes/{name}")
            conditions = (node.get("status") or {}).get("conditions") or []
            return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

        edgenodes.eventually(ready, 120, "the cloud node Ready", interval=1.0)

    def start_manager(self) -> None:
        workdir = self.workdir / "manager"
        kubeconfig = self.cluster.write_kubeconfig(
            workdir / "manager.kubeconfig", MANAGER_USER, MANAGER_GROUPS
        )
        self.manager_port = self.ports.one()
        self.manager = processes.Process(
            "edgehub manager",
            edgenodes.edgehub_argv(
                "manager",
                f"--kubeconfig={kubeconfig}",
                f"--controllers={self.spec.manager_controllers}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--health-port={self.manager_port}",
                *self.spec.manager_args,
            ),
            workdir / "manager.log",
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            die_with_parent=self.die_with_parent,
        )
        self.manager.start()
        edgenodes.eventually(
            lambda: edgenodes.http("GET", f"http://127.0.0.1:{self.manager_port}/readyz")[0] == 200,
            60,
            "edgehub manager ready",
            alive=lambda: self._check(self.manager),
        )

    @staticmethod
    def _check(proc: processes.Process | None) -> None:
        if proc is not None and proc.returncode is not None:
            raise proc.failure("is not running")

    def apply_load(self, *, batch: int = 100, timeout: float = 600.0) -> None:
        """Create the load (``fleetplans.objects``), then wait until every pod runs."""
        for doc in fleetplans.batches(fleetplans.objects(self.spec.load()), batch):
            self.cluster.kubectl("apply", "-f", "-", input=json.dumps(doc), timeout=120)
        self.wait_pods_running(timeout)

    # --- the nodes ---------------------------------------------------------------------------

    def start(self, mode: Mode, *, timeout: float = 600.0) -> None:
        """Start every member in ``mode`` and return once all hubs are ready and every Node is
        Ready, marked autonomous, and (when a load exists) every pod runs again."""
        if self.members:
            raise processes.ProcessError(f"the fleet already runs in mode {self.mode}")
        self.mode = mode
        self.members = [
            Member(self, p, mode, self.workdir / str(mode) / p.name) for p in self.placements
        ]
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> None:
        started = time.monotonic()
        for member in self.members:
            member.link.start()
        self._wait_all(lambda m: m.link.ready(), 60, "edge links listening")
        for member in self.members:
            for proc in (member.hub, member.shim):
                if proc is not None:
                    proc.start()
        self._wait_all(lambda m: m.hub_ready(), 180, "hubs ready")
        for member in self.members:
            member.hollow.start()
        left = max(60.0, timeout - (time.monotonic() - started))
        self.wait_ready(left)
        self.mark_autonomous()
        if self.pods():
            self.wait_pods_running(left)
        self.log(f"{self.mode}: {len(self.members)} nodes up in {time.monotonic() - started:.0f} s")

    def _wait_all(self, check: Callable[[Member], bool], timeout: float, what: str) -> None:
        pending = list(self.members)

        def done() -> bool:
            pending[:] = [m for m in pending if not check(m)]
            return not pending

        edgenodes.eventually(
            done,
            timeout,
            f"{what} (still waiting for {[m.name for m in pending[:5]]})",
            interval=0.3,
            alive=self.check_alive,
        )

    def check_alive(self) -> None:
        for member in self.members:
            member.check_alive()
        self._check(self.manager)
        if self.cloud_node is not None:
            self.cloud_node.check_alive()

    def crashes(self) -> list[str]:
        """Every crash of a hub since this mode started (``restart_hubs``)."""
        return [c for m in self.members for c in m.crashes]

    def stop(self) -> None:
        """Stop every member's processes (the Node objects stay)."""
        fleetplumbing.in_parallel([m.stop for m in self.members])
        self.members = []
        self.mode = None

    def close(self) -> None:
        self.stop()
        if self.cloud_node is not None:
            self.cloud_node.stop()
        if self.manager is not None:
            self.manager.stop()

    # --- the cloud's view ----------------------------------------------------------------------

    @property
    def selector(self) -> str:
        return f"{fleetplans.LABEL}={self.spec.prefix}"

    def nodes(self) -> list[dict[str, Any]]:
        return self.admin.items("/api/v1/nodes", labelSelector=self.selector)

    def ready_nodes(self) -> set[str]:
        return set(self.ready_since())

    def ready_since(self) -> dict[str, float | None]:
        """Each Ready node's Ready transition time (wall clock, whole seconds: the condition's
        ``lastTransitionTime``, which kubelet sets when it reports the change; None when it
        does not parse)."""
        since: dict[str, float | None] = {}
        for node in self.nodes():
            for cond in (node.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "Ready" and cond.get("status") == "True":
                    when = cond.get("lastTransitionTime") or ""
                    try:
                        parsed = datetime.datetime.fromisoformat(when.replace("Z", "+00:00"))
                    except ValueError:
                        since[node["metadata"]["name"]] = None
                        continue
                    since[node["metadata"]["name"]] = parsed.timestamp()
        return since

    def wait_ready(self, timeout: float) -> None:
        want = {p.name for p in self.placements}
        missing: list[str] = []

        def all_ready() -> bool:
            missing[:] = sorted(want - self.ready_nodes())
            return not missing

        edgenodes.eventually(
            all_ready,
            timeout,
            f"every node Ready (not yet: {missing[:5]})",
            interval=1.0,
            alive=self.check_alive,
        )

    def mark_autonomous(self) -> None:
        """Annotate every node autonomous (kubectl: a GET and a PATCH a node). Right after a
        fleet starts the apiserver may answer slowly (30 YurtHubs listing everything at once
        kept 30 nodes' annotation past 60 s once): up to 300 s a batch."""
        names = [p.name for p in self.placements]
        for i in range(0, len(names), 50):
            self.cluster.kubectl(
                "annotate",
                "node",
                *names[i : i + 50],
                f"{fleetplans.AUTONOMY}=0",
                "--overwrite",
                timeout=300,
            )

    def pods(self) -> list[dict[str, Any]]:
        return self.admin.items("/api/v1/pods", labelSelector=self.selector)

    def pod_uids(self) -> dict[str, str]:
        """``namespace/name -> uid`` of the load's pods now."""
        return {
            f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["metadata"]["uid"]
            for p in self.pods()
        }

    def wait_pods_running(self, timeout: float) -> None:
        want = self.spec.pods_per_node * self.spec.nodes
        seen: list[int] = [0]

        def running() -> bool:
            pods = self.pods()
            seen[0] = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
            return seen[0] >= want

        edgenodes.eventually(
            running,
            timeout,
            f"{want} pods Running (seen {seen})",
            interval=2.0,
            alive=self.check_alive,
        )

    def leaders(self) -> dict[str, tuple[str, ...]]:
        """Each pool's elected leaders (``status.leaderEndpoints``)."""
        out: dict[str, tuple[str, ...]] = {}
        wanted = set(self.spec.pool_names())
        for pool in self.admin.items("/apis/apps.openyurt.io/v1beta2/nodepools"):
            name = pool["metadata"]["name"]
            if name in wanted:
                endpoints = (pool.get("status") or {}).get("leaderEndpoints") or []
                out[name] = tuple(sorted(str(e.get("nodeName")) for e in endpoints))
        return out

    def wait_leaders(self, timeout: float = 120.0) -> dict[str, tuple[str, ...]]:
        """Every pool's leaders, once each pool has one."""

        def found() -> dict[str, tuple[str, ...]] | None:
            leaders = self.leaders()
            complete = len(leaders) == self.spec.pools and all(leaders.values())
            return leaders if complete else None

        return edgenodes.eventually(found, timeout, "a leader in every pool", interval=1.0)

    def leader_members(self) -> list[Member]:
        chosen = {name for names in self.leaders().values() for name in names}
        return [m for m in self.members if m.name in chosen]

    # --- the links ------------------------------------------------------------------------------

    def set_links(self, mode: str) -> float:
        """Switch every link at (nearly) once; returns the spread in seconds."""
        started = time.monotonic()
        calls = [functools.partial(m.link.set_mode, mode) for m in self.members]
        fleetplumbing.in_parallel(calls, workers=32)
        return time.monotonic() - started

    def cut_all(self) -> float:
        return self.set_links("blackhole")

    def heal_all(self) -> float:
        return self.set_links("pass")

    def link_bytes(self) -> int:
        """Bytes relayed both ways over every member's link so far."""
        return sum(sum(m.link.relayed()) for m in self.members)
