"""The installed ``edgehub manager`` binary against the simulated apiserver: two replicas, only
the leader approves; ``kill -9`` of the leader hands over after the lease expires; SIGTERM
exits 0 and releases the Lease; a second signal forces a stop that hangs on a cut-off
apiserver; an unknown controller exits 3 naming the known ones. (The same on the real
control plane: tests/e2e/cluster/test_manager_real.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import csr_support as cs
import pytest
from manager_replicas import Replica

from yurthub.testing import partition, simapiserver

EDGEHUB = str(Path(sys.executable).with_name("edgehub"))
LEASE = 2  # seconds; renew deadline 1.2, retry 0.2: client-go's proportions, fast
CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
USAGES = ["digital signature", "client auth"]


@contextlib.asynccontextmanager
async def replicas(kubeconfig: Path, count: int, *extra: str) -> AsyncIterator[list[Replica]]:
    env = {
        **os.environ,
        "EDGEHUB_KUBECONFIG": str(kubeconfig),
        "EDGEHUB_LEADER_ELECT_NAMESPACE": "kube-system",  # flags read EDGEHUB_* too
    }
    started: list[Replica] = []
    async with asyncio.TaskGroup() as tg:
        try:
            for _ in range(count):
                proc = await asyncio.create_subprocess_exec(
                    EDGEHUB,
                    "manager",
                    "--bind-address=127.0.0.1",
                    "--health-port=0",
                    f"--leader-elect-lease-duration={LEASE}",
                    "--leader-elect-renew-deadline=1.2",
                    "--leader-elect-retry-period=0.2",
                    *extra,
                    env=env,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.PIPE,
                )
                replica = Replica(proc)
                started.append(replica)
                tg.create_task(replica.follow(), name=f"manager {proc.pid} log")
            for replica in started:
                async with asyncio.timeout(20):
                    await replica.ready.wait()
            yield started
        finally:
            for replica in started:
                if replica.proc.returncode is None:
                    replica.proc.kill()
                await replica.proc.wait()


async def until(check: Callable[[], Awaitable[bool]], timeout: float) -> float:
    """Seconds until ``await check()`` is true."""
    start = time.monotonic()
    while not await check():
        assert time.monotonic() - start < timeout, "condition not reached in time"
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def submit_and_wait_approved(sim: simapiserver.SimApiserver, name: str) -> None:
    # As the apiserver records it when a hub sends its first CSR with a bootstrap token.
    obj = cs.csr(
        name,
        cs.hub_client_request("edge-1"),
        cs.CLIENT_SIGNER,
        USAGES,
        username="system:bootstrap:abcdef",
        groups=["system:bootstrappers", "system:authenticated"],
    )
    del obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]
    sim.state.create(obj)

    async def approved() -> bool:
        status = sim.state.get("certificatesigningrequests", None, name).get("status") or {}
        return any(c.get("type") == "Approved" for c in status.get("conditions") or [])

    await until(approved, 10)


def holder(sim: simapiserver.SimApiserver) -> str:
    lease = sim.state.get("leases", "kube-system", "edgehub-manager")
    return str(lease["spec"].get("holderIdentity") or "")


@pytest.mark.slow
async def test_two_replicas_hand_over_on_kill_and_release_on_sigterm(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    sim = sim_apiserver
    kubeconfig = sim.write_kubeconfig(
        tmp_path / "manager.kubeconfig",
        "system:serviceaccount:edgehub-system:edgehub-manager",
        ["system:serviceaccounts"],
    )
    async with replicas(kubeconfig, 2) as (a, b):

        async def one_leader() -> bool:
            return [await a.leader(), await b.leader()].count(True) == 1

        await until(one_leader, 10)
        leader, standby = (a, b) if await a.leader() else (b, a)
        await submit_and_wait_approved(sim, "first")

        async def logged() -> bool:  # the log line follows the write it reports
            return any("CSR first approved" in line for line in leader.lines)

        await until(logged, 5)
        assert not any("approved" in line for line in standby.lines), "the standby never acts"

        # kill -9: no release; the standby waits out the lease it last saw renewed.
        leader.proc.send_signal(signal.SIGKILL)
        took = await until(standby.leader, LEASE + 5)
        assert took >= LEASE - 1.2 - 0.3, f"took over after {took:.1f}s: before the lease expired"
        await submit_and_wait_approved(sim, "second")

        # SIGTERM: exit 0, the Lease released (nobody holds it).
        standby.proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(10):
            assert await standby.proc.wait() == 0
        assert holder(sim) == ""
        assert any("released lease" in line for line in standby.lines)


@pytest.mark.slow
async def test_a_second_signal_forces_a_stuck_stop(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    sim = sim_apiserver
    async with partition.Partition("127.0.0.1", sim.port) as link:
        kubeconfig = sim.write_kubeconfig(
            tmp_path / "cut.kubeconfig",
            "system:serviceaccount:edgehub-system:edgehub-manager",
            ["system:serviceaccounts"],
            server=f"https://127.0.0.1:{link.port}",
        )
        async with replicas(kubeconfig, 1) as (only,):
            await until(only.leader, 10)
            await link.set_mode(partition.Mode.BLACKHOLE)
            # The clean stop would wait for the release (up to 5 s): a second signal ends it.
            only.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.3)
            only.proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(3):
                assert await only.proc.wait() == 1
            assert any("second signal" in line for line in only.lines)


async def test_unknown_controller_exits_3_naming_the_known_ones(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        EDGEHUB,
        "manager",
        "--controllers=csrapprover,nodelifecycle",
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "EDGEHUB_KUBECONFIG": str(tmp_path / "none")},
    )
    _, err = await proc.communicate()
    assert proc.returncode == 3
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and "nodelifecycle" in lines[0] and "csrapprover" in lines[0]
