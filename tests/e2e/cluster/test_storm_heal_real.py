"""A pool's links cut and healed at once, on the real control plane: the hub as a good citizen.

Three edge nodes of one NodePool (hubs with the node's identity and serving certificates,
kubemark hollow kubelet + kube-proxy, ``edgehub manager``'s hub-leader controllers), every
link cut long enough for the node lifecycle controller to mark the nodes NotReady, 300
Services and 300 ConfigMaps created meanwhile, then every link healed in the same second.
What the apiserver sees after the heal:

- no relist: every watch (kubelet's, kube-proxy's through the pool, the hubs' own loops)
  resumes from the version it held, which the apiserver still has: no LIST and no streaming
  list (``apiserver_watch_list_duration_seconds``) of the resources the nodes read, and
  nothing in the hubs' ``node_yurthub_cloud_lists_total`` (their own and their clients' lists
  sent to the cloud);
- no failed lease renewal: no 409 and no 504 on a Lease PUT (before: renewals sent into the
  silent link were delivered at the heal, the apiserver logged 504s for their gone client, and
  the next renewal on the stale base was a 409);
- the pool stays whole: the apiserver never holds more Services/EndpointSlices watches than
  before the cut (one each for the pool), followers stay on their leader;
- every node Ready again, quickly: the time from the heal until each hub trusts the cloud
  again (and forwards: the watches it held end, kubelet's resume upstream) and to NodeReady
  is printed (``bench/`` and the fleet bench measure it at
  size; no test asserts a time).
"""

from __future__ import annotations

import collections
import json
import threading
import time
from pathlib import Path

import cluster_support as support
import pytest

from yurthub.testing import edgenodes, realcluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]  # a 60 s cut, NotReady, the heal

POOL = "pool-storm"
NAMES = ("127.0.0.41", "127.0.0.42", "127.0.0.43")
CREATED = 300
NODE_RESOURCES = ("pods", "nodes", "services", "endpointslices", "configmaps", "nodepools")


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """``(labels, value)`` of every sample of ``name`` in a Prometheus text page."""
    out = []
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        head, _, value = line.rpartition(" ")
        labels = dict(
            part.split("=", 1) for part in head[len(name) + 1 : -1].split(",") if "=" in part
        )
        out.append(({k: v.strip('"') for k, v in labels.items()}, float(value)))
    return out


class Apiserver:
    """What kube-apiserver's own metrics say."""

    def __init__(self, cluster: realcluster.RealCluster) -> None:
        self.cluster = cluster

    def page(self) -> str:
        return self.cluster.kubectl("get", "--raw", "/metrics").stdout

    @staticmethod
    def relists(text: str) -> dict[str, float]:
        """Streaming lists so far of the resources the nodes read (how kubelet, kube-proxy and
        the pool's feeders list). Plain LISTs are not told apart by client here (the
        apiserver's own repair loops list Services): the hubs count those they send."""
        out: collections.defaultdict[str, float] = collections.defaultdict(float)
        for labels, value in samples(text, "apiserver_watch_list_duration_seconds_count"):
            if labels.get("resource") in NODE_RESOURCES:
                out[f"watch-list {labels['resource']}"] += value
        return dict(out)

    @staticmethod
    def lease_puts(text: str) -> dict[str, float]:
        out: collections.defaultdict[str, float] = collections.defaultdict(float)
        for labels, value in samples(text, "apiserver_request_total"):
            if labels.get("resource") == "leases" and labels.get("verb") == "PUT":
                out[labels["code"]] += value
        return dict(out)

    @staticmethod
    def pool_watches(text: str) -> int:
        total = 0.0
        for labels, value in samples(text, "apiserver_longrunning_requests"):
            if labels.get("verb") == "WATCH" and labels.get("resource") in (
                "services",
                "endpointslices",
            ):
                total += value
        return int(total)


