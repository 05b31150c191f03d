"""The response filters in the assembled hub, against the simulated apiserver, over real HTTP."""

from __future__ import annotations

import asyncio
import pathlib

from filter_edge import (
    DISCARD,
    HUB_IP,
    KUBE_PROXY,
    KUBECTL,
    KUBELET,
    annotate,
    by_name,
    filtered_edge,
    nodes_of,
    set_pool,
    web_slice,
)

from yurthub.testing import partition, simapiserver

POOL_TOPOLOGY = {"openyurt.io/topologyKeys": "openyurt.io/nodepool"}
SLICES = "/apis/discovery.k8s.io/v1/endpointslices"


def pool_topology_on_web(sim: simapiserver.SimApiserver) -> None:
    annotate(sim, "web", POOL_TOPOLOGY)


async def test_kubelet_sees_the_kubernetes_service_at_the_hub(tmp_path: pathlib.Path) -> None:
    async with filtered_edge(tmp_path) as edge:
        services = by_name((await edge.get("/api/v1/services", ua=KUBELET))["items"])
        spec = services["kubernetes"]["spec"]
        assert spec["clusterIP"] == HUB_IP and spec["clusterIPs"] == [HUB_IP]
        assert [p["port"] for p in spec["ports"] if p["name"] == "https"] == [10268]
        # Not for other clients, and the hub's own informer saw the original.
        direct = by_name((await edge.get("/api/v1/services", ua=KUBECTL))["items"])
        assert direct["kubernetes"]["spec"]["clusterIP"] == "10.96.0.1"
        # Offline from the cache, the same answer (the cache stored what the cloud sent).
        await edge.cut()
        offline = by_name((await edge.get("/api/v1/services", ua=KUBELET))["items"])
        assert offline["kubernetes"]["spec"]["clusterIP"] == HUB_IP
        assert offline["web"] == services["web"]


async def test_kube_proxy_sees_its_pool_endpoints_live(tmp_path: pathlib.Path) -> None:
    async with filtered_edge(tmp_path, before_start=pool_topology_on_web) as edge:
        listed = await edge.get(SLICES, ua=KUBE_PROXY)
        assert (
            listed["kind"] == "EndpointSliceList" and listed["apiVersion"] == "discovery.k8s.io/v1"
        )
        slices = by_name(listed["items"])
        web = web_slice(edge.sim)
        assert nodes_of(web) == ["cloud-node-1", "edge-node-1", "edge-node-2"]
        assert nodes_of(slices[web["metadata"]["name"]]) == ["edge-node-1", "edge-node-2"]
        # forwardkubesvctraffic: the apiservers' slice is the hub.
        kube = slices["kubernetes"]["endpoints"]
        assert [e["addresses"] for e in kube] == [[HUB_IP]]
        async with edge.watch(
            SLICES, ua=KUBE_PROXY, resourceVersion=listed["metadata"]["resourceVersion"]
        ) as events:
            # The cloud pod moves to edge-node-2: kube-proxy on edge-node-1 now sees it.
            moved = web_slice(edge.sim)
            for e in moved["endpoints"]:
                if e["nodeName"] == "cloud-node-1":
                    e["nodeName"] = "edge-node-2"
            edge.sim.state.update(moved)
            event = await events.until(
                lambda ev: ev["object"]["metadata"]["name"] == web["metadata"]["name"]
            )
            assert event["type"] == "MODIFIED"
            assert nodes_of(event["object"]) == ["edge-node-1", "edge-node-2", "edge-node-2"]
            # Both edge pods move to the cloud: an empty slice, not a vanished one.
            moved = web_slice(edge.sim)
            for e in moved["endpoints"]:
                e["nodeName"] = "cloud-node-1"
            edge.sim.state.update(moved)
            event = await events.until(
                lambda ev: ev["object"]["metadata"]["name"] == web["metadata"]["name"]
            )
            assert event["type"] == "MODIFIED" and event["object"]["endpoints"] == []
            # The pool grows (NodePool status): the next change of the slice shows it.
            grown = ["edge-node-1", "edge-node-2", "cloud-node-1"]
            set_pool(edge.sim, "edge-pool", grown)
            assert edge.node.filters is not None
            filter_inputs = edge.node.filters.inputs
            async with asyncio.timeout(10):  # the hub's own watch of NodePools has seen it
                while filter_inputs.pool_nodes("edge-pool") != frozenset(grown):
                    await asyncio.sleep(0.02)
            moved = web_slice(edge.sim)
            moved["metadata"].setdefault("annotations", {})["touch"] = "1"
            edge.sim.state.update(moved)
            event = await events.until(
                lambda ev: ev["object"]["metadata"]["name"] == web["metadata"]["name"]
            )
            assert nodes_of(event["object"]) == ["cloud-node-1"] * 3


