"""The hub offline, end to end on loopback: simulated apiserver -> partition -> hub + cache.

Reference §4 / §10.2 answers, checked against what the same hub cached while online.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import shutil
import threading
import time
from typing import Any

import orjson
import pytest
from accept_support import full_accept_queue
from cache_edge import KUBELET_UA, NODE, Edge, edge_node

from yurthub import settings
from yurthub.cache import keys, runtime
from yurthub.proxy import local, remote, routing
from yurthub.testing import partition

PODS = "/api/v1/pods"
MY_SELECTOR = f"spec.nodeName={NODE}"
MY_PODS = {"fieldSelector": MY_SELECTOR}
POD_SCOPE = keys.Scope("kubelet", "pods", "v1")
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


@pytest.fixture
async def edge(tmp_path: pathlib.Path) -> Any:
    async with edge_node(tmp_path) as node:
        yield node


def names(body: dict[str, Any]) -> list[str]:
    return sorted(i["metadata"]["name"] for i in body["items"])


async def warm(edge: Edge) -> dict[str, Any]:
    """What a kubelet reads while online; returns its pod list."""
    status, pods = await edge.get(PODS, params=MY_PODS)
    assert status == 200 and pods["items"]
    assert (await edge.get(f"/api/v1/nodes/{NODE}"))[0] == 200
    assert (await edge.get("/api/v1/namespaces/kube-system/configmaps"))[0] == 200
    await edge.flush()
    assert isinstance(pods, dict)
    return pods


async def test_reads_are_answered_from_cache_offline(edge: Edge) -> None:
    online = await warm(edge)
    await edge.cut()
    status, offline = await edge.get(PODS, params=MY_PODS)
    assert status == 200
    assert names(offline) == names(online)
    assert offline["kind"] == "PodList" and offline["apiVersion"] == "v1"
    assert int(offline["metadata"]["resourceVersion"]) >= int(online["metadata"]["resourceVersion"])
    first = online["items"][0]["metadata"]
    status, pod = await edge.get(f"/api/v1/namespaces/{first['namespace']}/pods/{first['name']}")
    assert status == 200 and pod["kind"] == "Pod" and pod["metadata"]["name"] == first["name"]
    status, node = await edge.get(f"/api/v1/nodes/{NODE}")
    assert status == 200 and node["metadata"]["name"] == NODE


async def test_a_list_answered_just_before_the_cut_is_answered_offline(
    edge: Edge, monkeypatch: pytest.MonkeyPatch
) -> None:
    # kubelet lists online, the link drops a moment later, kubelet lists again: the hub answers
    # what it has just answered, even while the write of that list still waits for the disk
    # (here: the writer's thread held busy until the offline read has come in; the read's
    # wait is made long so a loaded machine cannot outlast it).
    monkeypatch.setattr(local, "READ_SETTLE", 30.0)
    held = threading.Event()
    edge.rt.store._writer._pool.submit(held.wait, 30.0)  # the writer's one thread, busy
    try:
        status, online = await edge.get(PODS, params=MY_PODS)
        assert status == 200 and online["items"]
        assert edge.rt.store.list_record(keys.list_key(POD_SCOPE, "", "", MY_SELECTOR)) is None
        await edge.cut(partition.Mode.REFUSE)
        async with asyncio.TaskGroup() as tg:
            offline = tg.create_task(edge.get(PODS, params=MY_PODS), name="offline-list")
            await asyncio.sleep(0.1)  # the read has come in and waits for the queued write
            assert not offline.done()
            held.set()
    finally:
        held.set()
    status, body = offline.result()
    assert status == 200
    assert names(body) == names(online)
    assert edge.rt.store.list_record(keys.list_key(POD_SCOPE, "", "", MY_SELECTOR)) is not None


async def test_offline_lists_apply_selectors(edge: Edge) -> None:
    await warm(edge)
    status, all_cms = await edge.get("/api/v1/namespaces/kube-system/configmaps")
    assert status == 200
    await edge.cut()
    # A selector never listed online: answered by filtering what the component cached.
    target = all_cms["items"][0]["metadata"]["name"]
    status, one = await edge.get(
        "/api/v1/namespaces/kube-system/configmaps",
        params={"fieldSelector": f"metadata.name={target}"},
    )
    assert status == 200 and names(one) == [target]
    status, none = await edge.get(
        "/api/v1/namespaces/kube-system/configmaps", params={"labelSelector": "no-such=label"}
    )
    assert status == 200 and none["items"] == []
    status, bad = await edge.get(PODS, params={"labelSelector": "a in (b"})
    assert status == 400 and bad["kind"] == "Status"


async def test_all_namespaces_list_beside_a_namespaced_one(edge: Edge) -> None:
    await warm(edge)  # lists kube-system's configmaps
    status, online = await edge.get("/api/v1/configmaps")
    assert status == 200
    await edge.flush()
    await edge.cut()
    status, offline = await edge.get("/api/v1/configmaps")
    assert status == 200, offline  # the namespaced list's record is not an item
    assert names(offline) == names(online)


async def test_lists_with_different_selectors_coexist(edge: Edge) -> None:
    await warm(edge)
    status, other = await edge.get(PODS, params={"fieldSelector": "spec.nodeName=edge-node-2"})
    assert status == 200 and other["items"]
    await edge.flush()
    await edge.cut()
    mine = (await edge.get(PODS, params=MY_PODS))[1]
    theirs = (await edge.get(PODS, params={"fieldSelector": "spec.nodeName=edge-node-2"}))[1]
    assert names(mine) and names(theirs) and not set(names(mine)) & set(names(theirs))
    assert {p["spec"]["nodeName"] for p in mine["items"]} == {NODE}


async def test_never_cached_lists_are_404_except_by_name(edge: Edge) -> None:
    await edge.cut()
    status, body = await edge.get("/api/v1/namespaces/default/secrets")
    assert status == 404 and body["reason"] == "NotFound"
    status, body = await edge.get(
        "/api/v1/namespaces/kube-system/configmaps",
        params={"fieldSelector": "metadata.name=kubernetes-services-endpoint"},
    )
    assert status == 200 and body["items"] == []
    status, body = await edge.get("/api/v1/namespaces/default/pods/nope")
    assert status == 404


async def test_kubelet_empty_pod_list_is_404(edge: Edge) -> None:
    status, body = await edge.get(PODS, params={"fieldSelector": "spec.nodeName=no-such-node"})
    assert status == 200 and body["items"] == []
    await edge.flush()
    await edge.cut()
    status, _ = await edge.get(PODS, params={"fieldSelector": "spec.nodeName=no-such-node"})
    assert status == 404


async def test_watch_follows_into_the_cache_and_bookmarks_offline(edge: Edge) -> None:
    pods = await warm(edge)
    rv = pods["metadata"]["resourceVersion"]
    params = {**MY_PODS, "watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true"}
    async with edge.session.get(
        edge.url + PODS, params=params, headers={"User-Agent": KUBELET_UA}
    ) as resp:
        assert resp.status == 200
        created = edge.sim.state.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "late-pod", "namespace": "default"},
                "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
            }
        )
        async with asyncio.timeout(5):
            async for line in resp.content:
                event = orjson.loads(line)
                if event["object"]["metadata"].get("name") == "late-pod":
                    break
    await edge.flush()
    await edge.cut()
    _, offline = await edge.get(PODS, params=MY_PODS)
    assert "late-pod" in names(offline)
    assert int(offline["metadata"]["resourceVersion"]) >= int(
        created["metadata"]["resourceVersion"]
    )
    # A watch offline: held open, bookmarks carry the list's version, ends at timeoutSeconds
    # (the hub ends it: read to its end, under a deadline only a watch held for ever reaches).
    started = time.monotonic()
    params = {**MY_PODS, "watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": "1"}
    async with (
        asyncio.timeout(60),
        edge.session.get(
            edge.url + PODS, params=params, headers={"User-Agent": KUBELET_UA}
        ) as resp,
    ):
        assert resp.status == 200
        events = [orjson.loads(line) async for line in resp.content if line.strip()]
    assert time.monotonic() - started >= 0.9  # held open until then, not ended at once
    assert events and {e["type"] for e in events} == {"BOOKMARK"}
    bookmark = events[0]["object"]
    assert bookmark["kind"] == "Pod" and bookmark["apiVersion"] == "v1"
    assert bookmark["metadata"]["resourceVersion"] == offline["metadata"]["resourceVersion"]


async def test_a_watch_resumed_on_a_wiped_cache_is_no_pod_list(edge: Edge) -> None:
    # kubelet lists once, then re-watches from its last version for as long as the watch
    # works. A hub restarted on an empty cache (wiped, replaced disk) only ever sees the events
    # since: served offline as the pod list, every other pod would read as deleted and be killed.
    pods = await warm(edge)
    rv = pods["metadata"]["resourceVersion"]
    await edge.stop_hub()
    shutil.rmtree(edge.hub_settings.cache.disk_cache_path)
    await edge.start_hub()
    await edge.wait_health(True)
    params = {**MY_PODS, "watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true"}
    async with edge.session.get(
        edge.url + PODS, params=params, headers={"User-Agent": KUBELET_UA}
    ) as resp:
        assert resp.status == 200
        edge.sim.state.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "resumed-pod", "namespace": "default"},
                "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
            }
        )
        async with asyncio.timeout(5):
            async for line in resp.content:
                if orjson.loads(line)["object"]["metadata"].get("name") == "resumed-pod":
                    break
    await edge.flush()
    assert edge.rt.store.list_records() == []
    await edge.cut()
    status, body = await edge.get(PODS, params=MY_PODS)
    assert status == 404 and body["reason"] == "NotFound", body
    status, pod = await edge.get("/api/v1/namespaces/default/pods/resumed-pod")
    assert status == 200 and pod["spec"]["nodeName"] == NODE


async def test_held_watch_ends_when_the_cloud_is_back(edge: Edge) -> None:
    await warm(edge)
    await edge.cut()
    params = {**MY_PODS, "watch": "true", "timeoutSeconds": "60"}

    async def held() -> float:
        started = time.monotonic()
        async with edge.session.get(
            edge.url + PODS, params=params, headers={"User-Agent": KUBELET_UA}
        ) as resp:
            assert resp.status == 200
            await resp.read()
        return time.monotonic() - started

    async with asyncio.TaskGroup() as tg:
        watch = tg.create_task(held(), name="held-watch")
        await asyncio.sleep(0.5)
        assert not watch.done()
        await edge.heal()
    assert watch.result() < 10


async def test_a_watch_the_apiserver_failed_is_held_for_the_hubs_back_off(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client watch whose connection to the apiserver timed out (its SYN dropped: the
    apiserver shaking hands with a fleet) while the hub still trusted the apiserver is answered
    from the cache, and held for the hub's back-off (``pacing.FailedWatches``; 6 s at least
    here), not ended as soon as the cloud is healthy: the client would be back at once, asking
    for one more connection. Before, it ended within the heal spread (none here) of the hub
    trusting the apiserver again: after an apiserver restart in a fleet, a few seconds apart
    for every watch of every node."""
    monkeypatch.setattr(remote, "PATIENT_CONNECT_TIMEOUT", 1.0)
    slow = settings.HeartbeatSettings(
        interval=60.0, timeout=1.0, healthy_threshold=1, failed_retry=1
    )
    # One heartbeat a minute: no probe runs between the link's refusal and the watch, so the
    # hub still trusts the apiserver when the watch's connect times out.
    async with edge_node(tmp_path, heartbeat=slow, first_backoff=6.0) as node:
        await warm(node)
        params = {**MY_PODS, "watch": "true", "timeoutSeconds": "60", "allowWatchBookmarks": "1"}
        await node.link.set_mode(partition.Mode.REFUSE)
        started = time.monotonic()
        with full_accept_queue(node.link.port):
            resp = await node.session.get(
                node.url + PODS, params=params, headers={"User-Agent": KUBELET_UA}
            )
        async with resp:
            assert resp.status == 200
            await node.heal()
            async with asyncio.timeout(30):
                events = [orjson.loads(line) async for line in resp.content]
        held = time.monotonic() - started
    assert {e["type"] for e in events} <= {"BOOKMARK"}, events
    assert held >= 6.0, f"the held watch ended after {held:.1f} s, before the back-off"


