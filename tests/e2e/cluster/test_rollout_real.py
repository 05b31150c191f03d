"""A pool of three nodes moved from OpenYurt's real YurtHub v1.7.0 to edgehub, upgraded to a
second edgehub build and rolled back (to the first build, then to YurtHub), with no hands on
the nodes: the lines of docs/migrating.md's ``handover`` and ``rollback`` blocks and of
docs/rollout.md's ``upgrade`` block, run by ``sh`` as written (KUBECONFIG set, this checkout's
``edgehub`` on PATH), in the cloud only. yurt-manager is not run: the test leaves what it
would have left (its Deployment, an expired leader Lease, YurtStaticSets ``yurt-hub`` and
``yurt-hub-cloud``, ConfigMap ``yurt-static-set-yurt-hub``, the manifests with its hash).
The manager line runs with this test's ports, no leader election and only its
yurtstaticset controller added.

The nodes are hollow kubelets (kubemark: the real kubelet, a fake runtime) whose hub is the
static Pod ``yurt-hub`` in their staticPodPath, run by ``staticpods.Runner``: the stand-in for
the container runtime, which starts, replaces and stops the hub process when the manifest
changes, as kubelet would, and runs the YurtStaticSet's worker Pods from what the Pod says
(its command line, environment, ConfigMap and hostPath volumes), reporting their end through
the node's hub. What stands in for what: ``podcommands`` (images, the node's network and
filesystem), ``rollout_support`` (the second build) and the cut node's NotReady mark, written
at the cut as the node lifecycle controller writes it after its 50 s grace period (the
controller takes it from there). Everything else is real: the control
plane, kubelet's mirror Pods and Leases, the manager's yurtstaticset controller, the worker
(``edgehub static-pod-upgrade``), the hub processes, YurtHub's files and the links.

Checked: the pool is migrated with ``maxUnavailable: 1`` while one node is cut off (it is done
after its link heals; ``edgehub rollout status`` shows it offline meanwhile, with the totals
``kubectl get yss`` prints); each rollout reaches every node; every hub's cache answers offline
after each switch (for edgehub: what YurtHub had cached, too: a component that only YurtHub
ever saw); kubelet keeps every pod, none is evicted; no node is NotReady except around its own
hub restart (and the cut node while cut); YurtHub's cache files are untouched by edgehub and
YurtHub runs again on the rollback. The time per node and per pool is printed (no test
asserts a time); run with ``-s`` to see it.
"""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import rollout_support as rs
import yurthub_support

from managers import staticsetplanning
from yurthub.cache import yurthubfiles
from yurthub.testing import edgenodes, processes, realcluster, staticpodnodes, yurthubs

# Four rollouts of three nodes one at a time, a cut and twelve offline checks: minutes.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

EDGEHUB = str(pathlib.Path(sys.executable).with_name("edgehub"))
POOL = "roll-pool"
NODES = ("roll-a", "roll-b", "roll-c")
CUT = "roll-c"
APPS = "rollout-apps"
NS = "kube-system"
YSS = "yurt-hub"
KUBELET_UA = {"User-Agent": "hollow-kubelet/v1.37.2 (linux/amd64) kubernetes/rollout"}
"""What this node's kubelet calls itself (kubemark's): the component both hubs cache it as."""
FLANNELD_UA = {"User-Agent": "flanneld/v0.22.0"}
GUIDE = rs.guide_blocks(rs.REPO / "docs" / "migrating.md")
HANDOVER, ROLLBACK = GUIDE["handover"], GUIDE["rollback"]
UPGRADE = rs.guide_blocks(rs.REPO / "docs" / "rollout.md")["upgrade"]
OPENYURT_HASH = "openyurt1"
"""The hash yurt-manager wrote on the manifests before the hand-over (not edgehub's scheme)."""
SLACK = 20.0
"""Seconds a node may stay NotReady after its hub is back: kubelet renews its Lease every
10 s and the node lifecycle controller looks every 5 s; this watch samples every second."""


