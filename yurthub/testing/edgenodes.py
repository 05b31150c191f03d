"""A whole edge node on loopback: a link you can cut, edgehub, and a kubemark hollow node.

    with realcluster.RealCluster(d) as cluster:
        node = edgenodes.EdgeNode(cluster, "edge-1", workdir=d / "edge-1")
        node.start()                 # returns once the Node is Ready in the cloud
        node.cut()                   # blackhole the hub's link to the apiserver
        node.hollow.restart_kubelet()
        node.heal()
        node.stop()

Pieces, each a process with its log under ``workdir/logs`` (hollow node: ``workdir/hollow``):

- ``edgehub partition`` between the hub and the apiserver (``cut``/``heal``/``set_mode``);
- ``edgehub hub`` for the node, holding the node's identity (``system:node:<name>`` in
  ``system:nodes`` and ``openyurt:yurthub``, minted by the cluster's CA), cache in
  ``workdir/cache``;
- ``HollowNode``: kubemark's kubelet and kube-proxy, talking to the hub's HTTP proxy.

Invariant: ``stop`` ends every process ``start`` began, also after a failed start.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from yurthub.cache import entries, keysealing, sealing, verifying
from yurthub.testing import hollownodes, processes, realcluster

T = TypeVar("T")


def edgehub_argv(*args: str) -> list[str]:
    """The installed edgehub, run by this interpreter (no PATH lookup)."""
    return [sys.executable, "-m", "edgehub", *args]


def eventually(
    check: Callable[[], T | None],
    timeout: float,
    what: str,
    *,
    interval: float = 0.5,
    alive: Callable[[], None] | None = None,
) -> T:
    """Call ``check`` until it returns something other than None/False; raise after
    ``timeout`` with ``what`` (and ``alive`` raising if a process died meanwhile)."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        if alive is not None:
            alive()
        try:
            result = check()
        except (OSError, ValueError, KeyError, processes.ProcessError) as e:
            last, result = e, None
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            suffix = f" (last error: {last})" if last else ""
            raise TimeoutError(f"{what} not seen within {timeout:.0f} s{suffix}")
        time.sleep(interval)