def hub_total(node: edgenodes.EdgeNode, name: str, **match: str) -> float:
    return sum(
        value
        for labels, value in samples(node.metrics(), name)
        if all(labels.get(k) == v for k, v in match.items())
    )


def lease_put_buckets(node: edgenodes.EdgeNode) -> dict[float, float]:
    """kubelet's Lease PUTs the hub answered, by latency bucket (``le`` -> count so far)."""
    return {
        float(labels["le"]): value
        for labels, value in samples(node.metrics(), "node_yurthub_request_duration_seconds_bucket")
        if labels.get("component") == "kubelet"
        and labels.get("resource") == "leases"
        and labels.get("verb") == "update"
    }


def slowest(before: dict[float, float], after: dict[float, float]) -> tuple[int, float]:
    """(how many, the bucket bound of the slowest) of the observations between two scrapes."""
    grown = {le: after[le] - before.get(le, 0) for le in after}
    count = int(max(grown.values(), default=0))
    bound = min((le for le, n in grown.items() if n >= count), default=float("inf"))
    return count, bound


def source(node: edgenodes.EdgeNode, resource: str) -> str:
    for src in ("leader", "cloud"):
        if (
            hub_total(
                node, "node_yurthub_multiplexer_upstream_watches", resource=resource, source=src
            )
            >= 1
        ):
            return src
    return ""


def sources(nodes: list[edgenodes.EdgeNode]) -> list[tuple[str, str]]:
    return [
        (source(n, "/v1/services"), source(n, "discovery.k8s.io/v1/endpointslices")) for n in nodes
    ]


def create(cluster: realcluster.RealCluster, kind: str, count: int) -> None:
    for start in range(0, count, 100):
        items = []
        for i in range(start, min(start + 100, count)):
            meta = {
                "name": f"storm-{i}",
                "namespace": "default",
                "labels": {"edgehub-test": "storm"},
            }
            if kind == "Service":
                items.append(
                    {"apiVersion": "v1", "kind": kind, "metadata": meta,
                     "spec": {"ports": [{"port": 80}], "clusterIP": "None"}}
                )  # fmt: skip
            else:
                items.append({"apiVersion": "v1", "kind": kind, "metadata": meta, "data": {}})
        doc = {"apiVersion": "v1", "kind": "List", "items": items}
        cluster.kubectl("create", "-f", "-", input=json.dumps(doc))


