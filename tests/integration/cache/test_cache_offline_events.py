"""Events recorded while the cloud is away reach it after the heal (the offline Event journal).

Simulated apiserver -> partition -> hub + cache: a kubelet-like client records Events through
the hub during a cut (creates, and client-go's count PATCHes of a repeated one); after the heal
the simulator holds them with their counts and original times.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import stat
from collections.abc import Callable
from typing import Any

import pytest
from cache_edge import NODE, Edge, edge_node

from yurthub import settings
from yurthub.cache import eventfolding, eventjournal
from yurthub.kubeproto import converting

EVENTS = "/api/v1/namespaces/default/events"
SMP = "application/strategic-merge-patch+json"
PROTOBUF = converting.CONTENT_TYPE


def kubelet_event(pod: str, reason: str, message: str, at: str, **extra: Any) -> dict[str, Any]:
    """An Event as client-go's recorder creates it for kubelet."""
    return {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {"name": f"{pod}.{reason.lower()}", "namespace": "default"},
        "involvedObject": {
            "kind": "Pod",
            "namespace": "default",
            "name": pod,
            "uid": f"uid-{pod}",
            "apiVersion": "v1",
        },
        "reason": reason,
        "message": message,
        "source": {"component": "kubelet", "host": NODE},
        "firstTimestamp": at,
        "lastTimestamp": at,
        "count": 1,
        "type": "Normal",
        **extra,
    }


def cloud_events(edge: Edge) -> dict[str, dict[str, Any]]:
    return {e["metadata"]["name"]: e for e in edge.sim.state.list("events", "default")}


async def wait_for(
    edge: Edge, done: Callable[[dict[str, dict[str, Any]]], bool], within: float = 30.0
) -> dict[str, dict[str, Any]]:
    async with asyncio.timeout(within):
        while not done(found := cloud_events(edge)):
            await asyncio.sleep(0.1)
    return found


async def create(edge: Edge, event: dict[str, Any]) -> None:
    status, body, _ = await edge.request("POST", EVENTS, body=event)
    assert status == 201, body
    assert body["metadata"]["name"] == event["metadata"]["name"]


@pytest.fixture
async def edge(tmp_path: pathlib.Path) -> Any:
    async with edge_node(tmp_path) as node:
        yield node


async def test_events_recorded_during_a_cut_reach_the_cloud_with_counts_and_times(
    edge: Edge,
) -> None:
    before = set(cloud_events(edge))
    await edge.cut()
    pulled = kubelet_event("web-1", "Pulled", "image pulled", "2026-01-02T03:04:05Z")
    started = kubelet_event("web-1", "Started", "started container", "2026-01-02T03:04:06Z")
    backoff = kubelet_event("web-2", "BackOff", "back-off restarting", "2026-01-02T03:04:07Z")
    for event in (pulled, started, backoff):
        await create(edge, event)
    # client-go's recorder counts a repeat with a strategic merge patch of the same name.
    name = backoff["metadata"]["name"]
    for count, at in ((2, "2026-01-02T03:05:07Z"), (3, "2026-01-02T03:06:07Z")):
        patch = {"count": count, "lastTimestamp": at, "message": "back-off restarting"}
        status, body, _ = await edge.request(
            "PATCH", f"{EVENTS}/{name}", body=patch, content_type=SMP
        )
        assert status == 200, body
        assert body["count"] == count and body["lastTimestamp"] == at
    assert not set(cloud_events(edge)) - before  # nothing reached the cloud while cut
    await edge.heal()
    names = {e["metadata"]["name"] for e in (pulled, started, backoff)}
    found = await wait_for(edge, lambda f: names <= set(f))
    for sent in (pulled, started):
        got = found[sent["metadata"]["name"]]
        assert got["count"] == 1
        assert got["firstTimestamp"] == got["lastTimestamp"] == sent["firstTimestamp"]
        assert got["reason"] == sent["reason"] and got["involvedObject"]["name"] == "web-1"
    got = found[name]
    assert got["count"] == 3
    assert got["firstTimestamp"] == "2026-01-02T03:04:07Z"
    assert got["lastTimestamp"] == "2026-01-02T03:06:07Z"
    assert edge.rt.journal is not None
    async with asyncio.timeout(10):
        while (await edge.rt.status())["offlineEvents"]["posted"] < 3:
            await asyncio.sleep(0.05)
    assert edge.rt.journal.pending == 0


