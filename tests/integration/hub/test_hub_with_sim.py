"""Two simulated apiservers (one shared state) behind one hub, driven by real kubectl and the
``kubernetes`` Python client: through the hub gives the same answers as direct."""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import yaml

from yurthub import server, settings
from yurthub.testing import simapiserver
from yurthub.testing.fixtures import KUBECTL

pytestmark = pytest.mark.slow


def hub_client_kubeconfig(path: pathlib.Path, proxy_url: str) -> pathlib.Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "hub", "cluster": {"server": proxy_url}}],
        "users": [{"name": "node", "user": {}}],
        "contexts": [{"name": "hub", "context": {"cluster": "hub", "user": "node"}}],
        "current-context": "hub",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def kubectl_argv(kubeconfig: pathlib.Path, *args: str) -> list[str]:
    # A private discovery cache per kubeconfig: hub ports are reused across tests.
    cache = kubeconfig.parent / f"{kubeconfig.stem}-cache"
    return [KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache), *args]


async def kubectl(kubeconfig: pathlib.Path, *args: str, stdin: bytes | None = None) -> bytes:
    proc = await asyncio.create_subprocess_exec(
        *kubectl_argv(kubeconfig, "--request-timeout=10s", *args),
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(30):
        out, err = await proc.communicate(stdin)
    assert proc.returncode == 0, err.decode()
    return out


class Cluster:
    def __init__(self, tmp: pathlib.Path) -> None:
        self.tmp = tmp
        self.a: Any = None
        self.b: Any = None
        self.hub: server.Hub | None = None
        self.direct = tmp / "direct.kubeconfig"
        self.via_hub = tmp / "hub-client.kubeconfig"

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[Cluster]:
        self.a = simapiserver.SimApiserver("127.0.0.1", workdir=self.tmp / "a")
        await self.a.start()
        self.b = simapiserver.SimApiserver("127.0.0.1", workdir=self.tmp / "b", state=self.a.state)
        await self.b.start()
        try:
            self.a.write_kubeconfig(self.direct, user="admin", groups=["system:masters"])
            identity = self.tmp / "hub.kubeconfig"
            self.a.write_kubeconfig(
                identity, user="system:node:n1", groups=["system:masters"], auth="cert"
            )
            hub_settings = settings.HubSettings(
                node_name="n1",
                upstream=settings.UpstreamSettings(
                    servers=(self.a.url, self.b.url), kubeconfig=identity, connect_timeout=1.0
                ),
                listen=settings.ListenSettings(serve_port=0, proxy_port=0),
                heartbeat=settings.HeartbeatSettings(interval=0.5, timeout=1.0),
                proxy=settings.ProxySettings(shutdown_grace=1.0),
            )
            self.hub = server.Hub(hub_settings)
            await self.hub.start()
            try:
                assert self.hub.health is not None
                async with asyncio.timeout(10):
                    await self.hub.health.initial_probe_done.wait()
                assert self.hub.health.any_healthy()
                hub_client_kubeconfig(self.via_hub, self.hub.proxy_url)
                yield self
            finally:
                await self.hub.stop()
        finally:
            await self.b.stop()
            await self.a.stop()


@pytest.fixture
async def cluster(tmp_path: pathlib.Path) -> AsyncIterator[Cluster]:
    async with Cluster(tmp_path).run() as c:
        yield c


def names(raw: bytes) -> list[tuple[str, str]]:
    doc = json.loads(raw)
    return sorted((i["metadata"].get("namespace", ""), i["metadata"]["name"]) for i in doc["items"])


async def test_kubectl_get_apply_delete_same_as_direct(cluster: Cluster) -> None:
    for what in (["get", "pods", "-A"], ["get", "nodes"], ["get", "namespaces"]):
        direct = await kubectl(cluster.direct, *what, "-o", "json")
        via = await kubectl(cluster.via_hub, *what, "-o", "json")
        assert names(via) == names(direct)
    manifest = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "through-hub", "namespace": "default"},
            "data": {"k": "v"},
        }
    ).encode()
    await kubectl(cluster.via_hub, "apply", "-f", "-", stdin=manifest)
    got = json.loads(await kubectl(cluster.direct, "get", "configmap", "through-hub", "-o", "json"))
    assert got["data"] == {"k": "v"}
    await kubectl(cluster.via_hub, "delete", "configmap", "through-hub")
    listed = await kubectl(cluster.direct, "get", "configmaps", "-o", "json")
    assert ("default", "through-hub") not in names(listed)