async def test_a_held_watch_outlives_the_heal_within_the_heal_spread(
    tmp_path: pathlib.Path,
) -> None:
    """With the heal spread, the hub is back online (a new read is answered by the apiserver)
    while the watch it held offline stays open: the client comes back at its own random moment
    within the spread, not with every other one. A cut again before that moment keeps it held
    (a flapping link does not send the client to it)."""
    async with edge_node(tmp_path, heal_spread=600.0) as node:
        await warm(node)
        await node.cut()
        params = {**MY_PODS, "watch": "true", "timeoutSeconds": "60", "allowWatchBookmarks": "1"}
        async with node.session.get(
            node.url + PODS, params=params, headers={"User-Agent": KUBELET_UA}
        ) as resp:
            assert resp.status == 200
            await node.heal()
            node.sim.state.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "after-heal", "namespace": "default"},
                    "data": {},
                }
            )
            status, _ = await node.get("/api/v1/namespaces/default/configmaps/after-heal")
            assert status == 200  # only the apiserver has it: the hub is online
            # Held on while online: old code ended it within its half-second health poll,
            # four bookmarks (0.3 s apart) take longer than that.
            async with asyncio.timeout(30):
                for _ in range(4):
                    assert orjson.loads(await resp.content.readline())["type"] == "BOOKMARK"
            await node.cut()
            async with asyncio.timeout(30):
                for _ in range(2):
                    assert orjson.loads(await resp.content.readline())["type"] == "BOOKMARK"


