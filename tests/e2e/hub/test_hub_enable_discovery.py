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

from yurthub.testing import ports, processes, simapiserver

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
            processes.read_announcement_sync(hub.stdout, "EDGEHUB_HUB_READY")
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


def _hub_argv(
    workdir: pathlib.Path, server: str, identity: pathlib.Path, akri: pathlib.Path
) -> list[str]:
    return [
        EDGEHUB,
        "hub",
        f"--server-addr={server}",
        "--node-name=edge-node-1",
        f"--kubeconfig={identity}",
        "--proxy-port=0",
        "--serve-port=0",
        f"--disk-cache-path={workdir / 'cache'}",
        "--heartbeat-interval-seconds=1",
        "--heartbeat-timeout-seconds=1",
        "--enable-discovery",
        "--embedded-handlers=debugEcho",
        f"--discovery-handlers-directory={akri}",
        f"--device-plugins-dir={workdir / 'dp'}",
        f"--cdi-dir={workdir / 'cdi'}",
        f"--pod-resources-socket={workdir / 'pr.sock'}",
    ]


def test_unusable_discovery_directory_is_a_startup_failure(workdir: pathlib.Path) -> None:
    with simapiserver.SimApiserverThread(seed="demo", workdir=workdir / "cloud") as sim:
        identity = sim.call(sim.sim.write_kubeconfig, workdir / "id.kubeconfig")
        kubectl(sim.kubeconfig_path, "apply", "-f", str(CRDS))
        blocker = workdir / "blocker"
        blocker.write_text("a file where a directory should be")
        proc = subprocess.run(
            _hub_argv(workdir, sim.url, identity, blocker / "akri"),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 3, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("edgehub hub:")]
    assert len(lines) == 1 and "discovery" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_sigterm_while_the_agent_waits_for_an_unreachable_cloud(workdir: pathlib.Path) -> None:
    # Nothing listens there and nothing is cached: the agent's start waits for its first list.
    dead = f"https://127.0.0.1:{ports.closed_port()}"
    with simapiserver.SimApiserverThread(seed="demo", workdir=workdir / "cloud") as sim:
        identity = sim.call(sim.sim.write_kubeconfig, workdir / "id.kubeconfig")
    log = (workdir / "hub.log").open("w")
    hub = subprocess.Popen(
        _hub_argv(workdir, dead, identity, workdir / "akri"), stdout=log, stderr=log
    )
    try:
        # Into the agent's wait: the hub serves (its handlers are installed by then), then a
        # moment more. A fixed sleep raced the imports on a loaded machine (SIGTERM killed it).
        deadline = time.monotonic() + 30
        while "hub proxy listening" not in (workdir / "hub.log").read_text():
            assert hub.poll() is None, (workdir / "hub.log").read_text()
            assert time.monotonic() < deadline, (workdir / "hub.log").read_text()
            time.sleep(0.1)
        time.sleep(1)
        assert hub.poll() is None, (workdir / "hub.log").read_text()
        hub.send_signal(signal.SIGTERM)
        code = hub.wait(timeout=20)
    finally:
        if hub.poll() is None:
            hub.kill()
            hub.wait()
        log.close()
    assert code == 0, (workdir / "hub.log").read_text()
