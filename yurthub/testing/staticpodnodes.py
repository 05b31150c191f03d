"""An edge node whose hub is a static Pod, as on a real OpenYurt node: the hollow kubelet reads
the hub's manifest from its staticPodPath and talks to the apiserver through that hub; the
hub process is started, replaced and stopped by ``staticpods.Runner`` as kubelet would.

    node = staticpodnodes.StaticPodNode(cluster, "edge-a", workdir=d, images=images)
    node.start({"yurthub.yaml": manifest_text})   # returns once the Node is Ready
    node.cut(); node.heal()                      # the link between its hub and the apiserver

Pieces: ``edgehub partition`` between the node and the apiserver (the node's apiserver
address, ``127.0.0.1:6443`` in a manifest, is this partition); the hollow kubelet and
kube-proxy, whose kubeconfig names the node's hub proxy (``127.0.0.1:10261`` on a node, this
node's own port here); the runner. The node's filesystem is ``workdir/host``: YurtHub's
``/var/lib/yurthub`` and ``/etc/kubernetes`` are there, ``/etc/kubernetes/manifests`` is the
hollow kubelet's staticPodPath.

Invariant: ``stop`` ends every process ``start`` began, also after a failed start.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from yurthub.testing import (
    edgenodes,
    hollownodes,
    podcommands,
    processes,
    realcluster,
    staticpods,
)

WELL_KNOWN = (10261, 10267, 10268, 10269)
"""The hub's ports on a node: proxy, hub server, secure proxy, multiplexer."""
APISERVER_PORT = 6443
MANIFESTS = "/etc/kubernetes/manifests"
IMPLICIT_FLAGS = {
    "static-pod-upgrade": (
        "--readyz-url=http://127.0.0.1:10267/v1/readyz",
        "--status-url=http://127.0.0.1:10267/v1/status",
    ),
    "status": ("--server=http://127.0.0.1:10267",),
}
"""Commands whose defaults name the node's well-known hub server (the worker, ``edgehub
status``): made explicit, then remapped to this node's port."""
NODE_PATHS = ("/etc/kubernetes", "/var/lib/yurthub", "/root")
"""What an operator's shell on the node sees of the node's filesystem (``sh``)."""


class StaticPodNode:
    def __init__(
        self,
        cluster: realcluster.RealCluster,
        name: str,
        *,
        workdir: pathlib.Path,
        images: Mapping[str, podcommands.Image],
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.name = name
        self.workdir = workdir
        self.root = workdir / "host"
        self.images = dict(images)
        self.partition_port, self.control_port, *hub_ports = realcluster.free_ports(
            2 + len(WELL_KNOWN)
        )
        self.ports = dict(zip(WELL_KNOWN, hub_ports, strict=True))
        self.ports[APISERVER_PORT] = self.partition_port
        self.hollow = hollownodes.HollowNode(
            cluster.binaries,
            name,
            server=self.proxy_url,
            workdir=workdir / "hollow",
            labels=labels,
            die_with_parent=True,
        )
        self.runner: staticpods.Runner | None = None
        self._partition: processes.Process | None = None

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.ports[10261]}"

    @property
    def serve_url(self) -> str:
        return f"http://127.0.0.1:{self.ports[10267]}"

    @property
    def apiserver_url(self) -> str:
        """The apiserver as this node reaches it (through its partition)."""
        return f"https://127.0.0.1:{self.partition_port}"

    def path(self, node_path: str) -> pathlib.Path:
        """Where the node's ``node_path`` is on this host."""
        return self.root / node_path.lstrip("/")

    def start(
        self, manifests: Mapping[str, str], *, timeout: float = 120.0, wait_ready: bool = True
    ) -> None:
        """``wait_ready=False``: return once everything is started, without waiting for the
        Node to be Ready (``wait_ready`` then; several nodes start side by side)."""
        try:
            self._start(manifests, timeout, wait_ready)
        except BaseException:
            self.stop()
            raise

    def _start(self, manifests: Mapping[str, str], timeout: float, wait_ready: bool) -> None:
        assert self.cluster.ports is not None
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._partition = processes.Process(
            f"partition {self.name}",
            edgenodes.edgehub_argv(
                "partition",
                "--listen", f"127.0.0.1:{self.partition_port}",
                "--upstream", f"127.0.0.1:{self.cluster.ports.apiserver}",
                "--control", f"127.0.0.1:{self.control_port}",
            ),
            self.workdir / "logs" / "partition.log",
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            die_with_parent=True,
        )  # fmt: skip
        self._partition.start()
        self.hollow.start()
        static_pod_path = self.hollow.static_pod_path()
        for name, text in manifests.items():
            (static_pod_path / name).write_text(text)
        self.runner = staticpods.Runner(
            staticpods.NodeHost(
                node=self.name,
                root=self.root,
                static_pod_path=static_pod_path,
                host_paths={MANIFESTS: static_pod_path},
                ports=self.ports,
                images=self.images,
                proxy_url=self.proxy_url,
                kubelet_url=f"http://127.0.0.1:{self.hollow.kubelet_port}",
                serve_url=self.serve_url,
                implicit_flags=IMPLICIT_FLAGS,
            ),
            self.workdir / "pods",
        )
        self.runner.start()
        if wait_ready:
            self.wait_ready(timeout)

    def sh(self, line: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """``line`` run by ``sh`` as an operator on the node runs it: in a private mount
        namespace where ``NODE_PATHS`` are the node's and ``/etc/kubernetes/manifests`` is
        kubelet's staticPodPath."""
        assert self.runner is not None
        plan = [podcommands.Mount(p, self.path(p)) for p in NODE_PATHS]
        plan.append(podcommands.Mount(MANIFESTS, self.runner.host.static_pod_path))
        for m in plan:
            m.source.mkdir(parents=True, exist_ok=True)
        scratch = self.workdir / "scratch-sh"
        scratch.mkdir(parents=True, exist_ok=True)
        script, create = podcommands.mount_script(plan, scratch)
        assert not create, create
        unshare = shutil.which("unshare") or "unshare"
        return subprocess.run(
            [unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script,
             "sh", "/bin/sh", "-c", line],
            capture_output=True, text=True, timeout=timeout, check=False, cwd="/",
        )  # fmt: skip

    def check_alive(self) -> None:
        if self._partition is not None and not self._partition.alive:
            raise self._partition.failure("is not running")
        self.hollow.check_alive()
        if self.runner is not None:
            self.runner.check_alive()

    # -- the cloud's view

    def node(self) -> dict[str, Any]:
        out = self.cluster.kubectl("get", "node", self.name, "-o", "json").stdout
        found: dict[str, Any] = json.loads(out)
        return found

    def ready(self) -> bool:
        for cond in self.node().get("status", {}).get("conditions", []):
            if cond.get("type") == "Ready":
                return bool(cond.get("status") == "True")
        return False

    def wait_ready(self, timeout: float = 120.0) -> None:
        edgenodes.eventually(
            lambda: self.ready(), timeout, f"node {self.name} Ready", alive=self.check_alive
        )

    # -- the link

    def set_mode(self, mode: str) -> None:
        url = f"http://127.0.0.1:{self.control_port}/mode?mode={mode}"
        status, body = edgenodes.http("PUT", url)
        if status != 200:
            raise processes.ProcessError(f"partition refused mode {mode}: {status} {body!r}")

    def cut(self, mode: str = "blackhole") -> None:
        self.set_mode(mode)

    def heal(self) -> None:
        self.set_mode("pass")

    def stop(self) -> None:
        if self.runner is not None:
            self.runner.stop()
        self.hollow.stop()
        if self._partition is not None:
            self._partition.stop()
