"""Pool scope on the real control plane: three edge nodes of one NodePool (hubs and kubemark
hollow kubelet + kube-proxy), ``edgehub manager``'s hub-leader controllers with the manifests'
ServiceAccount and roles.

- The manager elects a leader (a Ready node with an InternalIP) and writes
  ``leader-hub-pool-e2e``; the followers read from the leader, and kube-apiserver's own metrics
  (``apiserver_longrunning_requests``) show one services watch and one endpointslices watch
  more for the whole pool, where every kubelet and kube-proxy would hold their own.
- A Service created in the cloud reaches a kube-proxy-like watch on every hub over the watches
  already open: no follower lists the leader anew, the pool keeps one apiserver watch per
  resource, and the followers read it from the leader.
- The leader's hub killed (SIGKILL): followers are served again on the same client watches.
- The leader's node NotReady while the others are Ready: once the manager's grace is over it
  elects another, followers follow it. The grace is ``REPLACE_AFTER`` here, given to the
  manager with its hidden ``--hub-leader-replace-after`` (``hubleaderelecting.REPLACE_AFTER``,
  30 s, by default; the grace's rules are table-tested in test_managers_hubleaders).
- The cloud cut for the whole pool: every hub answers from its cache.

The nodes are named after their addresses (``127.0.0.21``...): kubelet then reports that
address as the node's InternalIP (an IP given as the hostname is used as it is), so the
leaders the manager elects are loopback addresses, each hub's multiplexer port its own. The
hubs use the node's identity as kubelet's (``--bootstrap-mode=kubeletcertificate``) and request
their serving certificates, which the manager's ``csrapprover`` approves and the real
controller-manager signs: followers talk HTTPS to their leader with the node's client
certificate, and check the leader's serving certificate against the cluster CA.

A node is made NotReady by writing the condition the node lifecycle controller would write
after its grace period (50 s; the test bed's controller-manager keeps its defaults).

How fast things arrive is printed, not asserted (``bench/`` measures it); waits have deadlines
far beyond what the steps take.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import cluster_support as support
import pytest

from yurthub.testing import edgenodes, realcluster

pytestmark = pytest.mark.slow

POOL = "pool-e2e"
NAMES = ("127.0.0.21", "127.0.0.22", "127.0.0.23")
KUBE_PROXY = "kube-proxy/v1.37.2 (linux/amd64) kubernetes/abcdef0"
KUBELET = "kubelet/v1.37.2 (linux/amd64) kubernetes/abcdef0"
REPLACE_AFTER = 5  # seconds the manager waits before it replaces a NotReady leader


def apiserver_watches(cluster: realcluster.RealCluster) -> dict[str, float]:
    """kube-apiserver's own count of WATCH requests open on services and endpointslices
    (``apiserver_longrunning_requests``, summed over scopes)."""
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    out = {}
    for resource in ("services", "endpointslices"):
        total = 0.0
        for line in text.splitlines():
            if (
                line.startswith("apiserver_longrunning_requests{")
                and f'resource="{resource}"' in line
                and 'verb="WATCH"' in line
            ):
                total += float(line.rsplit(" ", 1)[1])
        out[resource] = total
    return out


def metric(node: edgenodes.EdgeNode, prefix: str) -> float:
    for line in node.metrics().splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def source(node: edgenodes.EdgeNode, resource: str = "/v1/services") -> str:
    """Where the hub's multiplexer holds its upstream watch now: leader, cloud or ''."""
    for src in ("leader", "cloud"):
        if (
            metric(
                node,
                f'node_yurthub_multiplexer_upstream_watches{{resource="{resource}",source="{src}"}}',
            )
            >= 1
        ):
            return src
    return ""


def port_status(
    cluster: realcluster.RealCluster,
    tmp_path: Path,
    url: str,
    who: tuple[str, tuple[str, ...]] | None,
) -> int:
    """The status a GET of the multiplexer port answers, with ``who``'s client certificate."""
    context = ssl.create_default_context(cadata=cluster.ca_pem.decode())
    if who is not None:
        cert, key = cluster.issue_identity(who[0], who[1])
        pem = tmp_path / "client.pem"
        pem.write_bytes(cert + key)
        context.load_cert_chain(str(pem))
    request = urllib.request.Request(url, headers={"User-Agent": "multiplexer-proxy-x"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        with e:  # its response holds the connection
            return int(e.code)


def served_lists(node: edgenodes.EdgeNode) -> float:
    """The lists of services ``node``'s multiplexer answered (its own clients and, on a leader,
    its followers)."""
    prefix = "node_yurthub_multiplexer_served_total"
    return metric(node, prefix + '{resource="/v1/services",verb="list"}')


def upstream_bytes(node: edgenodes.EdgeNode, src: str) -> float:
    return metric(
        node,
        f'node_yurthub_multiplexer_upstream_bytes_total{{resource="/v1/services",source="{src}"}}',
    )


def configmap_leaders(cluster: realcluster.RealCluster) -> str:
    found = cluster.kubectl(
        "get", "configmap", f"leader-hub-{POOL}", "-n", "kube-system", "-o", "json", check=False
    )
    if found.returncode != 0:
        return ""
    return str(json.loads(found.stdout).get("data", {}).get("leaders", ""))


def service(name: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"ports": [{"port": 80}]},
        }
    )


