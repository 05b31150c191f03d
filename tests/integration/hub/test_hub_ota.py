"""YurtHub's OTA API on a running hub (with its cache) in front of the simulated apiserver.

The hub reaches the simulator through a partition injector (``cut`` makes it offline); the
test itself writes the cluster's objects as an admin, straight to the simulator.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pathlib
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson

from yurthub import assembly, server, settings
from yurthub.testing import partition, simapiserver

NODE = "edge-node-1"
KUBELET = "kubelet/v1.32.4 (linux/amd64) kubernetes/abcdef0"
OLD_MANIFEST = (
    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hub\n  namespace: kube-system\n# old\n"
)
NEW_MANIFEST = (
    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hub\n  namespace: kube-system\n# new\n"
)


@dataclasses.dataclass
class Bed:
    sim: simapiserver.SimApiserver
    link: partition.Partition
    node: assembly.Node
    admin: aiohttp.ClientSession
    http: aiohttp.ClientSession
    manifests: pathlib.Path

    async def api(self, method: str, path: str, body: Any = None, ctype: str = "") -> Any:
        headers = {"Content-Type": ctype or "application/json"} if body is not None else {}
        async with self.admin.request(
            method,
            self.sim.url + path,
            data=orjson.dumps(body) if body is not None else None,
            headers=headers,
        ) as resp:
            decoded = orjson.loads(await resp.read())
            assert resp.status < 300, decoded
            return decoded

    async def ota(self, action: str, pod: str, namespace: str = "default") -> tuple[int, Any]:
        url = (
            f"{self.node.hub.server_url}/openyurt.io/v1/namespaces/{namespace}/pods/{pod}/{action}"
        )
        async with self.http.post(url) as resp:
            raw = await resp.read()
            try:
                return resp.status, orjson.loads(raw)
            except orjson.JSONDecodeError:
                return resp.status, raw

    async def health(self, healthy: bool) -> None:
        checker = self.node.hub.health
        assert checker is not None
        async with asyncio.timeout(10):
            while checker.any_healthy() is not healthy:
                await asyncio.sleep(0.05)

    async def pod_with_condition(
        self, name: str, owner: dict[str, Any], need: str | None, namespace: str = "default"
    ) -> dict[str, Any]:
        await self.api(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "ownerReferences": [owner]},
                "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
            },
        )
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        if need is not None:
            condition = {
                "type": "PodNeedUpgrade",
                "status": need,
                "message": "controllerrevision: rev2",
            }
            pod = await self.api("GET", path)
            conditions = [*pod["status"].get("conditions", []), condition]
            await self.api(
                "PATCH",
                path + "/status",
                {"status": {"conditions": conditions}},
                "application/merge-patch+json",
            )
        result: dict[str, Any] = await self.api("GET", path)
        return result

    async def static_set_manifest(self, name: str, manifest: str) -> None:
        """The ConfigMap a YurtStaticSet ``name``'s controller writes: its Pod manifest."""
        await self.api(
            "POST",
            "/api/v1/namespaces/kube-system/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"yurt-static-set-{name}"},
                "data": {name: manifest},
            },
        )

    async def owner(self, kind: str, path: str, name: str) -> dict[str, Any]:
        obj = await self.api("GET", path)
        return {
            "apiVersion": obj["apiVersion"],
            "kind": kind,
            "name": name,
            "uid": obj["metadata"]["uid"],
        }


