"""The hub's own ConfigMaps upstream: ``yurt-hub-cfg`` and ``leader-hub-<pool>`` come through
one ConfigMap watch per hub (one label selector names both), and each still reaches its
reader."""

from __future__ import annotations

import asyncio
import logging
import pathlib

import pytest
import yaml
from pool_edge import NAMES, POOL, eventually, pool_of

from yurthub.cache import agents

CRDS = pathlib.Path(__file__).parents[3] / "manifests" / "crds"


def hub_cfg(sim: object, **data: str) -> None:
    sim.state.apply(  # type: ignore[attr-defined]
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": agents.CONFIGMAP_NAME,
                "namespace": "kube-system",
                "labels": {agents.CONFIGMAP_LABEL: agents.CONFIGMAP_NAME},
            },
            "data": data,
        }
    )


async def test_one_configmap_watch_per_hub_feeds_both_configmaps(tmp_path: pathlib.Path) -> None:
    async with pool_of(tmp_path) as pool:
        leader, *followers = pool.hubs
        for hub in followers:
            await eventually(lambda h=hub: h.source() == "edge-node-1" and h.watching())
        # Both ConfigMaps change; every hub hears of both through its watch.
        hub_cfg(pool.sim, cache_agents="some-agent")
        pool.set_leaders("edge-node-2")
        for hub in pool.hubs:
            cache = hub.node.cache  # type: ignore[union-attr]
            await eventually(
                lambda c=cache: "some-agent" in c.agents.current.names, what=f"{hub.name} cfg"
            )
        await eventually(lambda: followers[1].source() == "edge-node-2", what="new leader")
        await eventually(lambda: leader.source() == "edge-node-2", what="old leader follows")
        # One ConfigMap watch per hub, not one per ConfigMap.
        assert pool.sim.open_watches().get("configmaps", 0) == len(pool.hubs)


async def test_the_filters_nodepools_come_from_the_leader(tmp_path: pathlib.Path) -> None:
    async with pool_of(tmp_path, start=False) as pool:
        for name in ("nodepools.apps.openyurt.io.yaml",):
            pool.sim.state.create(yaml.safe_load((CRDS / name).read_text()))
        pool.sim.state.apply(
            {
                "apiVersion": "apps.openyurt.io/v1beta2",
                "kind": "NodePool",
                "metadata": {"name": POOL},
                "spec": {"type": "Edge"},
                "status": {"nodes": list(NAMES), "readyNodeNum": len(NAMES)},
            }
        )
        await asyncio.gather(*(hub.start() for hub in pool.hubs))
        _, *followers = pool.hubs
        for hub in followers:
            await eventually(
                lambda h=hub: h.source("nodepools") == "edge-node-1" and h.watching("nodepools"),
                what=hub.name,
            )
        for hub in pool.hubs:  # every hub's servicetopology knows the pool's nodes
            world = hub.node.filters.inputs  # type: ignore[union-attr]
            await eventually(
                lambda w=world: w.node_pools.synced and POOL in w.node_pools.nodes,
                what=f"{hub.name} knows the pool",
            )
        # Only the leader watches NodePools upstream; the followers read them from it.
        assert pool.sim.open_watches().get("nodepools", 0) == 1


async def test_a_resource_the_leader_cannot_read_moves_only_its_own_feeders(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    # No NodePool CRD: the leader's own read of nodepools fails (404), so it answers its
    # followers 503 for them, and keeps serving services and endpointslices.
    async with pool_of(tmp_path) as pool:
        _, *followers = pool.hubs
        for hub in followers:
            await eventually(lambda h=hub: h.source() == "edge-node-1" and h.watching())

        def left() -> set[str]:
            return {
                r.getMessage().split(":", 1)[0]
                for r in caplog.records
                if r.name == "yurthub.pool.feeding" and "from elsewhere" in r.getMessage()
            }

        await eventually(lambda: left() == {"apps.openyurt.io/v1beta2/nodepools"}, within=20.0)
        assert [hub.source() for hub in followers] == ["edge-node-1", "edge-node-1"]
        assert [hub.source("endpointslices") for hub in followers] == ["edge-node-1"] * 2
        assert pool.upstream_watches() == {"services": 1, "endpointslices": 1}
