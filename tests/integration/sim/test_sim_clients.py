"""The official Python clients against the simulated apiserver: ``kubernetes`` (sync, with the
sim on a background thread) and ``kubernetes_asyncio`` (on the test's loop)."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Iterator
from typing import Any

import kubernetes as typed_kubernetes
import kubernetes_asyncio
import pytest

from yurthub.testing import simapiserver

# The sync client's generated annotations make every field Optional and every body a model
# class; the tests check values at run time, so they use it untyped.
kubernetes: Any = typed_kubernetes

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


@pytest.fixture
def sync_sim(tmp_path: pathlib.Path) -> Iterator[simapiserver.SimApiserverThread]:
    with simapiserver.SimApiserverThread(
        workdir=tmp_path / "sim", bookmark_interval=0.2, history_size=20
    ) as sim:
        yield sim


@pytest.fixture
def core(sync_sim: simapiserver.SimApiserverThread) -> Iterator[Any]:
    api = kubernetes.config.new_client_from_config(config_file=str(sync_sim.sim.kubeconfig_path))
    try:
        yield kubernetes.client.CoreV1Api(api)
    finally:
        api.close()


def test_sync_list_paging_and_conflict(core: Any) -> None:
    pods = core.list_pod_for_all_namespaces()
    assert len(pods.items) >= 10 and int(pods.metadata.resource_version) > 0
    first = core.list_namespaced_pod("default", limit=2)
    assert len(first.items) == 2 and first.metadata._continue
    rest = core.list_namespaced_pod("default", limit=100, _continue=first.metadata._continue)
    assert len(first.items) + len(rest.items) == len(core.list_namespaced_pod("default").items)
    edge = core.list_pod_for_all_namespaces(
        field_selector="spec.nodeName=edge-node-2", label_selector="app in (web,sensor-reader)"
    )
    assert {p.spec.node_name for p in edge.items} == {"edge-node-2"} and len(edge.items) == 2
    cm = core.create_namespaced_config_map(
        "default", {"metadata": {"name": "c1"}, "data": {"a": "1"}}
    )
    cm.data = {"a": "2"}
    core.replace_namespaced_config_map("c1", "default", cm)
    cm.data = {"a": "3"}  # still carries the old resourceVersion
    with pytest.raises(kubernetes.client.ApiException) as e:
        core.replace_namespaced_config_map("c1", "default", cm)
    assert e.value.status == 409
    with pytest.raises(kubernetes.client.ApiException) as e:
        core.read_namespaced_config_map("nope", "default")
    assert e.value.status == 404


def test_sync_watch_stream_with_bookmarks(
    sync_sim: simapiserver.SimApiserverThread, core: Any
) -> None:
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    sync_sim.call(
        sync_sim.state.create,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "w1", "namespace": "default"},
        },
    )
    seen: list[tuple[str, str]] = []
    watch = kubernetes.watch.Watch()
    for event in watch.stream(
        core.list_namespaced_config_map,
        "default",
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=5,
    ):
        if event["type"] == "BOOKMARK":
            # The client leaves BOOKMARK objects undecoded.
            assert int(event["object"]["metadata"]["resourceVersion"]) >= int(rv)
            seen.append(("BOOKMARK", ""))
            watch.stop()
        else:
            seen.append((event["type"], event["object"].metadata.name))
    assert seen[0] == ("ADDED", "w1")
    assert seen[-1][0] == "BOOKMARK"


def test_sync_expired_watch_is_410(sync_sim: simapiserver.SimApiserverThread, core: Any) -> None:
    old = core.list_namespaced_config_map("default").metadata.resource_version
    for i in range(30):
        sync_sim.call(
            sync_sim.state.create,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"n{i}", "namespace": "default"},
            },
        )
    stream = kubernetes.watch.Watch().stream(
        core.list_namespaced_config_map, "default", resource_version=old, timeout_seconds=5
    )
    with pytest.raises(kubernetes.client.ApiException) as e:
        for _ in stream:
            pass
    assert e.value.status == 410


def test_sync_custom_resource_crud(sync_sim: simapiserver.SimApiserverThread) -> None:
    api = kubernetes.config.new_client_from_config(config_file=str(sync_sim.sim.kubeconfig_path))
    try:
        kubernetes.client.ApiextensionsV1Api(api).create_custom_resource_definition(WIDGET_CRD)
        custom = kubernetes.client.CustomObjectsApi(api)
        args = ("example.com", "v1", "default", "widgets")
        custom.create_namespaced_custom_object(
            *args,
            {
                "apiVersion": "example.com/v1",
                "kind": "Widget",
                "metadata": {"name": "w"},
                "spec": {"size": 1},
            },
        )
        custom.patch_namespaced_custom_object(*args, "w", {"spec": {"size": 2}})
        custom.patch_namespaced_custom_object_status(*args, "w", {"status": {"ready": True}})
        got = custom.get_namespaced_custom_object(*args, "w")
        assert got["spec"] == {"size": 2} and got["status"] == {"ready": True}
        assert got["metadata"]["generation"] == 2
        assert [
            i["metadata"]["name"] for i in custom.list_namespaced_custom_object(*args)["items"]
        ] == ["w"]
        custom.delete_namespaced_custom_object(*args, "w")
        assert custom.list_namespaced_custom_object(*args)["items"] == []
    finally:
        api.close()


async def test_asyncio_client_list_watch_conflict_and_410(
    sim_apiserver: simapiserver.SimApiserver,
) -> None:
    sim_apiserver.bookmark_interval = 0.2
    sim_apiserver.state.set_history_size(10)
    api = await kubernetes_asyncio.config.new_client_from_config(
        config_file=str(sim_apiserver.kubeconfig_path)
    )
    async with api:
        core = kubernetes_asyncio.client.CoreV1Api(api)
        nodes = await core.list_node(label_selector="apps.openyurt.io/nodepool=edge-pool")
        assert sorted(n.metadata.name for n in nodes.items) == ["edge-node-1", "edge-node-2"]
        listing = await core.list_namespaced_config_map("default")
        events: list[tuple[str, str]] = []
        watch = kubernetes_asyncio.watch.Watch()

        async def mutate() -> None:
            await asyncio.sleep(0.1)
            sim_apiserver.state.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "aw", "namespace": "default"},
                }
            )

        async with asyncio.TaskGroup() as tg:
            tg.create_task(mutate(), name="mutate")
            async with watch.stream(
                core.list_namespaced_config_map,
                "default",
                resource_version=listing.metadata.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=5,
            ) as stream:
                async for event in stream:
                    if event["type"] == "BOOKMARK":
                        events.append(("BOOKMARK", ""))
                        break
                    events.append((event["type"], event["object"].metadata.name))
        assert events[0] == ("ADDED", "aw") and events[-1][0] == "BOOKMARK"
        cm = await core.read_namespaced_config_map("aw", "default")
        cm.data = {"x": "1"}
        await core.replace_namespaced_config_map("aw", "default", cm)
        with pytest.raises(kubernetes_asyncio.client.ApiException) as e:
            await core.replace_namespaced_config_map("aw", "default", cm)
        assert e.value.status == 409
        old = listing.metadata.resource_version
        for i in range(15):
            sim_apiserver.state.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"f{i}", "namespace": "default"},
                }
            )
        with pytest.raises(kubernetes_asyncio.client.ApiException) as e:
            async with kubernetes_asyncio.watch.Watch().stream(
                core.list_namespaced_config_map, "default", resource_version=old, timeout_seconds=5
            ) as stream:
                async for _ in stream:
                    pass
        assert e.value.status == 410
