"""The hub's own ConfigMaps upstream: ``yurt-hub-cfg`` and ``leader-hub-<pool>`` come through
one ConfigMap watch per hub (one label selector names both), and each still reaches its
reader."""

from __future__ import annotations

import pathlib

from pool_edge import eventually, pool_of

from yurthub.cache import agents


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