async def test_posting_stops_when_the_link_drops_again_and_goes_on_at_the_next_heal(
    tmp_path: pathlib.Path,
) -> None:
    async with edge_node(tmp_path, offline_event_qps=2.0) as edge:
        await edge.cut()
        sent = [
            kubelet_event(f"job-{i}", "Completed", f"run {i}", "2026-01-02T03:04:05Z")
            for i in range(20)
        ]
        for event in sent:
            await create(edge, event)
        names = {e["metadata"]["name"] for e in sent}
        await edge.heal()
        await wait_for(edge, lambda f: bool(names & set(f)))  # posting has begun...
        await edge.cut()  # ...and the link drops again, long before 20 at 2/s are through
        assert edge.rt.journal is not None
        left = edge.rt.journal.pending
        assert 0 < left < len(sent)
        await edge.heal()
        found = await wait_for(edge, lambda f: names <= set(f))
        assert all(found[n]["count"] == 1 for n in names)


def protobuf_event(name: str, reason: str, first: int) -> bytes:
    """A core/v1 Event in protobuf, as kubelet's client sends it (enveloped)."""
    converter = converting.Converter()
    event = converter._class("k8s.io.api.core.v1.Event")()
    event.metadata.name = name
    event.metadata.namespace = "default"
    event.involvedObject.kind = "Node"
    event.involvedObject.name = NODE
    event.reason = reason
    event.message = "Starting kubelet."
    event.source.component = "kubelet"
    event.source.host = NODE
    event.firstTimestamp.seconds = first
    event.lastTimestamp.seconds = first
    event.count = 1
    event.type = "Normal"
    unknown = converter._class("k8s.io.apimachinery.pkg.runtime.Unknown")()
    unknown.typeMeta.apiVersion = "v1"
    unknown.typeMeta.kind = "Event"
    unknown.raw = event.SerializeToString()
    return b"k8s\x00" + unknown.SerializeToString()


async def test_a_protobuf_event_as_kubelet_sends_it_reaches_the_cloud(edge: Edge) -> None:
    await edge.cut()
    body = protobuf_event(f"{NODE}.17e2", "Starting", 1767225600)
    status, answer, _ = await edge.request(
        "POST",
        EVENTS,
        body=body,
        content_type=PROTOBUF,
        accept=f"{PROTOBUF}, application/json",
    )
    assert status == 201 and answer == body  # the echo kubelet reads back
    await edge.heal()
    found = await wait_for(edge, lambda f: f"{NODE}.17e2" in f)
    got = found[f"{NODE}.17e2"]
    assert got["firstTimestamp"] == got["lastTimestamp"] == "2026-01-01T00:00:00Z"
    assert got["involvedObject"]["kind"] == "Node" and got["source"]["component"] == "kubelet"


async def test_an_events_k8s_io_series_reaches_the_cloud(edge: Edge) -> None:
    """events.k8s.io/v1 (the scheduler's and kube-proxy's recorders): a create, then the
    series PATCH of its repeats."""
    path = "/apis/events.k8s.io/v1/namespaces/default/events"
    event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "proxy.17e3", "namespace": "default"},
        "eventTime": "2026-01-02T03:04:05.000000Z",
        "reportingController": "kube-proxy",
        "reportingInstance": f"kube-proxy-{NODE}",
        "action": "StartKubeProxy",
        "reason": "Starting",
        "regarding": {"kind": "Node", "name": NODE, "apiVersion": "v1"},
        "note": "",
        "type": "Normal",
    }
    await edge.cut()
    status, body, _ = await edge.request("POST", path, body=event)
    assert status == 201, body
    series = {"series": {"count": 4, "lastObservedTime": "2026-01-02T03:14:05.000000Z"}}
    status, body, _ = await edge.request(
        "PATCH", f"{path}/proxy.17e3", body=series, content_type=SMP
    )
    assert status == 200 and body["series"]["count"] == 4
    await edge.heal()
    found = await wait_for(edge, lambda f: "proxy.17e3" in f)
    got = found["proxy.17e3"]
    assert got["reason"] == "Starting" and got["involvedObject"]["name"] == NODE
    assert got["series"]["count"] == 4


