"""edgehub's and the real YurtHub v1.7.0's ``/metrics`` side by side, both in front of the same
apiserver with the same kind of identity and the same few requests driven through each: every
family YurtHub exports, edgehub exports with the same type and label names, and what edgehub
has beyond them is exactly the additions docs/metrics.md lists (families matched by the name
on their TYPE line, as a Prometheus query sees them)."""

from __future__ import annotations

import fnmatch
import pathlib
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import metrics_support
import pytest
import yurthub_support
from cluster_support import REPO

from yurthub.testing import processes, realcluster, yurthubs

EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
NODE = "metrics-node"
GROUPS = ("system:nodes", "openyurt:yurthub")
KUBELET = {
    "User-Agent": "kubelet/v1.37.2 (linux/amd64) kubernetes/metrics",
    "Accept": "application/json",
}
TRAFFIC = re.compile(r"^node_yurthub_proxy_traffic_collector(?:_total)?\{", re.M)
pytestmark = pytest.mark.slow


def wait_for(
    what: str, check: Callable[[], bool], proc: processes.Process, within: float = 120
) -> None:
    deadline = time.monotonic() + within
    while not check():
        if not proc.alive:
            raise proc.failure(f"{proc.name} exited while waiting for {what}")
        if time.monotonic() > deadline:
            raise proc.failure(f"{proc.name}: no {what} in {within} s")
        time.sleep(0.2)


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        with e:  # its response holds the connection
            return e.code, e.read()
    except OSError:
        return 0, b""


def drive(proxy: str) -> None:
    """A few of kubelet's requests: a list, a get (404 is fine), /version."""
    assert get(f"{proxy}/api/v1/namespaces/default/services", KUBELET)[0] == 200
    get(f"{proxy}/api/v1/nodes/{NODE}", KUBELET)
    assert get(f"{proxy}/version", KUBELET)[0] == 200


def scrape(serve: int) -> str:
    return get(f"http://127.0.0.1:{serve}/metrics")[1].decode()


def test_edgehub_exports_every_yurthub_family_and_only_the_documented_additions(
    real_cluster: realcluster.RealCluster, hub_rbac: None, tmp_path: pathlib.Path
) -> None:
    binary = yurthub_support.path()
    cluster = real_cluster
    # YurtHub's filters wait for NodePools and NodeBuckets to list (its readyz says so).
    for crd in ("nodepools.apps.openyurt.io.yaml", "nodebuckets.apps.openyurt.io.yaml"):
        cluster.kubectl("apply", "-f", str(REPO / "manifests" / "crds" / crd))
    cluster.kubectl(
        "wait", "--for", "condition=established", "--timeout", "60s",
        "crd/nodepools.apps.openyurt.io", "crd/nodebuckets.apps.openyurt.io",
    )  # fmt: skip
    hubs: dict[str, tuple[processes.Process, int, int]] = {}
    ports = realcluster.free_ports(6)
    root = yurthubs.lay_out_root(cluster, tmp_path / "yurthub", cluster.url, NODE, GROUPS)
    yurthub_ports = (ports[0], ports[1], ports[2], ports[3])
    hubs["yurthub"] = (
        processes.Process(
            "yurthub",
            yurthubs.argv(str(binary), root, cluster.url, NODE, "metrics-pool", yurthub_ports),
            tmp_path / "yurthub.log",
            die_with_parent=True,
        ),
        ports[0],
        ports[1],
    )
    kubeconfig = cluster.write_kubeconfig(
        tmp_path / "edgehub.kubeconfig", f"system:node:{NODE}", GROUPS
    )
    serve, proxy, secure, mux = (*realcluster.free_ports(4),)
    hubs["edgehub"] = (
        processes.Process(
            "edgehub",
            [
                EDGEHUB, "--log-level", "warning", "hub", "--server-addr", cluster.url,
                "--node-name", NODE, "--kubeconfig", str(kubeconfig),
                "--disk-cache-path", str(tmp_path / "edgehub-cache"), "--serve-port", str(serve),
                "--proxy-port", str(proxy), "--proxy-secure-port", str(secure),
                "--multiplexer-port", str(mux), "--node-ip", "127.0.0.1",
            ],
            tmp_path / "edgehub.log",
            die_with_parent=True,
        ),
        serve,
        proxy,
    )  # fmt: skip
    scraped: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {}
    try:
        for proc, _, _ in hubs.values():
            proc.start()
        for name, (proc, serve_port, proxy_port) in hubs.items():
            ready = f"http://127.0.0.1:{serve_port}/v1/readyz"
            wait_for("readyz", lambda u=ready: get(u)[0] == 200, proc)
            drive(f"http://127.0.0.1:{proxy_port}")
            # The traffic counter is added when the answer's body is closed: wait for it.
            wait_for(
                "proxied bytes counted",
                lambda p=serve_port: TRAFFIC.search(scrape(p)) is not None,
                proc,
            )
            text = scrape(serve_port)
            (tmp_path / f"{name}.metrics").write_text(text)  # for a failure's reader
            scraped[name] = metrics_support.families(text)
    finally:
        for proc, _, _ in hubs.values():
            proc.stop()
    yurthub, edgehub = scraped["yurthub"], scraped["edgehub"]
    runtime = metrics_support.doc_patterns("YurtHub's Go runtime families, not exported")
    additions = metrics_support.doc_table("edgehub's additions")
    ours = metrics_support.doc_table("YurtHub's families")

    def is_runtime(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in runtime)

    different = {
        n: (v, edgehub.get(n))
        for n, v in yurthub.items()
        if not is_runtime(n) and edgehub.get(n) != v
    }
    assert different == {}, "YurtHub's (type, labels) vs edgehub's"
    assert [n for n in edgehub if is_runtime(n)] == []
    assert {n for n in yurthub if not is_runtime(n)} <= set(ours) | set(
        metrics_support.doc_table("Process families, shared")
    ), "a YurtHub family docs/metrics.md does not list"
    extra = {n: v[0] for n, v in edgehub.items() if n not in yurthub and n not in ours}
    assert extra == {n: v[0] for n, v in additions.items()}, "edgehub's additions"