async def test_kubectl_watch_logs_exec(cluster: Cluster) -> None:
    proc = await asyncio.create_subprocess_exec(
        *kubectl_argv(cluster.via_hub, "get", "configmaps", "-w", "--output-watch-events",
                      "-o", "name"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        await asyncio.sleep(1.0)
        for i in range(3):
            await kubectl(cluster.direct, "create", "configmap", f"w{i}")
        seen: list[str] = []
        async with asyncio.timeout(10):
            while not all(any(f"configmap/w{i}" in s for s in seen) for i in range(3)):
                seen.append((await proc.stdout.readline()).decode())
    finally:
        proc.terminate()
        await proc.wait()

    pods = json.loads(await kubectl(cluster.direct, "get", "pods", "-A", "-o", "json"))["items"]
    assert pods, "the demo seed has pods"
    ns, name = pods[0]["metadata"]["namespace"], pods[0]["metadata"]["name"]
    direct_logs = await kubectl(cluster.direct, "logs", "-n", ns, name, "--tail=5")
    via_logs = await kubectl(cluster.via_hub, "logs", "-n", ns, name, "--tail=5")
    assert via_logs.splitlines()[:1] == direct_logs.splitlines()[:1]

    follow = await asyncio.create_subprocess_exec(
        *kubectl_argv(cluster.via_hub, "logs", "-f", "-n", ns, name),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert follow.stdout is not None
    try:
        async with asyncio.timeout(10):
            assert await follow.stdout.readline()
    finally:
        follow.terminate()
        await follow.wait()

    direct_exec = await kubectl(cluster.direct, "exec", "-n", ns, name, "--", "echo", "hello")
    via_exec = await kubectl(cluster.via_hub, "exec", "-n", ns, name, "--", "echo", "hello")
    assert via_exec == direct_exec


async def test_failover_and_all_down(cluster: Cluster) -> None:
    assert cluster.hub is not None
    await kubectl(cluster.via_hub, "get", "namespaces", "-o", "name")
    await cluster.a.stop()
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession() as s:
        for _ in range(6):  # round robin would send every other request to the dead one
            started = loop.time()
            async with s.get(cluster.hub.proxy_url + "/api/v1/namespaces") as r:
                assert r.status == 200
                await r.read()
            assert loop.time() - started < 2
    await kubectl(cluster.via_hub, "get", "namespaces", "-o", "name")
    await cluster.b.stop()
    proc = await asyncio.create_subprocess_exec(
        *kubectl_argv(cluster.via_hub, "get", "--raw", "/api/v1/namespaces"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await proc.communicate()
    assert proc.returncode != 0
    assert b"no healthy backends available." in err


async def test_kubernetes_client_watch_through_hub(cluster: Cluster) -> None:
    import kubernetes

    assert cluster.hub is not None
    config = kubernetes.client.Configuration()
    config.host = cluster.hub.proxy_url
    with kubernetes.client.ApiClient(config) as client:  # closed: its pool holds sockets
        api: Any = kubernetes.client.CoreV1Api(client)
        watch_module: Any = kubernetes.watch
        loop = asyncio.get_running_loop()
        # The sync client blocks: never on this loop, which also runs the hub.
        listed = await loop.run_in_executor(None, api.list_namespaced_config_map, "default")
        start_rv = listed.metadata.resource_version
        received: list[tuple[str, str]] = []
        done = threading.Event()

        def consume() -> None:
            w = watch_module.Watch()
            for event in w.stream(
                api.list_namespaced_config_map,
                "default",
                resource_version=start_rv,
                timeout_seconds=20,
            ):
                received.append((event["type"], event["object"].metadata.name))
                if len(received) >= 30:
                    w.stop()
            done.set()

        thread = threading.Thread(target=consume, name="k8s-client-watch", daemon=True)
        thread.start()
        await asyncio.sleep(0.5)
        expected: list[tuple[str, str]] = []
        for i in range(10):
            await kubectl(cluster.direct, "create", "configmap", f"ev{i}")
            expected.append(("ADDED", f"ev{i}"))
        for i in range(10):
            await kubectl(cluster.direct, "label", "configmap", f"ev{i}", "x=y")
            expected.append(("MODIFIED", f"ev{i}"))
        for i in range(10):
            await kubectl(cluster.direct, "delete", "configmap", f"ev{i}")
            expected.append(("DELETED", f"ev{i}"))
        await loop.run_in_executor(None, done.wait, 30)
        thread.join(5)
        assert received == expected