def _get(url: str, headers: dict[str, str]) -> tuple[int, Any]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={**headers, "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return int(r.status), json.loads(r.read())
    except urllib.error.HTTPError as e:
        with e:  # its response holds the connection
            return int(e.code), None
    except (OSError, ValueError):
        return 0, None


def node_pods(node: staticpodnodes.StaticPodNode) -> str:
    """kubelet's list of its node's pods (the only pod list a node's identity may read)."""
    return f"{node.proxy_url}/api/v1/pods?fieldSelector=spec.nodeName%3D{node.name}"


def _metric_version(node: staticpodnodes.StaticPodNode) -> str | None:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{node.serve_url}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError as e:
        realcluster.close_answer(e)
        return None
    for line in text.splitlines():
        if line.startswith("openyurt_version_info{"):
            for part in line[line.index("{") + 1 : line.rindex("}")].split(","):
                key, _, value = part.partition("=")
                if key == "git_version":
                    return value.strip('"')
    return None


class Pool:
    def __init__(
        self, cluster: realcluster.RealCluster, nodes: list[staticpodnodes.StaticPodNode]
    ) -> None:
        self.cluster = cluster
        self.api = rs.Api(cluster)
        self.nodes = {n.name: n for n in nodes}
        self.manager: processes.Process | None = None
        self.watch: rs.RolloutWatch | None = None
        self.times: list[str] = []

    def kubectl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.cluster.kubectl(*args, **kw)

    @property
    def env(self) -> dict[str, str]:
        """The guide's commands find the cluster as an operator's do: KUBECONFIG; ``edgehub``
        is this checkout's, first on PATH."""
        path = f"{pathlib.Path(EDGEHUB).parent}:{self.cluster.binaries.directory}:"
        return {**os.environ, "KUBECONFIG": str(self.cluster.admin_kubeconfig),
                "PATH": path + os.environ.get("PATH", "")}  # fmt: skip

    @property
    def hashes(self) -> dict[str, str]:
        """Image -> hash of the hub template that runs it."""
        return {
            image: staticsetplanning.template_hash(
                rs.yurthub_template(POOL) if image == rs.YURTHUB_IMAGE
                else rs.edgehub_template(POOL, image)
            )
            for image in (rs.YURTHUB_IMAGE, rs.EDGEHUB_1, rs.EDGEHUB_2)
        }  # fmt: skip

    def sh(self, line: str) -> subprocess.CompletedProcess[str]:
        """One line of the guide, run by ``sh`` as written."""
        done = subprocess.run(["sh", "-c", line], env=self.env, capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        return done

    def rollout(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [EDGEHUB, "rollout", *args, "--kubeconfig", str(self.cluster.admin_kubeconfig)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done

    def alive(self) -> None:
        for node in self.nodes.values():
            node.check_alive()
        if self.manager is not None and not self.manager.alive:
            raise self.manager.failure("is not running")

    def yss(self) -> dict[str, Any]:
        return self.api.get(f"/apis/apps.openyurt.io/v1alpha1/namespaces/{NS}/yurtstaticsets/{YSS}")

    def target(self) -> str:
        return staticsetplanning.template_hash(self.yss()["spec"]["template"])

    def follow(self, what: str, started: float, timeout: float = 600.0) -> dict[str, float]:
        """Wait until every node runs the YurtStaticSet's template with no worker left; print
        how long each node took from its worker's creation, its hub restart, and the pool's
        time from ``started``."""
        digest = self.target()
        assert self.watch is not None
        done = self.watch.wait(digest, started, timeout, self.alive)
        status = self.yss()["status"]
        assert (status["totalNumber"], status["upgradedNumber"]) == (3, 3), status
        load = os.getloadavg()
        lines = [f"{what}: whole pool {max(done.values()) - started:.1f} s "
                 f"(load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})"]  # fmt: skip
        for node in sorted(done):
            runner = self.nodes[node].runner
            assert runner is not None
            swaps = [s for s in runner.snapshot()[0] if s.noticed >= started]
            restart = swaps[-1].restart_seconds if swaps else None
            hub = f"{restart:.1f}" if restart is not None else "?"
            created = self.watch.created_after(digest, node, started)
            took = f"{done[node] - created:.1f}" if created is not None else "?"
            lines.append(f"  {node}: worker created -> node done {took} s (hub restart {hub} s)")
        self.times += lines
        print("\n".join(lines), flush=True)
        return done

    def answers_offline(self, node: staticpodnodes.StaticPodNode, *, edgehub: bool) -> None:
        """Cut ``node`` (refused connections) and ask its hub what kubelet needs from the
        cache (its Node, its pods with the apps among them); edgehub also as flanneld, a
        component only YurtHub ever saw here: what the import brought."""
        node.cut("refuse")
        seen: list[Any] = []
        try:

            def answered() -> bool:
                seen[:] = []
                status, doc = _get(node_pods(node), KUBELET_UA)
                names = {p["metadata"]["name"] for p in (doc or {}).get("items") or []}
                seen.append(("kubelet pods", status, sorted(names)))
                if status != 200 or not {f"app-{node.name}-0", f"app-{node.name}-1"} <= names:
                    return False
                status, doc = _get(f"{node.proxy_url}/api/v1/nodes/{node.name}", KUBELET_UA)
                seen.append(("kubelet node", status))
                if status != 200 or (doc or {}).get("metadata", {}).get("name") != node.name:
                    return False
                if not edgehub:
                    return True
                status, doc = _get(f"{node.proxy_url}/api/v1/nodes/{node.name}", FLANNELD_UA)
                seen.append(("flanneld node", status))
                if status != 200 or (doc or {}).get("metadata", {}).get("name") != node.name:
                    return False
                status, doc = _get(node_pods(node), FLANNELD_UA)
                names = {p["metadata"]["name"] for p in (doc or {}).get("items") or []}
                seen.append(("flanneld pods", status, sorted(names)))
                return status == 200 and f"app-{node.name}-0" in names

            try:
                edgenodes.eventually(answered, 60, f"{node.name}'s hub answering offline",
                                     alive=self.alive)  # fmt: skip
            except TimeoutError as e:
                raise AssertionError(f"{e}: last answers {seen}") from e
        finally:
            node.heal()


def _cache_digest(node: staticpodnodes.StaticPodNode) -> dict[str, str]:
    """YurtHub's cache files of the node (edgehub's own files beside them left out)."""
    import hashlib

    root = node.path("/etc/kubernetes/cache")
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] not in yurthubfiles.OWN_FILES
    }


@pytest.fixture
def pool(
    real_cluster: realcluster.RealCluster, hub_rbac: None, tmp_path: pathlib.Path
) -> Iterator[Pool]:
    cluster = real_cluster
    for crd in ("nodepools", "nodebuckets", "yurtstaticsets"):
        cluster.kubectl("apply", "-f", str(rs.REPO / f"manifests/crds/{crd}.apps.openyurt.io.yaml"))
    cluster.kubectl(
        "wait", "--for", "condition=established", "--timeout", "60s",
        "crd/nodepools.apps.openyurt.io", "crd/nodebuckets.apps.openyurt.io",
        "crd/yurtstaticsets.apps.openyurt.io",
    )  # fmt: skip
    # YurtHub caches kubemark's hollow kubelet as it caches a kubelet (its documented knob),
    # so what it hands over on these nodes is what it would on real ones.
    before = cluster.kubectl("get", "configmap", "yurt-hub-cfg", "-n", NS, "-o", "json",
                             check=False)  # fmt: skip
    agents = "hollow-kubelet,hollow-proxy"
    if before.returncode == 0:
        old_agents = json.loads(before.stdout).get("data", {}).get("cache_agents", "")
        patch = {"data": {"cache_agents": ",".join(a for a in (old_agents, agents) if a)}}
        cluster.kubectl("patch", "configmap", "yurt-hub-cfg", "-n", NS, "--type=merge",
                        "-p", json.dumps(patch))  # fmt: skip
    else:
        cluster.kubectl("create", "configmap", "yurt-hub-cfg", "-n", NS,
                        f"--from-literal=cache_agents={agents}")  # fmt: skip
        # YurtHub reads it only with its label (reference: yurthub-behaviour.md §2).
        cluster.kubectl("label", "configmap", "yurt-hub-cfg", "-n", NS,
                        "openyurt.io/configmap-name=yurt-hub-cfg")  # fmt: skip
    images = rs.images(yurthub_support.path(), tmp_path / "build2")
    first = rs.manifest(rs.yurthub_template(POOL), OPENYURT_HASH)
    nodes = []
    try:
        for name in NODES:
            node = staticpodnodes.StaticPodNode(
                cluster, name, workdir=tmp_path / name, images=images,
                labels={"apps.openyurt.io/nodepool": POOL},
            )  # fmt: skip
            nodes.append(node)
            yurthubs.lay_out_root(cluster, node.path("/var/lib/yurthub"), node.apiserver_url,
                                  name, ("system:nodes", "openyurt:yurthub"))  # fmt: skip
            node.path("/etc/kubernetes").mkdir(parents=True, exist_ok=True)
            node.start({"yurthub.yaml": first}, wait_ready=False)
        for node in nodes:  # started side by side: each takes tens of seconds to be Ready
            node.wait_ready()
        yield Pool(cluster, nodes)
    finally:
        for node in nodes:
            node.stop()
        if before.returncode == 0:
            restore = {"data": {"cache_agents": old_agents}}
            cluster.kubectl("patch", "configmap", "yurt-hub-cfg", "-n", NS, "--type=merge",
                            "-p", json.dumps(restore), check=False)  # fmt: skip
        else:
            cluster.kubectl("delete", "configmap", "yurt-hub-cfg", "-n", NS, check=False)
        for name in NODES:
            cluster.kubectl("delete", "node", name, "--wait=false", check=False)
        cluster.kubectl("delete", "namespace", APPS, "--wait=false", check=False)
        cluster.kubectl("delete", "yss", YSS, "yurt-hub-cloud", "-n", NS, "--wait=false",
                        check=False)  # fmt: skip
        cluster.kubectl("delete", "deployment", "yurt-manager", "-n", NS, check=False)
        cluster.kubectl("delete", "lease", "cloud-yurt-manager", "-n", NS, check=False)
        cluster.kubectl("delete", "configmap", f"yurt-static-set-{YSS}", "-n", NS, check=False)
        cluster.kubectl("delete", "pods", "-n", NS, "--all", "--grace-period=0", "--force",
                        "--wait=false", check=False)  # fmt: skip


def _eventually(check: Callable[[], Any], timeout: float, what: str, pool: Pool) -> Any:
    return edgenodes.eventually(check, timeout, what, alive=pool.alive)


def test_a_pool_moves_from_yurthub_to_edgehub_and_back_with_no_hands_on_the_nodes(
    pool: Pool, tmp_path: pathlib.Path
) -> None:
    nodes = pool.nodes
    # What yurt-manager (OpenYurt >= 1.4) left: YurtStaticSet yurt-hub with YurtHub's
    # template, its ConfigMap, and the manifests it wrote on the nodes (its own hash).
    yurthub_tmpl = rs.yurthub_template(POOL)
    pool.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "apps.openyurt.io/v1alpha1", "kind": "YurtStaticSet",
        "metadata": {"name": YSS, "namespace": NS, "labels": {"apps.openyurt.io/nodepool": POOL}},
        "spec": {"staticPodManifest": "yurthub", "template": yurthub_tmpl,
                 "upgradeStrategy": {"type": "AdvancedRollingUpdate", "maxUnavailable": 1}},
    }))  # fmt: skip
    pool.kubectl("create", "configmap", f"yurt-static-set-{YSS}", "-n", NS,
                 f"--from-literal=yurthub={rs.manifest(yurthub_tmpl, OPENYURT_HASH)}")  # fmt: skip
    pool.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "apps.openyurt.io/v1alpha1", "kind": "YurtStaticSet",
        "metadata": {"name": "yurt-hub-cloud", "namespace": NS},
        "spec": {"staticPodManifest": "yurthub", "template": yurthub_tmpl,
                 "upgradeStrategy": {"type": "AdvancedRollingUpdate", "maxUnavailable": 1}},
    }))  # fmt: skip
    # yurt-manager itself (its image never runs here) and its leader Lease, long expired.
    pool.kubectl("create", "deployment", "yurt-manager", "-n", NS,
                 "--image=openyurt/yurt-manager:v1.7.0")  # fmt: skip
    stale = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(time.time() - 600))
    pool.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "cloud-yurt-manager", "namespace": NS},
        "spec": {"holderIdentity": "yurt-manager-0", "leaseDurationSeconds": 30,
                 "renewTime": stale},
    }))  # fmt: skip

    # Workloads kubelet must keep: two pods per node.
    pool.kubectl("create", "namespace", APPS)
    for name in NODES:
        for i in range(2):
            pool.kubectl("apply", "-f", "-", input=json.dumps({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"app-{name}-{i}", "namespace": APPS},
                "spec": {"nodeName": name,
                         "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
            }))  # fmt: skip

    def running_apps() -> dict[str, dict[str, str]] | None:
        out = {}
        for name, node in nodes.items():
            pods = node.hollow.running_pods()
            if pods is None:
                return None
            out[name] = {k: v for k, v in pods.items() if k.startswith(APPS + "/")}
        return out if all(len(v) == 2 for v in out.values()) else None

    kept = _eventually(running_apps, 120, "the apps running on every node", pool)
    uids = {p["metadata"]["name"]: p["metadata"]["uid"]
            for p in pool.api.get(f"/api/v1/namespaces/{APPS}/pods")["items"]}  # fmt: skip
    # What only YurtHub ever sees: flanneld's reads (a cached component that never runs here).
    for node in nodes.values():
        assert _get(f"{node.proxy_url}/api/v1/nodes/{node.name}", FLANNELD_UA)[0] == 200
        status, doc = _get(node_pods(node), FLANNELD_UA)
        names = {p["metadata"]["name"] for p in doc["items"]}
        assert status == 200 and {f"app-{node.name}-0", f"app-{node.name}-1"} <= names, names
    versions = {n: _metric_version(node) for n, node in nodes.items()}
    yurthub_version = versions[NODES[0]]
    assert yurthub_version and yurthub_version != "v0.1.0" and len(set(versions.values())) == 1

    watch = rs.ReadinessWatch(pool.api, NODES)
    watch.start()
    pool.watch = rs.RolloutWatch(pool.api, NS, YSS, NODES)
    pool.watch.start()
    manager_log = tmp_path / "manager.log"
    try:
        # roll-c is cut off from the cloud before the rollout starts, and stays so while the
        # others are migrated (it goes NotReady: a rollout must not wait for it).
        cut_at = time.time()
        nodes[CUT].cut()
        # NotReady as the node lifecycle controller marks it once its grace period (50 s)
        # has passed without a word from the node: written now instead of waited for (the
        # controller takes it from there: its taints; its own mark later changes nothing).
        # A status the kubelet had sent just before the cut may land after it: then the
        # controller's own mark is what ends the wait below.
        pool.kubectl("patch", "node", CUT, "--subresource=status", "--type=strategic", "-p",
                     json.dumps({"status": {"conditions": [rs.unknown_ready()]}}))  # fmt: skip
        _eventually(lambda: not rs.ready_of(pool.api.get(f"/api/v1/nodes/{CUT}")), 180,
                    f"{CUT} NotReady", pool)  # fmt: skip

        # The hand-over, as docs/migrating.md says it (its lines run as written).
        started = time.time()
        *kubectl_lines, manager_line, status_line = HANDOVER
        for line in kubectl_lines:
            pool.sh(line)
        got = pool.yss()
        assert got["spec"]["template"] == rs.edgehub_template(POOL)
        assert got["metadata"]["annotations"]["edgehub.io/owner"] == "edgehub"
        assert (
            pool.api.get(f"/apis/apps/v1/namespaces/{NS}/deployments/yurt-manager")["spec"][
                "replicas"
            ]
            == 0
        )
        # The manager with the line's flags, plus this test's own: its ports, no election, the
        # yurtstaticset controller alone (the others need what this cluster lacks), and a node's
        # wait before a halt long enough for a machine loaded by other work (the halt has tests
        # of its own; here a slow node must not stop the rollout).
        pool.manager = processes.Process(
            "manager",
            [EDGEHUB, *shlex.split(manager_line)[1:], "--leader-elect=false",
             "--controllers=yurtstaticset", "--bind-address=127.0.0.1", "--health-port=0",
             "--webhook-port=0", "--rollout-node-ready-timeout=600"],
            manager_log,
            env=pool.env,
            die_with_parent=True,
        )  # fmt: skip
        pool.manager.start()
        digests = {}

        def two_done() -> bool:
            status = pool.yss().get("status") or {}
            return status.get("upgradedNumber") == 2

        _eventually(two_done, 300, "roll-a and roll-b migrated", pool)
        for name in ("roll-a", "roll-b"):
            assert pool.nodes[name].runner.running_image("yurthub.yaml") == rs.EDGEHUB_1  # type: ignore[union-attr]
            digests[name] = _cache_digest(nodes[name])

        # Where it stands, once roll-b's kubelet is seen back: roll-c offline, nothing else to
        # do, and the totals those of `kubectl get yss`.
        seen: list[Any] = []

        def standing() -> dict[str, Any] | None:
            (row,) = json.loads(pool.sh(f"{status_line} --pool {POOL} -o json").stdout)["items"]
            seen[:] = [row["state"]]
            assert not str(row["state"]).startswith("Halted"), row
            return row if row["state"] == "Waiting for offline nodes" else None

        try:
            row = _eventually(standing, 300, "roll-a and roll-b done, roll-c offline", pool)
        except TimeoutError as e:
            raise TimeoutError(f"{e} (the last state: {seen})") from e
        table = pool.sh(status_line).stdout.splitlines()
        assert table[0].split()[:6] == ["NAMESPACE", "YURTSTATICSET", "POOL", "TOTAL",
                                        "UPGRADED", "READY"], table  # fmt: skip
        assert table[1].split()[:9] == [NS, YSS, POOL, "3", "2", str(row["ready"]), "0", "1",
                                        "0"], table  # fmt: skip
        table = pool.kubectl("get", "yss", YSS, "-n", NS, "--no-headers").stdout.split()
        assert [str(row["total"]), str(row["ready"]), str(row["upgraded"])] == table[2:5], (
            row, table,
        )  # fmt: skip
        assert (row["total"], row["upgraded"], row["offline"], row["failed"]) == (3, 2, 1, 0)
        assert row["nodes"] == {"roll-a": "upgraded", "roll-b": "upgraded", CUT: "offline"}
        assert not any(w for w in pool.api.get(f"/api/v1/namespaces/{NS}/pods")["items"]
                       if w["spec"].get("nodeName") == CUT
                       and w["metadata"]["name"].startswith("yss-upgrade-worker-"))  # fmt: skip

        healed_at = time.time()
        nodes[CUT].heal()
        done = pool.follow("migration YurtHub v1.7.0 -> edgehub 0.1.0", started)
        pool.times.append(f"  {CUT}: link healed -> done {done[CUT] - healed_at:.1f} s "
                          f"(cut for {healed_at - cut_at:.0f} s)")  # fmt: skip
        print(pool.times[-1], flush=True)
        digests[CUT] = _cache_digest(nodes[CUT])
        for name, node in nodes.items():
            assert _metric_version(node) == "v0.1.0", name
            pool.answers_offline(node, edgehub=True)

        # The second edgehub build, rolled out the same way (docs/rollout.md's lines).
        started = time.time()
        for line in UPGRADE:
            pool.sh(line)
        assert pool.yss()["spec"]["template"] == rs.edgehub_template(POOL, rs.EDGEHUB_2)
        pool.follow("upgrade edgehub 0.1.0 -> 0.2.0", started)
        for name, node in nodes.items():
            assert _metric_version(node) == "v0.2.0", name
            pool.answers_offline(node, edgehub=True)

        # Rolled back: to the first build, then the whole pool to YurtHub.
        undo, history, undo_to_yurthub, hand_back, start_yurt_manager = ROLLBACK
        started = time.time()
        said = pool.sh(undo).stdout
        assert f"{NS}/{YSS}: rolling back to revision 2" in said, said
        pool.follow("rollback edgehub 0.2.0 -> 0.1.0", started)
        for name, node in nodes.items():
            assert _metric_version(node) == "v0.1.0", name
            pool.answers_offline(node, edgehub=True)
            # edgehub wrote nothing of YurtHub's (its own database and marker aside).
            assert _cache_digest(node) == digests[name], name

        listed = pool.sh(history).stdout
        assert [line.split()[:2] for line in listed.splitlines()[2:]] == [
            ["1", pool.hashes[rs.YURTHUB_IMAGE]],
            ["3", pool.hashes[rs.EDGEHUB_2]],
            ["4", pool.hashes[rs.EDGEHUB_1]],
        ], listed
        started = time.time()
        said = pool.sh(undo_to_yurthub).stdout
        assert "rolling back to revision 1" in said and rs.YURTHUB_IMAGE in said, said
        pool.follow("rollback edgehub 0.1.0 -> YurtHub v1.7.0", started)
        for name, node in nodes.items():
            assert node.runner.running_image("yurthub.yaml") == rs.YURTHUB_IMAGE  # type: ignore[union-attr]
            assert _metric_version(node) == yurthub_version, name
            pool.answers_offline(node, edgehub=False)
        # Handed back to yurt-manager: edgehub leaves it alone from then on.
        pool.sh(hand_back)
        pool.sh(start_yurt_manager)
        edgenodes.eventually(
            lambda: "yurt-hub: edgehub.io/owner=yurt-manager, left to that owner"
            in manager_log.read_text(),
            60, "the manager leaving yurt-hub to yurt-manager", alive=pool.alive,
        )  # fmt: skip
    finally:
        watch.stop()
        pool.watch.stop()
        if pool.manager is not None:
            pool.manager.stop()
        (tmp_path / "rollout-times.txt").write_text("\n".join(pool.times) + "\n")
        print("\n".join(pool.times), flush=True)

    # kubelet kept every pod; none was evicted or replaced.
    assert running_apps() == kept
    after = {p["metadata"]["name"]: p["metadata"]["uid"]
             for p in pool.api.get(f"/api/v1/namespaces/{APPS}/pods")["items"]}  # fmt: skip
    assert after == uids
    events = pool.api.get(f"/api/v1/namespaces/{APPS}/events")["items"]
    assert not [e for e in events if e.get("reason") == "Evicted"]
    # The cut node's pods were scheduled for deletion when its unreachable taint came (they
    # tolerate it 300 s); the taint manager says only that it cancelled that on its return.
    taints = [e.get("message", "") for e in events if e.get("reason") == "TaintManagerEviction"]
    assert all(m.startswith("Cancelling deletion of Pod ") for m in taints), taints
    # No node NotReady but around its own hub restarts (and roll-c while it was cut).
    assert watch.samples > 0
    for name, periods in watch.periods.items():
        swaps = nodes[name].runner.snapshot()[0]  # type: ignore[union-attr]
        for start, end in periods:
            end = end or time.time()
            if name == CUT and start >= cut_at - 1 and end <= healed_at + 60:
                continue
            assert any(
                start >= s.noticed - 1 and end <= (s.ready or s.noticed) + SLACK for s in swaps
            ), (name, start, end, [(s.noticed, s.ready) for s in swaps])