def test_a_pool_healed_at_once_resumes_renews_and_stays_pooled(
    real_cluster: realcluster.RealCluster, hub_rbac: None, tmp_path: Path
) -> None:
    cluster = real_cluster
    api = Apiserver(cluster)
    try:
        with support.hub_pool(cluster, tmp_path, POOL, NAMES) as (nodes, _port):
            for node in nodes:
                node.wait_ready(120)
            (leader_name,) = edgenodes.eventually(
                lambda: support.pool_leaders(cluster, POOL) or None, 60, "a leader"
            )
            pooled = sorted([("cloud", "cloud"), ("leader", "leader"), ("leader", "leader")])
            edgenodes.eventually(lambda: sorted(sources(nodes)) == pooled, 60, "the pool settled")
            before_cut = api.page()
            steady_watches = api.pool_watches(before_cut)

            # Every link cut; the cloud changes meanwhile; the nodes go NotReady.
            for node in nodes:
                node.cut()
            for node in nodes:
                node.wait_cloud(False, 60)
            create(cluster, "Service", CREATED)
            create(cluster, "ConfigMap", CREATED)
            for node in nodes:
                edgenodes.eventually(
                    lambda n=node: n.condition() == "Unknown", 120, f"{node.name} NotReady"
                )

            # Healed in the same second.
            before = api.page()
            leases_before = {n.name: lease_put_buckets(n) for n in nodes}
            lists_before = {n.name: hub_total(n, "node_yurthub_cloud_lists_total") for n in nodes}
            for node in nodes:
                node.heal()
            healed = time.monotonic()
            forwarded: dict[str, float] = {}
            ready: dict[str, float] = {}
            watch_counts: list[int] = []
            source_seen: list[list[tuple[str, str]]] = []
            done = threading.Event()

            def watch_the_hubs() -> None:
                # The moment each hub trusts the cloud again is the moment it forwards again: the
                # watches it held end and kubelet's and kube-proxy's resume upstream at once.
                while not done.is_set():
                    for n in nodes:
                        if n.name not in forwarded and n.cloud_healthy():
                            forwarded[n.name] = time.monotonic() - healed
                    time.sleep(0.1)

            poller = threading.Thread(target=watch_the_hubs, name="hub-poller", daemon=True)
            poller.start()
            try:

                def all_ready() -> bool:
                    watch_counts.append(api.pool_watches(api.page()))
                    source_seen.append(sources(nodes))
                    for n in nodes:
                        if n.name not in ready and n.condition() == "True":
                            ready[n.name] = time.monotonic() - healed
                    return len(ready) == len(nodes)

                edgenodes.eventually(all_ready, 90, "every node Ready after the heal", interval=0.3)
                # A while longer: late relists or pool changes would show now.
                settle = time.monotonic() + 20
                while time.monotonic() < settle:
                    watch_counts.append(api.pool_watches(api.page()))
                    source_seen.append(sources(nodes))
                    time.sleep(0.5)
            finally:
                done.set()
                poller.join(5)
            after = api.page()
            lease_latency = {
                n.name: slowest(leases_before[n.name], lease_put_buckets(n)) for n in nodes
            }
            print(f"leader {leader_name}; heal -> the hub forwards again (s):",
                  {k: round(v, 1) for k, v in sorted(forwarded.items())})  # fmt: skip
            print("heal -> NodeReady (s):", {k: round(v, 1) for k, v in sorted(ready.items())})

            relists_before, relists_after = api.relists(before), api.relists(after)
            relisted = {k: v - relists_before.get(k, 0) for k, v in relists_after.items()}
            hub_lists = {
                n.name: hub_total(n, "node_yurthub_cloud_lists_total") - lists_before[n.name]
                for n in nodes
            }
            puts_before, puts_after = api.lease_puts(before), api.lease_puts(after)
            puts = {k: v - puts_before.get(k, 0) for k, v in puts_after.items()}
            followers = [i for i, n in enumerate(nodes) if n.name != leader_name]
            on_the_cloud = [
                seen for seen in source_seen if any("cloud" in seen[i] for i in followers)
            ]
            print("apiserver streaming lists after the heal:", relisted)
            print("lists the hubs sent to the cloud after the heal:", hub_lists)
            print("Lease PUTs after the heal by code:", puts)
            print(
                "kubelet's Lease PUTs through the hub after the heal (count, slowest <= s):",
                lease_latency,
            )
            print(
                f"Services+EndpointSlices watches after the heal: {max(watch_counts)} (steady "
                f"{steady_watches}); followers seen on the cloud {len(on_the_cloud)} times"
            )

            # No relist: nothing listed again, by the hubs or through them (the hubs count every
            # list and streaming list they send to the cloud, their own and kubelet's and
            # kube-proxy's). The apiserver-wide count above is context only: the control plane's
            # own informers (the controller-manager's) may relist after this many writes.
            assert all(v == 0 for v in hub_lists.values()), hub_lists
            # No failed lease renewal.
            assert puts.get("409", 0) == 0 and puts.get("504", 0) == 0, puts
            assert puts.get("200", 0) >= len(nodes)
            # The pool stayed whole: never more watches than before the cut, followers on their
            # leader throughout.
            assert max(watch_counts) <= steady_watches, watch_counts
            assert not on_the_cloud, on_the_cloud[:3]
            assert sorted(source_seen[-1]) == pooled, source_seen[-1]
    finally:
        cluster.kubectl(
            "delete", "services,configmaps", "-n", "default", "-l", "edgehub-test=storm",
            "--wait=false", check=False,
        )  # fmt: skip
