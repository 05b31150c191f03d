"""Offline answers come from the newest cached list that covers the request, whatever form it
was fetched in, and a Table built offline keeps the columns the apiserver gave it.

Before: after ``kubectl get pods -A -o json`` (full objects) and a newer ``kubectl get pods -A``
(a Table: metadata-only objects), the offline ``kubectl get pods -A`` showed the older full
list (a pod short), and a Table built from metadata-only objects had NAME and AGE only.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from cache_edge import NODE, Edge, edge_node

PARTIAL = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"


@pytest.fixture
async def edge(tmp_path: pathlib.Path) -> Any:
    async with edge_node(tmp_path) as node:
        yield node


def new_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
    }


def rows(stdout: str) -> list[list[str]]:
    """Table lines split into cells, without the AGE cell (it moves with the clock)."""
    lines = stdout.splitlines()
    header = lines[0].split()
    age = header.index("AGE") if "AGE" in header else None
    return [
        [cell for i, cell in enumerate(line.split()) if i != age] for line in [lines[0], *lines[1:]]
    ]


async def test_a_newer_table_list_answers_offline_with_its_columns(edge: Edge) -> None:
    await edge.kubectl("get", "pods", "-A", "-o", "json")  # full objects, older
    edge.sim.state.create(new_pod("newer-than-the-json-list"))
    online = await edge.kubectl("get", "pods", "-A")  # a Table, newer
    wide = await edge.kubectl("get", "pods", "-A", "-o", "wide")
    await edge.flush()
    await edge.cut()
    offline = await edge.kubectl("get", "pods", "-A")
    assert "newer-than-the-json-list" in offline.stdout
    assert rows(offline.stdout) == rows(online.stdout)
    offline_wide = await edge.kubectl("get", "pods", "-A", "-o", "wide")
    assert rows(offline_wide.stdout)[0] == rows(wide.stdout)[0]  # IP, NODE, ... columns kept
    assert rows(offline_wide.stdout) == rows(wide.stdout)


async def test_a_newer_full_list_answers_a_metadata_request(edge: Edge) -> None:
    status, _ = await edge.get("/api/v1/pods", ua="kubectl/v1.32.0", accept=PARTIAL)
    assert status == 200
    edge.sim.state.create(new_pod("only-in-the-full-list"))
    status, full = await edge.get("/api/v1/pods", ua="kubectl/v1.32.0")
    assert status == 200
    await edge.flush()
    await edge.cut()
    status, body = await edge.get("/api/v1/pods", ua="kubectl/v1.32.0", accept=PARTIAL)
    assert status == 200 and body["kind"] == "PartialObjectMetadataList"
    assert "only-in-the-full-list" in {i["metadata"]["name"] for i in body["items"]}
    assert body["metadata"]["resourceVersion"] == full["metadata"]["resourceVersion"]
