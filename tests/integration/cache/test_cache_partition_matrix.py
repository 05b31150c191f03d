"""Every partition mode x the kubelet-like client and kubectl, through the hub with its cache.

For each mode: warm up online, cut the link, change the cluster while cut, heal. Then:
no read sent after the hub noticed the cut failed; each watch was re-established at most once
after the link came back; and the cache, like the client, converged to the apiserver's state
for what was listed. And, with the hub's default heartbeat, a request in flight at the cut
(kubectl's read, the kubelet-like client's watch) is ended when the hub notices the cut (a
missing response header has the server probed at once, not at the next 10 s heartbeat) and
answered from the cache.

No assertion here is on wall time: each checks an order of events (seen in flight before the
cut, answered by the cache after the hub noticed) so that a loaded machine only makes it slower.
"""

from __future__ import annotations

import asyncio
import logging
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


async def eventually(check: Any, within: float = 30.0) -> None:
    """Wait for ``check`` (a deadline far beyond what it takes: only a broken hub reaches it)."""
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
                await edge.cut(mode)
                detected = time.monotonic()
            # The cluster changes while the node cannot see it.
            edge.sim.state.create(new_pod("made-while-cut"))
            gone = sorted(p for p in node_pods(edge) if "made-while-cut" not in p)[0]
            edge.sim.state.delete("pods", *gone.split("/"))
            # The kubelet-like client keeps working while cut (its reads are checked below).
            sent = client.requests
            await eventually(lambda: client.requests >= sent + 6)
            offline = await edge.kubectl("get", "pods", "-A")
            assert "NAME" in offline.stdout
            # Both watches open again (held by the cache, or through a slow link): counted from
            # here, a watch still to be re-made after the cut would pass for one after the heal.
            await eventually(lambda: client.watching == {"pods", "services"})

            starts_before_heal = dict(client.watch_starts)
            await edge.link.set_mode(partition.Mode.PASS)
            await edge.wait_health(True, within=60)
            truth = node_pods(edge)
            await eventually(lambda: client_pods(client) == node_pods(edge))
            await edge.flush()
            await eventually(lambda: cached_pods(edge) == node_pods(edge))
            sent = client.requests  # and keeps working once healed
            await eventually(lambda: client.requests >= sent + 2)
            running.cancel()

        assert "default/made-while-cut" in truth and gone not in truth
        failed_reads = client.failures_after(detected, reads_only=True)
        assert not failed_reads, failed_reads
        for resource in ("pods", "services"):
            again = client.watch_starts[resource] - starts_before_heal.get(resource, 0)
            assert again <= 1, (resource, again)


def hub_sample(edge: Edge, name: str, **labels: str) -> float:
    """One sample of the hub's own registry (0 when the series does not exist yet)."""
    return edge.hub.metrics.registry.get_sample_value(name, labels) or 0.0


def cache_answers(edge: Edge, component: str) -> float:
    return sum(
        hub_sample(
            edge, "node_yurthub_answers_total", source="cache", component=component, verb=verb
        )
        for verb in ("get", "list", "watch")
    )


@pytest.mark.parametrize("client", ["kubectl", "kubelet"])
async def test_request_in_flight_at_the_cut(
    tmp_path: pathlib.Path, client: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With the hub's default heartbeat (10 s): requests in flight when the link goes silent
    are ended when the hub notices (a request left without response headers gets its server
    probed at once, not at the next heartbeat): a read is answered from the cache, and a watch
    open at the cut ends so the client re-watches from the cache.

    Event order, not wall time: kubectl's list is seen inside the link before the cut (the
    hub's in-flight gauge); the hub logs the missing headers, then the server unhealthy, then
    the request ended because of it; the answer is counted as the cache's. (The kubelet-like
    client's node GETs are answered locally first and never wait in the link; its reads there
    are its lists, in flight only around a re-watch, so its case is about the watch.)"""
    caplog.set_level(logging.INFO)
    async with edge_node(tmp_path, heartbeat=settings.HeartbeatSettings()) as edge:
        kubelet_like = kubelet.KubeletClient(
            edge.url, NODE, lease_interval=0.3, status_interval=0.3, request_timeout=30.0
        )
        server = edge.hub_settings.upstream.servers[0]
        async with asyncio.TaskGroup() as tg:
            running = tg.create_task(kubelet_like.run(), name="kubelet-like")
            await eventually(
                lambda: kubelet_like.pods and kubelet_like.watch_starts["pods"] >= 1, 30
            )
            await edge.kubectl("get", "pods", "-A")
            await edge.flush()
            watches_before = kubelet_like.watch_starts["pods"]
            kubectl_from_cache = cache_answers(edge, "kubectl")
            caplog.clear()

            # Slow first, so that requests are inside the link when it goes silent: each
            # crossing waits 0.8 s in the link (on this loop, whose timers run in order: a
            # request seen in flight cannot have been answered before the cut below).
            await edge.link.set_mode(partition.Mode.LATENCY, latency=0.8)
            in_flight = None
            gauge = "node_yurthub_in_flight_requests_collector"
            labels = {"verb": "list", "resource": "pods", "subresources": "", "client": "kubectl"}
            if client == "kubectl":
                in_flight = tg.create_task(
                    edge.kubectl("get", "pods", "-A", request_timeout=None), name="kubectl"
                )
                await eventually(lambda: hub_sample(edge, gauge, **labels) >= 1, 30)
            # Reads of the kubelet-like client inside the link now, if any: they must end too.
            held = {n for n, s in kubelet_like.in_flight.items() if s.is_read}
            await edge.link.set_mode(partition.Mode.BLACKHOLE)
            cut = time.monotonic()
            await edge.wait_health(False, within=60)

            if in_flight is not None:
                done = await in_flight
                assert "NAME" in done.stdout and "web-" in done.stdout
                # Answered by the local path (the link is still silent), not by the cloud.
                assert cache_answers(edge, "kubectl") > kubectl_from_cache
                assert hub_sample(edge, gauge, **labels) == 0
                ended = "list pods for /api/v1/pods via"
            else:
                # The watch open at the cut ended; the re-watch is held open by the cache.
                await eventually(lambda: kubelet_like.watch_starts["pods"] > watches_before, 30)
                ended = "watch pods for /api/v1/pods: "
            # Reads in flight at the cut end (with no failure: checked below): the hub did not
            # leave them to their deadline.
            await eventually(lambda: not held & kubelet_like.in_flight.keys(), 60)
            running.cancel()

        assert not kubelet_like.failures_after(cut - 1.0, reads_only=True)
        log = [r.getMessage() for r in caplog.records]
        slow = log.index(f"no response headers from {server} in time: probing it now")
        unhealthy = log.index(f"server {server} is now unhealthy")
        because = [n for n, m in enumerate(log) if m.startswith(ended) and "became unhealthy" in m]
        assert because and slow < unhealthy < because[0], log