async def arrival(
    urls: list[str], create: Any, name: str, within: float, *, from_start: bool = False
) -> list[float]:
    """Seconds until ``name`` shows up on a kube-proxy-like watch of each hub after
    ``create()`` returns (``from_start``: after it was called)."""
    async with aiohttp.ClientSession() as session:
        streams = []
        for url in urls:
            resp = await session.get(
                f"{url}/api/v1/services",
                params={"watch": "true", "timeoutSeconds": "120"},
                headers={"User-Agent": KUBE_PROXY, "Accept": "application/json"},
                timeout=aiohttp.ClientTimeout(total=None),
            )
            assert resp.status == 200, await resp.text()
            streams.append(resp)
        called = time.monotonic()
        await asyncio.to_thread(create)
        created = called if from_start else time.monotonic()

        async def seen(resp: aiohttp.ClientResponse) -> float:
            async with asyncio.timeout(within):
                while True:
                    line = await resp.content.readline()
                    assert line, "the watch ended"
                    event = json.loads(line)
                    if (
                        event["type"] in ("ADDED", "MODIFIED")
                        and event["object"]["metadata"]["name"] == name
                    ):
                        return time.monotonic() - created

        try:
            return list(await asyncio.gather(*(seen(r) for r in streams)))
        finally:
            for resp in streams:
                resp.close()


