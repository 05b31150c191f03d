"""``/metrics`` stays small and off the proxy's event loop, whatever local clients send.

Before: every User-Agent and every resource name in a URL became a label value (3,000 odd
requests made a 27.8 MB ``/metrics``), and a scrape ran on the event loop, stalling kubelet's
requests for its whole duration.
"""

from __future__ import annotations

import asyncio
import random
import string
import threading
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from hubfakes import FakeApiserver
from prometheus_client import parser
from prometheus_client.core import GaugeMetricFamily, Metric

from yurthub import apiresources, kubeconfigs, labels, settings
from yurthub.proxy import upstream
from yurthub.testing import simapiserver

MakeHub = Callable[..., Any]
LABELS = ("client", "component", "verb", "resource", "subresources", "code")


def junk(n: int) -> str:
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=n))


async def hammer(hub: Any, count: int) -> None:
    """``count`` requests with random User-Agents, methods and resource names."""
    async with aiohttp.ClientSession() as s:

        async def one(i: int) -> None:
            ua = f"{junk(12)}/{junk(6)} ({junk(20)})" if i % 3 else junk(30)
            path = random.choice(
                [
                    f"/api/v1/{junk(10)}",
                    f"/apis/{junk(8)}.example.com/v1/namespaces/{junk(5)}/{junk(9)}/x/{junk(7)}",
                    f"/api/v1/namespaces/d/pods/p/{junk(8)}",
                    f"/{junk(12)}",
                ]
            )
            method = random.choice(["GET", "POST", "PATCH", junk(6).upper()])
            async with s.request(method, hub.proxy_url + path, headers={"User-Agent": ua}) as r:
                await r.read()

        for start in range(0, count, 50):
            await asyncio.gather(*(one(i) for i in range(start, min(count, start + 50))))


def label_values(text: str) -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {name: set() for name in LABELS}
    for family in parser.text_string_to_metric_families(text):
        if not family.name.startswith("node_yurthub_"):
            continue
        for sample in family.samples:
            for name in LABELS:
                if name in sample.labels:
                    seen[name].add(sample.labels[name])
    return seen


async def scrape(hub: Any) -> str:
    async with aiohttp.ClientSession() as s, s.get(hub.server_url + "/metrics") as r:
        assert r.status == 200
        return await r.text()


async def test_label_values_are_bounded(apiserver: FakeApiserver, make_hub: MakeHub) -> None:
    async with make_hub([apiserver.url]) as hub:
        await hammer(hub, 1500)
        async with (
            aiohttp.ClientSession(headers={"User-Agent": "kubelet/v1.32.4"}) as s,
            s.get(hub.proxy_url + "/api/v1/pods") as r,
        ):
            assert r.status == 200
        text = await scrape(hub)
    assert len(text) < 200_000, len(text)
    seen = label_values(text)
    assert seen["client"] <= {"kubelet", "other"}, seen["client"]
    assert "kubelet" in seen["component"] and len(seen["component"]) <= 3, seen["component"]
    assert seen["verb"] <= {"get", "list", "create", "patch", "post", "other"}, seen["verb"]
    # Only names the apiserver's discovery (or Kubernetes itself) knows.
    assert seen["resource"] <= {"pods", "", "other"}, seen["resource"]
    assert seen["subresources"] <= {"", "other"}, seen["subresources"]


class _HeldCollector:
    """A collector that takes as long as the test says (a huge label set, a slow /proc read)."""

    def __init__(self) -> None:
        self.collecting = threading.Event()
        self.release = threading.Event()

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        self.collecting.set()
        # Bounded: a scrape run on the event loop would hold the proxy (and the test) this long.
        self.release.wait(10)
        return [GaugeMetricFamily("slow_collector", "held", value=1)]


async def test_a_scrape_never_stalls_the_proxy(apiserver: FakeApiserver, make_hub: MakeHub) -> None:
    held = _HeldCollector()
    async with make_hub([apiserver.url]) as hub:
        hub.metrics.registry.register(held)
        try:
            async with asyncio.TaskGroup() as tg:
                # The test's client shares the hub's event loop: a scrape on the loop stalls it.
                scrapes = [tg.create_task(scrape(hub), name=f"scrape-{i}") for i in range(3)]
                assert await asyncio.to_thread(held.collecting.wait, 10), "no scrape began"
                async with (
                    aiohttp.ClientSession(headers={"User-Agent": "kubelet/v1.32.4"}) as s,
                    s.get(hub.proxy_url + "/api/v1/pods") as r,
                ):
                    assert r.status == 200
                # Answered while the scrape was still collecting: no time bound needed.
                assert not any(t.done() for t in scrapes)
                held.release.set()
        finally:
            held.release.set()
        assert all("slow_collector 1.0" in t.result() for t in scrapes)


@pytest.mark.parametrize("ua", ["kubelet/v1.32.4", "KUBE-PROXY/v1.32", "kubectl/v1.32.4 (linux)"])
async def test_known_components_keep_their_name(
    apiserver: FakeApiserver, make_hub: MakeHub, ua: str
) -> None:
    async with make_hub([apiserver.url]) as hub:
        async with (
            aiohttp.ClientSession(headers={"User-Agent": ua}) as s,
            s.get(hub.proxy_url + "/api/v1/pods") as r,
        ):
            assert r.status == 200
        seen = label_values(await scrape(hub))
    assert seen["client"] == {ua.split("/")[0].lower()}


async def test_resource_names_come_from_the_apiservers_discovery(
    sim_apiserver: simapiserver.SimApiserver,
) -> None:
    sim_apiserver.state.create(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "gadgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "subresources": {"status": {}},
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                ],
            },
        }
    )
    identity = kubeconfigs.load(sim_apiserver.write_kubeconfig(sim_apiserver.workdir / "hub.kc"))
    client = upstream.Upstream(settings.UpstreamSettings(servers=(sim_apiserver.url,)), identity)
    await client.start()
    bounds = labels.Bounds()
    assert bounds.resource("gadgets") == "other"
    try:
        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(
                apiresources.follow(client, lambda: sim_apiserver.url, bounds), name="discovery"
            )
            async with asyncio.timeout(5):
                while bounds.resource("gadgets") == "other":
                    await asyncio.sleep(0.05)
            task.cancel()
    finally:
        await client.close()
    assert bounds.resource("pods") == "pods" and bounds.resource("podz") == "other"
