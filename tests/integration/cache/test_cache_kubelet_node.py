"""Kubelet's ``get node`` through the hub, on the simulated apiserver behind a link.

Kubelet reads its Node every 10 s to build its status and patches only what changed. The hub
answers that read from its cache once the cache's copy came from the cloud; after an outage
the copy is what the cloud said before the cut. Meanwhile the node lifecycle controller wrote
``Ready: Unknown``; kubelet, handed its own old status back, saw nothing to report, and the
node stayed NotReady until kubelet's node watch had brought the change to the cache (the
fleet's nodes took 20-32 s to be Ready after a heal). So the first read after an outage, and
after the hub starts, goes to the cloud; the next ones are local again.
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest
from cache_edge import NODE, Edge, edge_node

from yurthub.testing import partition

NODE_PATH = f"/api/v1/nodes/{NODE}"
MARK = "edgehub.test/during-the-outage"


@pytest.fixture
async def edge(tmp_path: pathlib.Path) -> AsyncIterator[Edge]:
    async with edge_node(tmp_path) as node:
        yield node


def cloud_reads(edge: Edge) -> int:
    """kubelet's reads of its node that reached the apiserver."""
    return sum(
        1
        for r in edge.sim.audit_log()
        if r.resource == "nodes"
        and r.verb == "get"
        and r.name == NODE
        and not r.subresource
        and r.user_agent.startswith("kubelet/")
    )


def mark_in_the_cloud(edge: Edge) -> None:
    """What the node lifecycle controller does to a node whose kubelet went quiet: a change
    the hub cannot see while the link is cut (here a label, so the test reads it easily)."""
    node = edge.sim.state.get("nodes", None, NODE)
    node["metadata"].setdefault("labels", {})[MARK] = "yes"
    node["metadata"].pop("resourceVersion", None)
    edge.sim.state.update(node)


def marked(node: dict[str, object]) -> bool:
    meta = node["metadata"]
    assert isinstance(meta, dict)
    return MARK in (meta.get("labels") or {})


async def test_the_first_node_read_after_an_outage_comes_from_the_cloud(edge: Edge) -> None:
    status, node = await edge.get(NODE_PATH)
    assert status == 200 and not marked(node)
    assert cloud_reads(edge) == 1  # the hub's first read since it started: the cloud's
    await edge.flush()
    status, node = await edge.get(NODE_PATH)
    assert status == 200 and cloud_reads(edge) == 1  # then the cache's copy

    await edge.cut(partition.Mode.REFUSE)
    mark_in_the_cloud(edge)
    status, node = await edge.get(NODE_PATH)
    assert status == 200 and not marked(node)  # offline: the copy from before the cut

    await edge.heal()
    # Anything on the node may say it is kubelet: its read of another node read from the cloud
    # says nothing about this node's copy.
    edge.sim.state.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "other"}})
    assert (await edge.get("/api/v1/nodes/other"))[0] == 200
    status, node = await edge.get(NODE_PATH)
    assert status == 200 and marked(node), node["metadata"]
    assert cloud_reads(edge) == 2
    await edge.flush()
    # Read from the cloud, the copy is current again: the next read is local, and it is that
    # copy (no node watch ran here to update the cache).
    status, node = await edge.get(NODE_PATH)
    assert status == 200 and marked(node) and cloud_reads(edge) == 2


async def test_a_restarted_hub_reads_the_node_from_the_cloud_first(edge: Edge) -> None:
    status, _ = await edge.get(NODE_PATH)
    assert status == 200 and cloud_reads(edge) == 1
    await edge.flush()
    mark_in_the_cloud(edge)  # while the hub is down, say
    await edge.restart_hub()
    status, node = await edge.get(NODE_PATH)
    assert status == 200 and marked(node) and cloud_reads(edge) == 2
    await edge.flush()
    status, node = await edge.get(NODE_PATH)
    assert status == 200 and marked(node) and cloud_reads(edge) == 2
