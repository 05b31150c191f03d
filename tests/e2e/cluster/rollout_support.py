"""The pieces of the fleet rollout test (``test_rollout_real.py``): the hub's static Pod as
OpenYurt ships it and as the migration guide turns it into edgehub's, the image table (what
stands for each image), a reader of the apiserver, and a watcher of Node readiness.

The images (``podcommands.Image``):

* ``openyurt/yurthub:v1.7.0``: the real YurtHub v1.7.0 binary (``make yurthub-bin``);
* ``ghcr.io/edgehub/edgehub:0.1.0``: this checkout's ``edgehub`` run by this interpreter,
  with the ENTRYPOINT and CMD read from the repository's Dockerfile;
* ``ghcr.io/edgehub/edgehub:0.2.0``, **the second edgehub build**: the same code, run with a
  directory first on PYTHONPATH holding ``edgehub-0.2.0.dist-info`` (package metadata
  version 0.2.0), so ``edgehub --version``, ``openyurt_version_info{git_version}`` and the
  manager's User-Agent say 0.2.0. What stands in for a new build is a new version, not new code.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

import yaml

from yurthub.testing import podcommands, realcluster

REPO = pathlib.Path(__file__).resolve().parents[3]
YURTHUB_IMAGE = "openyurt/yurthub:v1.7.0"
EDGEHUB_1 = "ghcr.io/edgehub/edgehub:0.1.0"
EDGEHUB_2 = "ghcr.io/edgehub/edgehub:0.2.0"
HASH = "openyurt.io/static-pod-hash"


def images(yurthub: pathlib.Path, build2: pathlib.Path) -> dict[str, podcommands.Image]:
    """The image table; ``build2``: where the second build's metadata is written."""
    entrypoint, cmd = podcommands.dockerfile_entrypoint((REPO / "Dockerfile").read_text())
    dist = build2 / "edgehub-0.2.0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: edgehub\nVersion: 0.2.0\n")
    edgehub = {"edgehub": (sys.executable, "-m", "edgehub")}
    return {
        YURTHUB_IMAGE: podcommands.Image(commands={"yurthub": (str(yurthub),)}),
        EDGEHUB_1: podcommands.Image(commands=edgehub, entrypoint=entrypoint, cmd=cmd),
        EDGEHUB_2: podcommands.Image(
            commands=edgehub, entrypoint=entrypoint, cmd=cmd, env={"PYTHONPATH": str(build2)}
        ),
    }


def hub_args(pool: str) -> list[str]:
    """YurtHub's flags as ``yurtadm join`` writes them, plus what this test bed needs: every
    port named (each node's is remapped), the node's loopback for its address and no dummy
    interface (no NET_ADMIN on a shared host)."""
    return [
        "--v=2",
        "--bind-address=127.0.0.1",
        "--server-addr=https://127.0.0.1:6443",
        "--node-name=$(NODE_NAME)",
        f"--nodepool-name={pool}",
        "--bootstrap-file=/var/lib/yurthub/bootstrap-hub.conf",
        "--working-mode=edge",
        "--namespace=kube-system",
        "--serve-port=10267",
        "--bind-proxy-address=127.0.0.1",
        "--proxy-port=10261",
        "--proxy-secure-port=10268",
        "--multiplexer-port=10269",
        "--node-ip=127.0.0.1",
        "--enable-dummy-if=false",
    ]


def template(image: str, command: Sequence[str]) -> dict[str, Any]:
    """The hub's Pod template (OpenYurt's yurt-hub: host network, /var/lib/yurthub and
    /etc/kubernetes from the host)."""
    return {
        "metadata": {
            "name": "yurt-hub",
            "namespace": "kube-system",
            "labels": {"k8s-app": "yurt-hub"},
        },
        "spec": {
            "hostNetwork": True,
            "priorityClassName": "system-node-critical",
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "yurt-hub",
                    "image": image,
                    "command": list(command),
                    "env": [
                        {
                            "name": "NODE_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                        }
                    ],
                    "volumeMounts": [
                        {"name": "hub-dir", "mountPath": "/var/lib/yurthub"},
                        {"name": "kubernetes", "mountPath": "/etc/kubernetes"},
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "hub-dir",
                    "hostPath": {"path": "/var/lib/yurthub", "type": "DirectoryOrCreate"},
                },
                {
                    "name": "kubernetes",
                    "hostPath": {"path": "/etc/kubernetes", "type": "Directory"},
                },
            ],
        },
    }


def yurthub_template(pool: str) -> dict[str, Any]:
    return template(YURTHUB_IMAGE, ["yurthub", *hub_args(pool)])


