"""The outage record on the simulated apiserver, through a partition the tests switch.

Each cut is one outage with the cause the hub met (refused, reset, silent: the partition's
modes; 401: the apiserver stops accepting the hub's token; TLS: the hub does not trust the
server's certificate); what the hub answered meanwhile is counted per component, verb and
resource, bounded under a flood; the tokens it issued are listed without the token; a hub
restarted during an outage records one outage; after the heal one Node Event says it all and
``GET /v1/outages`` keeps the history.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
import sqlite3
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from cache_edge import FAST_HEARTBEAT, KUBELET_UA, NODE, Edge, edge_node, edge_settings
from cryptography.hazmat.primitives import serialization

from yurthub import labels
from yurthub.outages import history, records
from yurthub.testing import partition, simapiserver
from yurthub.testing.sim import kubeconfigs, pki

KUBECTL_UA = "kubectl/v1.32.4 (linux/amd64) kubernetes/abcdef0"
NAMESPACES = "/api/v1/namespaces"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def outage_events(sim: simapiserver.SimApiserver) -> list[dict[str, Any]]:
    return [
        e for e in sim.state.list("events", "default") if e.get("reason") == records.EVENT_REASON
    ]


async def until(check: Callable[[], Any], within: float = 30.0) -> Any:
    async with asyncio.timeout(within):
        while not (found := check()):
            await asyncio.sleep(0.05)
    return found


async def outages_document(edge: Edge) -> dict[str, Any]:
    async with edge.session.get(edge.hub.server_url + "/v1/outages") as resp:
        assert resp.status == 200
        document: dict[str, Any] = await resp.json()
        return document


async def posted(edge: Edge, count: int) -> list[dict[str, Any]]:
    """Wait for ``count`` outage Events in the cloud and the history saying so."""
    events = await until(lambda: (e := outage_events(edge.sim)) and len(e) >= count and e)

    async def all_posted() -> bool:
        found = (await outages_document(edge))["outages"]
        return len(found) >= count and all(o["event"] == records.POSTED for o in found)

    async with asyncio.timeout(10):
        while not await all_posted():
            await asyncio.sleep(0.05)
    return list(events)


def sample(edge: Edge, name: str, **labelled: str) -> float:
    return edge.hub.metrics.registry.get_sample_value(name, labelled) or 0.0


@pytest.fixture
async def edge(tmp_path: pathlib.Path) -> AsyncIterator[Edge]:
    async with edge_node(tmp_path) as node:
        yield node


@pytest.mark.parametrize(
    ("mode", "cause"),
    [
        (partition.Mode.REFUSE, "refused"),
        (partition.Mode.RESET, "reset"),
        (partition.Mode.BLACKHOLE, "silent"),
    ],
)
async def test_a_cut_is_one_outage_with_its_cause_and_one_event_after_the_heal(
    edge: Edge, mode: partition.Mode, cause: str
) -> None:
    assert (await edge.get(NAMESPACES, ua=KUBECTL_UA))[0] == 200  # cached for offline
    await edge.flush()
    await edge.cut(mode)
    current = edge.hub.outages.current
    assert current is not None and current.cause == cause
    for _ in range(3):
        assert (await edge.get(NAMESPACES, ua=KUBECTL_UA))[0] == 200
    assert (await edge.get(CONFIGMAPS, ua=KUBECTL_UA))[0] == 404  # never listed: refused
    # While it lasts: the status says so, the gauge grows.
    async with edge.session.get(edge.hub.server_url + "/v1/status") as resp:
        ongoing = (await resp.json())["outages"]["ongoing"]
    assert ongoing["cause"] == cause and ongoing["answered"] == 3 and ongoing["refused"] == 1
    await until(lambda: sample(edge, "node_yurthub_outage_ongoing_seconds") > 0)
    assert outage_events(edge.sim) == []

    await edge.heal()
    (event,) = await posted(edge, 1)
    assert event["involvedObject"]["kind"] == "Node" and event["involvedObject"]["name"] == NODE
    assert event["type"] == "Normal" and event["source"]["component"] == "edgehub"
    assert event["metadata"]["name"] == records.event_name(NODE, current.id)
    message = event["message"]
    assert message.startswith(f"Node {NODE} could not reach the cloud for ")
    assert f": {records.cause_words(current)}" in message
    assert "The hub answered 3 requests locally (kubectl 3) and refused 1 (404 1)" in message
    (outage,) = (await outages_document(edge))["outages"]
    assert outage["cause"] == cause and not outage["ongoing"]
    assert outage["failedProbes"][cause] >= 1
    by_key = {(a["component"], a["verb"], a["resource"]): a for a in outage["answers"]}
    assert by_key["kubectl", "list", "namespaces"]["answered"] == 3
    assert by_key["kubectl", "list", "configmaps"]["refusedByCode"] == {"404": 1}
    assert outage["bySource"] == {"cache": 4}
    assert sample(edge, "node_yurthub_outage_seconds_count") == 1
    assert sample(edge, "node_yurthub_outage_ongoing_seconds") == 0
    assert edge.hub.outages.current is None

    # A second outage is a second record and a second Event.
    await edge.cut(mode)
    await edge.heal()
    events = await posted(edge, 2)
    assert len({e["metadata"]["name"] for e in events}) == 2
    assert len((await outages_document(edge))["outages"]) == 2


async def test_a_link_that_drops_again_soon_after_the_heal_is_one_outage_that_flapped(
    edge: Edge,
) -> None:
    """Within the flap window (a minute here) the second cut goes on with the first outage:
    one record, its flap counted, no Event while the link may still flap (the Event once it
    stayed up: ``tests/integration/hub/test_outages_flaps.py``, with a stepped clock)."""
    edge.hub_settings = dataclasses.replace(edge.hub_settings, outage_flap_window=60.0)
    await edge.restart_hub()
    await edge.wait_health(True)
    assert (await edge.get(NAMESPACES, ua=KUBECTL_UA))[0] == 200
    await edge.flush()
    await edge.cut(partition.Mode.REFUSE)
    first = edge.hub.outages.current
    assert first is not None
    assert (await edge.get(NAMESPACES, ua=KUBECTL_UA))[0] == 200
    await edge.heal()
    await edge.cut(partition.Mode.REFUSE)
    assert edge.hub.outages.current is first and first.flaps >= 1
    assert (await edge.get(NAMESPACES, ua=KUBECTL_UA))[0] == 200
    async with edge.session.get(edge.hub.server_url + "/v1/status") as resp:
        ongoing = (await resp.json())["outages"]["ongoing"]
    assert ongoing["flaps"] == first.flaps and ongoing["answered"] == 2
    assert sample(edge, "node_yurthub_outage_flaps_total") == first.flaps
    await edge.heal()
    (outage,) = (await outages_document(edge))["outages"]
    assert outage["id"] == first.id and outage["flaps"] == first.flaps
    assert outage["answered"] == 2 and outage["event"] == "pending"
    assert (await outages_document(edge))["bounds"]["flapWindowSeconds"] == 60.0
    ready, wait = await edge.hub.outages.due()
    assert ready == [] and wait is not None  # its Event waits for the link to stay up
    assert outage_events(edge.sim) == []
    assert sample(edge, "node_yurthub_outage_seconds_count") == 0  # observed once final


async def test_a_silent_kubelet_is_an_outage_of_its_own_cause(tmp_path: pathlib.Path) -> None:
    heartbeat = dataclasses.replace(FAST_HEARTBEAT, kubelet_health_grace_period=2.0)
    async with edge_node(tmp_path, heartbeat=heartbeat) as edge:
        lease = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}"
        await edge.get(lease, ua=KUBELET_UA)  # kubelet is alive: the gate opens
        # ...and goes silent: the hub stops renewing the node lease itself, the link is fine.
        await edge.wait_health(False, within=20)
        current = edge.hub.outages.current
        assert current is not None and current.cause == "kubelet"
        await edge.get(lease, ua=KUBELET_UA)  # kubelet is back
        await edge.wait_health(True, within=20)
        (event,) = await posted(edge, 1)
        assert "kubelet went silent" in event["message"]


async def test_answers_are_counted_by_source_component_and_verb_in_the_metrics(
    edge: Edge,
) -> None:
    assert (await edge.get(NAMESPACES, ua=KUBECTL_UA))[0] == 200
    await edge.flush()
    await edge.cut()
    assert (await edge.get(NAMESPACES, ua=KUBECTL_UA))[0] == 200
    series = "node_yurthub_answers_total"
    assert sample(edge, series, source="cloud", component="kubectl", verb="list") == 1
    assert sample(edge, series, source="cache", component="kubectl", verb="list") == 1


async def test_a_hub_restarted_during_an_outage_records_the_whole_outage_once(
    edge: Edge,
) -> None:
    assert (await edge.get(NAMESPACES, ua=KUBECTL_UA))[0] == 200
    await edge.flush()
    await edge.cut(partition.Mode.REFUSE)
    began = edge.hub.outages.current
    assert began is not None
    for _ in range(2):
        assert (await edge.get(NAMESPACES, ua=KUBECTL_UA))[0] == 200
    await edge.restart_hub()  # the link is still cut: the hub starts offline
    current = edge.hub.outages.current
    assert current is not None and current.id == began.id and current.restarts == 1
    for _ in range(3):
        assert (await edge.get(NAMESPACES, ua=KUBECTL_UA))[0] == 200
    await edge.heal()
    (event,) = await posted(edge, 1)
    assert event["metadata"]["name"] == records.event_name(NODE, began.id)
    assert "answered 5 requests locally" in event["message"]
    assert "The hub restarted once during it." in event["message"]
    (outage,) = (await outages_document(edge))["outages"]
    assert outage["hubRestarts"] == 1 and outage["answered"] == 5
    assert outage["began"] == records.timestamp(began.began)


async def test_a_hub_stopped_offline_and_started_online_ends_the_outage_it_recorded(
    edge: Edge,
) -> None:
    await edge.cut()
    began = edge.hub.outages.current
    assert began is not None
    await edge.stop_hub()
    await edge.link.set_mode(partition.Mode.PASS)  # the link came back while the hub was down
    await edge.start_hub()
    assert edge.hub.outages.current is None
    last = edge.hub.outages.last
    assert last is not None and last.id == began.id and last.restarts == 1
    (event,) = await posted(edge, 1)
    assert event["metadata"]["name"] == records.event_name(NODE, began.id)


async def test_a_hub_restarted_after_the_heal_posts_nothing_twice(edge: Edge) -> None:
    await edge.cut()
    await edge.heal()
    (first,) = await posted(edge, 1)
    await edge.restart_hub()
    await edge.wait_health(True)
    # The Event's state is on disk: the restarted hub has nothing to post.
    assert await edge.hub.outages.unposted() == []
    assert [e["metadata"]["name"] for e in outage_events(edge.sim)] == [first["metadata"]["name"]]


async def test_the_event_counts_the_offline_events_recorded_and_dropped(edge: Edge) -> None:
    cache = dataclasses.replace(edge.hub_settings.cache, offline_events=2)
    edge.hub_settings = dataclasses.replace(edge.hub_settings, cache=cache)
    await edge.restart_hub()  # a journal of 2 Events at most
    await edge.wait_health(True)
    await edge.cut()
    for i in range(3):
        event = {
            "kind": "Event",
            "apiVersion": "v1",
            "metadata": {"name": f"web-{i}.started", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": f"web-{i}"},
            "reason": "Started",
            "message": f"started container {i}",
            "source": {"component": "kubelet", "host": NODE},
            "count": 1,
            "type": "Normal",
        }
        status, body, _ = await edge.request(
            "POST", "/api/v1/namespaces/default/events", body=event
        )
        assert status == 201, body
    await edge.heal()
    (summary,) = await posted(edge, 1)
    assert "3 Events recorded offline, 1 dropped over the journal's bounds." in summary["message"]
    (outage,) = (await outages_document(edge))["outages"]
    assert (outage["eventsRecorded"], outage["eventsDropped"]) == (3, 1)


async def test_a_flood_of_distinct_requests_keeps_the_record_bounded(edge: Edge) -> None:
    components = sorted(labels.KNOWN_COMPONENTS)[:12]
    resources = sorted(labels.BUILTIN_RESOURCES)[:20]
    assert len(components) * len(resources) > records.MAX_KEYS
    await edge.cut()
    sent = 0
    for component in components:
        replies = await asyncio.gather(
            *(
                edge.get(f"/api/v1/namespaces/default/{r}/x", ua=f"{component}/1.0")
                for r in resources
            )
        )
        sent += len(replies)
    outage = edge.hub.outages.current
    assert outage is not None
    assert len(outage.tallies) == records.MAX_KEYS + 1
    assert outage.answered_total + outage.refused_total == sent
    assert outage.tallies[records.OTHER_KEY].refused > 0
    await edge.heal()
    (event,) = await posted(edge, 1)
    assert len(event["message"]) <= records.MAX_MESSAGE
    with contextlib.closing(
        sqlite3.connect(
            f"file:{edge.hub_settings.cache.disk_cache_path / history.FILE_NAME}?mode=ro", uri=True
        )
    ) as con:
        (size,) = con.execute("SELECT MAX(LENGTH(record)) FROM outages").fetchone()
    assert size < 64 << 10


async def test_offline_tokens_are_listed_without_the_token(tmp_path: pathlib.Path) -> None:
    async with edge_node(tmp_path) as edge:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "app", "namespace": "default"},
            "spec": {
                "nodeName": NODE,
                "serviceAccountName": "default",
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                "volumes": [
                    {
                        "name": "kube-api-access",
                        "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
                    }
                ],
            },
        }
        status, created, _ = await edge.request(
            "POST", "/api/v1/namespaces/default/pods", ua=KUBECTL_UA, body=pod
        )
        assert status == 201, created
        status, _ = await edge.get(
            "/api/v1/pods", ua=KUBELET_UA, params={"fieldSelector": f"spec.nodeName={NODE}"}
        )
        assert status == 200
        await edge.flush()
        await edge.cut()
        meta = created["metadata"]
        request = {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "spec": {
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                }
            },
        }
        status, answer, _ = await edge.request(
            "POST",
            "/api/v1/namespaces/default/serviceaccounts/default/token",
            ua=KUBELET_UA,
            body=request,
        )
        assert status == 201, answer
        token = answer["status"]["token"]
        outage = edge.hub.outages.current
        assert outage is not None and outage.tokens_issued == 1
        (listed,) = outage.tokens
        assert (listed.namespace, listed.service_account, listed.pod) == (
            "default",
            "default",
            "app",
        )
        key = ("kubelet", "create", "serviceaccounts/token")
        assert outage.tallies[key].answered == 1
        await edge.heal()
        (event,) = await posted(edge, 1)
        assert "issued 1 ServiceAccount token offline (default/default)" in event["message"]
        (shown,) = (await outages_document(edge))["outages"]
        assert shown["tokens"][0]["pod"] == "app" and "token" not in shown["tokens"][0]
        await edge.stop_hub()
        stored = (edge.hub_settings.cache.disk_cache_path / history.FILE_NAME).read_bytes()
        assert token.encode() not in stored
        assert token.split(".")[2].encode() not in stored  # not even its signature
        await edge.start_hub()


# --- 401 and TLS: the simulated apiserver's TLS port behind the partition ---------------------


KUBECONFIG = "hub.kubeconfig"


@contextlib.asynccontextmanager
async def tls_edge(workdir: pathlib.Path) -> AsyncIterator[Edge]:
    """An edge node (hub not started) reaching the sim's TLS port through the partition, with
    the kubeconfig ``workdir / KUBECONFIG`` the test writes."""
    async with (
        simapiserver.SimApiserver(workdir=workdir / "sim", seed="demo") as sim,
        partition.Partition("127.0.0.1", sim.port) as link,
        aiohttp.ClientSession() as session,
    ):
        hub_settings = edge_settings(workdir / "cache", f"https://127.0.0.1:{link.port}")
        upstream = dataclasses.replace(hub_settings.upstream, kubeconfig=workdir / KUBECONFIG)
        hub_settings = dataclasses.replace(hub_settings, upstream=upstream)
        yield Edge(workdir, sim, link, hub_settings, None, None, session)  # type: ignore[arg-type]


def node_kubeconfig(sim: simapiserver.SimApiserver, url: str, *, token: str, ca_pem: bytes) -> str:
    return kubeconfigs.render(server=url, ca_pem=ca_pem, user=f"system:node:{NODE}", token=token)


async def test_a_rejected_token_is_a_401_outage(tmp_path: pathlib.Path) -> None:
    async with tls_edge(tmp_path) as edge:
        sim = edge.sim
        token = sim.issue_token(f"system:node:{NODE}", ("system:nodes",))
        path = tmp_path / KUBECONFIG
        path.write_text(
            node_kubeconfig(
                sim, edge.hub_settings.upstream.servers[0], token=token, ca_pem=sim.ca_pem
            )
        )
        await edge.start_hub()
        try:
            await edge.wait_health(True)
            user = sim.state.static_tokens.pop(token)  # the apiserver forgets the hub's token
            await edge.wait_health(False)
            current = edge.hub.outages.current
            assert current is not None and current.cause == "unauthorized"
            sim.state.static_tokens[token] = user
            await edge.wait_health(True)
            (event,) = await posted(edge, 1)
            assert "401 Unauthorized" in event["message"]
        finally:
            await edge.stop_hub()


async def test_an_untrusted_server_is_a_tls_outage_until_the_ca_is_fixed(
    tmp_path: pathlib.Path,
) -> None:
    async with tls_edge(tmp_path) as edge:
        sim = edge.sim
        token = sim.issue_token(f"system:node:{NODE}", ("system:nodes",))
        other = pki.Authority.create("another-ca").cert.public_bytes(serialization.Encoding.PEM)
        url = edge.hub_settings.upstream.servers[0]
        path = tmp_path / KUBECONFIG
        path.write_text(node_kubeconfig(sim, url, token=token, ca_pem=other))
        await edge.start_hub()  # offline from the start: the first probe fails the handshake
        try:
            current = edge.hub.outages.current
            assert current is not None and current.cause == "tls"
            assert "certificate is not trusted" in current.reason
            # The operator fixes the CA: the next failed handshake reloads the kubeconfig.
            path.write_text(node_kubeconfig(sim, url, token=token, ca_pem=sim.ca_pem))
            await edge.wait_health(True, within=30)
            (event,) = await posted(edge, 1)
            assert "TLS handshake failed" in event["message"]
        finally:
            await edge.stop_hub()


async def test_every_answer_the_hub_gives_during_an_outage_is_counted_its_refusals_too(
    edge: Edge,
) -> None:
    """A foreign Host's 403, a bad request's 400, an unknown method's 405 and a 429 over the
    per-client limit are answers too: each is counted under its code, as docs/outages.md says."""
    proxy = dataclasses.replace(edge.hub_settings.proxy, max_long_running_per_client=1)
    edge.hub_settings = dataclasses.replace(edge.hub_settings, proxy=proxy)
    await edge.restart_hub()
    await edge.wait_health(True)
    assert (await edge.get(NAMESPACES, ua=KUBECTL_UA))[0] == 200  # cached for offline
    await edge.flush()
    await edge.cut(partition.Mode.REFUSE)
    headers = {"User-Agent": KUBECTL_UA, "Accept": "application/json"}
    url = edge.url + NAMESPACES
    answered: list[int] = []
    async with edge.session.get(url, params={"watch": "1"}, headers=headers) as held:
        assert held.status == 200  # an offline watch from the cache, held open
        async with edge.session.get(url, params={"watch": "1"}, headers=headers) as resp:
            answered.append(resp.status)  # one long-running request per client: 429
    async with edge.session.get(url, headers={**headers, "Host": "evil.example"}) as resp:
        answered.append(resp.status)
    async with edge.session.get(url, params={"limit": "many"}, headers=headers) as resp:
        answered.append(resp.status)
    async with edge.session.request("PROPFIND", url, headers=headers) as resp:
        answered.append(resp.status)
    assert answered == [429, 403, 400, 405]
    outage = edge.hub.outages.current
    assert outage is not None
    kubectl = {key: tally for key, tally in outage.tallies.items() if key[0] == "kubectl"}
    # (the held watch, closed by the client mid-stream, counts as "aborted", as before)
    assert kubectl[("kubectl", "watch", "namespaces")].codes["429"] == 1
    # refused before they were classified: the User-Agent's component, the method
    assert kubectl[("kubectl", "get", "")].codes == {"403": 1, "400": 1}
    assert kubectl[("kubectl", "other", "namespaces")].codes == {"405": 1}
