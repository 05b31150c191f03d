"""The model to 10,000 nodes (``fleetmodel``) and the cost arithmetic of ``fleetmeasures``."""

from __future__ import annotations

import socket

import pytest

from yurthub.testing import fleetmeasures, fleetmodel, procstats

BASE = fleetmodel.Baseline(watches=100.0, pool_watches=4.0, request_rate=2.0)


def test_direct_grows_pool_watches_with_the_nodes() -> None:
    # 30 nodes: 3 pool-scoped watches each (90), 20 others each (600).
    direct = fleetmodel.Measured(
        "direct",
        nodes=30,
        pools=3,
        watches=100 + 690,
        pool_watches=94,
        request_rate=2 + 30 * 0.5,
        link_bytes_per_second=30 * 100.0,
        storm_peak_rate=2 + 30 * 4.0,
        storm_requests=30 * 50.0,
        storm_link_bytes=30 * 1e6,
    )
    p = fleetmodel.per_node(direct, BASE)
    assert (p.pool_watches_per_node, p.other_watches_per_node) == (3.0, 20.0)
    assert (p.request_rate_per_node, p.storm_peak_per_node) == (0.5, 4.0)
    e = fleetmodel.extrapolate(p, fleetmodel.Target(), pooled=False)
    assert e.pool_watches == 30_000
    assert e.watches == 230_000
    assert e.request_rate == 5_000
    assert e.storm_peak_rate == 40_000
    assert e.link_gib_per_hour == pytest.approx(100.0 * 10_000 * 3600 / (1 << 30))
    assert e.storm_link_gib == pytest.approx(1e6 * 10_000 / (1 << 30))


def test_hubs_pool_per_pool() -> None:
    hub = fleetmodel.Measured(
        "edgehub",
        nodes=30,
        pools=3,
        watches=100 + 6 + 600,
        pool_watches=4 + 6,
        request_rate=17.0,
        link_bytes_per_second=1.0,
    )
    found = fleetmodel.model({"edgehub": hub}, BASE)["edgehub"]
    assert found.pool_watches == 200  # 2 per pool, 100 pools
    assert found.watches == 200_000 + 200
    assert found.storm_peak_rate is None and found.storm_link_gib is None


def test_nothing_goes_negative_when_a_mode_measured_below_the_baseline() -> None:
    low = fleetmodel.Measured(
        "x",
        nodes=3,
        pools=1,
        watches=50,
        pool_watches=1,
        request_rate=1.0,
        link_bytes_per_second=0.0,
    )
    p = fleetmodel.per_node(low, BASE)
    assert (p.pool_watches_per_node, p.other_watches_per_node, p.request_rate_per_node) == (0, 0, 0)


def test_costs_between_two_readings_and_by_role() -> None:
    before = (
        10.0,
        {
            "kube-apiserver": procstats.Usage(5.0, 0),
            "hub|a": procstats.Usage(1.0, 0),
            "hub|b": procstats.Usage(1.0, 0),
        },
    )
    after = (
        20.0,
        {
            "kube-apiserver": procstats.Usage(7.0, 300 << 20),
            "hub|a": procstats.Usage(1.5, 60 << 20),
            "hub|b": procstats.Usage(2.0, 80 << 20),
            "kubelet|a": procstats.Usage(9.0, 1 << 20),
        },
    )
    costs = fleetmeasures.costs_between(before, after)
    assert costs["kube-apiserver"] == fleetmeasures.Cost(200.0, 300.0)
    assert "kubelet|a" not in costs  # not running at the first reading
    control, roles = fleetmeasures.split_roles(costs)
    assert list(control) == ["kube-apiserver"]
    hub = fleetmeasures.role_costs(roles)["hub"]
    assert (hub.count, hub.mean_millicores, hub.max_millicores) == (2, 75.0, 100.0)
    assert (hub.mean_rss_mib, hub.max_rss_mib) == (70.0, 80.0)


@pytest.mark.parametrize(
    ("before", "after", "seconds", "want"),
    [(1.0, 2.0, 4.0, 250.0), (1.0, 1.0, 1.0, 0.0), (2.0, 1.0, 1.0, 0.0), (1.0, 2.0, 0.0, 0.0)],
)
def test_millicores(before: float, after: float, seconds: float, want: float) -> None:
    assert (
        procstats.millicores(procstats.Usage(before, 0), procstats.Usage(after, 0), seconds) == want
    )


@pytest.mark.parametrize(
    ("empty", "at_size", "expected"),
    [
        # 55,000 objects measured: 1 MB each over the empty 100 MB; 310,000 at the target.
        (100.0, 100.0 + 55_000, 100.0 + 310_000),
        (50.0, 50.0, 50.0),  # grew by nothing: stays at its empty RSS
        (80.0, 70.0, 80.0),  # smaller at size (a GC between samples): never below empty
    ],
)
def test_manager_rss_grows_with_the_objects(empty: float, at_size: float, expected: float) -> None:
    m = fleetmodel.ManagerMeasured("m", 5_000, 50_000, rss_empty_mb=empty, rss_at_size_mb=at_size)
    assert fleetmodel.manager_rss_mb(m) == pytest.approx(expected)


def test_the_measured_managers_extrapolate_in_their_measured_order() -> None:
    edgehub, yurt = fleetmodel.MANAGERS_MEASURED
    assert fleetmodel.manager_rss_mb(edgehub) < fleetmodel.manager_rss_mb(yurt)


def test_connections_scale_per_node_the_control_planes_own_taken_off() -> None:
    base = fleetmodel.Baseline(watches=100.0, pool_watches=4.0, request_rate=2.0, connections=13)
    hub = fleetmodel.Measured(
        "edgehub",
        nodes=30,
        pools=3,
        watches=700,
        pool_watches=10,
        request_rate=17.0,
        link_bytes_per_second=1.0,
        connections=13 + 30 * 46,
    )
    assert fleetmodel.model({"edgehub": hub}, base)["edgehub"].connections == 460_000
    uncounted = fleetmodel.model({"edgehub": hub}, BASE)["edgehub"]  # no baseline count
    assert uncounted.connections is None


TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout
   0: 0100007F:1A0B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1
   1: 0100007F:1A0B 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2
   2: 0100007F:9C40 0100007F:1A0B 01 00000000:00000000 00:00000000 00000000     0        0 3
   3: 0100007F:1A0B 0100007F:9C41 06 00000000:00000000 00:00000000 00000000     0        0 4
   4: 0100007F:1A0B 0100007F:9C42 01 00000000:00000000 00:00000000 00000000     0        0 5
"""
TCP6 = """  sl  local_address                         remote_address                        st
   0: 00000000000000000000000001000000:1A0B 00000000000000000000000001000000:9C43 01
   1: garbage
"""


def test_connections_into_a_port_count_the_servers_established_ends() -> None:
    # Port 0x1A0B = 6667: the listener (0A), two established (01), one in TIME_WAIT (06);
    # the client's end (local 0x9C40) is not the server's; one more over IPv6.
    assert procstats.established_into(0x1A0B, [TCP, TCP6]) == 3
    assert procstats.established_into(0x9C40, [TCP]) == 1
    assert procstats.established_into(80, [TCP, TCP6, ""]) == 0


def test_connections_into_a_listener_here_are_counted() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        before = procstats.connections_into(port)
        with socket.create_connection(("127.0.0.1", port)), server.accept()[0]:
            assert procstats.connections_into(port) == before + 1
        assert before == 0