async def test_a_repeat_of_an_event_created_online_is_patched_onto_it(edge: Edge) -> None:
    """Created online (and cached), counted offline: the cached copy patched is journaled; its
    create after the heal meets a 409 and the count is patched onto the cloud's."""
    event = kubelet_event("db-0", "Unhealthy", "probe failed", "2026-01-02T03:04:05Z")
    await create(edge, event)
    name = event["metadata"]["name"]
    assert cloud_events(edge)[name]["count"] == 1
    await edge.flush()
    await edge.cut()
    patch = {"count": 2, "lastTimestamp": "2026-01-02T03:09:00Z", "message": "probe failed"}
    status, body, _ = await edge.request("PATCH", f"{EVENTS}/{name}", body=patch, content_type=SMP)
    assert status == 200 and body["count"] == 2
    await edge.heal()
    found = await wait_for(edge, lambda f: f[name]["count"] == 2)
    assert found[name]["lastTimestamp"] == "2026-01-02T03:09:00Z"
    assert found[name]["firstTimestamp"] == "2026-01-02T03:04:05Z"


async def test_a_repeat_of_an_event_neither_journaled_nor_cached_is_created_again(
    edge: Edge,
) -> None:
    """client-go meets the offline 404 to its PATCH and creates the Event with its count (the
    same name): journaled, and patched onto the cloud's copy after the heal."""
    event = kubelet_event("db-1", "Unhealthy", "probe failed", "2026-01-02T03:04:05Z")
    edge.sim.state.create(event)  # created online by someone the hub did not cache
    name = event["metadata"]["name"]
    await edge.cut()
    patch = {"count": 2, "lastTimestamp": "2026-01-02T03:09:00Z", "message": "probe failed"}
    status, _, _ = await edge.request("PATCH", f"{EVENTS}/{name}", body=patch, content_type=SMP)
    assert status == 404
    await create(edge, {**event, "count": 2, "lastTimestamp": "2026-01-02T03:09:00Z"})
    await edge.heal()
    found = await wait_for(edge, lambda f: f[name]["count"] == 2)
    assert found[name]["lastTimestamp"] == "2026-01-02T03:09:00Z"


async def test_the_journal_survives_a_hub_restart_offline(edge: Edge) -> None:
    await edge.cut()
    event = kubelet_event("web-3", "Killing", "stopping container", "2026-01-02T03:04:05Z")
    await create(edge, event)
    await edge.restart_hub()  # the link stays cut
    journal_file = edge.hub_settings.cache.disk_cache_path / eventjournal.FILE_NAME
    assert stat.S_IMODE(journal_file.stat().st_mode) == 0o600
    assert edge.rt.journal is not None and edge.rt.journal.pending == 1
    await edge.heal()
    found = await wait_for(edge, lambda f: event["metadata"]["name"] in f)
    assert found[event["metadata"]["name"]]["firstTimestamp"] == "2026-01-02T03:04:05Z"


