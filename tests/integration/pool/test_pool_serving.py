"""One hub's multiplexer answering local clients as the apiserver's watch cache would:
selections, resourceVersion rules, streaming lists, bookmarks, timeouts, slow clients, the
clients' filters, what it leaves to the ordinary path, its memory budget, a live change of the
pool-scoped set, and its metrics."""

from __future__ import annotations

import asyncio
import pathlib
import time
from typing import Any

import pytest
from pool_edge import (
    KUBE_PROXY,
    KUBELET,
    SERVICES,
    SLICES,
    eventually,
    named,
    pool_of,
    service,
    set_configmap,
)

NODE = "edge-node-1"


def names(body: dict[str, Any]) -> set[str]:
    return {i["metadata"]["name"] for i in body["items"]}


def upstream_requests(pool: Any, ua: str, resource: str) -> int:
    return sum(1 for r in pool.sim.audit_log() if r.user_agent == ua and r.resource == resource)


async def test_lists_with_selectors_from_memory(tmp_path: pathlib.Path) -> None:
    async with pool_of(tmp_path, names=(NODE,), leaders=()) as pool:
        (hub,) = pool.hubs
        pool.sim.state.create(service("a", tier="web"))
        pool.sim.state.create(service("b", namespace="kube-system", tier="db"))
        await eventually(lambda: hub.pool.mux.resources and _has(hub, "b"))
        pool.sim.clear_audit_log()
        everything = await hub.get(SERVICES)
        assert everything["kind"] == "ServiceList" and everything["apiVersion"] == "v1"
        assert {"a", "b", "web", "kubernetes"} <= names(everything)
        assert int(everything["metadata"]["resourceVersion"]) >= int(
            max(i["metadata"]["resourceVersion"] for i in everything["items"])
        )
        assert names(await hub.get(SERVICES, labelSelector="tier in (web,db)")) == {"a", "b"}
        assert names(
            await hub.get("/api/v1/namespaces/kube-system/services", labelSelector="tier")
        ) == {"b"}
        assert names(await hub.get(SERVICES, fieldSelector="metadata.name=a")) == {"a"}
        assert "a" not in names(
            await hub.get(SERVICES, fieldSelector="metadata.namespace!=default")
        )
        assert names(await hub.get(SERVICES, fieldSelector="spec.type=NodePort")) == set()
        status, body, _ = await hub.request(SERVICES, fieldSelector="status.phase=x")
        assert status == 400 and body["message"] == "field label not supported: status.phase"
        status, body, _ = await hub.request(SERVICES, resourceVersionMatch="Exact")
        assert status == 422 and body["reason"] == "Invalid"
        assert upstream_requests(pool, KUBE_PROXY, "services") == 0  # all from memory


def _has(hub: Any, name: str) -> bool:
    for gvr, res in hub.pool.mux.resources.items():
        if gvr.resource == "services":
            return any(e.name == name for e in res.store._objects.values())
    return False


async def test_resource_version_rules(tmp_path: pathlib.Path) -> None:
    async with pool_of(tmp_path, names=(NODE,), leaders=(), history_events=3) as pool:
        (hub,) = pool.hubs
        listed = await hub.get(SERVICES)
        rv = int(listed["metadata"]["resourceVersion"])
        # Not older than a version the store has not reached: waits 3 s, then 504.
        started = time.monotonic()
        status, body, headers = await hub.request(SERVICES, resourceVersion=str(rv + 10_000))
        assert status == 504 and headers["Retry-After"] == "1"
        assert body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
        assert time.monotonic() - started >= 2.9
        # Exact at the store's version: from memory; at another: the apiserver answers.
        exact = await hub.get(SERVICES, resourceVersion=str(rv), resourceVersionMatch="Exact")
        assert exact["metadata"]["resourceVersion"] == str(rv)
        for i in range(5):
            pool.sim.state.create(service(f"s{i}"))
        await eventually(lambda: _has(hub, "s4"))
        # A watch from before the (3-event) history: an ERROR event with 410 Expired.
        async with hub.watch(SERVICES, resourceVersion=str(rv)) as events:
            error = await events.next()
            assert error["type"] == "ERROR" and error["object"]["code"] == 410
            assert await events.ended()
        # From a version inside the history: the changes after it, then live ones.
        recent = int(
            (await hub.get(SERVICES, fieldSelector="metadata.name=s2"))["items"][0]["metadata"][
                "resourceVersion"
            ]
        )
        async with hub.watch(SERVICES, resourceVersion=str(recent)) as events:
            assert [(await events.next())["object"]["metadata"]["name"] for _ in range(2)] == [
                "s3",
                "s4",
            ]