async def test_a_discarded_load_balancer_never_reaches_kube_proxy(tmp_path: pathlib.Path) -> None:
    lb = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "cloud-lb", "namespace": "default", "annotations": DISCARD},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}], "selector": {"app": "web"}},
    }
    async with filtered_edge(tmp_path) as edge:
        listed = await edge.get("/api/v1/services", ua=KUBE_PROXY)
        async with edge.watch(
            "/api/v1/services", ua=KUBE_PROXY, resourceVersion=listed["metadata"]["resourceVersion"]
        ) as events:
            edge.sim.state.create(lb)
            event = await events.until(lambda ev: ev["object"]["metadata"]["name"] == "cloud-lb")
            # YurtHub's rule: a dropped object becomes DELETED carrying it, so a client that
            # had it forgets it; one that never had it (kube-proxy here) ignores the event.
            assert event["type"] == "DELETED"
            assert event["object"]["metadata"]["annotations"] == DISCARD
        names = {
            s["metadata"]["name"]
            for s in (await edge.get("/api/v1/services", ua=KUBE_PROXY))["items"]
        }
        assert "cloud-lb" not in names and "web" in names
        assert "cloud-lb" in {
            s["metadata"]["name"] for s in (await edge.get("/api/v1/services", ua=KUBECTL))["items"]
        }
        await edge.cut()
        offline = (await edge.get("/api/v1/services", ua=KUBE_PROXY))["items"]
        assert "cloud-lb" not in {s["metadata"]["name"] for s in offline}
        # A streaming list offline (client-go's WatchListClient): the initial events are the
        # cached list, filtered; a dropped object is simply not among them.
        async with edge.watch(
            "/api/v1/services",
            ua=KUBE_PROXY,
            sendInitialEvents="true",
            allowWatchBookmarks="true",
            resourceVersionMatch="NotOlderThan",
        ) as events:
            initial = []
            while (event := await events.next())["type"] != "BOOKMARK":
                initial.append(event["object"]["metadata"]["name"])
            assert "web" in initial and "cloud-lb" not in initial
        metrics = await edge.metrics()
        assert (
            'node_yurthub_filter_objects_total{filter="discardcloudservice",outcome="dropped"}'
            in metrics
        )
        assert 'node_yurthub_filter_requests_total{filter="discardcloudservice"}' in metrics


async def test_yurt_hub_cfg_adds_components_live(tmp_path: pathlib.Path) -> None:
    cilium = "cilium-agent/v1.16"
    cfg = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "yurt-hub-cfg",
            "namespace": "kube-system",
            "labels": {"openyurt.io/configmap-name": "yurt-hub-cfg"},
        },
        "data": {"servicetopology": "cilium-agent", "masterservice": "cilium-agent"},
    }
    async with filtered_edge(tmp_path, before_start=pool_topology_on_web) as edge:
        name = web_slice(edge.sim)["metadata"]["name"]

        async def web_nodes() -> list[str]:
            return nodes_of(by_name((await edge.get(SLICES, ua=cilium))["items"])[name])

        assert len(await web_nodes()) == 3
        edge.sim.state.create(cfg)
        async with asyncio.timeout(5):
            while len(await web_nodes()) != 2:
                await asyncio.sleep(0.05)
        services = by_name((await edge.get("/api/v1/services", ua=cilium))["items"])
        assert services["kubernetes"]["spec"]["clusterIP"] == HUB_IP
        edge.sim.state.delete("configmaps", "kube-system", "yurt-hub-cfg")
        async with asyncio.timeout(5):
            while len(await web_nodes()) != 3:
                await asyncio.sleep(0.05)


async def test_inputs_come_back_from_the_cache_after_an_offline_restart(
    tmp_path: pathlib.Path,
) -> None:
    async with filtered_edge(tmp_path, before_start=pool_topology_on_web) as edge:
        name = web_slice(edge.sim)["metadata"]["name"]
        online = by_name((await edge.get(SLICES, ua=KUBE_PROXY))["items"])[name]
        assert nodes_of(online) == ["edge-node-1", "edge-node-2"]
        await edge.stop_hub()
        # The cloud goes away, then the hub restarts on its cache: the services, the node and
        # the NodePools the filters need were read through the hub, so they are cached too.
        await edge.link.set_mode(partition.Mode.BLACKHOLE)
        await edge.start_hub()
        filters = edge.node.filters
        assert filters is not None
        async with asyncio.timeout(10):
            while not filters.synced():
                await asyncio.sleep(0.05)
        assert not edge.healthy()
        offline = by_name((await edge.get(SLICES, ua=KUBE_PROXY))["items"])[name]
        assert nodes_of(offline) == ["edge-node-1", "edge-node-2"]