async def test_writes_offline(edge: Edge) -> None:
    await warm(edge)
    await edge.cut()
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "ev-1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "x", "namespace": "default"},
        "reason": "Started",
    }
    status, echoed, _ = await edge.request("POST", "/api/v1/namespaces/default/events", body=event)
    assert status == 201 and echoed == event
    status, body, _ = await edge.request("DELETE", f"/api/v1/nodes/{NODE}")
    assert status == 403 and body["reason"] == "Forbidden"
    assert body["message"] == "delete request is not supported in local cache"
    status, node, _ = await edge.request(
        "PATCH",
        f"/api/v1/nodes/{NODE}",
        body={"metadata": {"labels": {"set-offline": "yes"}}},
        content_type="application/merge-patch+json",
    )
    assert status == 200 and node["metadata"]["labels"]["set-offline"] == "yes"
    status, node, _ = await edge.request(
        "PATCH",
        f"/api/v1/nodes/{NODE}",
        body={"metadata": "not an object"},
        content_type="application/merge-patch+json",
    )
    assert status == 200 and node["metadata"]["name"] == NODE  # identity stays, no 500
    status, node, _ = await edge.request(
        "PUT", f"/api/v1/nodes/{NODE}", body={"metadata": {"name": NODE, "labels": {}}}
    )
    assert status == 200 and "set-offline" not in node["metadata"].get("labels", {})
    await edge.flush()
    status, events = await edge.get(
        "/api/v1/namespaces/default/events", params={"fieldSelector": "metadata.name=ev-1"}
    )
    assert status == 200 and names(events) == ["ev-1"]


