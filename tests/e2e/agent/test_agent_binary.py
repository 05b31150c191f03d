"""The installed ``edgehub agent`` binary with real handler processes, kubectl, the simulated
apiserver and a simulated kubelet: the issue's "how it is checked" list.

* debugEcho served by ``edgehub handler debugEcho``: Instances with Akri's hash names appear;
  killing the handler mid-stream and starting it again churns nothing; SIGKILL of the agent and
  a restart keep every Instance untouched; SIGTERM exits 0 and removes the plugin sockets.
* udev (``SUBSYSTEM=="tty"``, embedded): local Instances for this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from discovery.testing import cluster
from discovery.testing import kubelet as sim_kubelet
from yurthub.testing import processes

pytestmark = pytest.mark.slow

# The simulated apiserver lives in yurthub.testing (tests may use it; discovery may not).
simapiserver = pytest.importorskip("yurthub.testing.simapiserver")

REPO = Path(__file__).resolve().parents[3]
EDGEHUB = str(Path(sys.executable).with_name("edgehub"))
CRDS = [
    REPO / "manifests/crds/configurations.akri.sh.yaml",
    REPO / "manifests/crds/instances.akri.sh.yaml",
]


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=3).hexdigest()


@pytest.fixture
def base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ehe-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def sim(base: Path) -> AsyncIterator[Any]:
    server = simapiserver.SimApiserver("127.0.0.1", port=0, seed="demo", workdir=base / "sim")
    await server.start()
    try:
        for crd in CRDS:
            await cluster.kubectl(server, "apply", "-f", str(crd))
        yield server
    finally:
        await server.stop()


@contextlib.asynccontextmanager
async def process(*args: str, env: dict[str, str]) -> AsyncIterator[asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(
        *args,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        await processes.terminate(proc)
        if proc.stderr is not None:
            await proc.stderr.read()


def agent_args(sim: Any, base: Path, *extra: str) -> list[str]:
    return [
        EDGEHUB,
        "agent",
        "--node-name=node-e2e",
        f"--kubeconfig={sim.kubeconfig_path}",
        f"--discovery-handlers-directory={base / 'akri'}",
        f"--device-plugins-dir={base / 'dp'}",
        f"--pod-resources-socket={base / 'pr.sock'}",
        f"--cdi-dir={base / 'cdi'}",
        "--metrics-address=127.0.0.1",
        "--metrics-port=0",
        "--settle-seconds=0.5",
        "--registration-window-seconds=0.5",
        *extra,
    ]


def config(name: str, handler: str, details: str) -> str:
    return json.dumps(
        {
            "apiVersion": "akri.sh/v0",
            "kind": "Configuration",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "discoveryHandler": {"name": handler, "discoveryDetails": details},
                "capacity": 1,
            },
        }
    )


@pytest.mark.slow  # about 5 s: it waits out windows in which nothing may change
async def test_debug_echo_handler_process_crash_and_agent_restart(sim: Any, base: Path) -> None:
    handler_env = {
        "DISCOVERY_HANDLERS_DIRECTORY": str(base / "akri"),
        "DEBUG_ECHO_INSTANCES_SHARED": "false",
        "DEBUG_ECHO_AVAILABILITY_FILE": str(base / "availability"),
        "DEBUG_ECHO_POLL_SECONDS": "0.1",
    }
    handler_args = [EDGEHUB, "handler", "debugEcho", "--registration-retry=0.2"]
    names = {f"cfg-{digest('bar0node-e2e')}", f"cfg-{digest('bar1node-e2e')}"}
    await cluster.kubectl(
        sim, "apply", "-f", "-", stdin=config("cfg", "debugEcho", "descriptions: [bar0, bar1]")
    )

    async def expected() -> bool:
        return set(await cluster.instances(sim)) == names

    async with (
        sim_kubelet.SimKubelet(base / "dp") as kubelet,
        process(*agent_args(sim, base), env={}) as agent,
    ):
        async with process(*handler_args, env=handler_env) as handler:
            await cluster.eventually(expected)
            await kubelet.wait_for(lambda: len(kubelet.plugins) == 3)
            before = {n: i["metadata"]["uid"] for n, i in (await cluster.instances(sim)).items()}
            handler.kill()  # crash mid-stream
            await handler.wait()
        async with process(*handler_args, env=handler_env):
            await asyncio.sleep(2.0)
            assert {
                n: i["metadata"]["uid"] for n, i in (await cluster.instances(sim)).items()
            } == before
            agent.kill()  # the agent dies without cleaning up
            await agent.wait()
            stale = set((base / "dp").glob("cfg-*.sock"))
            async with process(*agent_args(sim, base), env={}) as again:
                await kubelet.wait_for(lambda: len(kubelet.plugins) == 3, within=20.0)
                await asyncio.sleep(1.0)
                after = {n: i["metadata"]["uid"] for n, i in (await cluster.instances(sim)).items()}
                assert after == before
                again.send_signal(signal.SIGTERM)
                async with asyncio.timeout(10):
                    assert await again.wait() == 0
                assert set((base / "dp").glob("cfg-*.sock")) <= stale


async def test_udev_tty_configuration_finds_local_devices(sim: Any, base: Path) -> None:
    pytest.importorskip("discovery.handlers.udev")
    if not list(Path("/sys/class/tty").glob("*")):
        pytest.skip("no tty devices in /sys/class/tty")
    details = 'udevRules:\n- SUBSYSTEM=="tty"\n'
    await cluster.kubectl(sim, "apply", "-f", "-", stdin=config("ttys", "udev", details))
    async with process(*agent_args(sim, base, "--embedded-handlers=udev"), env={}):

        async def some_local() -> bool:
            found = await cluster.instances(sim)
            return bool(found) and all(
                not i["spec"]["shared"] and i["spec"]["nodes"] == ["node-e2e"]
                for i in found.values()
            )

        await cluster.eventually(some_local, within=20.0)
        sample = next(iter((await cluster.instances(sim)).values()))
        assert sample["spec"]["brokerProperties"]["UDEV_DEVPATH"].startswith("/devices/")


async def test_bad_flags_exit_3(base: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        EDGEHUB, "agent", "--node-name=x", stderr=asyncio.subprocess.PIPE
    )
    _, err = await proc.communicate()
    assert proc.returncode == 3
    assert b"--kubeconfig" in err


@pytest.mark.parametrize("failing", ["metrics port in use", "unusable handlers directory"])
async def test_startup_failures_exit_3_with_one_clear_line(base: Path, failing: str) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    (base / "file").write_text("not a directory")
    if failing == "metrics port in use":
        extra = ["--metrics-port", str(taken.getsockname()[1])]
        expected = "error: cannot serve metrics: "
    else:
        extra = ["--metrics-port", "0", f"--discovery-handlers-directory={base}/file/akri"]
        expected = f"error: discovery handlers directory: cannot listen on {base}/file/akri/"
    with taken:
        proc = await asyncio.create_subprocess_exec(
            EDGEHUB, "--log-level", "error", "agent", "--node-name=x",
            "--server-addr=http://127.0.0.1:9", "--metrics-address=127.0.0.1",
            f"--device-plugins-dir={base}/dp", f"--cdi-dir={base}/cdi", *extra,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 3, err
    assert "Traceback" not in err.decode(), err
    assert err.decode().strip().splitlines()[-1].startswith(expected), err


async def test_in_a_pod_the_service_account_authenticates(sim: Any, base: Path) -> None:
    # What the DaemonSet gives the agent: no kubeconfig, a ServiceAccount directory and
    # KUBERNETES_SERVICE_HOST/PORT (here the simulator).
    await cluster.kubectl(sim, "create", "serviceaccount", "edgehub-agent", "-n", "default")
    account = base / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(sim.service_account_token("default", "edgehub-agent"))
    (account / "ca.crt").write_bytes(sim.ca_pem)
    args = [
        a
        for a in agent_args(sim, base, "--embedded-handlers=debugEcho")
        if not a.startswith("--kubeconfig=")
    ]
    env = {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(sim.port),
        "EDGEHUB_SERVICE_ACCOUNT_DIR": str(account),
        "DEBUG_ECHO_AVAILABILITY_FILE": str(base / "availability"),
    }
    await cluster.kubectl(
        sim, "apply", "-f", "-", stdin=config("cfg", "debugEcho", "descriptions: [p]")
    )
    async with process(*args, env=env):

        async def created() -> bool:
            return list(await cluster.instances(sim)) == [f"cfg-{digest('p')}"]

        await cluster.eventually(created)
