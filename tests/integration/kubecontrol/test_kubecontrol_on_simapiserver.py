"""The controller runtime against the simulated apiserver: a Controller's workers, back-off and
resync, and Lease leader election among replicas (hand-over on release, on a leader cut off
from the apiserver, and never two leaders acting at once)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from kubecontrol import controlling, electing, kubeapi, leases
from yurthub.testing import partition, simapiserver

CONFIGMAPS = kubeapi.CONFIGMAPS
# Short but client-go-shaped timings: lease > renew deadline > 1.2 x retry period.
FAST = {"lease_duration": 2, "renew_deadline": 1.2, "retry_period": 0.2}
RELEASE_ONLY = {**FAST, "lease_duration": 3600}
"""A lease that never expires within a test: a hand-over can only come from a release."""
CUT_OFF = {"lease_duration": 6, "renew_deadline": 3.6, "retry_period": 0.6}
"""FAST times three, for the cut-off leader: with a 1.2 s renew deadline one stall of the shared
event loop before the cut could end its leadership early (a second span, or a hand-over that
was not the cut's doing); a 3.6 s stall is far rarer."""


@contextlib.asynccontextmanager
async def api_to(sim: simapiserver.SimApiserver, url: str | None = None) -> AsyncIterator[Any]:
    client = await kubeapi.connect(url, sim.kubeconfig_path, "kubecontrol-test/0")
    try:
        yield kubeapi.KubeApi(client, request_timeout=5.0)
    finally:
        await client.close()


def configmap(name: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
    }


async def eventually(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_controller_reconciles_retries_with_backoff_and_resyncs(
    sim_apiserver: simapiserver.SimApiserver,
) -> None:
    sim_apiserver.state.create(configmap("a", app="x"))
    sim_apiserver.state.create(configmap("other", app="y"))  # outside the selector
    calls: list[tuple[str, float]] = []
    failures = {"b": 2}
    outcomes: list[str] = []

    class Observer:
        def reconciled(self, controller: str, outcome: str, seconds: float) -> None:
            outcomes.append(outcome)

    async def reconcile(key: controlling.Key) -> float | None:
        calls.append((key[1], time.monotonic()))
        if failures.get(key[1], 0) > 0:
            failures[key[1]] -= 1
            raise kubeapi.Unavailable("injected")
        return None

    reported: list[str] = []

    async def on_error(key: controlling.Key, e: Exception) -> None:
        reported.append(f"{key[1]}: {e}")

    timings = controlling.Timings(workers=2, resync=0.5, backoff_initial=0.1, backoff_cap=1.0)
    controller = controlling.Controller(
        "test", reconcile, timings, on_error=on_error, observer=Observer()
    )
    async with api_to(sim_apiserver) as api:
        controller.watch(api, CONFIGMAPS, namespace="default", label_selector="app=x")
        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(controller.run(), name="controller")
            await eventually(lambda: any(c[0] == "a" for c in calls))
            sim_apiserver.state.create(configmap("b", app="x"))
            await eventually(lambda: sum(c[0] == "b" for c in calls) >= 3)
            times = [t for name, t in calls if name == "b"]
            # Retried after 0.1 s, then 0.2 s: the per-key back-off, not a tight loop.
            assert times[1] - times[0] >= 0.09 and times[2] - times[1] >= 0.19
            assert reported == ["b: injected", "b: injected"]
            assert controller.backoff.failures(("default", "b")) == 0, "success resets"
            # The periodic resync queues every object again, without any event.
            seen = len([c for c in calls if c[0] == "a"])
            await eventually(lambda: len([c for c in calls if c[0] == "a"]) >= seen + 1)
            task.cancel()
    assert {name for name, _ in calls} == {"a", "b"}
    assert "error" in outcomes and "success" in outcomes


async def test_stopped_workers_release_their_keys_and_a_restart_sees_everything(
    sim_apiserver: simapiserver.SimApiserver,
) -> None:
    sim_apiserver.state.create(configmap("slow"))
    started = asyncio.Event()
    calls: list[str] = []

    async def reconcile(key: controlling.Key) -> float | None:
        calls.append(key[1])
        if key[1] == "slow" and calls.count("slow") == 1:
            started.set()
            await asyncio.sleep(3600)  # cancelled when the workers stop
        return None

    controller = controlling.Controller("test", reconcile, controlling.Timings(workers=1))
    async with api_to(sim_apiserver) as api:
        controller.watch(api, CONFIGMAPS, namespace="default")
        async with asyncio.TaskGroup() as tg:
            caches = tg.create_task(controller.run_caches(), name="caches")
            workers = tg.create_task(controller.run_workers(), name="workers")
            await started.wait()
            workers.cancel()
            await asyncio.gather(workers, return_exceptions=True)
            # While nobody works, events still queue keys (a warm standby).
            sim_apiserver.state.create(configmap("later"))
            await eventually(lambda: ("default", "later") in controller.reflectors[0].store)
            count = len(calls)
            workers = tg.create_task(controller.run_workers(), name="workers again")
            await eventually(lambda: {"slow", "later"} <= set(calls[count:]))
            workers.cancel()
            caches.cancel()
    assert calls.count("slow") >= 2, "the interrupted key was handed out again"


class Replica:
    """One elector and a record of when its lead() ran."""

    def __init__(
        self, api: kubeapi.KubeApi, identity: str, timings: dict[str, Any] | None = None
    ) -> None:
        self.identity = identity
        self.elector = electing.Elector(
            api, leases.Config("kube-system", "test-lease", identity, **(timings or FAST))
        )
        self.spans: list[tuple[float, float]] = []
        self.leading = asyncio.Event()

    async def lead(self) -> None:
        start = time.monotonic()
        self.leading.set()
        try:
            await asyncio.sleep(3600)
        finally:
            self.leading.clear()
            self.spans.append((start, time.monotonic()))


def overlaps(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> bool:
    return any(s1 < e2 and s2 < e1 for s1, e1 in a for s2, e2 in b)


async def test_one_leader_and_a_released_lease_is_taken_over_at_once(
    sim_apiserver: simapiserver.SimApiserver,
) -> None:
    async with api_to(sim_apiserver) as api:
        # The lease never expires here: the standby can lead only because it was released.
        first = Replica(api, "a_1", RELEASE_ONLY)
        second = Replica(api, "b_2", RELEASE_ONLY)
        async with asyncio.TaskGroup() as tg:
            one = tg.create_task(first.elector.run(first.lead), name="elector a")
            await first.leading.wait()
            two = tg.create_task(second.elector.run(second.lead), name="elector b")
            await eventually(lambda: second.elector.holder == "a_1")
            await asyncio.sleep(1.0)  # several renewals: the standby stays a standby
            assert not second.leading.is_set() and second.elector.in_contact()
            one.cancel()  # a clean stop: lead() ends, then the lease is released
            # Released: taken on the standby's next try (the lease itself lasts an hour).
            async with asyncio.timeout(60):
                await second.leading.wait()
            lease = sim_apiserver.state.get("leases", "kube-system", "test-lease")
            assert lease["spec"]["holderIdentity"] == "b_2"
            assert lease["spec"]["leaseTransitions"] == 1  # a -> b (a release is no transition)
            two.cancel()
    assert not overlaps(first.spans, second.spans)
    lease = sim_apiserver.state.get("leases", "kube-system", "test-lease")
    assert lease["spec"]["holderIdentity"] == "" and lease["spec"]["leaseDurationSeconds"] == 1


async def test_a_renewal_that_landed_unseen_does_not_stop_the_release(
    sim_apiserver: simapiserver.SimApiserver,
) -> None:
    # A renewal cancelled in flight can reach the apiserver while its answer is lost: the
    # elector's copy is then stale, and a release with it is a 409. It re-reads and releases.
    async with api_to(sim_apiserver) as api:
        replica = Replica(api, "a_1")
        async with asyncio.TaskGroup() as tg:
            task = tg.create_task(replica.elector.run(replica.lead), name="elector a")
            await replica.leading.wait()
            stored = sim_apiserver.state.get("leases", "kube-system", "test-lease")
            stored["metadata"]["annotations"] = {"renewed": "unseen"}  # a newer version, ours
            sim_apiserver.state.update(stored)
            task.cancel()
    lease = sim_apiserver.state.get("leases", "kube-system", "test-lease")
    assert lease["spec"]["holderIdentity"] == ""


async def test_a_leader_cut_off_stops_acting_before_the_standby_takes_over(
    sim_apiserver: simapiserver.SimApiserver,
) -> None:
    async with (
        partition.Partition("127.0.0.1", sim_apiserver.port) as link,
        api_to(sim_apiserver, f"https://127.0.0.1:{link.port}") as cut_api,
        api_to(sim_apiserver) as api,
    ):
        cut = Replica(cut_api, "cut_1", CUT_OFF)
        standby = Replica(api, "standby_2", CUT_OFF)
        async with asyncio.TaskGroup() as tg:
            cut_task = tg.create_task(cut.elector.run(cut.lead), name="elector cut")
            await cut.leading.wait()
            standby_task = tg.create_task(standby.elector.run(standby.lead), name="elector standby")
            await eventually(lambda: standby.elector.holder == "cut_1")
            await link.set_mode(partition.Mode.BLACKHOLE)
            await standby.leading.wait()
            assert not cut.leading.is_set(), "the cut-off leader stopped acting first"
            # It led (leading.wait() above), so it has a span; the last one is the span the
            # cut ended, whatever a stall before the cut did to an earlier one.
            assert cut.spans
            cut_span = cut.spans[-1]
            # It stopped within the renew deadline of its last renewal, and the standby waited
            # the whole lease duration after its last sighting of a change.
            assert (
                time.monotonic() - cut_span[1]
                >= CUT_OFF["lease_duration"] - CUT_OFF["renew_deadline"] - 0.1
            )
            cut_elections = cut.elector.elected
            # Back online it sees the new holder and stays a standby: it never acts again
            # until it is elected again.
            await link.set_mode(partition.Mode.PASS)
            await eventually(lambda: cut.elector.holder == "standby_2")
            # A try or two of its acquire loop (0.6 s apart and more, jittered) as a standby.
            await asyncio.sleep(2.5 * CUT_OFF["retry_period"])
            assert not cut.leading.is_set()
            cut_task.cancel()
            standby_task.cancel()
    assert not overlaps(cut.spans, standby.spans)
    assert cut.elector.elected == cut_elections and standby.elector.elected == 1
