"""The heartbeat lane on the simulated apiserver behind a link that goes silent (blackhole)
and comes back: what the hub gave up on during the outage is never delivered when the route
returns (the lane resets its connections), so the apiserver sees no late lease PUT (a 504 for a
client long gone) and the first renewal after the heal is no 409 on a stale base; nor does a
node status PATCH the hub answered 504 take effect late."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from hubfakes import hub_behind_a_link, lease_requests

from yurthub.proxy import upstream
from yurthub.testing import partition

pytestmark = pytest.mark.slow

KUBELET = "kubelet/v1.37.2 (linux/amd64) kubernetes/abcdef0"


async def until(check: object, within: float = 20.0) -> None:
    async with asyncio.timeout(within):
        while not check():  # type: ignore[operator]
            await asyncio.sleep(0.05)


async def test_an_abandoned_renewal_is_never_delivered_and_the_next_is_no_conflict(
    tmp_path: pathlib.Path,
) -> None:
    async with hub_behind_a_link(tmp_path, interval=0.5) as (sim, link, hub):
        assert hub.health is not None
        await until(lambda: lease_requests(sim, "update").count(200) >= 2)
        await link.set_mode(partition.Mode.BLACKHOLE)
        await until(lambda: not hub.health.any_healthy())
        before = len(lease_requests(sim, "update"))
        await link.set_mode(partition.Mode.PASS)
        await until(hub.health.any_healthy)
        # A couple more renewals after the heal.
        await until(lambda: lease_requests(sim, "update")[before:].count(200) >= 3)
        after = lease_requests(sim, "update")[before:]
        # Every PUT the apiserver saw after the heal was a fresh renewal: none held over from
        # the outage (the first, abandoned one would land on the base it was built on and the
        # one after it would conflict).
        assert 409 not in after, after
        assert set(after) == {200}, after


async def test_a_node_patch_answered_504_does_not_take_effect_later(
    tmp_path: pathlib.Path,
) -> None:
    async with hub_behind_a_link(tmp_path, interval=0.5) as (sim, link, hub):
        assert hub.health is not None
        sim.state.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        await link.set_mode(partition.Mode.BLACKHOLE)
        async with aiohttp.ClientSession() as session:
            patch = session.patch(
                f"{hub.proxy_url}/api/v1/nodes/n1",
                data=b'{"metadata":{"labels":{"late":"yes"}}}',
                headers={
                    "User-Agent": KUBELET,
                    "Content-Type": "application/merge-patch+json",
                    "Accept": "application/json",
                },
            )
            async with asyncio.timeout(20), patch as resp:
                # The hub declares the apiserver gone and answers the PATCH it was sending.
                assert resp.status == 504, await resp.text()
        await link.set_mode(partition.Mode.PASS)
        await until(hub.health.any_healthy)
        # Long enough for a held request to arrive: the renewals after the heal went through.
        before = len(lease_requests(sim, "update"))
        await until(lambda: len(lease_requests(sim, "update")) >= before + 2)
        patched = [r for r in sim.audit_log() if r.resource == "nodes" and r.verb == "patch"]
        assert patched == []
        labels = sim.state.get("nodes", None, "n1")["metadata"].get("labels", {})
        assert "late" not in labels


async def test_kubelets_stalled_requests_never_hold_up_the_health_probes(
    tmp_path: pathlib.Path,
) -> None:
    # Anything on the node may say it is kubelet (the proxy authenticates nobody): a few node
    # PATCHes whose bodies never finish hold the lane's connections for as long as they like.
    # The probes have connections of their own: the hub keeps renewing and stays online.
    # Probes of 2 s: a probe starved of its lane would time out at any timeout, and on a
    # loaded machine three 0.5 s probes in a row can miss for want of CPU alone.
    async with hub_behind_a_link(tmp_path, interval=0.5, timeout=2.0) as (sim, _link, hub):
        assert hub.health is not None
        sim.state.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        flips: list[str] = []
        hub.health.on_unhealthy.append(flips.append)
        release = asyncio.Event()
        forwarded = 0

        async def stalled_body() -> AsyncIterator[bytes]:
            nonlocal forwarded
            yield b'{"metadata":{"labels":'
            forwarded += 1
            await release.wait()
            yield b'{"stalled":"yes"}}}'

        async def stalled_patch(session: aiohttp.ClientSession) -> None:
            headers = {"User-Agent": KUBELET, "Content-Type": "application/merge-patch+json"}
            url = f"{hub.proxy_url}/api/v1/nodes/n1"
            async with session.patch(url, data=stalled_body(), headers=headers) as resp:
                await resp.read()

        async with aiohttp.ClientSession() as session, asyncio.TaskGroup() as tg:
            for n in range(upstream.LANE_PER_SERVER + 1):
                tg.create_task(stalled_patch(session), name=f"stalled patch {n}")
            try:
                await until(lambda: forwarded > upstream.LANE_PER_SERVER)
                before = lease_requests(sim, "update").count(200)
                # Renewals go on while every stalled request is still held.
                await until(lambda: lease_requests(sim, "update").count(200) >= before + 3)
                assert flips == []
                assert hub.health.any_healthy()
            finally:
                release.set()