@contextlib.asynccontextmanager
async def bed(tmp_path: pathlib.Path) -> AsyncIterator[Bed]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    async with simapiserver.SimApiserver(
        workdir=tmp_path / "sim", insecure_port=0, bookmark_interval=1.0
    ) as sim:
        assert sim.insecure_url is not None
        port = int(sim.insecure_url.rsplit(":", 1)[1])
        async with partition.Partition("127.0.0.1", port) as link:
            hub_settings = settings.HubSettings(
                node_name=NODE,
                upstream=settings.UpstreamSettings(servers=(link.url,), connect_timeout=1.0),
                listen=settings.ListenSettings(serve_port=0, proxy_port=0),
                heartbeat=settings.HeartbeatSettings(
                    interval=0.5, timeout=1.0, healthy_threshold=1, failed_retry=1
                ),
                proxy=settings.ProxySettings(shutdown_grace=1.0),
                cache=settings.CacheSettings(disk_cache_path=tmp_path / "cache"),
                static_pod_path=manifests,
            )
            tls = ssl.create_default_context(cafile=str(sim.ca_path))
            async with (
                aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(ssl=tls),
                    headers={"Authorization": f"Bearer {sim.admin_token}"},
                ) as admin,
                aiohttp.ClientSession() as http,
                assembly.running(hub_settings) as node,
            ):
                the_bed = Bed(sim, link, node, admin, http, manifests)
                await the_bed.health(True)
                yield the_bed


async def daemonset_owner(b: Bed) -> dict[str, Any]:
    return await b.owner(
        "DaemonSet", "/apis/apps/v1/namespaces/default/daemonsets/sensor-reader", "sensor-reader"
    )


def deletes_of(sim: simapiserver.SimApiserver, name: str) -> list[Any]:
    return [r for r in sim.audit_log() if r.verb == "delete" and r.name == name]


async def test_get_pods_lists_what_kubelet_read_through_the_hub(tmp_path: pathlib.Path) -> None:
    async with bed(tmp_path) as b:
        async with b.http.get(
            f"{b.node.hub.proxy_url}/api/v1/pods",
            params={"fieldSelector": f"spec.nodeName={NODE}"},
            headers={"User-Agent": KUBELET, "Accept": "application/json"},
        ) as resp:
            assert resp.status == 200
            listed = await resp.json()
        expected = sorted(p["metadata"]["name"] for p in listed["items"])
        assert expected  # the demo runs pods on this node
        assert b.node.cache is not None
        assert await b.node.cache.store.flush(5)
        async with b.http.get(f"{b.node.hub.server_url}/pods") as resp:
            assert resp.status == 200
            assert resp.content_type == "application/json"
            answer = await resp.json()
        assert answer["kind"] == "PodList" and answer["apiVersion"] == "v1"
        assert sorted(p["metadata"]["name"] for p in answer["items"]) == expected
        assert {p["spec"]["nodeName"] for p in answer["items"]} == {NODE}


async def test_upgrade_deletes_an_ota_daemonset_pod_with_the_condition(
    tmp_path: pathlib.Path,
) -> None:
    async with bed(tmp_path) as b:
        owner = await daemonset_owner(b)
        await b.pod_with_condition("sensor-reader-ota", owner, "True")
        code, body = await b.ota("upgrade", "sensor-reader-ota")
        assert code == 200, body
        assert body == b"Start updating pod default/sensor-reader-ota"
        assert len(deletes_of(b.sim, "sensor-reader-ota")) == 1
        async with b.admin.get(
            b.sim.url + "/api/v1/namespaces/default/pods/sensor-reader-ota"
        ) as r:
            assert r.status == 404


async def test_upgrade_without_the_condition_is_refused_and_deletes_nothing(
    tmp_path: pathlib.Path,
) -> None:
    async with bed(tmp_path) as b:
        owner = await daemonset_owner(b)
        await b.pod_with_condition("sensor-reader-no", owner, None)
        await b.pod_with_condition("sensor-reader-false", owner, "False")
        for name in ("sensor-reader-no", "sensor-reader-false"):
            code, body = await b.ota("upgrade", name)
            assert code == 403, body
            assert body["kind"] == "Status" and body["reason"] == "Forbidden"
            assert "PodNeedUpgrade" in body["message"]
            assert deletes_of(b.sim, name) == []
        code, body = await b.ota("upgrade", "no-such-pod")
        assert code == 500 and "Get pod failed" in body["message"], body