async def test_filters_off(tmp_path: pathlib.Path) -> None:
    async with filtered_edge(tmp_path, before_start=pool_topology_on_web, enabled=False) as edge:
        services = by_name((await edge.get("/api/v1/services", ua=KUBELET))["items"])
        assert services["kubernetes"]["spec"]["clusterIP"] == "10.96.0.1"
        assert "node_yurthub_filter_requests_total{" not in await edge.metrics()


async def test_one_filter_disabled(tmp_path: pathlib.Path) -> None:
    async with filtered_edge(
        tmp_path, before_start=pool_topology_on_web, disabled=("forwardkubesvctraffic",)
    ) as edge:
        slices = by_name((await edge.get(SLICES, ua=KUBE_PROXY))["items"])
        assert slices["kubernetes"]["endpoints"][0]["addresses"] != [HUB_IP]
        assert len(nodes_of(slices[web_slice(edge.sim)["metadata"]["name"]])) == 2


async def test_pool_topology_off_leaves_pool_services_whole_on_an_unpooled_node(
    tmp_path: pathlib.Path,
) -> None:
    """``--no-enable-node-pool`` (and no NodeBuckets): a pool-topology Service keeps every
    endpoint, also on a node in no pool; a node-topology Service is still cut to this node."""

    def unpooled(sim: simapiserver.SimApiserver) -> None:
        pool_topology_on_web(sim)
        node = sim.state.get("nodes", None, "edge-node-1")
        node["metadata"]["labels"].pop("apps.openyurt.io/nodepool", None)
        sim.state.update(node)

    async with filtered_edge(tmp_path, before_start=unpooled, enable_node_pool=False) as edge:
        web = web_slice(edge.sim)
        slices = by_name((await edge.get(SLICES, ua=KUBE_PROXY))["items"])
        assert (
            nodes_of(slices[web["metadata"]["name"]])
            == nodes_of(web)
            == [
                "cloud-node-1",
                "edge-node-1",
                "edge-node-2",
            ]
        )
        annotate(edge.sim, "web", {"openyurt.io/topologyKeys": "kubernetes.io/hostname"})
        async with asyncio.timeout(5):
            while nodes_of(
                by_name((await edge.get(SLICES, ua=KUBE_PROXY))["items"])[web["metadata"]["name"]]
            ) != ["edge-node-1"]:
                await asyncio.sleep(0.05)


async def test_with_the_cli_defaults_pods_keep_the_apiserver(tmp_path: pathlib.Path) -> None:
    """No dummy interface, no serving certificate (the CLI's defaults): the hub's address is
    127.0.0.1, which in a pod is the pod itself. The filters that would point pods there stay
    off, and ``/v1/status`` says which and why."""
    inclusterconfig = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
        "data": {"config.conf": "clientConnection:\n  kubeconfig: /var/lib/kube-proxy/kc\n"},
    }

    def with_kube_proxy_config(sim: simapiserver.SimApiserver) -> None:
        sim.state.apply(inclusterconfig)

    async with filtered_edge(tmp_path, before_start=with_kube_proxy_config, hub_host="") as edge:
        assert edge.node.hub.settings.hub_address == ("127.0.0.1", 10268)
        services = by_name((await edge.get("/api/v1/services", ua=KUBELET))["items"])
        direct = by_name((await edge.get("/api/v1/services", ua=KUBECTL))["items"])
        assert services["kubernetes"] == direct["kubernetes"]
        assert services["kubernetes"]["spec"]["clusterIP"] == "10.96.0.1"
        assert [p["port"] for p in services["kubernetes"]["spec"]["ports"]] == [443]
        slices = by_name((await edge.get(SLICES, ua=KUBE_PROXY))["items"])
        raw = by_name((await edge.get(SLICES, ua=KUBECTL))["items"])
        assert slices["kubernetes"] == raw["kubernetes"]
        config = await edge.get("/api/v1/namespaces/kube-system/configmaps/kube-proxy", ua=KUBELET)
        assert config["data"] == inclusterconfig["data"]
        # The other filters still work.
        assert (await edge.get("/api/v1/services", ua=KUBE_PROXY))["items"]
        async with edge.session.get(edge.node.hub.server_url + "/v1/status") as resp:
            status = await resp.json()
        section = status["filters"]
        assert section["hubAddress"] == "127.0.0.1:10268"
        assert sorted(section["inactive"]) == sorted(
            ["masterservice", "forwardkubesvctraffic", "inclusterconfig", "serviceenvupdater"]
        )
        why = section["inactive"]["masterservice"]
        assert "127.0.0.1 is a loopback address" in why and "no secure port" in why
        assert "masterservice" not in section["active"] and "servicetopology" in section["active"]
        assert 'filter="masterservice"' not in await edge.metrics()
