"""``edgehub manager`` on the real control plane (kube-apiserver with Node,RBAC authorization,
the real controller-manager signing), as deployed: its ServiceAccount bound by
``manifests/manager/rbac.yaml``, ``autonomy-rbac.yaml`` (with ``autonomy-policy.yaml``) and
``hubleader-rbac.yaml`` (with the NodePool CRD), and nothing more.

* Hub-shaped client and serving CSRs made with ``cryptography`` and submitted as the node
  (its client certificate) are approved by the manager and signed by the controller-manager;
  kubelet's serving CSR from the same node stays pending, untouched.
* Two replicas with kube-controller-manager's election timings: only the leader acts; after
  ``kill -9`` of the leader the other takes the Lease over, never before the dead leader's
  last renewal expired (its ``renewTime`` + ``leaseDurationSeconds``, as the Lease says), and
  approves; SIGTERM exits 0 and leaves the Lease released.

Waits have deadlines far beyond what the steps take; what is asserted is the order of events.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import cluster_support as support
import csr_support as cs
import pytest
from cryptography import x509
from manager_replicas import Replica

from yurthub.testing import realcluster

pytestmark = pytest.mark.slow

REPO = support.REPO
EDGEHUB = str(Path(sys.executable).with_name("edgehub"))
NAMESPACE = "edgehub-system"
NODE = "edge-csr-1"
# kube-controller-manager's timings, spelled out: the hand-over check below derives from them.
RENEW_DEADLINE = 10.0


async def until(check: Callable[[], Awaitable[bool]], timeout: float) -> float:
    start = time.monotonic()
    while not await check():
        assert time.monotonic() - start < timeout, "condition not reached in time"
        await asyncio.sleep(0.2)
    return time.monotonic() - start


async def kubectl(cluster: realcluster.RealCluster, *args: str, **kw: Any) -> str:
    """The pinned kubectl, off the event loop (the managers' logs keep being read)."""
    result = await asyncio.to_thread(cluster.kubectl, *args, **kw)
    return result.stdout


async def lease_spec(cluster: realcluster.RealCluster) -> dict[str, Any]:
    lease = json.loads(
        await kubectl(cluster, "get", "lease", "edgehub-manager", "-n", NAMESPACE, "-o", "json")
    )
    spec: dict[str, Any] = lease["spec"]
    return spec


def micro_time(text: str) -> datetime.datetime:
    """A Lease's MicroTime (``2026-12-01T22:10:57.123456Z``)."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


async def csr_json(cluster: realcluster.RealCluster, name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(await kubectl(cluster, "get", "csr", name, "-o", "json"))
    return out


async def condition_types(cluster: realcluster.RealCluster, name: str) -> set[str]:
    status = (await csr_json(cluster, name)).get("status") or {}
    return {c["type"] for c in status.get("conditions") or []}


async def issued(
    cluster: realcluster.RealCluster, name: str, timeout: float = 120
) -> dict[str, Any]:
    """The CSR once the controller-manager has put a certificate into it."""

    async def signed() -> bool:
        return bool(((await csr_json(cluster, name)).get("status") or {}).get("certificate"))

    await until(signed, timeout)
    return await csr_json(cluster, name)


def certificate(csr: dict[str, Any]) -> x509.Certificate:
    return x509.load_pem_x509_certificate(base64.b64decode(csr["status"]["certificate"]))


async def submit_as_node(
    cluster: realcluster.RealCluster, kubeconfig: Path, obj: dict[str, Any]
) -> None:
    await kubectl(
        cluster, "create", "-f", "-", kubeconfig=kubeconfig, input=json.dumps(cs.body(obj))
    )


def logged(replica: Replica, text: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return any(text in line for line in replica.lines)

    return check


async def start_replica(kubeconfig: Path, tg: asyncio.TaskGroup) -> Replica:
    proc = await asyncio.create_subprocess_exec(
        EDGEHUB,
        "manager",
        f"--leader-elect-namespace={NAMESPACE}",
        "--bind-address=127.0.0.1",
        "--health-port=0",
        "--leader-elect-lease-duration=15",
        f"--leader-elect-renew-deadline={RENEW_DEADLINE}",
        "--leader-elect-retry-period=2",
        env={**os.environ, "EDGEHUB_KUBECONFIG": str(kubeconfig)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    replica = Replica(proc)
    tg.create_task(replica.follow(), name=f"manager {proc.pid} log")
    async with asyncio.timeout(30):
        await replica.ready.wait()
    return replica


async def test_manager_approves_hub_csrs_leaves_kubelets_and_hands_over(
    real_cluster: realcluster.RealCluster, tmp_path: Path
) -> None:
    cluster = real_cluster
    await kubectl(cluster, "apply", "-f", str(REPO / "manifests/discovery/00-namespace.yaml"))
    await kubectl(
        cluster, "apply", "-f", str(REPO / "manifests/crds/nodepools.apps.openyurt.io.yaml")
    )
    for manifest in (
        "rbac.yaml",
        "autonomy-rbac.yaml",
        "autonomy-policy.yaml",
        "hubleader-rbac.yaml",
    ):
        await kubectl(cluster, "apply", "-f", str(REPO / "manifests/manager" / manifest))
    token = await kubectl(
        cluster, "create", "token", "edgehub-manager", "-n", NAMESPACE, "--duration=1h"
    )
    manager_kubeconfig = support.token_kubeconfig(
        tmp_path / "manager.kubeconfig", cluster.url, token.strip(), cluster.ca_pem
    )
    node_kubeconfig = cluster.node_kubeconfig(NODE)

    replicas: list[Replica] = []
    async with asyncio.TaskGroup() as tg:
        try:
            replicas.append(await start_replica(manager_kubeconfig, tg))
            replicas.append(await start_replica(manager_kubeconfig, tg))

            async def one_leader() -> bool:
                return [await r.leader() for r in replicas].count(True) == 1

            await until(one_leader, 120)
            leader, standby = replicas if await replicas[0].leader() else replicas[::-1]

            client_usages = ["digital signature", "client auth"]
            serving_usages = ["digital signature", "server auth"]
            hub_client = cs.csr(
                "mgr-e2e-client", cs.hub_client_request(NODE), cs.CLIENT_SIGNER, client_usages
            )
            hub_serving = cs.csr(
                "mgr-e2e-serving", cs.hub_serving_request(NODE), cs.SERVING_SIGNER, serving_usages
            )
            kubelet = cs.csr(
                "mgr-e2e-kubelet-serving",
                cs.kubelet_serving_request(NODE),
                cs.SERVING_SIGNER,
                ["digital signature", "key encipherment", "server auth"],
            )
            for obj in (kubelet, hub_client, hub_serving):
                await submit_as_node(cluster, node_kubeconfig, obj)

            # Approved by the manager, signed by the real controller-manager with the cluster CA.
            ca = x509.load_pem_x509_certificate(cluster.ca_pem)
            for name in ("mgr-e2e-client", "mgr-e2e-serving"):
                signed = await issued(cluster, name)
                certificate(signed).verify_directly_issued_by(ca)
                (approved,) = [c for c in signed["status"]["conditions"] if c["type"] == "Approved"]
                assert approved["reason"] == "AutoApproved" and "edgehub" in approved["message"]
                await until(logged(leader, f"CSR {name} approved"), 60)
            client_cert = certificate(await csr_json(cluster, "mgr-e2e-client"))
            organizations = client_cert.subject.get_attributes_for_oid(
                x509.oid.NameOID.ORGANIZATION_NAME
            )
            assert "openyurt:yurthub" in [o.value for o in organizations]
            # kubelet's own serving CSR: nobody here approves it.
            assert await condition_types(cluster, "mgr-e2e-kubelet-serving") == set()
            assert not await logged(standby, "CSR")(), "the standby never acts"
            assert 'decision="approved"' not in await standby.metrics()

            # kill -9: the standby takes over once the lease it last saw renewed expires. Read
            # once the leader is gone, the Lease holds its last renewal (nothing renews it now).
            leader.proc.send_signal(signal.SIGKILL)
            await leader.proc.wait()
            dead = await lease_spec(cluster)
            assert dead["holderIdentity"], dead
            await until(standby.leader, 120)
            taken = await lease_spec(cluster)
            assert taken["holderIdentity"] not in ("", dead["holderIdentity"]), taken
            assert taken["leaseTransitions"] == dead.get("leaseTransitions", 0) + 1, taken
            expired = micro_time(dead["renewTime"]) + datetime.timedelta(
                seconds=dead["leaseDurationSeconds"]
            )
            # Not before the dead leader's lease expired. The standby counts from the start of
            # the read that showed it the last renewal, and a read is abandoned after the renew
            # deadline: that read may have begun at most that long before the renewal's stamp.
            earliest = expired - datetime.timedelta(seconds=RENEW_DEADLINE)
            assert micro_time(taken["acquireTime"]) >= earliest, (dead, taken)
            after = cs.csr(
                "mgr-e2e-client-after", cs.hub_client_request(NODE), cs.CLIENT_SIGNER, client_usages
            )
            await submit_as_node(cluster, node_kubeconfig, after)
            await issued(cluster, "mgr-e2e-client-after")
            await until(logged(standby, "CSR mgr-e2e-client-after approved"), 60)
            assert await condition_types(cluster, "mgr-e2e-kubelet-serving") == set()

            # SIGTERM: a clean exit that releases the Lease.
            standby.proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(15):
                assert await standby.proc.wait() == 0
            lease = json.loads(
                await kubectl(
                    cluster, "get", "lease", "edgehub-manager", "-n", NAMESPACE, "-o", "json"
                )
            )
            assert lease["spec"].get("holderIdentity", "") == ""
        finally:
            for replica in replicas:
                if replica.proc.returncode is None:
                    replica.proc.kill()
                await replica.proc.wait()