def test_pool_scope_on_the_real_cluster(
    real_cluster: realcluster.RealCluster, hub_rbac: None, tmp_path: Path
) -> None:
    cluster = real_cluster
    baseline = apiserver_watches(cluster)
    pool = support.hub_pool(
        cluster, tmp_path, POOL, NAMES, [f"--hub-leader-replace-after={REPLACE_AFTER}"]
    )
    try:
        with pool as (nodes, port):
            for node in nodes:
                node.wait_ready()
                assert node.node()["status"]["addresses"][0] == {
                    "type": "InternalIP",
                    "address": node.name,
                }

            # The manager elects one leader; the ConfigMap names it; the others follow it.
            (leader_name,) = edgenodes.eventually(
                lambda: support.pool_leaders(cluster, POOL) or None, 60, "a leader"
            )
            edgenodes.eventually(
                lambda: configmap_leaders(cluster) == f"{leader_name}/{leader_name}",
                30,
                "leader-hub ConfigMap",
            )
            leader = next(n for n in nodes if n.name == leader_name)
            followers = [n for n in nodes if n is not leader]
            for node in followers:
                for resource in ("/v1/services", "discovery.k8s.io/v1/endpointslices"):
                    edgenodes.eventually(
                        lambda n=node, r=resource: source(n, r) == "leader",
                        30,
                        f"{node.name} following",
                    )
            assert source(leader) == "cloud"
            # The leader reads the cloud as kube-proxy would, in protobuf, cached as received.
            key = f"multiplexer-proxy-{leader.name}/services.v1.core/default/kubernetes"
            stored = edgenodes.eventually(lambda: leader.cached_body(key), 30, "the leader's cache")
            assert stored.startswith(b"k8s\x00"), stored[:40]

            # One services watch and one endpointslices watch for the whole pool.
            seen: list[dict[str, float]] = []

            def pool_watches() -> dict[str, float] | None:
                now = apiserver_watches(cluster)
                delta = {k: now[k] - baseline[k] for k in now}
                seen.append(delta)
                return delta if all(v == 1 for v in delta.values()) else None

            edgenodes.eventually(pool_watches, 30, f"one watch per resource (seen {seen[-3:]})")
            for node in nodes:  # kubelet and kube-proxy were answered by the multiplexer
                assert (
                    metric(
                        node,
                        'node_yurthub_multiplexer_served_total{resource="/v1/services",verb="watch"}',
                    )
                    >= 2
                )
                assert (
                    metric(
                        node,
                        'node_yurthub_multiplexer_served_total{resource="discovery.k8s.io/v1/endpointslices",verb="watch"}',
                    )
                    >= 1
                )

            # The leader's port: HTTPS with its serving certificate (the cluster CA's, for its IP);
            # a node's client certificate is required, and only pool-scoped list/watch answered.
            url = f"https://{leader_name}:{port}/api/v1/services"
            assert port_status(cluster, tmp_path, url, None) == 401
            assert port_status(cluster, tmp_path, url, ("someone", ())) == 403
            assert port_status(cluster, tmp_path, url, ("system:node:x", ("system:nodes",))) == 200
            pods = f"https://{leader_name}:{port}/api/v1/pods"
            assert port_status(cluster, tmp_path, pods, ("system:node:x", ("system:nodes",))) == 403

            # A Service created in the cloud reaches every hub's kube-proxy as an event of the
            # watches already open: the leader's one upstream watch carries it, the followers'
            # watches on the leader pass it on; nothing lists or watches anew to get it.
            urls = [n.proxy_url for n in nodes]
            leader_served = served_lists(leader)
            from_leader = {n.name: upstream_bytes(n, "leader") for n in followers}
            took = asyncio.run(
                arrival(
                    urls,
                    lambda: cluster.kubectl("apply", "-f", "-", input=service("pool-e2e-a")),
                    "pool-e2e-a",
                    120,
                )
            )
            # No relist: a follower that fell back to listing (the slow path) shows on the leader.
            # (Watches may be re-opened from where they were when they time out: that is normal.)
            assert served_lists(leader) == leader_served, (leader_served, served_lists(leader))
            edgenodes.eventually(
                pool_watches, 30, f"still one watch per resource (seen {seen[-3:]})"
            )
            for node in followers:
                assert source(node) == "leader"
                assert upstream_bytes(node, "leader") > from_leader[node.name], node.name
            print(
                f"new Service on each hub's kube-proxy watch after {[round(t, 3) for t in took]} s"
            )

            # The leader's hub dies: followers are served again within 10 s, on the same watches.
            follower_urls = [n.proxy_url for n in followers]

            def crash_and_create() -> None:
                leader.kill_hub()
                cluster.kubectl("apply", "-f", "-", input=service("pool-e2e-b"))

            took = asyncio.run(
                arrival(follower_urls, crash_and_create, "pool-e2e-b", 120, from_start=True)
            )
            print(f"leader killed: followers served again after {[round(t, 3) for t in took]} s")
            for node in followers:
                edgenodes.eventually(
                    lambda n=node: source(n) == "cloud", 10, f"{node.name} on the cloud"
                )

            # The leader's node goes NotReady (as the node lifecycle controller writes it) while the
            # others are Ready: a problem of its own, so once the manager's grace is over another
            # leader is elected and followed.
            marked = time.monotonic()
            now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            not_ready = {
                "type": "Ready",
                "status": "False",
                "reason": "NodeStatusUnknown",
                "lastTransitionTime": now,
            }
            cluster.kubectl(
                "patch",
                "node",
                leader.name,
                "--subresource=status",
                "--type=strategic",
                "-p",
                json.dumps({"status": {"conditions": [not_ready]}}),
            )
            (new_leader,) = edgenodes.eventually(
                lambda: (
                    [n for n in support.pool_leaders(cluster, POOL) if n != leader.name] or None
                ),
                REPLACE_AFTER + 60,
                "a new leader",
            )
            print(
                f"new leader {new_leader} elected {time.monotonic() - marked:.1f} s after NotReady"
            )
            other = next(n for n in followers if n.name != new_leader)
            edgenodes.eventually(lambda: source(other) == "leader", 30, "following the new leader")
            assert source(next(n for n in followers if n.name == new_leader)) == "cloud"
            edgenodes.eventually(
                pool_watches, 30, f"one watch per resource again (seen {seen[-3:]})"
            )

            # The cloud cut for the whole pool: every hub answers from its cache (or the leader).
            for node in followers:
                node.cut()
            for node in followers:
                node.wait_cloud(False)
            for node in followers:
                status, body = edgenodes.http("GET", f"{node.proxy_url}/api/v1/services")
                names = {s["metadata"]["name"] for s in json.loads(body)["items"]}
                assert status == 200 and {"pool-e2e-a", "pool-e2e-b"} <= names

            # The manager did all of it with its own roles: nothing refused, the role for the hubs.
            role: Any = support.get_json(cluster, "clusterrole", "yurt-hub-multiplexer")
            assert {
                "apiGroups": [""],
                "resources": ["services"],
                "verbs": ["list", "watch"],
            } in role["rules"]
            log = (tmp_path / "manager.log").read_text(errors="replace")
            assert "forbidden" not in log.lower(), log[-3000:]
    finally:
        cluster.kubectl(
            "delete", "service", "pool-e2e-a", "pool-e2e-b", "--wait=false", check=False
        )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-x", "-q"]))
