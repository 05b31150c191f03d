"""Filtered answers in every wire shape an apiserver sends, through a real hub over loopback.

A small scripted apiserver answers what the simulator cannot: protobuf (for clients that accept
only protobuf), gzip-compressed JSON (the apiserver compresses big answers), a watch whose
events are written one at a time, and a body that breaks mid-way.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from yurthub import server, settings
from yurthub.filters import runtime as filtering
from yurthub.testing import protomessages as pm

PROTOBUF = "application/vnd.kubernetes.protobuf"
KUBE_PROXY = "kube-proxy/v1.37.2"
KUBELET = "kubelet/v1.37.2"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
DISCARD = {"svc.openyurt.io/discard": "true"}
HUB_IP = "169.254.2.1"


def json_service(name: str, discard: bool = False, namespace: str = "default") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if discard:
        meta["annotations"] = DISCARD
    return {
        "metadata": meta,
        "spec": {
            "type": "LoadBalancer" if discard else "ClusterIP",
            "clusterIP": "10.96.0.1",
            "clusterIPs": ["10.96.0.1"],
            "ports": [{"name": "https", "port": 443}],
        },
    }


def pb_service(name: str, discard: bool = False) -> Any:
    meta = pm.message(
        "ObjectMeta",
        name=name,
        namespace="default",
        uid=f"u-{name}",
        annotations=DISCARD if discard else {},
    )
    spec = pm.message(
        "ServiceSpec",
        ports=[pm.message("ServicePort", name="https", port=443)],
        clusterIP="10.96.0.1",
        clusterIPs=["10.96.0.1"],
        type="LoadBalancer" if discard else "ClusterIP",
    )
    return pm.message("Service", metadata=meta, spec=spec)


class Upstream:
    """Leases for the hub's heartbeat, and scripted services answers."""

    def __init__(self) -> None:
        self.events: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.lease: dict[str, Any] | None = None
        self.services = (
            [json_service("kubernetes")]
            + [json_service(f"lb-{i}", discard=True) for i in range(300)]
            + [json_service(f"svc-{i}") for i in range(300)]
        )

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get(LEASES + "/{name}", self._lease_get)
        app.router.add_put(LEASES + "/{name}", self._lease_put)
        app.router.add_post(LEASES, self._lease_put)
        app.router.add_get("/api/v1/services", self._services)
        return app

    async def _lease_get(self, request: web.Request) -> web.Response:
        if self.lease is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        return web.json_response(self.lease)

    async def _lease_put(self, request: web.Request) -> web.Response:
        self.lease = await request.json()
        self.lease["metadata"]["resourceVersion"] = "1"
        return web.json_response(self.lease, status=201 if request.method == "POST" else 200)

    async def _services(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("labelSelector") == "broken=gzip":
            return await self._broken(request)
        protobuf = request.headers.get("Accept", "").startswith(PROTOBUF)
        if request.query.get("watch") == "true":
            content_type = f"{PROTOBUF};stream=watch" if protobuf else "application/json"
            resp = web.StreamResponse(headers={"Content-Type": content_type})
            await resp.prepare(request)
            while (event := await self.events.get()) is not None:
                await resp.write(event)
            return resp
        if protobuf:
            body = pm.envelope(
                "ServiceList",
                pm.message(
                    "ServiceList",
                    metadata=pm.message("ListMeta", resourceVersion="5"),
                    items=[pb_service("kubernetes"), pb_service("lb", True), pb_service("plain")],
                ),
            )
            return web.Response(body=body, headers={"Content-Type": PROTOBUF})
        body = orjson.dumps(
            {
                "kind": "ServiceList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": "5"},
                "items": self.services,
            }
        )
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            return web.Response(
                body=gzip.compress(body),
                headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
            )
        return web.Response(body=body, content_type="application/json")

    async def _broken(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "application/json", "Content-Encoding": "gzip"}
        )
        await resp.prepare(request)
        await resp.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03not-deflate-at-all")
        await resp.write_eof()
        return resp