def edgehub_template(pool: str, image: str = EDGEHUB_1) -> dict[str, Any]:
    """The migration guide's rule: the same Pod, the image edgehub's and ``yurthub`` ->
    ``edgehub hub``, every argument as it was."""
    return template(image, ["edgehub", "hub", *hub_args(pool)])


def manifest(tmpl: dict[str, Any], digest: str) -> str:
    """A static Pod manifest of ``tmpl`` with hash annotation ``digest`` (as yurt-manager
    writes it into kubelet's staticPodPath and its ConfigMap)."""
    metadata = {**tmpl["metadata"], "annotations": {HASH: digest}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": tmpl["spec"]}
    return yaml.safe_dump(pod, sort_keys=True)


class Api:
    """GETs of the real apiserver as the admin, without a kubectl process each time."""

    def __init__(self, cluster: realcluster.RealCluster) -> None:
        self.url = cluster.url
        self.ssl: ssl.SSLContext = cluster.admin_ssl_context()

    def get(self, path: str) -> dict[str, Any]:
        request = urllib.request.Request(self.url + path, headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=10, context=self.ssl) as r:
            doc: dict[str, Any] = json.loads(r.read())
        return doc

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            return self.get(path)
        except urllib.error.HTTPError as e:
            e.close()  # its response holds the connection
            if e.code == 404:
                return None
            raise


def unknown_ready() -> dict[str, str]:
    """The Ready condition the node lifecycle controller writes on a node silent for its
    grace period."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "type": "Ready",
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
        "lastTransitionTime": now,
    }


def ready_of(node: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


class ReadinessWatch:
    """Every second, each node's Ready condition; the NotReady periods seen, with times."""

    def __init__(self, api: Api, nodes: Sequence[str]) -> None:
        self.api = api
        self.nodes = list(nodes)
        self.periods: dict[str, list[list[float]]] = {n: [] for n in nodes}
        """node -> [[start, end or 0.0], ...]"""
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="readiness watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                items = self.api.get("/api/v1/nodes")["items"]
            except (OSError, ValueError):
                continue
            now = time.time()
            seen = {i["metadata"]["name"]: ready_of(i) for i in items}
            self.samples += 1
            for name in self.nodes:
                periods = self.periods[name]
                open_period = bool(periods) and periods[-1][1] == 0.0
                if not seen.get(name, False) and not open_period:
                    periods.append([now, 0.0])
                elif seen.get(name, False) and open_period:
                    periods[-1][1] = now


class RolloutWatch:
    """Every half second, the YurtStaticSet's workers and mirror Pods: per template hash and
    node, when its workers were created and when the node became done (its mirror Pod on that
    hash, no worker of that hash left), each time it happens."""

    def __init__(self, api: Api, namespace: str, yss: str, nodes: Sequence[str]) -> None:
        self.api = api
        self.namespace = namespace
        self.yss = yss
        self.nodes = list(nodes)
        self.created: dict[tuple[str, str], list[float]] = {}
        self.done: dict[tuple[str, str], list[float]] = {}
        self.errors = 0
        self._workers: set[str] = set()
        self._state: dict[tuple[str, str], bool] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rollout watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        from kubecontrol import timestamps

        while not self._stop.wait(0.5):
            try:
                pods = self.api.get(f"/api/v1/namespaces/{self.namespace}/pods")["items"]
            except (OSError, ValueError):
                self.errors += 1
                continue
            now = time.time()
            workers: set[tuple[str, str]] = set()
            mirrors: dict[str, str] = {}
            for pod in pods:
                meta = pod["metadata"]
                node = pod["spec"].get("nodeName", "")
                digest = (meta.get("annotations") or {}).get(HASH, "")
                if meta["name"].startswith(f"yss-upgrade-worker-{self.yss}-"):
                    workers.add((digest, node))
                    if meta["uid"] not in self._workers:
                        self._workers.add(meta["uid"])
                        stamp = timestamps.epoch(meta.get("creationTimestamp")) or now
                        self.created.setdefault((digest, node), []).append(stamp)
                elif meta["name"] == f"{self.yss}-{node}":
                    mirrors[node] = digest
            for node in self.nodes:
                for key in {(d, n) for d, n in self._state if n == node} | {
                    (mirrors.get(node, ""), node)
                }:
                    now_done = mirrors.get(node) == key[0] and key not in workers
                    if now_done and not self._state.get(key, False):
                        self.done.setdefault(key, []).append(now)
                    self._state[key] = now_done

    def wait(self, digest: str, after: float, timeout: float, alive: Any) -> dict[str, float]:
        """node -> when it became done on ``digest`` after ``after``, once every node has."""
        deadline = time.monotonic() + timeout
        while True:
            alive()
            done = {}
            for n in self.nodes:
                times = [t for t in self.done.get((digest, n), []) if t >= after]
                if times:
                    done[n] = times[0]
            if len(done) == len(self.nodes):
                return done
            if time.monotonic() > deadline:
                raise TimeoutError(f"hash {digest}: only {sorted(done)} done in {timeout:.0f} s")
            time.sleep(0.5)

    def created_after(self, digest: str, node: str, after: float) -> float | None:
        times = [t for t in self.created.get((digest, node), []) if t >= after - 1]
        return times[0] if times else None


def guide_blocks(path: pathlib.Path) -> dict[str, list[str]]:
    """The ``sh`` blocks of a doc that follow a ``<!-- guide-test: NAME -->`` line, each as its
    command lines (a trailing ``\\`` joins the next line)."""
    blocks: dict[str, list[str]] = {}
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("<!-- guide-test: "):
            continue
        name = line.removeprefix("<!-- guide-test: ").removesuffix(" -->").strip()
        assert lines[i + 1] == "```sh", f"{path}: block {name} is not a ```sh block"
        commands: list[str] = []
        pending = ""
        for text in lines[i + 2 :]:
            if text == "```":
                break
            if text.endswith("\\"):
                pending += text[:-1]
                continue
            commands.append(pending + text)
            pending = ""
        blocks[name] = commands
    return blocks


@contextlib.contextmanager
def yurthub_caches_hollow_nodes(cluster: realcluster.RealCluster) -> Iterator[None]:
    """``kube-system/yurt-hub-cfg`` with ``cache_agents`` naming kubemark's hollow kubelet and
    kube-proxy (YurtHub's documented knob, read only with its label), so that YurtHub caches
    them as it caches a kubelet and hands over on these nodes what it would on real ones; put
    back as it was afterwards."""
    ns = "kube-system"
    before = cluster.kubectl("get", "configmap", "yurt-hub-cfg", "-n", ns, "-o", "json",
                             check=False)  # fmt: skip
    agents = "hollow-kubelet,hollow-proxy"
    old_agents = ""
    if before.returncode == 0:
        old_agents = json.loads(before.stdout).get("data", {}).get("cache_agents", "")
        patch = {"data": {"cache_agents": ",".join(a for a in (old_agents, agents) if a)}}
        cluster.kubectl("patch", "configmap", "yurt-hub-cfg", "-n", ns, "--type=merge",
                        "-p", json.dumps(patch))  # fmt: skip
    else:
        cluster.kubectl("create", "configmap", "yurt-hub-cfg", "-n", ns,
                        f"--from-literal=cache_agents={agents}")  # fmt: skip
        cluster.kubectl("label", "configmap", "yurt-hub-cfg", "-n", ns,
                        "openyurt.io/configmap-name=yurt-hub-cfg")  # fmt: skip
    try:
        yield
    finally:
        if before.returncode == 0:
            restore = {"data": {"cache_agents": old_agents}}
            cluster.kubectl("patch", "configmap", "yurt-hub-cfg", "-n", ns, "--type=merge",
                            "-p", json.dumps(restore), check=False)  # fmt: skip
        else:
            cluster.kubectl("delete", "configmap", "yurt-hub-cfg", "-n", ns, check=False)


YURTADM_MANIFEST = """apiVersion: v1
kind: Pod
metadata:
  labels:
    k8s-app: yurt-hub
  name: yurt-hub
  namespace: kube-system
spec:
  volumes:
  - name: hub-dir
    hostPath:
      path: /var/lib/yurthub
      type: DirectoryOrCreate
  - name: kubernetes
    hostPath:
      path: /etc/kubernetes
      type: Directory
  containers:
  - name: yurt-hub
    image: openyurt/yurthub:v1.7.0
    imagePullPolicy: IfNotPresent
    volumeMounts:
    - name: hub-dir
      mountPath: /var/lib/yurthub
    - name: kubernetes
      mountPath: /etc/kubernetes
    command:
    - yurthub
{args}
    env:
    - name: NODE_NAME
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
  hostNetwork: true
  priorityClassName: system-node-critical
"""
"""A node's ``yurthub.yaml`` laid out as ``yurtadm join`` writes it (not as YAML dumps it)."""


def yurtadm_manifest(pool: str) -> str:
    return YURTADM_MANIFEST.format(args="\n".join(f"    - {a}" for a in hub_args(pool)))