async def test_offline_service_account_token_only_for_a_pod_of_this_node(edge: Edge) -> None:
    # Granted only as the apiserver grants the node: bound to a pod of this node that runs as
    # the account (test_cache_identity_partitions.py has the granted side); this asks for none.
    await edge.cut()
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"audiences": ["api"]},
    }
    status, body, _ = await edge.request(
        "POST", "/api/v1/namespaces/default/serviceaccounts/default/token", body=request
    )
    assert status == 403 and body["kind"] == "Status" and body["reason"] == "Forbidden"
    assert "not bound to a pod" in body["message"]
    assert "token" not in body


async def test_non_agents_get_503_offline(edge: Edge) -> None:
    await edge.cut()
    status, body = await edge.get("/api/v1/nodes", ua="go-http-client/1.1")
    assert status == 503 and "cache" in body["message"]


async def test_upstream_transport_error_is_answered_from_cache_at_once(
    edge: Edge, caplog: pytest.LogCaptureFixture
) -> None:
    await warm(edge)
    caplog.set_level(logging.INFO, logger="yurthub")
    caplog.clear()
    await edge.link.set_mode(partition.Mode.REFUSE)  # health has not noticed yet
    status, body = await edge.get(PODS, params=MY_PODS)
    assert status == 200 and body["items"]
    # At once: the request itself went up, failed on the connection, and the cache answered
    # it then (not after health noticed the link, which would need no upstream attempt).
    log = [(r.name, r.getMessage()) for r in caplog.records]
    tried = [
        n
        for n, (name, message) in enumerate(log)
        if name == "yurthub.proxy.routing" and message.startswith("list pods for /api/v1/pods via")
    ]
    assert tried, log
    assert not any(
        name == "yurthub.health" and "is now unhealthy" in message
        for name, message in log[: tried[0]]
    ), log


