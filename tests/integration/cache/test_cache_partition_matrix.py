"""Every partition mode x the kubelet-like client and kubectl, through the hub with its cache.

For each mode: warm up online, cut the link, change the cluster while cut, heal. Then:
no read sent after the hub noticed the cut failed; each watch was re-established at most once
after the link came back; and the cache, like the client, converged to the apiserver's state
for what was listed. And, with the hub's default heartbeat, a request in flight at the cut
(kubectl's, the kubelet-like client's reads and watches) is answered from the cache within a
second of the hub noticing the cut, which it does in about 3 s.
"""

from __future__ import annotations

import asyncio
import pathlib
import time
from typing import Any

import pytest
from cache_edge import NODE, Edge, edge_node

from yurthub import settings
from yurthub.cache import keys
from yurthub.testing import kubelet, partition

pytestmark = pytest.mark.slow


def node_pods(edge: Edge) -> dict[str, str]:
    """The apiserver's pods on this node: namespace/name -> resourceVersion."""
    items = edge.sim.state.list("pods", field_selector=f"spec.nodeName={NODE}")
    return {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["metadata"]["resourceVersion"]
        for p in items
    }


def cached_pods(edge: Edge) -> dict[str, str]:
    scope = keys.Scope("kubelet", "pods", "v1")
    owner = str(keys.list_key(scope, "", "", f"spec.nodeName={NODE}"))
    return {
        f"{k.namespace}/{k.name}": e.resource_version
        for k, e in edge.rt.store.objects(scope)
        if owner in e.owners
    }


def client_pods(client: kubelet.KubeletClient) -> dict[str, str]:
    return {name: p["metadata"]["resourceVersion"] for name, p in client.pods.items()}


def new_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
    }


async def eventually(check: Any, within: float = 8.0) -> None:
    async with asyncio.timeout(within):
        while not check():
            await asyncio.sleep(0.1)


@pytest.mark.parametrize(
    "mode",
    [
        partition.Mode.BLACKHOLE,
        partition.Mode.REFUSE,
        partition.Mode.RESET,
        partition.Mode.FLAP,
        partition.Mode.LATENCY,
    ],
)
async def test_partition_mode(tmp_path: pathlib.Path, mode: partition.Mode) -> None:
    async with edge_node(tmp_path) as edge:
        client = kubelet.KubeletClient(
            edge.url, NODE, lease_interval=0.5, status_interval=0.5, request_timeout=5.0
        )
        async with asyncio.TaskGroup() as tg:
            running = tg.create_task(client.run(), name="kubelet-like")
            await eventually(lambda: client.pods and client.watch_starts["pods"] >= 1)
            await edge.kubectl("get", "pods", "-A")
            await edge.flush()

            if mode is partition.Mode.LATENCY:
                await edge.link.set_mode(mode, latency=0.1)
                detected = time.monotonic()
            elif mode is partition.Mode.FLAP:
                await edge.link.set_mode(mode, interval=0.7)
                detected = time.monotonic() + 1.5  # health may flap with the link
            else:
                cut_at = time.monotonic()
                await edge.cut(mode)
                detected = time.monotonic()
                assert detected - cut_at < 5
            # The cluster changes while the node cannot see it.
            edge.sim.state.create(new_pod("made-while-cut"))
            gone = sorted(p for p in node_pods(edge) if "made-while-cut" not in p)[0]
            edge.sim.state.delete("pods", *gone.split("/"))
            await asyncio.sleep(1.5)
            offline = await edge.kubectl("get", "pods", "-A")
            assert "NAME" in offline.stdout

            starts_before_heal = dict(client.watch_starts)
            await edge.link.set_mode(partition.Mode.PASS)
            await edge.wait_health(True)
            healed = time.monotonic()
            truth = node_pods(edge)
            await eventually(lambda: client_pods(client) == node_pods(edge))
            await edge.flush()
            await eventually(lambda: cached_pods(edge) == node_pods(edge))
            await asyncio.sleep(0.5)
            running.cancel()

        assert "default/made-while-cut" in truth and gone not in truth
        failed_reads = client.failures_after(detected, reads_only=True)
        assert not failed_reads, failed_reads
        for resource in ("pods", "services"):
            again = client.watch_starts[resource] - starts_before_heal.get(resource, 0)
            assert again <= 1, (resource, again)
        assert healed - detected < 10


@pytest.mark.parametrize("client", ["kubectl", "kubelet"])
async def test_request_in_flight_at_the_cut(tmp_path: pathlib.Path, client: str) -> None:
    """With the hub's default heartbeat (10 s): reads in flight when the link goes silent get
    their cached answer within a second of the hub noticing (about 3 s: header deadline + one
    probe), and watches open at the cut end so the client re-watches from the cache."""
    async with edge_node(tmp_path, heartbeat=settings.HeartbeatSettings()) as edge:
        kubelet_like = kubelet.KubeletClient(
            edge.url, NODE, lease_interval=0.3, status_interval=0.3, request_timeout=30.0
        )
        async with asyncio.TaskGroup() as tg:
            running = tg.create_task(kubelet_like.run(), name="kubelet-like")
            await eventually(lambda: kubelet_like.pods and kubelet_like.watch_starts["pods"] >= 1)
            await edge.kubectl("get", "pods", "-A")
            await edge.flush()
            watches_before = kubelet_like.watch_starts["pods"]

            # Slow first, so that requests are inside the link when it goes silent.
            await edge.link.set_mode(partition.Mode.LATENCY, latency=0.8)
            in_flight = None
            if client == "kubectl":
                in_flight = tg.create_task(
                    edge.kubectl("get", "pods", "-A", request_timeout=None), name="kubectl"
                )
            await asyncio.sleep(0.4)
            await edge.link.set_mode(partition.Mode.BLACKHOLE)
            cut = time.monotonic()
            detected = cut + await edge.wait_health(False, within=8)

            if in_flight is not None:
                done = await in_flight
                answered = time.monotonic()
                assert "NAME" in done.stdout and "web-" in done.stdout
                assert answered - detected < 1.0 + 0.5, answered - detected  # + kubectl's exit
            else:
                # The watch open at the cut ended; the re-watch is held open by the cache.
                await eventually(lambda: kubelet_like.watch_starts["pods"] > watches_before, 3)
            await asyncio.sleep(1.0)
            running.cancel()

        assert detected - cut < 4.0
        assert not kubelet_like.failures_after(cut - 1.0, reads_only=True)
        for stall in kubelet_like.stalls:
            # A read started before the cut ended at most a second after the hub noticed it.
            if stall.verb in kubelet.READ_VERBS and stall.at < cut:
                assert stall.at + stall.seconds <= detected + 1.0, stall
