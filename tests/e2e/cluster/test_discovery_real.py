"""Discovery on the real control plane: the CRDs from manifests/crds apply, and the agent
with the ServiceAccount and ClusterRole from manifests/discovery reconciles a Configuration
into Instances (RBAC enforced, nothing it does refused)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import pathlib
import sys
from collections.abc import AsyncIterator

import cluster_support as support
import pytest

from discovery.testing import kubelet as sim_kubelet
from yurthub.testing import processes, realcluster

pytestmark = pytest.mark.slow

EDGEHUB = str(pathlib.Path(sys.executable).with_name("edgehub"))
NODE = "discovery-node"


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=3).hexdigest()


async def kubectl(cluster: realcluster.RealCluster, *args: str, stdin: str | None = None) -> str:
    result = await asyncio.to_thread(cluster.kubectl, *args, input=stdin)
    return result.stdout


async def instances(cluster: realcluster.RealCluster) -> dict[str, dict[str, object]]:
    listed = json.loads(await kubectl(cluster, "get", "akrii", "-n", "default", "-o", "json"))
    return {i["metadata"]["name"]: i for i in listed["items"]}


@contextlib.asynccontextmanager
async def agent(
    args: list[str], log: pathlib.Path, env: dict[str, str]
) -> AsyncIterator[asyncio.subprocess.Process]:
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.DEVNULL, stderr=out, env=env
        )
        try:
            yield proc
        finally:
            await processes.terminate(proc)


async def test_agent_with_the_manifests_rbac_makes_instances(
    real_cluster: realcluster.RealCluster, tmp_path: pathlib.Path
) -> None:
    for manifest in (
        "crds/configurations.akri.sh.yaml",
        "crds/instances.akri.sh.yaml",
        "discovery/00-namespace.yaml",
        "discovery/agent-rbac.yaml",
    ):
        await kubectl(real_cluster, "apply", "-f", str(support.REPO / "manifests" / manifest))
    await kubectl(
        real_cluster,
        "wait",
        "--for=condition=Established",
        "crd/instances.akri.sh",
        "--timeout=30s",
    )
    token = (
        await kubectl(real_cluster, "create", "token", "edgehub-agent", "-n", "edgehub-system")
    ).strip()
    kubeconfig = support.token_kubeconfig(
        tmp_path / "agent.kubeconfig", real_cluster.url, token, real_cluster.ca_pem
    )
    configuration = {
        "apiVersion": "akri.sh/v0",
        "kind": "Configuration",
        "metadata": {"name": "echo", "namespace": "default"},
        "spec": {
            "discoveryHandler": {"name": "debugEcho", "discoveryDetails": "descriptions: [a, b]"},
            "capacity": 2,
        },
    }
    await kubectl(real_cluster, "apply", "-f", "-", stdin=json.dumps(configuration))
    (tmp_path / "availability").write_text("ONLINE")
    env = dict(os.environ, DEBUG_ECHO_AVAILABILITY_FILE=str(tmp_path / "availability"))
    args = [
        EDGEHUB,
        "agent",
        f"--node-name={NODE}",
        f"--kubeconfig={kubeconfig}",
        f"--discovery-handlers-directory={tmp_path / 'akri'}",
        f"--device-plugins-dir={tmp_path / 'dp'}",
        f"--pod-resources-socket={tmp_path / 'pr.sock'}",
        f"--cdi-dir={tmp_path / 'cdi'}",
        "--metrics-address=127.0.0.1",
        "--metrics-port=0",
        "--settle-seconds=0.5",
        "--registration-window-seconds=0.5",
        "--embedded-handlers=debugEcho",
    ]
    want = {f"echo-{digest('a')}", f"echo-{digest('b')}"}
    log = tmp_path / "agent.log"
    async with (
        sim_kubelet.SimKubelet(tmp_path / "dp") as kubelet,
        agent(args, log, env),
    ):
        async with asyncio.timeout(30):
            while set(await instances(real_cluster)) != want:
                await asyncio.sleep(0.5)
        found = await instances(real_cluster)
        for instance in found.values():
            spec = instance["spec"]
            assert spec["configurationName"] == "echo"  # type: ignore[index]
            assert spec["nodes"] == [NODE]  # type: ignore[index]
            owners = instance["metadata"]["ownerReferences"]  # type: ignore[index]
            assert owners[0]["kind"] == "Configuration"
        await kubelet.wait_for(lambda: len(kubelet.plugins) >= 2)
        # Deleting the Configuration takes its Instances with it (finalizer honoured).
        await kubectl(real_cluster, "delete", "configuration", "echo", "--wait=false")
        async with asyncio.timeout(30):
            while await instances(real_cluster):
                await asyncio.sleep(0.5)
    text = log.read_text(errors="replace")
    assert "forbidden" not in text.lower(), text[-3000:]