async def test_events_of_a_token_caller_are_not_posted_with_the_node_identity(
    tmp_path: pathlib.Path,
) -> None:
    """A pod's verified ServiceAccount token is not the node: its offline Event is echoed but
    not journaled (the hub posts with the node's identity)."""
    async with edge_node(tmp_path) as edge:
        edge.hub_settings = dataclasses.replace(
            edge.hub_settings,
            authn=settings.AuthnSettings(issuer_keys_file=tmp_path / "issuer.json"),
        )
        await edge.restart_hub()
        await edge.wait_health(True)
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "app"}}
        status, _, _ = await edge.request(
            "POST", "/api/v1/namespaces/default/serviceaccounts", body=account
        )
        assert status == 201
        async with asyncio.timeout(10):
            while edge.hub.issuer_keys.current is None:
                await asyncio.sleep(0.05)
        token = edge.sim.service_account_token("default", "app")
        await edge.cut()
        theirs = kubelet_event("app-1", "Custom", "from a pod", "2026-01-02T03:04:05Z")
        status, body, _ = await edge.request("POST", EVENTS, body=theirs, token=token, ua="app/1")
        assert status == 201, body
        assert edge.rt.journal is not None and edge.rt.journal.pending == 0
        ours = kubelet_event("app-1", "Pulled", "pulled", "2026-01-02T03:04:05Z")
        await create(edge, ours)
        assert edge.rt.journal.pending == 1
        await edge.heal()
        found = await wait_for(edge, lambda f: ours["metadata"]["name"] in f)
        assert theirs["metadata"]["name"] not in found


async def test_over_the_bounds_the_oldest_go_and_one_summary_says_how_many(
    tmp_path: pathlib.Path,
) -> None:
    async with edge_node(tmp_path, offline_event_qps=0.0) as edge:
        await edge.cut()
        bounds = eventfolding.Bounds()
        total = bounds.events + 5
        for i in range(total):
            await create(
                edge, kubelet_event(f"pod-{i}", "Scheduled", f"event {i}", "2026-01-02T03:04:05Z")
            )
        assert edge.rt.journal is not None
        assert edge.rt.journal.pending == bounds.events and edge.rt.journal.dropped == 5
        await edge.heal()

        def summary(found: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
            return next(
                (e for e in found.values() if e["reason"] == eventfolding.SUMMARY_REASON), None
            )

        found = await wait_for(
            edge, lambda f: len(f) >= bounds.events + 1 and summary(f) is not None, within=90
        )
        pods = {e["involvedObject"]["name"] for e in found.values()}
        assert {f"pod-{i}" for i in range(5)}.isdisjoint(pods)  # the oldest five went
        assert {f"pod-{i}" for i in range(5, total)} <= pods
        told = summary(found)
        assert told is not None
        assert told["involvedObject"] == {
            "kind": "Node",
            "name": NODE,
            "uid": NODE,
            "apiVersion": "v1",
        }
        assert told["message"].startswith("5 Events recorded on node")
        assert told["type"] == "Warning"
        async with asyncio.timeout(10):
            while edge.rt.journal.dropped:
                await asyncio.sleep(0.05)


async def test_an_event_the_cloud_refuses_is_dropped_and_the_rest_posted(
    edge: Edge, caplog: pytest.LogCaptureFixture
) -> None:
    await edge.cut()
    refused = kubelet_event("web-9", "Pulled", "pulled", "2026-01-02T03:04:05Z")
    refused["metadata"]["namespace"] = "no-such-namespace"
    refused["involvedObject"]["namespace"] = "no-such-namespace"
    status, _, _ = await edge.request(
        "POST", "/api/v1/namespaces/no-such-namespace/events", body=refused
    )
    assert status == 201
    ok = kubelet_event("web-9", "Started", "started", "2026-01-02T03:04:06Z")
    await create(edge, ok)
    await edge.heal()
    await wait_for(edge, lambda f: ok["metadata"]["name"] in f)
    assert edge.rt.journal is not None
    async with asyncio.timeout(10):
        while (await edge.rt.status())["offlineEvents"]["refused"] < 1:
            await asyncio.sleep(0.05)
    assert edge.rt.journal.pending == 0
    assert any("the cloud refused an offline Event (Pulled)" in r.message for r in caplog.records)