async def test_kubectl_offline_gets_tables_and_discovery(edge: Edge) -> None:
    online = await edge.kubectl("get", "pods", "-A")
    await edge.kubectl("get", "nodes")
    await edge.kubectl("version", "-o", "json")
    await edge.flush()
    await edge.cut()
    offline = await edge.kubectl("get", "pods", "-A")
    assert [line.split()[:2] for line in offline.stdout.splitlines()[1:]] == [
        line.split()[:2] for line in online.stdout.splitlines()[1:]
    ]
    assert "AGE" in offline.stdout.splitlines()[0]
    nodes = await edge.kubectl("get", "nodes")
    assert NODE in nodes.stdout.split()
    # Tables carried metadata only: a full-object read was never cached, so it is not invented.
    assert (await edge.kubectl("get", "nodes", "-o", "yaml", check=False)).returncode != 0
    version = await edge.kubectl("version", "-o", "json")
    assert "serverVersion" in orjson.loads(version.stdout)
    status, _ = await edge.get("/apis/apps/v1/deployments", ua="kubectl/v1.32.0", accept=TABLE)
    assert status == 404  # never listed by kubectl


async def test_hub_restarted_offline_answers_the_same(edge: Edge) -> None:
    await warm(edge)
    await edge.kubectl("get", "pods", "-A")
    await edge.flush()
    await edge.cut()
    before = await edge.get(PODS, params=MY_PODS)
    table_before = await edge.kubectl("get", "pods", "-A")
    await edge.restart_hub()
    assert not edge.healthy()
    after = await edge.get(PODS, params=MY_PODS)
    assert after == before
    table_after = await edge.kubectl("get", "pods", "-A")
    assert [line.split()[:2] for line in table_after.stdout.splitlines()] == [
        line.split()[:2] for line in table_before.stdout.splitlines()
    ]


