"""What the installed ``edgehub hub`` tells an operator when something is wrong.

- a wrong ``--server-addr`` (nothing listening; http:// to an https port; https:// to an http
  port): one INFO line ``cannot reach <server>: <why in words>`` (never the repr of an
  ``ssl.SSLContext``), and ``/v1/readyz`` is 500 naming the unreachable server and the empty
  disk cache while the hub has never reached any apiserver and has nothing cached;
- offline, the real kubectl with a fresh discovery cache works (the hub keeps ``/api`` and
  ``/apis`` cached itself) and a list the hub never saw says so instead of reading like a
  deletion.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys
from collections.abc import AsyncIterator

import aiohttp
import pytest

from yurthub.testing import fixtures, partition, ports, processes, simapiserver

EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
pytestmark = pytest.mark.slow


CLOSED_WITHOUT_ANSWER = (
    "the server closed the connection without answering: is this an https:// port?"
)
WRONG_TLS = "TLS handshake failed (WRONG_VERSION_NUMBER): is this an http:// port?"


class RunningHub:
    def __init__(self, proc: asyncio.subprocess.Process, log: pathlib.Path, fields: dict[str, str]):
        self.proc, self.log = proc, log
        self.proxy, self.server = fields["proxy"], fields["server"]

    def log_text(self) -> str:
        return self.log.read_text()


async def _start(
    tmp: pathlib.Path, server: str, kubeconfig: pathlib.Path, *extra: str
) -> RunningHub:
    log = tmp / "hub.log"
    with log.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            EDGEHUB,
            "hub",
            f"--server-addr={server}",
            "--node-name=edge-1",
            f"--kubeconfig={kubeconfig}",
            f"--disk-cache-path={tmp / 'cache'}",
            "--proxy-port=0",
            "--serve-port=0",
            "--proxy-secure-port=0",
            "--heartbeat-interval-seconds=1",
            *extra,
            env=dict(os.environ, EDGEHUB_LOG_LEVEL="info"),
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
        )
    assert proc.stdout is not None
    try:
        fields = await processes.read_announcement(proc.stdout, "EDGEHUB_HUB_LISTENING", 20)
    except (TimeoutError, processes.ProcessError) as e:
        raise AssertionError(log.read_text()) from e
    return RunningHub(proc, log, fields)


@pytest.fixture
async def hubs() -> AsyncIterator[list[RunningHub]]:
    started: list[RunningHub] = []
    yield started
    for hub in started:
        if hub.proc.returncode is None:
            hub.proc.terminate()
            async with asyncio.timeout(15):
                await hub.proc.wait()


async def _readyz_until(hub: RunningHub, needle: str) -> str:
    async with aiohttp.ClientSession() as s, asyncio.timeout(15):
        while True:
            async with s.get(hub.server + "/v1/readyz") as r:
                text = await r.text()
                if needle in text:
                    assert r.status == 500, text
                    return text
            await asyncio.sleep(0.1)


async def _log_until(hub: RunningHub, needle: str) -> str:
    async with asyncio.timeout(15):
        while needle not in hub.log_text():
            await asyncio.sleep(0.1)
    return hub.log_text()


@pytest.mark.parametrize(
    ("scheme", "target", "why"),
    [
        ("https", "closed", "connection refused"),
        ("http", "sim-https", CLOSED_WITHOUT_ANSWER),
        ("https", "sim-http", WRONG_TLS),
    ],
)
async def test_a_wrong_server_addr_is_named_at_info_and_in_readyz(
    scheme: str,
    target: str,
    why: str,
    tmp_path: pathlib.Path,
    hubs: list[RunningHub],
) -> None:
    async with simapiserver.SimApiserver(workdir=tmp_path / "sim", insecure_port=0) as sim:
        if target == "closed":
            address = f"127.0.0.1:{ports.closed_port()}"
        elif target == "sim-https":
            address = f"127.0.0.1:{sim.port}"
        else:
            assert sim.insecure_url is not None
            address = sim.insecure_url.split("://", 1)[1]
        server = f"{scheme}://{address}"
        hub = await _start(tmp_path, server, sim.kubeconfig_path)
        hubs.append(hub)
        log = await _log_until(hub, f"cannot reach {server}: ")
        line = next(x for x in log.splitlines() if f"cannot reach {server}: " in x)
        assert " INFO " in line and line.endswith(f"cannot reach {server}: {why}"), line
        assert "SSLContext" not in log
        # One line for the reason, not one per probe (the heartbeat runs every second).
        await asyncio.sleep(2.5)
        assert hub.log_text().count(f"cannot reach {server}") == 1
        text = await _readyz_until(hub, "cloud-or-cache")
        assert f"{server}: {why}" in text
        assert f"the disk cache {tmp_path / 'cache'} holds no list" in text


async def test_the_ready_line_comes_only_once_readyz_is_200(
    tmp_path: pathlib.Path, hubs: list[RunningHub]
) -> None:
    async with (
        simapiserver.SimApiserver(workdir=tmp_path / "sim") as sim,
        partition.Partition("127.0.0.1", sim.port) as link,
    ):
        await link.set_mode(partition.Mode.REFUSE)
        server = f"https://{link.address}"
        hub = await _start(tmp_path, server, sim.kubeconfig_path)
        hubs.append(hub)
        # Listening, but nothing to answer with: not ready, and no READY line yet (the next
        # line on stdout is the READY one, read below: it must come after the cloud does).
        await _readyz_until(hub, "cloud-or-cache")
        await link.set_mode(partition.Mode.PASS)
        assert hub.proc.stdout is not None
        fields = await processes.read_announcement(hub.proc.stdout, "EDGEHUB_HUB_READY", 30)
        assert fields == {"proxy": hub.proxy, "server": hub.server}
        async with aiohttp.ClientSession() as s, s.get(hub.server + "/v1/readyz") as r:
            assert r.status == 200, await r.text()
        assert f"cannot reach {server}: connection refused" in hub.log_text()


def _hub_kubeconfig(path: pathlib.Path, proxy: str) -> pathlib.Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: hub, cluster: {{server: '{proxy}'}}}}]\n"
        "contexts: [{name: hub, context: {cluster: hub, user: kubectl}}]\n"
        "current-context: hub\nusers: [{name: kubectl, user: {}}]\n"
    )
    return path


async def _kubectl(
    kubeconfig: pathlib.Path, cache: pathlib.Path, *args: str
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        fixtures.KUBECTL,
        "--kubeconfig",
        str(kubeconfig),
        "--cache-dir",
        str(cache),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_offline_kubectl_with_a_fresh_discovery_cache_and_clear_404s(
    tmp_path: pathlib.Path, hubs: list[RunningHub]
) -> None:
    async with (
        simapiserver.SimApiserver(workdir=tmp_path / "sim") as sim,
        partition.Partition("127.0.0.1", sim.port) as link,
    ):
        hub = await _start(
            tmp_path, f"https://{link.address}", sim.kubeconfig_path, "--cache-agents=kubectl"
        )
        hubs.append(hub)
        kubeconfig = _hub_kubeconfig(tmp_path / "hub.kubeconfig", hub.proxy)
        # Online: one list of pods through the hub, nothing else. Discovery goes into a cache
        # directory this test throws away: offline kubectl starts with nothing.
        code, out, err = await _kubectl(kubeconfig, tmp_path / "online", "get", "pods", "-A")
        assert code == 0, err
        async with aiohttp.ClientSession() as s, asyncio.timeout(15):
            # The hub reads /api and /apis itself once the cloud is reachable.
            while True:
                async with s.get(hub.server + "/v1/status") as r:
                    status = await r.json()
                if status["cache"]["documents"] >= 5:
                    break
                await asyncio.sleep(0.2)
        await link.set_mode(partition.Mode.REFUSE)
        await _log_until(hub, f"server https://{link.address} is now unhealthy")

        code, out, err = await _kubectl(kubeconfig, tmp_path / "offline", "get", "pods", "-A")
        assert code == 0, err
        assert "couldn't get current server API group list" not in err
        assert "kube-system" in out
        code, out, err = await _kubectl(
            kubeconfig, tmp_path / "offline", "get", "configmaps", "-n", "default"
        )
        assert code != 0
        assert "not in the hub's offline cache (never listed while online)" in err, err
        assert "couldn't get current server API group list" not in err
        # Answers split by where they came from: kubectl's online ones from the cloud, its
        # offline ones from the cache.
        async with aiohttp.ClientSession() as s, s.get(hub.server + "/metrics") as r:
            text = await r.text()
        counts = {
            source: sum(
                _sample(
                    text,
                    f'node_yurthub_answers_total{{component="kubectl",source="{source}",'
                    f'verb="{verb}"}}',
                )
                for verb in ("get", "list")
            )
            for source in ("cloud", "cache")
        }
        assert counts["cloud"] >= 1 and counts["cache"] >= 2, counts


def _sample(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0