async def test_streaming_lists_bookmarks_and_timeouts(tmp_path: pathlib.Path) -> None:
    async with pool_of(tmp_path, names=(NODE,), leaders=(), bookmark_interval=0.3) as pool:
        (hub,) = pool.hubs
        async with hub.watch(
            SERVICES,
            ua=KUBELET,
            sendInitialEvents="true",
            resourceVersionMatch="NotOlderThan",
            allowWatchBookmarks="true",
        ) as events:
            seen = []
            while True:
                event = await events.next()
                if event["type"] == "BOOKMARK":
                    break
                assert event["type"] == "ADDED" and event["object"]["kind"] == "Service"
                seen.append(event["object"]["metadata"]["name"])
            assert {"web", "kubernetes"} <= set(seen)
            meta = event["object"]["metadata"]
            assert meta["annotations"] == {"k8s.io/initial-events-end": "true"}
            assert int(meta["resourceVersion"]) > 0
            # Idle: a BOOKMARK every bookmark interval.
            idle = await events.next(within=2.0)
            assert idle["type"] == "BOOKMARK" and "annotations" not in idle["object"]["metadata"]
            pool.sim.state.create(service("new"))
            await events.until(named("new"), within=5.0)
        async with hub.watch(SERVICES, timeoutSeconds="1") as events:
            started = time.monotonic()
            assert await events.ended(within=60.0)  # the hub ends it, not the client
            assert time.monotonic() - started > 0.5  # held open until then
        # The client's filters: kubelet sees the kubernetes Service pointing at the hub.
        kubernetes = (
            await hub.get(SERVICES, ua=KUBELET, fieldSelector="metadata.name=kubernetes")
        )["items"][0]
        assert kubernetes["spec"]["clusterIP"] == hub.settings.hub_address[0]
        raw = (await hub.get(SERVICES, ua="curl/8", fieldSelector="metadata.name=kubernetes"))[
            "items"
        ][0]
        assert raw["spec"]["clusterIP"] != hub.settings.hub_address[0]


async def test_a_slow_client_is_cut_off_and_the_others_go_on(tmp_path: pathlib.Path) -> None:
    async with pool_of(tmp_path, names=(NODE,), leaders=(), watcher_events=8) as pool:
        (hub,) = pool.hubs
        big = "x" * 200_000
        async with hub.watch(SERVICES) as slow, hub.watch(SERVICES) as fast:
            await fast.until(named("web"))
            for i in range(60):
                obj = service(f"big-{i}")
                obj["metadata"]["annotations"] = {"pad": big}
                pool.sim.state.create(obj)
                await fast.until(named(f"big-{i}"))  # the reader keeps up
            # The one that never read was closed; what it gets is what was written before.
            assert await slow.ended(within=10.0)


async def test_what_takes_the_ordinary_path(tmp_path: pathlib.Path) -> None:
    async with pool_of(tmp_path, names=(NODE,), leaders=()) as pool:
        (hub,) = pool.hubs
        await hub.get(SERVICES)
        pool.sim.clear_audit_log()
        await hub.get(SERVICES, ua="pod/1")
        assert upstream_requests(pool, "pod/1", "services") == 0
        cases: list[tuple[str, dict[str, str], dict[str, str]]] = [
            ("bearer/1", {"Authorization": "Bearer some-token"}, {}),
            ("table/1", {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}, {}),
            ("proto/1", {"Accept": "application/vnd.kubernetes.protobuf"}, {}),
            ("paged/1", {}, {"limit": "1", "continue": "abc"}),
        ]
        for ua, headers, params in cases:
            accept = headers.pop("Accept", "application/json")
            await hub.request(SERVICES, ua=ua, accept=accept, headers=headers, **params)
            assert upstream_requests(pool, ua, "services") == 1, ua


