"""A small fleet on the real control plane: four edge nodes behind their hubs in two NodePools
(``yurthub.testing.fleets``, as ``bench/fleet.py`` runs it at size), every link cut at once and
healed at the same instant, and the fleet's correctness claims after the heal:

- every node is Ready again in the cloud;
- every hub's cache equals the apiserver object by object (``fleetcaches``);
- no pod was evicted: the same pod UIDs before and after, although the outage outlasted the
  pods' default tolerations (the nodes are marked autonomous, as docs/autonomy.md says);
- no kubelet was answered 429 (the hollow kubelets' own client-go counters);
- the pools kept their leaders: only the links dropped, the leaders themselves were fine, so
  the manager changed nothing (NodePools polled through the outage and the recovery);
- kube-apiserver holds 2·P Services + EndpointSlices watches for the fleet, one of each per
  pool: every follower reads its leader again.

Its own control plane with short timings so the outage is felt within a minute:
kube-controller-manager declares a silent node unreachable after 20 s and taints it (each pool
is a zone; a cloud node in a zone of its own stays healthy, so the controller does not take
the outage for its own), and pods tolerate that for 20 s (the DefaultTolerationSeconds
admission plugin; the manager's ``autonomy`` controller told the same). The cut lasts until
every node has been tainted for longer than that: without the nodes' autonomy every pod
would be evicted. How long anything took is printed, never asserted (``bench/fleet.py``
measures it); waits have deadlines far beyond what the steps take.
"""

from __future__ import annotations

import datetime
import sys
import time
from collections.abc import Iterator

import cluster_support as support
import pytest

from yurthub.testing import (
    apimetrics,
    edgenodes,
    fleetmeasures,
    fleets,
    realcluster,
)

# The load, an outage past the tolerations and the recovery, on a shared 2-core machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

NODES, POOLS = 4, 2
GRACE = "20s"
TOLERATION = 20
UNREACHABLE = "node.kubernetes.io/unreachable"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[realcluster.RealCluster]:
    extra_args = {
        "kube-apiserver": {
            "default-not-ready-toleration-seconds": str(TOLERATION),
            "default-unreachable-toleration-seconds": str(TOLERATION),
        },
        "kube-controller-manager": {
            "node-monitor-grace-period": GRACE,
            "node-monitor-period": "2s",
            # A silent zone's nodes tainted one a second, not one per 10 s.
            "node-eviction-rate": "1",
        },
    }
    with support.own_cluster(tmp_path_factory, "fleet-cluster", extra_args) as bed:
        yield bed


@pytest.fixture(scope="module")
def fleet(
    cluster: realcluster.RealCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[fleets.Fleet]:
    spec = fleets.FleetSpec(
        nodes=NODES,
        pools=POOLS,
        prefix="fleet-e2e",
        subnet=21,
        pods_per_node=5,
        services=10,
        namespaces=2,
        configmaps=2,
        secrets=2,
        manager_args=(
            f"--default-not-ready-toleration-seconds={TOLERATION}",
            f"--default-unreachable-toleration-seconds={TOLERATION}",
        ),
    )
    running = fleets.Fleet(cluster, spec, tmp_path_factory.mktemp("fleet"), die_with_parent=True)
    try:
        running.prepare()
        yield running
    finally:
        running.close()


def pool_watches(fleet: fleets.Fleet) -> float:
    return apimetrics.pool_watches(
        apimetrics.select(fleet.admin.metrics(), (apimetrics.LONGRUNNING,))
    )


def unreachable_for(fleet: fleets.Fleet, seconds: float) -> bool:
    """Every node carries the unreachable NoExecute taint, added over ``seconds`` ago."""
    now = datetime.datetime.now(datetime.UTC)
    nodes = fleet.nodes()
    if len(nodes) != NODES:
        return False
    for node in nodes:
        taints = (node.get("spec") or {}).get("taints") or []
        added = [
            datetime.datetime.fromisoformat(t["timeAdded"].replace("Z", "+00:00"))
            for t in taints
            if t.get("key") == UNREACHABLE and t.get("effect") == "NoExecute" and t.get("timeAdded")
        ]
        if not added or (now - min(added)).total_seconds() < seconds:
            return False
    return True


def test_a_fleet_wide_heal(fleet: fleets.Fleet) -> None:
    baseline = pool_watches(fleet)
    fleet.start(fleets.Mode.EDGEHUB)
    fleet.apply_load()
    leaders = fleet.wait_leaders()
    assert sorted(leaders) == fleet.spec.pool_names()

    # Steady state: the followers read their leaders; one watch of each kind per pool.
    def pooled() -> bool:
        on_cloud, followers = fleetmeasures.followers_on_cloud(fleet)
        return (
            followers == NODES - POOLS
            and on_cloud == 0
            and (pool_watches(fleet) - baseline == 2 * POOLS)
        )

    edgenodes.eventually(pooled, 120, "every follower on its leader", alive=fleet.check_alive)
    edgenodes.eventually(
        lambda: not any(fleetmeasures.cache_differences(fleet).values()),
        120,
        "caches equal before the cut",
    )
    uids = fleet.pod_uids()
    assert len(uids) == NODES * 5
    k429 = fleetmeasures.kubelet_429s(fleet)

    # Every link cut at once, for longer than the pods tolerate an unreachable node.
    changes: list[dict[str, tuple[str, ...]]] = []

    def watch_leaders() -> None:
        now = fleet.leaders()
        if now != (changes[-1] if changes else leaders):
            changes.append(now)

    fleet.cut_all()
    cut = time.monotonic()
    edgenodes.eventually(
        lambda: (watch_leaders(), unreachable_for(fleet, TOLERATION + 5))[1],
        180,
        "every node unreachable for longer than the pods' tolerations",
        alive=fleet.check_alive,
    )
    outage = time.monotonic() - cut

    fleet.heal_all()
    healed = time.monotonic()
    edgenodes.eventually(
        lambda: (watch_leaders(), fleet.ready_nodes() >= {m.name for m in fleet.members})[1],
        120,
        "every node Ready again",
        alive=fleet.check_alive,
    )
    ready = time.monotonic() - healed
    found: list[dict[str, list[str]]] = []

    def caches_equal() -> bool:
        watch_leaders()
        found.append(fleetmeasures.cache_differences(fleet))
        return not any(found[-1].values())

    edgenodes.eventually(
        caches_equal, 180, f"every cache equal to the apiserver (last: {found[-1:]})"
    )
    equal = time.monotonic() - healed
    edgenodes.eventually(
        lambda: (watch_leaders(), pooled())[1],
        180,
        "the pools whole again",
        alive=fleet.check_alive,
    )
    whole = time.monotonic() - healed
    print(
        f"outage {outage:.0f} s; after the heal: Ready {ready:.1f} s, caches equal {equal:.1f} s, "
        f"pools whole {whole:.1f} s"
    )

    assert fleet.pod_uids() == uids, "pods were evicted or recreated"
    assert fleetmeasures.kubelet_429s(fleet) == k429, "a kubelet was answered 429"
    watch_leaders()
    assert changes == [], f"leaders changed although only the links dropped: {changes}"
    assert fleet.leaders() == leaders


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-x", "-q", "-s"]))
