"""The hub in front of small loopback apiservers: streaming, headers, tee, failover, bad input."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
import pytest
from hubfakes import FakeApiserver, RecordingSink, RecordingTee, ScriptedLocal
from multidict import CIMultiDict
from prometheus_client import parser

from yurthub import requestinfo

MakeHub = Callable[..., Any]


async def get_json(url: str, **kw: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.get(url, **kw) as r:
        return r.status, orjson.loads(await r.read())


async def test_list_and_get_pass_through(apiserver: FakeApiserver, make_hub: MakeHub) -> None:
    async with make_hub([apiserver.url]) as hub:
        status, body = await get_json(hub.proxy_url + "/api/v1/pods")
        assert status == 200 and body["kind"] == "PodList"
        status, body = await get_json(hub.proxy_url + "/version")
        assert status == 200 and body == {"gitVersion": "v1.32.0"}


async def test_identity_and_hop_by_hop(apiserver: FakeApiserver, make_hub: MakeHub) -> None:
    async with make_hub([apiserver.url]) as hub:
        headers = {
            "Connection": "keep-alive, X-Secret",
            "X-Secret": "1",
            "Impersonate-User": "admin",
            "Authorization": "Basic Zm9vOmJhcg==",
            "User-Agent": "kubelet/v1.32",
        }
        await get_json(hub.proxy_url + "/api/v1/pods", headers=headers)
        seen = apiserver.seen_headers[-1]
        assert "X-Secret" not in seen and "Impersonate-User" not in seen
        assert "Authorization" not in seen  # anonymous hub identity here: nothing added
        assert seen["User-Agent"] == "kubelet/v1.32"
        await get_json(hub.proxy_url + "/api/v1/pods", headers={"Authorization": "Bearer sa-tok"})
        assert apiserver.seen_headers[-1]["Authorization"] == "Bearer sa-tok"


async def test_a_client_is_asked_what_it_accepts_but_protobuf_views_are_asked_json(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    async with make_hub([apiserver.url]) as hub:
        pb = "application/vnd.kubernetes.protobuf"
        url = hub.proxy_url + "/api/v1/pods"
        await get_json(url, headers={"Accept": f"{pb},application/json"})
        assert apiserver.seen_headers[-1]["Accept"] == f"{pb},application/json"
        await get_json(url, headers={"Accept": pb})
        assert apiserver.seen_headers[-1]["Accept"] == pb
        view = ";as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
        await get_json(url, headers={"Accept": f"{pb}{view},application/json{view}"})
        assert apiserver.seen_headers[-1]["Accept"] == f"application/json{view}"


async def test_watch_events_arrive_one_by_one(apiserver: FakeApiserver, make_hub: MakeHub) -> None:
    tee = RecordingTee()
    async with make_hub([apiserver.url], tee=tee) as hub, aiohttp.ClientSession() as s:
        async with s.get(hub.proxy_url + "/api/v1/pods?watch=1") as r:
            assert r.status == 200
            received = []
            for i in range(5):
                event = b'{"type":"ADDED","object":{"metadata":{"name":"p%d"}}}\n' % i
                # The next event is only sent after this one arrived: buffering would hang.
                await apiserver.events.put(event)
                async with asyncio.timeout(2):
                    line = await r.content.readline()
                received.append(line)
                assert line == event
            await apiserver.events.put(None)  # upstream closes mid-stream
            async with asyncio.timeout(2):
                rest = await r.content.read()
            assert rest == b""  # the client sees a clean end of the watch
        path, sink = tee.sinks[-1]
        assert path == "/api/v1/pods"
        assert b"".join(sink.chunks) == b"".join(received)
        assert sink.aborted and not sink.finished  # the upstream broke the stream
        # the hub stays healthy afterwards
        status, _ = await get_json(hub.proxy_url + "/api/v1/pods")
        assert status == 200


async def test_non_watch_mid_body_close_is_an_error(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    tee = RecordingTee()
    async with make_hub([apiserver.url], tee=tee) as hub, aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.ClientPayloadError):
            async with s.get(hub.proxy_url + "/api/v1/namespaces/d/configmaps/broken") as r:
                await r.read()
        sink = tee.sinks[-1][1]
        assert sink.aborted and not sink.finished
        status, _ = await get_json(hub.proxy_url + "/api/v1/pods")
        assert status == 200


async def test_request_body_streams_through(apiserver: FakeApiserver, make_hub: MakeHub) -> None:
    async def body() -> Any:
        for i in range(50):
            yield b"x" * 10000 + str(i).encode()

    async with (
        make_hub([apiserver.url]) as hub,
        aiohttp.ClientSession() as s,
        s.post(hub.proxy_url + "/api/v1/namespaces/d/pods", data=body()) as r,
    ):
        assert r.status == 201
        data = await r.read()
    assert len(data) == 50 * 10000 + sum(len(str(i)) for i in range(50))


async def test_tee_gets_every_2xx_including_non_resource(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    tee = RecordingTee()
    async with make_hub([apiserver.url], tee=tee) as hub:
        await get_json(hub.proxy_url + "/version")
        await get_json(hub.proxy_url + "/api/v1/nodes/n1")
    assert [p for p, _ in tee.sinks] == ["/version", "/api/v1/nodes/n1"]
    assert all(sink.finished for _, sink in tee.sinks)


class BrokenTee:
    """A tee with a bug: opening or feeding raises."""

    def __init__(self, fail_on: str) -> None:
        self.fail_on = fail_on
        self.sink = RecordingSink()

    def open(self, info: Any, status: int, headers: Any) -> BrokenTee:
        if self.fail_on == "open":
            raise RuntimeError("tee bug")
        return self

    def feed(self, chunk: bytes) -> None:
        raise RuntimeError("tee bug")

    async def finish(self) -> None:
        self.sink.finished = True

    def abort(self, reason: str) -> None:
        self.sink.aborted = reason


@pytest.mark.parametrize("fail_on", ["open", "feed"])
async def test_a_failing_tee_costs_the_client_nothing(
    apiserver: FakeApiserver, make_hub: MakeHub, fail_on: str
) -> None:
    tee = BrokenTee(fail_on)
    async with make_hub([apiserver.url], tee=tee) as hub, aiohttp.ClientSession() as s:
        status, body = await get_json(hub.proxy_url + "/api/v1/pods")
        assert status == 200 and body["kind"] == "PodList"
        async with s.get(hub.proxy_url + "/api/v1/pods?watch=1") as r:
            for i in range(3):  # every event still arrives, each one a separate chunk
                event = b'{"type":"ADDED","object":{"metadata":{"name":"p%d"}}}\n' % i
                await apiserver.events.put(event)
                async with asyncio.timeout(2):
                    assert await r.content.readline() == event
            await apiserver.events.put(None)
    if fail_on == "feed":
        assert tee.sink.aborted and not tee.sink.finished


async def test_failover_and_all_down(make_hub: MakeHub) -> None:
    a, b = FakeApiserver(), FakeApiserver()
    await a.start()
    await b.start()
    try:
        async with make_hub([a.url, b.url]) as hub:
            assert hub.health.is_healthy(a.url) and hub.health.is_healthy(b.url)
            await a.stop()
            for _ in range(6):  # rr would hit the dead one every other request
                status, _ = await get_json(hub.proxy_url + "/api/v1/pods")
                assert status == 200
            async with asyncio.timeout(30):
                while hub.health.is_healthy(a.url):
                    await asyncio.sleep(0.05)
            await b.stop()
            status, body = await get_json(hub.proxy_url + "/api/v1/pods")
            assert status == 502
            assert body["kind"] == "Status" and body["message"] == "no healthy backends available."
    finally:
        await a.stop()
        await b.stop()


async def test_local_answers_offline_and_kubelet_lease(make_hub: MakeHub) -> None:
    api = FakeApiserver()
    await api.start()
    local = ScriptedLocal({"offline", "kubelet-lease"})
    try:
        async with make_hub([api.url], local=local) as hub:
            lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"
            status, body = await get_json(
                hub.proxy_url + lease, headers={"User-Agent": "kubelet/1"}
            )
            assert (status, body) == (200, {"local": "kubelet-lease"})
            # kubelet get node: the first from the cloud (the cache's copy may be old); then
            # local first, and this answerer declines, so it goes remote
            for _ in range(2):
                status, body = await get_json(
                    hub.proxy_url + "/api/v1/nodes/n1", headers={"User-Agent": "kubelet/1"}
                )
                assert status == 200 and body["kind"] == "Node"
            assert local.calls.count(("/api/v1/nodes/n1", "kubelet-node")) == 1
            await api.stop()
            status, body = await get_json(hub.proxy_url + "/api/v1/pods")
            assert (status, body) == (200, {"local": "offline"})
            status, body = await get_json(hub.proxy_url + "/version")
            assert (status, body) == (200, {"local": "offline"})
    finally:
        await api.stop()


async def test_readiness_gate_until_first_probe(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    apiserver.lease_delay = 0.5
    async with make_hub([apiserver.url], wait_ready=False) as hub:
        status, body = await get_json(hub.proxy_url + "/api/v1/pods")
        assert status == 503 and "initial-health-probe" in body["message"]
        async with aiohttp.ClientSession() as s, s.get(hub.server_url + "/v1/readyz") as r:
            assert r.status == 500 and "initial-health-probe" in await r.text()
        await hub.health.initial_probe_done.wait()
        status, _ = await get_json(hub.proxy_url + "/api/v1/pods")
        assert status == 200
        async with aiohttp.ClientSession() as s:
            async with s.get(hub.server_url + "/v1/readyz") as r:
                assert r.status == 200
            async with s.get(hub.server_url + "/v1/healthz") as r:
                assert (r.status, await r.text()) == (200, "OK")
            async with s.get(hub.server_url + "/metrics") as r:
                text = await r.text()
        assert f'node_yurthub_server_healthy_status{{server="{apiserver.url}"}} 1.0' in text
        assert "node_yurthub_request_duration_seconds_bucket" in text
        host_port = apiserver.url.removeprefix("http://")
        assert f'node_yurthub_closable_conns_collector{{server="{host_port}"}} 0.0' in text


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (sample.labels, sample.value)
        for family in parser.text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


async def test_metrics_carry_the_request_labels(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    ua = {"User-Agent": "kubelet/v1.32"}
    async with make_hub([apiserver.url]) as hub, aiohttp.ClientSession(headers=ua) as s:
        async with s.get(hub.proxy_url + "/api/v1/pods?watch=1") as watch:
            assert watch.status == 200
            async with s.get(hub.server_url + "/metrics") as r:
                text = await r.text()
        # client: the component, bounded (YurtHub puts the whole User-Agent there).
        watching = dict(verb="watch", resource="pods", subresources="", client="kubelet")
        assert samples(text, "node_yurthub_in_flight_requests_collector") == [(watching, 1)]
        await get_json(hub.proxy_url + "/api/v1/pods", headers=ua)
        async with s.get(hub.server_url + "/metrics") as r:
            text = await r.text()
    traffic = samples(text, "node_yurthub_proxy_traffic_collector_total")
    assert ({"client": "kubelet", "verb": "list", "resource": "pods", "subresources": ""}
            in [labels for labels, _ in traffic])  # fmt: skip
    durations = samples(text, "node_yurthub_request_duration_seconds_count")
    assert ({"component": "kubelet", "verb": "list", "resource": "pods", "code": "200"}, 1) in (
        durations
    )


async def test_websocket_upgrade_passes_through(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    async with make_hub([apiserver.url]) as hub, aiohttp.ClientSession() as s:
        url = hub.proxy_url + "/api/v1/namespaces/d/pods/p/exec?command=sh"
        async with s.ws_connect(url, protocols=("v5.channel.k8s.io",)) as ws:
            assert ws.protocol == "v5.channel.k8s.io"
            for i in range(3):
                await ws.send_bytes(b"\x00hello%d" % i)
                msg = await ws.receive(timeout=2)
                assert msg.data == b"echo:\x00hello%d" % i


async def raw_request(url: str, payload: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(payload)
        await writer.drain()
        async with asyncio.timeout(3):
            return await reader.read(65536)
    finally:
        writer.close()
        await writer.wait_closed()


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (
            b"GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n",
            431,
        ),
        (b"BREW /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
        (b"GET /api/v1/watch HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
        (b"OPTIONS /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 405),
        (b"\x16\x03\x01\x00\xa5garbage\r\n\r\n", 400),
        (b"GET /api/v1/pods?timeoutSeconds=x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
    ],
)
async def test_bad_input_gets_a_status(
    apiserver: FakeApiserver, make_hub: MakeHub, payload: bytes, code: int
) -> None:
    async with make_hub([apiserver.url]) as hub:
        answer = await raw_request(hub.proxy_url, payload)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split(b" ")[1] == b"%d" % code
        status = orjson.loads(body)
        assert status["kind"] == "Status" and status["code"] == code


async def test_non_utf8_user_agent(apiserver: FakeApiserver, make_hub: MakeHub) -> None:
    async with make_hub([apiserver.url]) as hub:
        answer = await raw_request(
            hub.proxy_url,
            b"GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kub\xffelet/\xfe\r\n"
            b"Connection: close\r\n\r\n",
        )
        assert answer.startswith(b"HTTP/1.1 200")
        # still serving, and the metrics still render (an unknown client is "other")
        status, _ = await get_json(hub.proxy_url + "/api/v1/pods")
        assert status == 200
        async with aiohttp.ClientSession() as s, s.get(hub.server_url + "/metrics") as r:
            assert r.status == 200
            text = await r.text()
            assert 'client="other"' in text and "\ufffd" not in text


async def test_graceful_stop_ends_watches_and_drains(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    async with (
        make_hub([apiserver.url]) as hub,
        aiohttp.ClientSession() as s,
        asyncio.TaskGroup() as tg,
    ):
        watch = await s.get(hub.proxy_url + "/api/v1/pods?watch=1")
        slow = tg.create_task(
            get_json(hub.proxy_url + "/api/v1/namespaces/d/configmaps/slow?sleep=0.5"),
            name="slow request",
        )
        assert hub.router is not None
        async with asyncio.timeout(5):  # the slow request has reached the hub
            while hub.router.in_flight < 2:
                await asyncio.sleep(0.01)
        await hub.stop()
        async with asyncio.timeout(30):
            assert await watch.content.read() == b""  # ended cleanly
        watch.release()
        status, body = await slow
        assert status == 200 and body["metadata"]["name"] == "slow"


async def test_statuses_and_headers_pass_through(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    async with make_hub([apiserver.url]) as hub, aiohttp.ClientSession() as s:
        async with s.get(hub.proxy_url + "/api/v1/namespaces/d/secrets/forbidden") as r:
            assert r.status == 403
            assert (await r.json())["message"] == "no"  # upstream Status body untouched
        async with s.get(hub.proxy_url + "/api/v1/namespaces/d/secrets/x") as r:
            assert r.status == 200 and await r.read() == b'{"kind":"Secret"}'
            assert r.headers["Audit-Id"] == "abc"
            assert "X-Hop" not in r.headers and "Keep-Alive" not in r.headers
        async with s.head(hub.proxy_url + "/api/v1/namespaces/d/secrets/x") as r:
            assert r.status == 200 and await r.read() == b""
        async with s.delete(hub.proxy_url + "/api/v1/namespaces/d/secrets/gone") as r:
            assert r.status == 204


async def test_list_deadline_gives_504(apiserver: FakeApiserver, make_hub: MakeHub) -> None:
    async with make_hub([apiserver.url]) as hub:
        # a get with timeout=3s: the hub allows 1 s (YurtHub: 2 s margin); the apiserver takes 2 s
        url = "/api/v1/namespaces/d/configmaps/slow?sleep=2&timeout=3s"
        started = asyncio.get_running_loop().time()
        status, body = await get_json(hub.proxy_url + url)
        assert status == 504 and body["kind"] == "Status"
        # Cut at the hub's 1 s, not the client's 3 s (room for a loaded machine's stalls).
        assert asyncio.get_running_loop().time() - started < 2.8


async def test_in_flight_bound_answers_429(apiserver: FakeApiserver, make_hub: MakeHub) -> None:
    limits = {"max_in_flight": 1, "max_long_running": 1}
    async with make_hub([apiserver.url], proxy=limits) as hub, aiohttp.ClientSession() as s:
        watch = await s.get(hub.proxy_url + "/api/v1/pods?watch=1")
        held = await s.get(hub.proxy_url + "/api/v1/namespaces/d/configmaps/stall")
        try:
            status, body = await get_json(hub.proxy_url + "/api/v1/pods")
            assert status == 429 and body["reason"] == "TooManyRequests"
            status, body = await get_json(hub.proxy_url + "/api/v1/pods?watch=1")
            assert status == 429 and "long-running" in body["message"]
        finally:
            watch.close()
            held.close()


async def test_a_lists_timeout_parameter_is_honoured(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    # kubectl --request-timeout=3s sends timeout=3s on a list too; before, only gets were bound.
    async with make_hub([apiserver.url]) as hub:
        started = asyncio.get_running_loop().time()
        status, body = await get_json(
            hub.proxy_url + "/api/v1/namespaces/d/configmaps?sleep=5&timeout=3s"
        )
        assert status == 504 and body["kind"] == "Status"
        # Cut at the hub's 1 s, not the client's 3 s (room for a loaded machine's stalls).
        assert asyncio.get_running_loop().time() - started < 2.8
        # A mutation's timeout is the client's own (no cache to fall back to, no margin).
        assert (
            requestinfo.classify(
                "POST", "/api/v1/namespaces/d/configmaps", {"timeout": "3s"}.items(), CIMultiDict()
            ).deadline
            == 3.0
        )


async def test_upstream_idle_time_is_bounded(apiserver: FakeApiserver, make_hub: MakeHub) -> None:
    async with make_hub([apiserver.url], upstream={"idle_timeout": 1.0}) as hub:
        loop = asyncio.get_running_loop()
        started = loop.time()
        status, body = await get_json(
            hub.proxy_url + "/api/v1/namespaces/d/configmaps/slow?sleep=9"
        )
        assert status == 504 and body["kind"] == "Status", body
        assert loop.time() - started < 3
        started = loop.time()
        async with (
            aiohttp.ClientSession() as s,
            s.get(hub.proxy_url + "/api/v1/namespaces/d/configmaps/stall") as r,
        ):
            assert r.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):
                await r.read()  # cut, not a silently short body
        assert loop.time() - started < 3
        assert hub.health is not None and hub.health.any_healthy()
