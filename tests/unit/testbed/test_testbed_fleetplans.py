"""The fleet's shape and load (``fleetplans``): names, pools, the objects and their bounds."""

from __future__ import annotations

import collections
import ipaddress

import pytest

from yurthub.testing import fleetplans


@pytest.mark.parametrize(
    ("subnet", "index", "address"),
    [
        (10, 0, "127.10.0.1"),
        (10, 249, "127.10.0.250"),
        (10, 250, "127.10.1.1"),
        (12, 1001, "127.12.4.2"),
    ],
)
def test_node_addresses(subnet: int, index: int, address: str) -> None:
    assert fleetplans.node_address(subnet, index) == address
    assert ipaddress.ip_address(address).is_loopback


@pytest.mark.parametrize(("subnet", "index"), [(0, 0), (255, 0), (10, -1), (10, 62_500)])
def test_node_addresses_out_of_range(subnet: int, index: int) -> None:
    with pytest.raises(ValueError):
        fleetplans.node_address(subnet, index)


@pytest.mark.parametrize(
    ("nodes", "pools", "sizes"),
    [(6, 2, [3, 3]), (7, 3, [3, 2, 2]), (30, 3, [10, 10, 10]), (5, 5, [1] * 5), (4, 1, [4])],
)
def test_pools_are_contiguous_blocks_differing_by_one_at_most(
    nodes: int, pools: int, sizes: list[int]
) -> None:
    found = [fleetplans.pool_index(i, nodes, pools) for i in range(nodes)]
    assert found == sorted(found)
    counts = collections.Counter(found)
    assert sorted(counts.values(), reverse=True) == sorted(sizes, reverse=True)
    assert set(counts) == set(range(pools))


@pytest.mark.parametrize(("index", "nodes", "pools"), [(0, 3, 4), (0, 3, 0), (3, 3, 1)])
def test_pool_index_refuses_impossible_fleets(index: int, nodes: int, pools: int) -> None:
    with pytest.raises(ValueError):
        fleetplans.pool_index(index, nodes, pools)


def test_placements_name_pools_by_prefix() -> None:
    found = fleetplans.placements("f", 11, 3, 2)
    assert [(p.name, p.pool) for p in found] == [
        ("127.11.0.1", "f-pool-0"),
        ("127.11.0.2", "f-pool-0"),
        ("127.11.0.3", "f-pool-1"),
    ]


@pytest.mark.parametrize(
    ("total", "services", "want"),
    [
        (10, 3, [4, 3, 3]),
        (0, 2, [0, 0]),
        (900, 200, [5] * 100 + [4] * 100),
        (3, 5, [1, 1, 1, 0, 0]),
    ],
)
def test_replicas_spread_the_pods(total: int, services: int, want: list[int]) -> None:
    assert fleetplans.replicas(total, services) == want


def test_the_load_is_what_the_spec_says() -> None:
    spec = fleetplans.LoadSpec(
        prefix="f", pods=45, services=20, namespaces=4, configmaps=8, secrets=4
    )
    objects = list(fleetplans.objects(spec))
    kinds = collections.Counter(o["kind"] for o in objects)
    assert kinds == {"Namespace": 4, "ConfigMap": 8, "Secret": 4, "Service": 20, "Deployment": 20}
    # Namespaces first: everything else lives in one.
    assert [o["kind"] for o in objects[:4]] == ["Namespace"] * 4
    assert all(o["metadata"]["labels"][fleetplans.LABEL] == "f" for o in objects)
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    assert sum(d["spec"]["replicas"] for d in deployments) == 45
    held = {(o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects}
    for d in deployments:
        ns = d["metadata"]["namespace"]
        pod = d["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {fleetplans.LABEL: "f"}
        volumes = {v["name"]: v for v in pod["volumes"]}
        # Every mount names an object of the load, in the pod's own namespace.
        assert (ns, volumes["config"]["configMap"]["name"]) in held
        assert (ns, volumes["secret"]["secret"]["secretName"]) in held
        # The Service of the same name selects exactly these pods.
        service = next(
            o
            for o in objects
            if o["kind"] == "Service" and o["metadata"]["name"] == d["metadata"]["name"]
        )
        assert service["spec"]["selector"] == d["spec"]["selector"]["matchLabels"]
        assert service["metadata"]["namespace"] == ns


@pytest.mark.parametrize(
    "kwargs",
    [
        {"pods": -1},
        {"pods": 1, "services": 0},
        {"pods": 1, "namespaces": 4, "configmaps": 3},
        {"pods": 1, "namespaces": 4, "secrets": 2},
        {"pods": 1, "namespaces": 30, "services": 20, "configmaps": 30, "secrets": 30},
    ],
)
def test_load_specs_that_cannot_be_built_are_refused(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        fleetplans.LoadSpec(prefix="f", **kwargs)


@pytest.mark.parametrize(("count", "size", "lengths"), [(5, 2, [2, 2, 1]), (4, 4, [4]), (0, 3, [])])
def test_batches(count: int, size: int, lengths: list[int]) -> None:
    items = ({"n": i} for i in range(count))
    docs = list(fleetplans.batches(items, size))
    assert [len(d["items"]) for d in docs] == lengths
    assert all(d["kind"] == "List" for d in docs)
    assert [i["n"] for d in docs for i in d["items"]] == list(range(count))
