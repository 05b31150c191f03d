"""kubemark hollow nodes: the real kubelet and kube-proxy code, with a fake container runtime.

``HollowNode(binaries, "edge-1", server=hub_url, workdir=d).start()`` runs ``kubemark
--morph=kubelet`` and ``--morph=proxy`` for node ``edge-1``, both talking to ``server``
(usually an edgehub proxy, plain HTTP on loopback: the hub holds the node's identity, so the
kubeconfig carries no credentials). The hollow kubelet registers its Node, renews its Lease,
patches its status and runs the pods bound to it on kubemark's fake runtime, over client-go
with protobuf, exactly as a kubelet does.

kubemark's components identify as ``hollow-kubelet`` / ``hollow-proxy`` (User-Agent); the hub
treats them as kubelet / kube-proxy (``requestinfo.COMPONENT_ALIASES``).

The kubelet keeps no state between runs (kubemark makes a fresh root directory each start,
``/tmp/hollow-kubelet.*``, whatever TMPDIR says, and its fake runtime a socket
``/tmp/kubelet_remote_*.sock``; ``stop_kubelet`` removes both): a restarted hollow kubelet
learns its pods from the apiserver (or the hub's cache) only, which is what the autonomy tests
need. Its staticPodPath is a directory in there (``static_pod_path`` reads it from the
kubelet's log): the kubelet posts the mirror Pods of the manifests written there, and its fake
runtime runs them, without a process (``staticpods`` runs those).

Dangers: kubemark's kubelet binds its server on 0.0.0.0 (kubemark hard-codes it) at a free
port we pick; its healthz port is kubelet's default 10248 on loopback, and a second hollow
kubelet on the machine only logs that it is taken.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import socket
import time
import urllib.request
from collections.abc import Callable, Mapping

import yaml

from yurthub.testing import k8sbinaries, processes, realcluster

_STATIC_POD_PATH = re.compile(r'"Adding static pod path" path="([^"]+)"')
_ROOT_DIR = re.compile(r"/tmp/hollow-kubelet\.\d+")
_RUNTIME_SOCKET = re.compile(r"kubelet_remote_\d+\.sock")
_LOG_HEAD = 1 << 20
"""Bytes of a kubelet's log read for its root directory (logged in its first seconds)."""


def root_dir(log_head: str) -> pathlib.Path | None:
    """The hollow kubelet's root directory (``/tmp/hollow-kubelet.N``), from the start of its
    log: the staticPodPath's parent. Only a path of that exact form. PURE."""
    found = _STATIC_POD_PATH.search(log_head)
    if found is None:
        return None
    parent = str(pathlib.PurePosixPath(found.group(1)).parent)
    return pathlib.Path(parent) if _ROOT_DIR.fullmatch(parent) else None


def kubelet_root(log: pathlib.Path, start: int) -> pathlib.Path | None:
    """The root directory named by the kubelet whose lines start at byte ``start`` of ``log``
    (a restarted kubelet appends to its predecessor's log, whose root was removed already);
    None when it names none or the log cannot be read."""
    try:
        with log.open("rb") as f:
            f.seek(start)
            head = f.read(_LOG_HEAD).decode(errors="replace")
    except OSError:
        return None
    return root_dir(head)


def remove_stale_runtime_sockets(directory: pathlib.Path = pathlib.Path("/tmp")) -> int:
    """Remove the fake runtime sockets (``kubelet_remote_N.sock``) in ``directory`` nothing
    listens on any more; returns how many. kubemark binds each under a temporary name and
    renames it, and logs neither name, so a stopped kubelet's cannot be told from a running
    one's but by this: a running kubelet's accepts a connection."""
    removed = 0
    for path in directory.glob("kubelet_remote_*.sock"):
        if not _RUNTIME_SOCKET.fullmatch(path.name):
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(1.0)
            try:
                probe.connect(str(path))
                continue  # a kubelet serves on it
            except (ConnectionRefusedError, FileNotFoundError):
                pass
            except OSError:
                continue  # busy, or not ours to judge: left alone
        path.unlink(missing_ok=True)
        removed += 1
    return removed