async def test_kubelet_lease_is_answered_locally(edge: Edge) -> None:
    path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}"
    cached = keys.object_key(runtime.LEASE_SCOPE, runtime.LEASE_NAMESPACE, NODE)
    async with asyncio.timeout(10):  # the prober renewed the lease in the cloud, and cached it
        while edge.rt.store.entry(cached) is None:
            await asyncio.sleep(0.05)
    status, lease = await edge.get(path)
    assert status == 200 and lease["metadata"]["name"] == NODE
    await edge.cut(partition.Mode.REFUSE)
    await edge.flush()
    status, lease = await edge.get(path)  # the prober's last renewal, now stable
    assert status == 200
    renewed = {**lease, "spec": {**lease["spec"], "renewTime": "2030-01-01T00:00:00.000000Z"}}
    status, body, _ = await edge.request("PUT", path, body=renewed)
    assert status == 200 and body["spec"]["renewTime"] == "2030-01-01T00:00:00.000000Z"
    await edge.flush()
    status, again = await edge.get(path)
    assert status == 200 and again["spec"]["renewTime"] == "2030-01-01T00:00:00.000000Z"


async def test_cache_agents_from_the_configmap(edge: Edge) -> None:
    edge.sim.state.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "yurt-hub-cfg",
                "namespace": "kube-system",
                "labels": {"openyurt.io/configmap-name": "yurt-hub-cfg"},
            },
            "data": {"cache_agents": "virt-handler"},
        }
    )
    async with asyncio.TaskGroup() as tg:
        follow = tg.create_task(edge.rt.follow_config(edge.hub.own_route), name="follow-config")
        async with asyncio.timeout(5):
            while not edge.rt.agents.allows("virt-handler"):
                await asyncio.sleep(0.05)
        assert (await edge.get("/api/v1/nodes", ua="virt-handler/1.0"))[0] == 200
        follow.cancel()
    await edge.flush()
    await edge.cut()
    await edge.restart_hub()
    assert not edge.rt.agents.allows("virt-handler")  # until the config is read again
    async with asyncio.TaskGroup() as tg:
        follow = tg.create_task(edge.rt.follow_config(edge.hub.own_route), name="follow-config")
        async with asyncio.timeout(5):
            while not edge.rt.agents.allows("virt-handler"):
                await asyncio.sleep(0.05)
        status, nodes = await edge.get("/api/v1/nodes", ua="virt-handler/1.0")
        assert status == 200 and nodes["items"]
        follow.cancel()


async def test_discovery_offline_prefers_what_the_client_accepts(edge: Edge) -> None:
    aggregated = (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    )
    assert (await edge.get("/apis", accept=aggregated))[0] == 200
    assert (await edge.get("/apis", accept="application/json"))[0] == 200
    await edge.flush()
    await edge.cut()
    status, body, headers = await edge.request("GET", "/apis", accept=aggregated)
    assert status == 200 and "apidiscovery.k8s.io" in headers["Content-Type"]
    status, body, headers = await edge.request("GET", "/apis", accept="application/json")
    assert status == 200 and body["kind"] == "APIGroupList"
    status, body, _ = await edge.request("GET", "/apis/never.example.com/v1")
    assert status == 404 and body["kind"] == "Status"


async def test_cache_metrics_on_the_hub_server(edge: Edge) -> None:
    await warm(edge)
    async with edge.session.get(edge.hub.server_url + "/metrics") as resp:
        text = await resp.text()
    values = {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith(("node_yurthub_cache_", "node_yurthub_error_keys_count"))
    }
    assert values["node_yurthub_cache_objects"] >= 3
    assert values["node_yurthub_cache_lists"] >= 2
    assert values["node_yurthub_error_keys_count"] == 0
    assert values["node_yurthub_cache_write_failures_total"] == 0


async def test_chunked_kubectl_list_is_cached_whole(edge: Edge) -> None:
    online = await edge.kubectl("get", "pods", "-A", "--chunk-size=3")
    assert len(online.stdout.splitlines()) > 5  # several pages
    await edge.flush()
    await edge.cut()
    offline = await edge.kubectl("get", "pods", "-A")
    assert [line.split()[:2] for line in offline.stdout.splitlines()[1:]] == [
        line.split()[:2] for line in online.stdout.splitlines()[1:]
    ]


