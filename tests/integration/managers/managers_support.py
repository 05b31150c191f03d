"""Running ``edgehub manager`` in-process against the simulated apiserver, and submitting CSRs
as the identities that really send them (a node, a bootstrap token, a hub)."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from kubecontrol import controlling, credentials
from managers import settings
from yurthub.testing import simapiserver

CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
NAMESPACE = "kube-system"
ACCOUNT = "edgehub-manager"
# Short but client-go-shaped leader election: lease > renew deadline > 1.2 x retry period.
FAST_ELECTION = {"lease_duration": 2, "renew_deadline": 1.2, "retry_period": 0.2}

NODE_GROUPS = ("system:nodes",)
HUB_GROUPS = ("openyurt:yurthub", "system:nodes")
TOKEN_USER = "system:bootstrap:abcdef"
TOKEN_GROUPS = ("system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token")


def service_account_dir(sim: simapiserver.SimApiserver, directory: Path) -> Path:
    """The projected volume a Pod of ServiceAccount kube-system/edgehub-manager would get."""
    if not any(
        a["metadata"]["name"] == ACCOUNT for a in sim.state.list("serviceaccounts", NAMESPACE)
    ):
        sim.state.create(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": ACCOUNT, "namespace": NAMESPACE},
            }
        )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(sim.service_account_token(NAMESPACE, ACCOUNT))
    (directory / "ca.crt").write_bytes(sim.ca_pem)
    return directory


def manager_settings(
    sim: simapiserver.SimApiserver,
    account_dir: Path,
    *,
    election: bool = False,
    identity: str = "",
    lease_duration: int = FAST_ELECTION["lease_duration"],
    **csr: Any,
) -> settings.ManagerSettings:
    return settings.ManagerSettings(
        controllers=("csrapprover",),
        kube=settings.KubeSettings(
            service_account=credentials.ServiceAccount(account_dir, server=sim.url),
            request_timeout=5.0,
        ),
        leader_election=settings.LeaderElection(
            enabled=election,
            identity=identity,
            **{**FAST_ELECTION, "lease_duration": lease_duration},
        ),
        bind_address="127.0.0.1",
        health_port=0,
        host=identity or "test-manager",
        csr_approver=settings.CsrApprover(**csr),
    )


def session_for(sim: simapiserver.SimApiserver, user: str, groups: tuple[str, ...]) -> Any:
    """An aiohttp session authenticated as ``user`` (a static token the sim accepts)."""
    token = sim.issue_token(user, groups)
    connector = aiohttp.TCPConnector(ssl=ssl.create_default_context(cadata=sim.ca_pem.decode()))
    return aiohttp.ClientSession(
        sim.url, headers={"Authorization": f"Bearer {token}"}, connector=connector
    )


async def submit(
    sim: simapiserver.SimApiserver, body: dict[str, Any], user: str, groups: tuple[str, ...]
) -> dict[str, Any]:
    async with (
        session_for(sim, user, groups) as session,
        session.post(CSRS, json=body) as resp,
    ):
        answer: dict[str, Any] = await resp.json()
        assert resp.status == 201, answer
        return answer


def csr_state(sim: simapiserver.SimApiserver, name: str) -> dict[str, Any]:
    return sim.state.get("certificatesigningrequests", None, name)


def conditions(sim: simapiserver.SimApiserver, name: str) -> dict[str, dict[str, Any]]:
    status = csr_state(sim, name).get("status") or {}
    return {c["type"]: c for c in status.get("conditions") or []}


async def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def nodes_processed(watcher: controlling.Controller, *nodes: str) -> bool:
    """The node watcher has seen each node and processed the last event about it: its caches
    are synced, the Node is in its cache as the apiserver has it, and its queue neither holds
    the node's key nor has it due. (It acts only on nodes it has seen, and remembers a node's
    Ready only once it reconciled it Ready: a change made before that is a first sighting.)"""
    nodes_cache = watcher.reflectors[0].store
    return watcher.synced and all(
        ("", node) in nodes_cache
        and watcher.queue.pending(("", node)) is None
        and not watcher.queue.held(("", node))
        for node in nodes
    )


async def get_text(port: int, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}") as resp,
    ):
        return resp.status, await resp.text()


# --- the Akri controllers -----------------------------------------------------------------

CRDS = Path(__file__).resolve().parents[3] / "manifests" / "crds"
FAST = controlling.Timings(workers=2, resync=None, backoff_initial=0.05, backoff_cap=0.5)


def install_crds(sim: simapiserver.SimApiserver) -> None:
    for path in sorted(CRDS.glob("*.yaml")):
        sim.state.create(yaml.safe_load(path.read_text()))


def akri_settings(
    sim: simapiserver.SimApiserver,
    account_dir: Path,
    *,
    controllers: tuple[str, ...] = ("brokers", "nodewatcher"),
    election: bool = False,
    identity: str = "",
    webhook: settings.Webhook | None = None,
    kubeconfig: Path | None = None,
    lease_duration: int = FAST_ELECTION["lease_duration"],
) -> settings.ManagerSettings:
    return settings.ManagerSettings(
        controllers=controllers,
        kube=settings.KubeSettings(
            kubeconfig=kubeconfig,
            service_account=None
            if kubeconfig is not None
            else credentials.ServiceAccount(account_dir, server=sim.url),
            request_timeout=5.0,
        ),
        leader_election=settings.LeaderElection(
            enabled=election,
            identity=identity,
            **{**FAST_ELECTION, "lease_duration": lease_duration},
        ),
        bind_address="127.0.0.1",
        health_port=0,
        host=identity or "test-manager",
        brokers=settings.Brokers(
            timings=FAST, restart_backoff_initial=0.3, restart_backoff_cap=2.0
        ),
        node_watcher=settings.NodeWatcher(timings=FAST),
        webhook=webhook,
    )


def configuration(name: str = "cfg", namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "akri.sh/v0",
        "kind": "Configuration",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "discoveryHandler": {"name": "debugEcho", "discoveryDetails": "descriptions: [a]"},
            **spec,
        },
    }


def instance(
    sim: simapiserver.SimApiserver,
    name: str,
    nodes: list[str],
    *,
    configuration_name: str = "cfg",
    shared: bool = True,
    capacity: int = 2,
    usage: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An Instance as the agents would write it, owned by its Configuration."""
    config = sim.state.get("configurations.akri.sh", "default", configuration_name)
    return sim.state.create(
        {
            "apiVersion": "akri.sh/v0",
            "kind": "Instance",
            "metadata": {
                "name": name,
                "namespace": "default",
                "ownerReferences": [
                    {
                        "apiVersion": "akri.sh/v0",
                        "kind": "Configuration",
                        "name": configuration_name,
                        "uid": config["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "configurationName": configuration_name,
                "cdiName": f"akri.sh/{configuration_name}={name.rsplit('-', 1)[-1]}",
                "capacity": capacity,
                "brokerProperties": {},
                "shared": shared,
                "nodes": nodes,
                "deviceUsage": usage or {},
            },
        }
    )


def names(sim: simapiserver.SimApiserver, resource: str, selector: str = "") -> dict[str, Any]:
    return {
        o["metadata"]["name"]: o
        for o in sim.state.list(resource, "default", label_selector=selector)
    }