def http(method: str, url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as e:
        with e:  # its response holds the connection
            return int(e.code), e.read()


class EdgeNode:
    def __init__(
        self,
        cluster: realcluster.RealCluster,
        name: str,
        *,
        workdir: pathlib.Path,
        hub_args: Sequence[str] = (),
        labels: Mapping[str, str] | None = None,
        proxy: bool = True,
        kubelet: bool = True,
        identity: pathlib.Path | None = None,
        serving_certificate: bool = False,
        die_with_parent: bool = True,
        cache_key_source: str = "",
    ) -> None:
        """``kubelet=False``: a hub alone (no hollow node; ``start`` returns once the hub is
        ready). ``identity``: the hub's kubeconfig instead of the node's own identity.
        ``serving_certificate``: the hub reads that identity as kubelet's
        (``--bootstrap-mode=kubeletcertificate``, ``--root-dir`` under ``workdir``) and so
        requests a serving certificate too (someone must approve its CSR: edgehub manager).
        ``cache_key_source``: the hub's ``--cache-key-source`` (its default, ``auto``, when
        empty); the cache helpers below open the sealed cache with it."""
        self.cluster = cluster
        self.name = name
        self.workdir = workdir
        self._hub_args = list(hub_args)
        self._with_kubelet = kubelet
        self._identity = identity
        self._serving_certificate = serving_certificate
        self._die = die_with_parent
        self._cache_key_source = cache_key_source
        self._hub_argv: list[str] = []
        self.partition_port, self.control_port, self.proxy_port, self.serve_port = (
            realcluster.free_ports(4)
        )
        self.cache_dir = workdir / "cache"
        self.hollow = hollownodes.HollowNode(
            cluster.binaries,
            name,
            server=self.proxy_url,
            workdir=workdir / "hollow",
            labels=labels,
            proxy=proxy,
            die_with_parent=die_with_parent,
        )
        self._partition: processes.Process | None = None
        self._hub: processes.Process | None = None
        self._killed = False

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.proxy_port}"

    @property
    def serve_url(self) -> str:
        return f"http://127.0.0.1:{self.serve_port}"

    @property
    def hub_log(self) -> pathlib.Path:
        return self.workdir / "logs" / "hub.log"

    def start(self, *, wait_ready: bool = True, timeout: float = 90.0) -> None:
        try:
            self._start(wait_ready, timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, wait_ready: bool, timeout: float) -> None:
        assert self.cluster.ports is not None
        self.workdir.mkdir(parents=True, exist_ok=True)
        identity = self._identity or self.cluster.node_kubeconfig(
            self.name, extra_groups=("openyurt:yurthub",)
        )
        self._partition = self._process(
            "partition",
            edgehub_argv(
                "partition",
                "--listen",
                f"127.0.0.1:{self.partition_port}",
                "--upstream",
                f"127.0.0.1:{self.cluster.ports.apiserver}",
                "--control",
                f"127.0.0.1:{self.control_port}",
            ),
        )
        self._partition.start()
        self._hub_argv = edgehub_argv(
            "hub",
            "--server-addr",
            f"https://127.0.0.1:{self.partition_port}",
            "--node-name",
            self.name,
            *(
                (
                    "--bootstrap-mode=kubeletcertificate",
                    f"--kubelet-kubeconfig={identity}",
                    f"--root-dir={self.workdir / 'root'}",
                )
                if self._serving_certificate
                else ("--kubeconfig", str(identity))
            ),
            "--disk-cache-path",
            str(self.cache_dir),
            "--proxy-port",
            str(self.proxy_port),
            "--serve-port",
            str(self.serve_port),
            *(("--cache-key-source", self._cache_key_source) if self._cache_key_source else ()),
            *self._hub_args,
        )
        self._start_hub()
        if not self._with_kubelet:
            return
        self.hollow.start()
        if wait_ready:
            self.wait_ready(timeout)

    def _start_hub(self) -> None:
        self._hub = self._process("hub", self._hub_argv)
        self._killed = False
        self._hub.start()
        eventually(
            lambda: http("GET", f"{self.serve_url}/v1/readyz")[0] == 200,
            30,
            f"hub of {self.name} ready",
            interval=0.2,
            alive=self.check_alive,
        )

    def restart_hub(self) -> None:
        """Stop the hub (SIGTERM) and start it again with the same flags, its cache and root
        dir as it left them; returns once it is ready (offline too: it answers from its
        cache). The hollow node keeps running."""
        if self._hub is not None:
            self._hub.stop()
        self._start_hub()

    def _process(self, component: str, argv: list[str]) -> processes.Process:
        return processes.Process(
            f"{component} {self.name}",
            argv,
            self.workdir / "logs" / f"{component}.log",
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            die_with_parent=self._die,
        )

    def check_alive(self) -> None:
        for proc in (self._partition, self._hub):
            if proc is self._hub and self._killed:
                continue
            if proc is not None and not proc.alive:
                raise proc.failure("is not running")
        if self._with_kubelet:
            self.hollow.check_alive()

    # --- the cloud's view -------------------------------------------------------------

    def node(self) -> dict[str, Any]:
        out = self.cluster.kubectl("get", "node", self.name, "-o", "json").stdout
        node: dict[str, Any] = json.loads(out)
        return node

    def condition(self, kind: str = "Ready") -> str:
        for cond in self.node().get("status", {}).get("conditions", []):
            if cond.get("type") == kind:
                return str(cond.get("status"))
        return ""

    def wait_ready(self, timeout: float = 90.0) -> None:
        eventually(
            lambda: self.condition() == "True",
            timeout,
            f"node {self.name} Ready",
            alive=self.check_alive,
        )

    # --- the link -------------------------------------------------------------------

    def set_mode(self, mode: str) -> None:
        status, body = http("PUT", f"http://127.0.0.1:{self.control_port}/mode?mode={mode}")
        if status != 200:
            raise processes.ProcessError(f"partition refused mode {mode}: {status} {body!r}")

    def cut(self, mode: str = "blackhole") -> None:
        self.set_mode(mode)

    def heal(self) -> None:
        self.set_mode("pass")

    def metrics(self) -> str:
        return http("GET", f"{self.serve_url}/metrics")[1].decode()

    def kill_hub(self) -> None:
        """SIGKILL the hub (a crash); its hollow node keeps running, cut off."""
        if self._hub is not None:
            self._killed = True
            self._hub.kill()

    @property
    def hub_alive(self) -> bool:
        return self._hub is not None and self._hub.alive

    def cloud_healthy(self) -> bool | None:
        """The hub's view of its one apiserver (None before the first probe)."""
        for line in self.metrics().splitlines():
            if line.startswith("node_yurthub_server_healthy_status{"):
                return float(line.rsplit(" ", 1)[1]) == 1.0
        return None

    def wait_cloud(self, healthy: bool, timeout: float = 40.0) -> None:
        eventually(
            lambda: self.cloud_healthy() is healthy,
            timeout,
            f"hub of {self.name} seeing the cloud {'healthy' if healthy else 'unhealthy'}",
            alive=self.check_alive,
        )

    # --- the kubelet's view ---------------------------------------------------------

    def running_pods(self) -> dict[str, str] | None:
        """``namespace/name -> uid`` of the pods the hollow kubelet's runtime runs (its
        ``/runningpods/`` debug endpoint), or None when the kubelet does not answer."""
        return self.hollow.running_pods()

    # --- the hub's cache -----------------------------------------------------------------

    def _sealer(self) -> sealing.Sealer:
        """What opens the cache's entries: its key source's data keys (``PLAIN`` for a
        plaintext cache)."""
        source = keysealing.parse_source(self._cache_key_source or "auto")
        return keysealing.read_sealer(self.cache_dir, source, os.environ)

    def cached(self, prefix: str) -> dict[str, str]:
        """``key -> resourceVersion`` of the objects cached under ``prefix`` (e.g.
        ``kubelet/pods.v1.core/ns/``), read-only beside the running hub; lists excluded."""
        sealer = self._sealer()
        con = verifying.connect(self.cache_dir)
        try:
            return {
                row.key: entries.decode_header(sealer.unseal(row.key, row.value)).resource_version
                for row in verifying.rows(con, prefix)
                if row.kind == "object" and row.value is not None
            }
        finally:
            con.close()

    def cached_body(self, key: str) -> bytes | None:
        """The body the hub's cache holds under ``key`` as stored (JSON, or protobuf in its
        ``k8s\\x00`` envelope)."""
        sealer = self._sealer()
        con = verifying.connect(self.cache_dir)
        try:
            for row in verifying.rows(con, key):
                if row.key == key and row.kind == "object" and row.value is not None:
                    return sealer.body(row.key, row.value)
            return None
        finally:
            con.close()

    def cached_object(self, key: str) -> dict[str, Any] | None:
        """The object the hub's cache holds under ``key`` (e.g. ``kubelet/nodes.v1.core/n``), as
        JSON (what it stored as protobuf converted)."""
        body = self.cached_body(key)
        if body is None:
            return None
        found: dict[str, Any] = json.loads(verifying.as_json(body))
        return found

    def cached_lists(self, prefix: str) -> dict[str, str]:
        """``list key -> resourceVersion`` of the list records under ``prefix``: the lists the
        hub saw whole and can answer offline."""
        sealer = self._sealer()
        con = verifying.connect(self.cache_dir)
        try:
            return {
                row.key: entries.decode_list(sealer.unseal(row.key, row.value)).resource_version
                for row in verifying.rows(con, prefix)
                if row.kind == "list" and row.value is not None
            }
        finally:
            con.close()

    def stop(self) -> None:
        if self._with_kubelet:
            self.hollow.stop()
        for proc in (self._hub, self._partition):
            if proc is not None:
                proc.stop()
