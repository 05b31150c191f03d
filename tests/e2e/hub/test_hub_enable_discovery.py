"""``edgehub hub --enable-discovery``: the agent runs inside the hub and talks through it.

The real binary against the simulated cloud: Instances appear for a debugEcho Configuration,
the cache holds the agent's answers (component ``edgehub-agent``), and SIGTERM ends both.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest

from yurthub.testing import simapiserver

EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
CRDS = pathlib.Path(__file__).resolve().parents[3] / "manifests" / "crds"
CONFIG = """apiVersion: akri.sh/v0
kind: Configuration
metadata: {name: echo, namespace: default}
spec:
  discoveryHandler: {name: debugEcho, discoveryDetails: "descriptions: [cam-a, cam-b]"}
"""


@pytest.fixture
def workdir() -> Iterator[pathlib.Path]:
    # Short: device-plugin socket paths must fit in 107 bytes.
    path = pathlib.Path(tempfile.mkdtemp(prefix="ehh-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def kubectl(kubeconfig: pathlib.Path, *args: str) -> str:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout


@pytest.mark.slow
def test_agent_runs_inside_the_hub(workdir: pathlib.Path) -> None:
    with simapiserver.SimApiserverThread(seed="demo", workdir=workdir / "cloud") as sim:
        admin = sim.kubeconfig_path
        identity = sim.call(
            sim.sim.write_kubeconfig, workdir / "id.kubeconfig", user="system:node:edge-node-1"
        )
        kubectl(admin, "apply", "-f", str(CRDS))
        log = (workdir / "hub.log").open("w")
        hub = subprocess.Popen(
            [
                EDGEHUB,
                "hub",
                f"--server-addr={sim.url}",
                "--node-name=edge-node-1",
                f"--kubeconfig={identity}",
                "--proxy-port=0",
                "--serve-port=0",
                f"--disk-cache-path={workdir / 'cache'}",
                "--enable-discovery",
                "--embedded-handlers=debugEcho",
                f"--discovery-handlers-directory={workdir / 'akri'}",
                f"--device-plugins-dir={workdir / 'dp'}",
                f"--cdi-dir={workdir / 'cdi'}",
                f"--pod-resources-socket={workdir / 'pr.sock'}",
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        try:
            assert hub.stdout is not None
            ready = hub.stdout.readline()
            assert ready.startswith("EDGEHUB_HUB_READY"), ready
            (workdir / "config.yaml").write_text(CONFIG)
            kubectl(admin, "apply", "-f", str(workdir / "config.yaml"))
            deadline = time.monotonic() + 20
            names: list[str] = []
            while time.monotonic() < deadline:
                items = json.loads(kubectl(admin, "get", "akrii", "-o", "json"))["items"]
                names = sorted(i["metadata"]["name"] for i in items)
                if len(names) == 2:
                    break
                time.sleep(0.3)
            assert len(names) == 2 and all(n.startswith("echo-") for n in names), names
            # The agent's reads went through the hub and were cached under its component.
            listing = subprocess.run(
                [EDGEHUB, "cache", "ls", "--disk-cache-path", str(workdir / "cache")],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
            assert "edgehub-agent/configurations.v0.akri.sh/default/echo" in listing, listing
        finally:
            hub.send_signal(signal.SIGTERM)
            try:
                code = hub.wait(timeout=30)
            finally:
                if hub.poll() is None:
                    hub.kill()
                    hub.wait()
                assert hub.stdout is not None
                hub.stdout.close()
                log.close()
        assert code == 0, (workdir / "hub.log").read_text()