@pytest.mark.parametrize("before_start", [False, True])
async def test_a_resource_over_its_memory_budget_is_proxied(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture, before_start: bool
) -> None:
    """Objects that outgrow the budget while watched, or a first list that does not fit."""
    async with pool_of(
        tmp_path, names=(NODE,), leaders=(), max_bytes=20_000, start=not before_start
    ) as pool:
        (hub,) = pool.hubs
        for i in range(10):
            obj = service(f"pad-{i}")
            obj["metadata"]["annotations"] = {"pad": "x" * 3000}
            pool.sim.state.create(obj)
        if before_start:
            await hub.start()
        await eventually(
            lambda: any("over the multiplexer's budget" in r.getMessage() for r in caplog.records)
        )
        pool.sim.clear_audit_log()
        listed = await hub.get(SERVICES)
        assert "pad-9" in names(listed)
        assert upstream_requests(pool, KUBE_PROXY, "services") == 1


async def test_the_pool_scoped_set_changes_live(tmp_path: pathlib.Path) -> None:
    async with pool_of(tmp_path, names=(NODE,), leaders=()) as pool:
        (hub,) = pool.hubs
        async with hub.watch(SLICES) as events:
            await events.next()
            set_configmap(pool.sim, {"pool-scoped-metadata": "/v1/services"})
            assert await events.ended(within=5.0)
        pool.sim.clear_audit_log()
        await hub.get(SLICES)
        await hub.get(SERVICES)
        assert upstream_requests(pool, KUBE_PROXY, "endpointslices") == 1
        assert upstream_requests(pool, KUBE_PROXY, "services") == 0
        metrics = await hub.metrics()
        assert 'node_yurthub_multiplexer_synced{resource="/v1/services"} 1.0' in metrics
        assert "endpointslices" not in "".join(
            line
            for line in metrics.splitlines()
            if line.startswith("node_yurthub_multiplexer_synced")
        )
        assert (
            'node_yurthub_multiplexer_upstream_watches{resource="/v1/services",source="cloud"} 1.0'
            in metrics
        )
        assert (
            'node_yurthub_multiplexer_served_total{resource="/v1/services",verb="list"}' in metrics
        )
        assert "node_yurthub_multiplexer_store_bytes" in metrics
        # The multiplexer's answers are counted as the pool's (not the hub's own refusals).
        assert 'node_yurthub_answers_total{component="kube-proxy",source="pool",verb="list"}' in (
            metrics
        )


@pytest.mark.slow
async def test_a_client_before_the_first_list_gets_429(tmp_path: pathlib.Path) -> None:
    """A follower whose leader accepts connections and never answers: the store waits for it
    (up to the 6 s idle timeout), so a client asking meanwhile gets 429 + Retry-After: 1."""
    async with pool_of(tmp_path, names=("edge-node-2",), start=False) as pool:
        (hub,) = pool.hubs
        hub.settings = _without_filters(hub.settings)
        port = hub.settings.pool.multiplexer_port
        server = await asyncio.start_server(_silent, "127.0.0.11", port)
        try:
            await hub.start()
            status, body, headers = await hub.request(SERVICES)
            assert status == 429 and headers["Retry-After"] == "1", body
            assert body["details"]["retryAfterSeconds"] == 1
            await eventually(lambda: hub.source() == "cloud", within=10.0)
            assert "web" in names(await hub.get(SERVICES))
        finally:
            await hub.stop()
            server.close()


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        await reader.read()  # until the client gives up
    finally:
        writer.close()


def _without_filters(settings: Any) -> Any:
    import dataclasses

    return dataclasses.replace(
        settings, filters=dataclasses.replace(settings.filters, enabled=False)
    )