def hub_kubeconfig(server: str) -> str:
    """A kubeconfig for ``server`` with no credentials (the hub authenticates upstream)."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "hub", "cluster": {"server": server}}],
        "users": [{"name": "node", "user": {}}],
        "contexts": [{"name": "hub", "context": {"cluster": "hub", "user": "node"}}],
        "current-context": "hub",
    }
    return yaml.safe_dump(doc, sort_keys=False)


def kubelet_argv(
    binary: pathlib.Path,
    name: str,
    kubeconfig: pathlib.Path,
    port: int,
    labels: Mapping[str, str],
) -> list[str]:
    argv = [
        str(binary),
        "--morph=kubelet",
        f"--name={name}",
        f"--kubeconfig={kubeconfig}",
        f"--kubelet-port={port}",
        "--kubelet-read-only-port=0",
        "--use-host-image-service=false",
        "--max-pods=110",
        "--v=1",
    ]
    if labels:
        argv.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
    return argv


def proxy_argv(binary: pathlib.Path, name: str, kubeconfig: pathlib.Path) -> list[str]:
    return [
        str(binary),
        "--morph=proxy",
        f"--name={name}",
        f"--kubeconfig={kubeconfig}",
        "--v=1",
    ]


class HollowNode:
    def __init__(
        self,
        binaries: k8sbinaries.Binaries,
        name: str,
        *,
        server: str,
        workdir: pathlib.Path,
        labels: Mapping[str, str] | None = None,
        proxy: bool = True,
        die_with_parent: bool = False,
        kubeconfig: str | None = None,
        port: Callable[[], int] | None = None,
    ) -> None:
        """``kubeconfig``: the kubeconfig's text, when the node talks to ``server`` with
        credentials of its own (no hub: a client certificate); by default none (a hub's plain
        HTTP proxy). ``port``: where the kubelet's server port comes from (by default a free
        ephemeral port, ``realcluster.free_ports``)."""
        self.name = name
        self.workdir = workdir
        self.kubeconfig = workdir / "kubeconfig"
        self._binaries = binaries
        self._server = server
        self._kubeconfig_text = kubeconfig
        self._port = port or (lambda: realcluster.free_ports(1)[0])
        self._labels = dict(labels or {})
        self._with_proxy = proxy
        self._die_with_parent = die_with_parent
        self.kubelet_port = 0
        self._kubelet: processes.Process | None = None
        self._kubelet_log_start = 0
        """Where the running kubelet's lines start in its log (a restart appends to it)."""
        self._proxy: processes.Process | None = None

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.write_text(self._kubeconfig_text or hub_kubeconfig(self._server))
        self.start_kubelet()
        if self._with_proxy:
            self._proxy = self._process(
                "kube-proxy",
                proxy_argv(self._binaries.path("kubemark"), self.name, self.kubeconfig),
            )
            self._proxy.start()

    def start_kubelet(self) -> None:
        if self._kubelet is not None and self._kubelet.alive:
            raise processes.ProcessError(f"the hollow kubelet of {self.name} already runs")
        self.kubelet_port = self._port()
        try:
            self._kubelet_log_start = self.kubelet_log.stat().st_size
        except FileNotFoundError:
            self._kubelet_log_start = 0
        self._kubelet = self._process(
            "kubelet",
            kubelet_argv(
                self._binaries.path("kubemark"),
                self.name,
                self.kubeconfig,
                self.kubelet_port,
                self._labels,
            ),
        )
        self._kubelet.start()

    def stop_kubelet(self) -> None:
        if self._kubelet is not None:
            root = self._kubelet_root()
            self._kubelet.stop()
            if root is not None:
                shutil.rmtree(root, ignore_errors=True)
            remove_stale_runtime_sockets()

    def restart_kubelet(self) -> None:
        self.stop_kubelet()
        self.start_kubelet()

    def running_pods(self) -> dict[str, str] | None:
        """``namespace/name -> uid`` of the pods the kubelet's (fake) runtime runs, from its
        ``/runningpods/`` debug endpoint (kubemark serves it in plain HTTP with kubelet's
        legacy anonymous AlwaysAllow defaults); None when the kubelet does not answer (yet)."""
        if self._kubelet is None or not self._kubelet.alive:
            return None
        url = f"http://127.0.0.1:{self.kubelet_port}/runningpods/"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                doc = json.loads(r.read(8 << 20))
        except (OSError, ValueError) as e:
            realcluster.close_answer(e)
            return None
        pods: dict[str, str] = {}
        for item in doc.get("items") or []:
            meta = item.get("metadata") or {}
            pods[f"{meta.get('namespace')}/{meta.get('name')}"] = str(meta.get("uid") or "")
        return pods

    def static_pod_path(self, timeout: float = 60.0) -> pathlib.Path:
        """The running kubelet's staticPodPath (kubemark picks it at start and logs it)."""
        deadline = time.monotonic() + timeout
        while True:
            if self._kubelet is None or not self._kubelet.alive:
                raise processes.ProcessError(f"the hollow kubelet of {self.name} is not running")
            text = self.kubelet_log.read_text(errors="replace") if self.kubelet_log.exists() else ""
            found = _STATIC_POD_PATH.findall(text)
            if found:
                return pathlib.Path(found[-1])
            if time.monotonic() > deadline:
                raise processes.ProcessError(f"no static pod path in {self.kubelet_log}")
            time.sleep(0.2)

    @property
    def kubelet_log(self) -> pathlib.Path:
        return self.workdir / "logs" / "kubelet.log"

    @property
    def proxy_log(self) -> pathlib.Path:
        return self.workdir / "logs" / "kube-proxy.log"

    def components(self) -> dict[str, processes.Process]:
        """The processes started so far: ``kubelet``, ``kube-proxy``."""
        found = {"kubelet": self._kubelet, "kube-proxy": self._proxy}
        return {name: proc for name, proc in found.items() if proc is not None}

    def metrics(self) -> str | None:
        """The hollow kubelet's ``/metrics`` (client-go's ``rest_client_*`` among them: what
        it asked and was answered), or None when it does not answer."""
        if self._kubelet is None or not self._kubelet.alive:
            return None
        url = f"http://127.0.0.1:{self.kubelet_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                text: str = r.read(32 << 20).decode()
                return text
        except (OSError, ValueError) as e:
            realcluster.close_answer(e)
            return None

    def check_alive(self) -> None:
        """Raise with the log tail if a component that should run has exited."""
        for proc in (self._kubelet, self._proxy):
            if proc is not None and not proc.alive:
                raise proc.failure("is not running")

    def stop(self) -> None:
        if self._proxy is not None:
            self._proxy.stop()
        self.stop_kubelet()

    def _kubelet_root(self) -> pathlib.Path | None:
        """The running kubelet's root directory, named in its part of its log."""
        return kubelet_root(self.kubelet_log, self._kubelet_log_start)

    def _process(self, component: str, argv: list[str]) -> processes.Process:
        tmp = self.workdir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        return processes.Process(
            f"hollow {component} {self.name}",
            argv,
            self.workdir / "logs" / f"{component}.log",
            env=dict(os.environ, TMPDIR=str(tmp)),
            die_with_parent=self._die_with_parent,
        )