@contextlib.asynccontextmanager
async def hub_in_front(up: Upstream) -> AsyncIterator[tuple[server.Hub, aiohttp.ClientSession]]:
    runner = web.AppRunner(up.app(), access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    s = settings.HubSettings(
        node_name="n1",
        upstream=settings.UpstreamSettings(servers=(url,), connect_timeout=1.0),
        listen=settings.ListenSettings(serve_port=0, proxy_port=0),
        heartbeat=settings.HeartbeatSettings(interval=0.3, timeout=1.0, healthy_threshold=1),
        proxy=settings.ProxySettings(shutdown_grace=1.0),
        filters=settings.FilterSettings(
            # Inputs are not what these tests are about: serve without waiting for them.
            disabled=("servicetopology", "nodeportisolation"),
            inputs_sync_timeout=0.0,
            hub_host=HUB_IP,  # where pods reach the hub (the dummy IP's stand-in)
        ),
    )
    filters = filtering.Filters(s)
    hub = server.Hub(s, filters=filters)
    filters.attach_metrics(hub.metrics)
    await hub.start()
    try:
        assert hub.health is not None
        async with asyncio.timeout(5):
            await hub.health.initial_probe_done.wait()
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            yield hub, session
    finally:
        await up.events.put(None)
        await hub.stop()
        await runner.cleanup()


async def test_protobuf_only_client_gets_a_filtered_protobuf_list() -> None:
    up = Upstream()
    async with (
        hub_in_front(up) as (hub, session),
        session.get(
            hub.proxy_url + "/api/v1/services",
            headers={"User-Agent": KUBE_PROXY, "Accept": PROTOBUF},
        ) as resp,
    ):
        assert resp.status == 200 and resp.headers["Content-Type"] == PROTOBUF
        got = pm.open_envelope(await resp.read(), "ServiceList")
    assert [i.metadata.name for i in got.items] == ["kubernetes", "plain"]
    assert got.items[0].metadata.uid == "u-kubernetes"


async def test_protobuf_watch_frames_arrive_filtered_one_at_a_time() -> None:
    up = Upstream()
    async with (
        hub_in_front(up) as (hub, session),
        session.get(
            hub.proxy_url + "/api/v1/services",
            params={"watch": "true"},
            headers={"User-Agent": KUBELET, "Accept": PROTOBUF},
        ) as resp,
    ):
        assert resp.status == 200
        await up.events.put(pm.frame("ADDED", pm.envelope("Service", pb_service("kubernetes"))))
        head = await asyncio.wait_for(resp.content.readexactly(4), 5)
        data = await asyncio.wait_for(resp.content.readexactly(int.from_bytes(head, "big")), 5)
        ((kind, raw),) = pm.frames(head + data)
        got = pm.open_envelope(raw, "Service")
        assert kind == "ADDED" and got.spec.clusterIP == HUB_IP
        assert got.spec.ports[0].port == 10268


async def test_gzip_json_list_is_filtered_and_sent_uncompressed() -> None:
    up = Upstream()
    async with (
        hub_in_front(up) as (hub, session),
        session.get(
            hub.proxy_url + "/api/v1/services",
            headers={
                "User-Agent": KUBE_PROXY,
                "Accept": "application/json",
                "Accept-Encoding": "gzip",
            },
        ) as resp,
    ):
        assert resp.status == 200 and "Content-Encoding" not in resp.headers
        body = orjson.loads(await resp.read())
    names = [i["metadata"]["name"] for i in body["items"]]
    assert len(names) == 301 and not any(n.startswith("lb-") for n in names)
    assert body["metadata"] == {"resourceVersion": "5"}


async def test_json_watch_event_reaches_the_client_alone() -> None:
    up = Upstream()
    async with (
        hub_in_front(up) as (hub, session),
        session.get(
            hub.proxy_url + "/api/v1/services",
            params={"watch": "true"},
            headers={"User-Agent": KUBE_PROXY},
        ) as resp,
    ):
        for name, discard in (("a", True), ("b", False)):
            event = {
                "type": "ADDED",
                "object": {"kind": "Service", **json_service(name, discard)},
            }
            await up.events.put(orjson.dumps(event) + b"\n")
            line = orjson.loads(await asyncio.wait_for(resp.content.readline(), 5))
            assert line["type"] == ("DELETED" if discard else "ADDED")
            assert line["object"]["metadata"]["name"] == name


async def test_a_corrupt_compressed_body_is_cut_not_passed_off_as_whole() -> None:
    up = Upstream()
    async with hub_in_front(up) as (hub, session):
        with pytest.raises(aiohttp.ClientPayloadError):
            async with session.get(
                hub.proxy_url + "/api/v1/services",
                params={"labelSelector": "broken=gzip"},
                headers={"User-Agent": KUBE_PROXY},
            ) as resp:
                assert resp.status == 200
                await resp.read()
        # The hub itself is fine.
        async with session.get(
            hub.proxy_url + "/api/v1/services", headers={"User-Agent": KUBE_PROXY}
        ) as resp:
            assert resp.status == 200 and len(orjson.loads(await resp.read())["items"]) == 301