async def test_offline_upgrade_and_imagepull_are_refused_with_503(tmp_path: pathlib.Path) -> None:
    async with bed(tmp_path) as b:
        owner = await daemonset_owner(b)
        await b.pod_with_condition("sensor-reader-off", owner, "True")
        await b.link.set_mode(partition.Mode.BLACKHOLE)
        await b.health(False)
        for action in ("upgrade", "imagepull"):
            code, body = await b.ota(action, "sensor-reader-off")
            assert code == 503, body
            assert body["reason"] == "ServiceUnavailable"
            assert body["message"] == "the cloud is unreachable: OTA upgrades need the apiserver"
        async with b.http.get(f"{b.node.hub.server_url}/pods") as resp:
            assert resp.status == 200  # the cache still answers
        await b.link.set_mode(partition.Mode.PASS)
        await b.health(True)
        assert deletes_of(b.sim, "sensor-reader-off") == []


async def test_imagepull_asks_for_the_new_images(tmp_path: pathlib.Path) -> None:
    async with bed(tmp_path) as b:
        owner = await daemonset_owner(b)
        await b.pod_with_condition("sensor-reader-img", owner, "True")
        code, body = await b.ota("imagepull", "sensor-reader-img")
        assert code == 200, body
        assert body == b"Image pre-pull requested for pod default/sensor-reader-img"
        pod = await b.api("GET", "/api/v1/namespaces/default/pods/sensor-reader-img")
        image = [c for c in pod["status"]["conditions"] if c["type"] == "PodImageReady"]
        assert len(image) == 1
        assert image[0]["status"] == "False"
        assert image[0]["message"] == "controllerrevision: rev2"
        # The images are not pulled yet: an upgrade must wait for them.
        code, body = await b.ota("upgrade", "sensor-reader-img")
        assert code == 403 and "image is not ready" in body["message"], body


async def test_upgrade_of_a_yurtstaticset_pod_installs_its_manifest(tmp_path: pathlib.Path) -> None:
    async with bed(tmp_path) as b:
        live = b.manifests / "hub.yaml"
        live.write_text(OLD_MANIFEST)
        os.chmod(live, 0o600)
        await b.static_set_manifest("hub", NEW_MANIFEST)
        owner = await b.owner("Node", f"/api/v1/nodes/{NODE}", NODE)
        owner["apiVersion"] = "v1"
        await b.pod_with_condition(f"hub-{NODE}", owner, "True", namespace="kube-system")
        code, body = await b.ota("upgrade", f"hub-{NODE}", namespace="kube-system")
        assert code == 200, body
        assert live.read_text() == NEW_MANIFEST
        assert (b.manifests / ".hub.yaml.bak").read_text() == OLD_MANIFEST
        assert sorted(p.name for p in b.manifests.iterdir()) == [".hub.yaml.bak", "hub.yaml"]
        assert live.stat().st_mode & 0o777 == 0o600
        # A manifest kubelet does not run from --static-pod-path: nothing is written.
        await b.static_set_manifest("elsewhere", NEW_MANIFEST)
        await b.pod_with_condition(f"elsewhere-{NODE}", owner, "True", namespace="kube-system")
        code, body = await b.ota("upgrade", f"elsewhere-{NODE}", namespace="kube-system")
        assert code == 500 and "no manifest" in body["message"], body
        assert sorted(p.name for p in b.manifests.iterdir()) == [".hub.yaml.bak", "hub.yaml"]
        # A mirror pod whose YurtStaticSet has no ConfigMap: YurtHub's 403.
        await b.pod_with_condition(f"other-{NODE}", owner, "True", namespace="kube-system")
        code, body = await b.ota("upgrade", f"other-{NODE}", namespace="kube-system")
        assert code == 403 and "Configmap for static pod does not exist" in body["message"]