def _nested(depth: int, leaf: bytes = b'"x"') -> bytes:
    """``{"a": {"a": ... leaf}}``, ``depth`` objects deep (too deep for orjson to encode)."""
    return b'{"a":' * depth + leaf + b"}" * depth


async def test_deeply_nested_offline_writes_are_refused_with_a_status(
    edge: Edge, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 27 item 6: an offline merge patch or TokenRequest nested ~500 deep was a 500
    with a traceback per request; now a 400 Status, one log line for the patch."""
    caplog.set_level(logging.INFO)
    await warm(edge)
    await edge.cut()
    patch = b'{"metadata":{"labels":{"a":"b"}},"spec":' + _nested(500) + b"}"
    caplog.clear()
    status, body, _ = await edge.request(
        "PATCH", f"/api/v1/nodes/{NODE}", body=patch, content_type="application/merge-patch+json"
    )
    assert status == 400 and body["kind"] == "Status" and body["reason"] == "BadRequest"
    assert "nested deeper than 200 levels" in body["message"]
    refusals = [r for r in caplog.records if "nested deeper" in r.getMessage()]
    assert len(refusals) == 1 and refusals[0].levelno == logging.INFO
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    # As deep as may be, it is applied (and the answer encodes).
    patch = b'{"metadata":{"labels":{"a":"b"}},"spec":' + _nested(150) + b"}"
    status, node, _ = await edge.request(
        "PATCH", f"/api/v1/nodes/{NODE}", body=patch, content_type="application/merge-patch+json"
    )
    assert status == 200 and node["metadata"]["labels"]["a"] == "b"
    request = b'{"kind":"TokenRequest","apiVersion":"authentication.k8s.io/v1","spec":'
    status, body, _ = await edge.request(
        "POST",
        "/api/v1/namespaces/default/serviceaccounts/default/token",
        body=request + _nested(500) + b"}",
    )
    assert status == 400 and body["kind"] == "Status"
    assert "nested deeper than 200 levels" in body["message"]
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


async def still_held(resp: Any) -> None:
    """The held watch ``resp`` still sends bookmarks (0.3 s apart) a second from now: those
    sent before are read at once, so one read a second later proves it open."""
    since = time.monotonic()
    async with asyncio.timeout(30):
        while True:
            line = await resp.content.readline()
            assert orjson.loads(line)["type"] == "BOOKMARK"
            if time.monotonic() - since > 1.0:
                return


async def test_a_pool_feeders_held_watch_ends_at_the_heal_whatever_the_spread(
    tmp_path: pathlib.Path,
) -> None:
    """A pool feeder's watch (over the hub's own socket, with the hub's own multiplexer
    User-Agent) held offline ends as soon as the cloud is back, not within the heal spread:
    a fleet has one such reader a pool leader, and the pool's followers wait for it. The same
    watch from a client with that User-Agent on the proxy port stays held."""
    async with edge_node(tmp_path, heal_spread=600.0) as node:
        await warm(node)
        await node.cut()
        params = {"watch": "true", "timeoutSeconds": "60", "allowWatchBookmarks": "1"}
        headers = {"User-Agent": f"multiplexer-proxy-{NODE}"}
        route = node.hub.own_route
        async with (
            route.session() as own,
            own.get(route.url + PODS, params=params, headers=headers) as feeder,
            node.session.get(node.url + PODS, params=params, headers=headers) as forged,
        ):
            assert feeder.status == 200 and forged.status == 200
            await node.heal()
            async with asyncio.timeout(10):
                await feeder.read()  # ended at the heal
            await still_held(forged)  # a second after the feeder's ended


async def test_kubelets_watch_of_its_node_held_offline_ends_at_the_heal(
    tmp_path: pathlib.Path,
) -> None:
    """kubelet decides at each status tick from its node informer whether to report (only a
    retry reads the apiserver): its watch of its own Node ends as soon as the cloud is back,
    whatever the heal spread, and first gets the Node as the cloud has it now (the Unknown the
    node lifecycle controller wrote during the outage) as one MODIFIED event, so kubelet
    reports Ready at its next tick. The hub's cache keeps that Node. Its other watches keep
    the spread."""
    async with edge_node(tmp_path, heal_spread=600.0) as node:
        await warm(node)
        held_at = node.sim.state.get("nodes", None, NODE)["metadata"]["resourceVersion"]
        await node.cut()
        params = {"watch": "true", "timeoutSeconds": "60", "allowWatchBookmarks": "1"}
        own_node = {**params, "fieldSelector": f"metadata.name={NODE}", "resourceVersion": held_at}
        kubelet = {"User-Agent": KUBELET_UA}
        nodes = node.url + "/api/v1/nodes"
        async with (
            node.session.get(nodes, params=own_node, headers=kubelet) as mine,
            node.session.get(nodes, params=own_node, headers=kubelet) as twin,
            node.session.get(
                node.url + PODS, params={**params, **MY_PODS}, headers=kubelet
            ) as pods,
        ):
            assert mine.status == 200 and twin.status == 200 and pods.status == 200
            unknown = node.sim.state.get("nodes", None, NODE)
            unknown.setdefault("status", {})["conditions"] = [
                {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}
            ]
            node.sim.state.update(unknown)
            now = node.sim.state.get("nodes", None, NODE)["metadata"]["resourceVersion"]
            assert int(now) > int(held_at)
            node.sim.clear_audit_log()
            await node.heal()
            async with asyncio.timeout(10):
                events = [orjson.loads(line) for line in (await mine.read()).splitlines()]
                also = [orjson.loads(line) for line in (await twin.read()).splitlines()]
            await still_held(pods)
        # Both held watches got it from one read: one a heal, whenever each noticed it.
        reads = [r for r in node.sim.audit_log() if r.user_agent == routing.HEAL_USER_AGENT]
        assert [(r.verb, r.name) for r in reads] == [("get", NODE)]
        assert also[-1] == events[-1]
        news = [e for e in events if e["type"] != "BOOKMARK"]
        assert [e["type"] for e in news] == ["MODIFIED"] and events[-1] is news[0]
        sent = news[0]["object"]
        assert sent["kind"] == "Node" and sent["metadata"]["resourceVersion"] == now
        assert sent["status"]["conditions"][0]["status"] == "Unknown"
        assert all(e["object"]["metadata"]["resourceVersion"] == held_at for e in events[:-1])
        await node.flush()
        await node.cut()
        status, cached = await node.get(f"/api/v1/nodes/{NODE}")
        assert status == 200 and cached["metadata"]["resourceVersion"] == now


async def test_kubelets_held_node_watch_gets_nothing_at_the_heal_when_its_node_did_not_change(
    tmp_path: pathlib.Path,
) -> None:
    """The Node the cloud has at the heal is the one kubelet's watch is at: the watch ends
    with its bookmarks only (an event at its own version would be no news)."""
    async with edge_node(tmp_path, heal_spread=600.0) as node:
        await warm(node)
        held_at = node.sim.state.get("nodes", None, NODE)["metadata"]["resourceVersion"]
        await node.cut()
        own_node = {
            "watch": "true",
            "timeoutSeconds": "60",
            "allowWatchBookmarks": "1",
            "fieldSelector": f"metadata.name={NODE}",
            "resourceVersion": held_at,
        }
        async with node.session.get(
            node.url + "/api/v1/nodes", params=own_node, headers={"User-Agent": KUBELET_UA}
        ) as mine:
            assert mine.status == 200
            await node.heal()
            async with asyncio.timeout(10):
                events = [orjson.loads(line) for line in (await mine.read()).splitlines()]
        assert {e["type"] for e in events} <= {"BOOKMARK"}
