"""The apiserver pushing back (429, as API Priority and Fairness answers) through the hub, on
two simulated apiservers over one state: a client's 429 reaches it unchanged (client-go
honours ``Retry-After``) and is never retried against the other apiserver; a heartbeat
answered 429 leaves the apiserver healthy (it is up, only busy)."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from hubfakes import hub_behind_a_link, lease_requests, running_hub

from yurthub import server
from yurthub.testing import partition, simapiserver
from yurthub.testing.sim import throttling

pytestmark = pytest.mark.slow

KUBELET = "kubelet/v1.37.2 (linux/amd64) kubernetes/abcdef0"


@contextlib.asynccontextmanager
async def two_apiservers_and_a_hub(
    tmp_path: pathlib.Path,
) -> AsyncIterator[tuple[simapiserver.SimApiserver, simapiserver.SimApiserver, server.Hub]]:
    a = simapiserver.SimApiserver(workdir=tmp_path / "a")
    await a.start()
    b = simapiserver.SimApiserver(workdir=tmp_path / "b", state=a.state)
    await b.start()
    identity = tmp_path / "hub.kubeconfig"
    a.write_kubeconfig(identity, user="system:node:n1", groups=["system:nodes"], auth="cert")
    try:
        async with running_hub(
            [a.url, b.url], upstream={"kubeconfig": identity}, interval=0.3
        ) as hub:
            assert hub.health is not None
            assert hub.health.is_healthy(a.url) and hub.health.is_healthy(b.url)
            yield a, b, hub
    finally:
        await b.stop()
        await a.stop()


def pod_lists(*sims: simapiserver.SimApiserver) -> list[int]:
    return [
        r.code for s in sims for r in s.audit_log() if r.resource == "pods" and r.verb == "list"
    ]


async def test_a_client_gets_the_429_as_the_apiserver_sent_it(tmp_path: pathlib.Path) -> None:
    async with two_apiservers_and_a_hub(tmp_path) as (a, b, hub):
        rules = [
            s.throttle(verbs=["list"], resources=["pods"], user_agents=["kubelet/"]) for s in (a, b)
        ]
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                f"{hub.proxy_url}/api/v1/pods",
                headers={"User-Agent": KUBELET, "Accept": "application/json"},
            ) as resp,
        ):
            body = await resp.read()
            assert resp.status == 429
            assert resp.headers["Content-Type"] == "text/plain; charset=utf-8"
            assert resp.headers["Retry-After"] == "1"
            refused_by = next(rule for rule in rules if rule.refused)
            assert resp.headers[throttling.FLOW_SCHEMA_HEADER] == refused_by.flow_schema_uid
            assert resp.headers[throttling.PRIORITY_LEVEL_HEADER] == refused_by.priority_level_uid
        # APF's own words, byte for byte (no Status: checked on the real apiserver).
        assert body == b"Too many requests, please try again later.\n"
        # One apiserver asked, once: a 429 is an answer, not a reason to try the other one.
        assert pod_lists(a, b) == [429]
        assert sum(rule.refused for rule in rules) == 1
        # Nor a sign of ill health.
        assert hub.health is not None
        assert hub.health.is_healthy(a.url) and hub.health.is_healthy(b.url)


async def test_a_heartbeat_answered_429_keeps_the_apiserver_healthy(
    tmp_path: pathlib.Path,
) -> None:
    async with two_apiservers_and_a_hub(tmp_path) as (a, b, hub):
        assert hub.health is not None
        rules = [s.throttle(resources=["leases"], users=["system:node:n1"]) for s in (a, b)]
        seen_unhealthy: list[str] = []
        async with asyncio.timeout(20):
            # A few heartbeats answered 429 by each apiserver (one every 0.3 s, alternating).
            while min(rule.refused for rule in rules) < 3:
                seen_unhealthy += [s.url for s in (a, b) if not hub.health.is_healthy(s.url)]
                await asyncio.sleep(0.05)
        assert seen_unhealthy == []
        assert hub.health.pushbacks >= 6
        # Nothing else says the node's lease is not being renewed: the metric does.
        family = "node_yurthub_heartbeat_pushbacks_total"
        counted = [hub.metrics.registry.get_sample_value(family, {"server": s.url}) for s in (a, b)]
        assert sum(c or 0 for c in counted) == hub.health.pushbacks
        for sim in (a, b):
            # Each was asked once per heartbeat: no retries of a 429 in the same probe.
            leases = [r for r in sim.audit_log() if r.resource == "leases" and r.code == 429]
            assert len(leases) == rules[(a, b).index(sim)].refused


async def test_an_apiserver_back_from_an_outage_that_answers_429_is_not_trusted_yet(
    tmp_path: pathlib.Path,
) -> None:
    # The link heals while the apiserver is pushing back (a fleet's hubs all reconnecting):
    # a 429 shows it is up, but the hub does not send its clients back to it until it accepts
    # a renewal, or every hub's clients would return at once to the apiserver that is refusing.
    async with hub_behind_a_link(tmp_path, interval=0.3) as (sim, link, hub):
        assert hub.health is not None
        await link.set_mode(partition.Mode.RESET)
        async with asyncio.timeout(10):
            while hub.health.any_healthy():
                await asyncio.sleep(0.05)
        rule = sim.throttle(resources=["leases"], users=["system:node:n1"])
        await link.set_mode(partition.Mode.PASS)
        async with asyncio.timeout(20):
            while rule.refused < 4:
                await asyncio.sleep(0.05)
        assert not hub.health.any_healthy()
        sim.unthrottle(rule)
        async with asyncio.timeout(20):
            while not hub.health.any_healthy():
                await asyncio.sleep(0.05)


async def test_a_renewal_refused_429_keeps_its_base(tmp_path: pathlib.Path) -> None:
    # A 429 is answered before the request is handled: the lease is as it was, and the next
    # renewal is one PUT on the same base, not a GET and a PUT to an apiserver that is busy.
    async with hub_behind_a_link(tmp_path, interval=0.3) as (sim, _link, hub):
        assert hub.health is not None
        async with asyncio.timeout(10):
            while lease_requests(sim, "update").count(200) < 2:
                await asyncio.sleep(0.05)
        gets = len(lease_requests(sim, "get"))
        rule = sim.throttle(verbs=["update"], resources=["leases"], users=["system:node:n1"])
        async with asyncio.timeout(20):
            while rule.refused < 4:
                await asyncio.sleep(0.05)
        assert len(lease_requests(sim, "get")) == gets
        assert hub.health.any_healthy()
