"""The installed ``edgehub hub`` joining with a bootstrap token given in YurtHub's pflag
spelling, rotating its certificates every second or so, and killed with SIGKILL at random
moments of that: after every restart it has a working pair at once and serves 10268."""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import signal
import ssl
import sys

import aiohttp
import pytest

from yurthub.certs import pemfiles
from yurthub.testing import joining, ports, processes, simapiserver

EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
NODE = "edge-1"
pytestmark = pytest.mark.slow


async def start(args: list[str], log: pathlib.Path) -> tuple[asyncio.subprocess.Process, str]:
    with open(log, "ab") as err:
        proc = await asyncio.create_subprocess_exec(
            EDGEHUB, "hub", *args, stdout=asyncio.subprocess.PIPE, stderr=err
        )
    assert proc.stdout is not None
    try:
        fields = await processes.read_announcement(proc.stdout, "EDGEHUB_HUB_LISTENING", 20)
    except (TimeoutError, processes.ProcessError) as e:
        raise AssertionError(log.read_text()[-2000:]) from e
    return proc, fields["server"]


async def serves(url: str, ca: ssl.SSLContext, token: str) -> int:
    async with (
        aiohttp.ClientSession() as s,
        s.get(
            url + "/api/v1/namespaces/kube-system/pods",
            headers={"Authorization": f"Bearer {token}"},
            ssl=ca,
        ) as r,
    ):
        return r.status


async def test_kill_9_during_rotation(tmp_path: pathlib.Path) -> None:
    async with simapiserver.SimApiserver(workdir=tmp_path / "sim") as sim:
        admin = joining.Admin.from_kubeconfig(sim.kubeconfig_path)
        token = joining.new_token()
        await admin.create_bootstrap_token(token)
        root = tmp_path / "root"
        secure = ports.free_port()
        args = [
            "--v=2",
            f"--server-addr={sim.url}",
            f"--node-name={NODE}",
            "--working-mode=edge",
            "--profiling=true",  # YurtHub's, not built here: dropped with a warning
            "--enable-dummy-if=false",
            f"--join-token={token}",
            f"--discovery-token-ca-cert-hash={joining.ca_pin(sim.ca_pem)}",
            f"--root-dir={root}",
            f"--disk-cache-path={tmp_path / 'cache'}",
            "--proxy-port=0",
            "--serve-port=0",
            f"--proxy-secure-port={secure}",
            "--heartbeat-interval-seconds=1",
            # 600 s certificates (the least the apiserver signs) renewed 599 s before expiry:
            # a rotation about every second.
            "--cert-expiration-seconds=600",
            "--cert-renew-before=599",
        ]
        log = tmp_path / "hub.log"
        pod_token = sim.service_account_token("kube-system", "default")
        ca = ssl.create_default_context(cadata=sim.ca_pem.decode())
        rng = random.Random(10)
        async with joining.approving(admin, node_name=NODE) as approver:
            proc, _ = await start(args, log)
            try:
                for _ in range(6):
                    await asyncio.sleep(rng.uniform(0.3, 2.0))
                    proc.send_signal(signal.SIGKILL)
                    await proc.wait()
                    # Whatever the moment, both links name a complete pair.
                    for name in ("yurthub", "yurthub-server"):
                        link = root / "pki" / f"{name}-current.pem"
                        if link.exists() or name == "yurthub":
                            pemfiles.load_pair(link)
                    proc, _ = await start(args, log)
                    async with asyncio.timeout(15):
                        while True:
                            try:
                                if (
                                    await serves(f"https://127.0.0.1:{secure}", ca, pod_token)
                                    == 200
                                ):
                                    break
                            except (aiohttp.ClientError, OSError):
                                pass
                            await asyncio.sleep(0.1)
            finally:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
                    await proc.wait()
        assert len(approver.approved) >= 8  # rotations happened between the kills
        text = log.read_text()
        assert "ignoring YurtHub flags this hub does not implement: --profiling" in text
        assert "Traceback" not in text
        leftovers = [n for n in os.listdir(root) + os.listdir(root / "pki") if ".tmp-" in n]
        assert leftovers == []