async def test_an_upgrade_replaces_only_the_manifest_of_the_static_pod_it_names(
    tmp_path: pathlib.Path,
) -> None:
    """Whoever may create Pods and ConfigMaps in some namespace can make a Pod that looks like
    a mirror Pod (a Node owner, bound to this node, ``<name>-<node>``) and a ConfigMap
    ``yurt-static-set-<name>`` there naming any manifest file: an upgrade of that Pod must not
    replace the manifest of another static Pod (here the hub's own, in kube-system) with the
    ConfigMap's (a privileged Pod no admission ever saw)."""
    async with bed(tmp_path) as b:
        live = b.manifests / "hub.yaml"
        live.write_text(OLD_MANIFEST)
        await b.api(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "yurt-static-set-hub"},
                "data": {"hub": NEW_MANIFEST.replace("kube-system", "default")},
            },
        )
        owner = await b.owner("Node", f"/api/v1/nodes/{NODE}", NODE)
        owner["apiVersion"] = "v1"
        await b.pod_with_condition(f"hub-{NODE}", owner, "True", namespace="default")
        code, body = await b.ota("upgrade", f"hub-{NODE}", namespace="default")
        assert code == 500 and "hub.yaml" in body["message"], body
        assert "not static pod default/hub" in body["message"], body
        assert live.read_text() == OLD_MANIFEST
        assert sorted(p.name for p in b.manifests.iterdir()) == ["hub.yaml"]


async def test_the_proxy_port_neither_serves_nor_forwards_ota_paths(
    tmp_path: pathlib.Path,
) -> None:
    async with bed(tmp_path) as b:
        owner = await daemonset_owner(b)
        await b.pod_with_condition("sensor-reader-px", owner, "True")
        b.sim.clear_audit_log()
        path = "/openyurt.io/v1/namespaces/default/pods/sensor-reader-px/upgrade"
        async with b.http.post(b.node.hub.proxy_url + path) as resp:
            assert resp.status == 404
            body = await resp.json()
        assert body["kind"] == "Status" and "hub server port" in body["message"]
        assert [r for r in b.sim.audit_log() if "openyurt.io" in r.path] == []
        assert deletes_of(b.sim, "sensor-reader-px") == []


async def test_without_a_cache_get_pods_lists_this_nodes_pods_from_the_apiserver(
    tmp_path: pathlib.Path,
) -> None:
    async with simapiserver.SimApiserver(workdir=tmp_path / "sim", insecure_port=0) as sim:
        assert sim.insecure_url is not None
        hub = server.Hub(
            settings.HubSettings(
                node_name=NODE,
                upstream=settings.UpstreamSettings(servers=(sim.insecure_url,)),
                listen=settings.ListenSettings(serve_port=0, proxy_port=0),
                heartbeat=settings.HeartbeatSettings(interval=0.5, timeout=1.0),
                working_mode=settings.WorkingMode.CLOUD,
            )
        )
        await hub.start()
        try:
            assert hub.health is not None
            async with asyncio.timeout(10):
                while not hub.health.any_healthy():
                    await asyncio.sleep(0.05)
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"{hub.server_url}/pods") as resp,
            ):
                assert resp.status == 200
                answer = await resp.json()
        finally:
            await hub.stop(grace=1.0)
        assert answer["kind"] == "PodList" and answer["items"]
        assert {p["spec"]["nodeName"] for p in answer["items"]} == {NODE}


async def test_a_static_pod_marked_while_the_node_is_cut_off_is_taken_once_it_is_back(
    tmp_path: pathlib.Path,
) -> None:
    """OTA during a rollout: the cloud marks the node's mirror Pod while the node is away; the
    node's upgrade request is refused (503) until its link heals, then it takes the template."""
    async with bed(tmp_path) as b:
        live = b.manifests / "hub.yaml"
        live.write_text(OLD_MANIFEST)
        await b.static_set_manifest("hub", NEW_MANIFEST)
        owner = await b.owner("Node", f"/api/v1/nodes/{NODE}", NODE)
        owner["apiVersion"] = "v1"
        await b.link.set_mode(partition.Mode.BLACKHOLE)
        await b.health(False)
        # Marked by the yurtstaticset controller in the cloud while the node is cut off.
        await b.pod_with_condition(f"hub-{NODE}", owner, "True", namespace="kube-system")
        code, body = await b.ota("upgrade", f"hub-{NODE}", namespace="kube-system")
        assert code == 503, body
        assert live.read_text() == OLD_MANIFEST
        await b.link.set_mode(partition.Mode.PASS)
        await b.health(True)
        code, body = await b.ota("upgrade", f"hub-{NODE}", namespace="kube-system")
        assert code == 200, body
        assert live.read_text() == NEW_MANIFEST
