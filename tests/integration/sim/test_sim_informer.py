"""client-go's shared informer against the simulated apiserver, directly and through the hub.

The informer is ``tests/cluster/informer`` built from the pinned modules by ``make cluster-bins``
(WatchListClient on: its initial list is a streaming list, gzipped as every Go client asks for
it, that ends with the ``k8s.io/initial-events-end`` bookmark it waits for). A missing build
fails with the command that makes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import ssl
from collections.abc import AsyncIterator

import aiohttp

from yurthub import server, settings
from yurthub.testing import simapiserver

INFORMER_TIMEOUT = 20.0
"""The informer's own deadline, for syncing and then for the event; it then says what failed."""


async def _create_namespace(sim: simapiserver.SimApiserver, name: str) -> None:
    connector = aiohttp.TCPConnector(ssl=ssl.create_default_context(cadata=sim.ca_pem.decode()))
    headers = {"Authorization": f"Bearer {sim.admin_token}"}
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    async with (
        aiohttp.ClientSession(sim.url, headers=headers, connector=connector) as http,
        http.post("/api/v1/namespaces", json=body) as resp,
    ):
        assert resp.status == 201, await resp.text()


async def _sync_then_see_an_add(
    informer: pathlib.Path, sim: simapiserver.SimApiserver, *connect: str
) -> None:
    """Runs the informer on namespaces; once it has synced, creates one and waits for its ADD."""
    name = "informed"
    proc = await asyncio.create_subprocess_exec(
        str(informer), *connect, "--resource", "namespaces", "--wait-for", name,
        "--timeout", f"{INFORMER_TIMEOUT:.0f}s",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr_pipe = proc.stdout, proc.stderr
    assert stdout is not None and stderr_pipe is not None
    lines: list[str] = []

    async def line() -> str:
        raw = await stdout.readline()
        lines.append(raw.decode().strip())
        return lines[-1]

    async with asyncio.TaskGroup() as tg:
        stderr = tg.create_task(stderr_pipe.read(), name="informer-stderr")
        try:
            async with asyncio.timeout(2 * INFORMER_TIMEOUT + 10):
                watchlist, synced = await line(), await line()
                if synced.startswith("SYNCED "):
                    await _create_namespace(sim, name)
                    await line()
                rc = await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    err = stderr.result().decode(errors="replace")
    tail = "\n".join(err.strip().splitlines()[-8:])
    assert watchlist == "WATCHLIST true", f"{lines}\n{tail}"
    assert synced.startswith("SYNCED "), f"the informer did not sync: {lines}\n{tail}"
    assert int(synced.split()[1]) >= 4  # default, kube-system, kube-public, kube-node-lease
    assert lines[2:] == [f"EVENT ADDED {name}"], f"{lines}\n{tail}"
    assert rc == 0, tail


async def test_informer_syncs_against_the_simulator(
    informer: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    async with simapiserver.SimApiserver(workdir=tmp_path / "sim") as sim:
        await _sync_then_see_an_add(informer, sim, "--kubeconfig", str(sim.kubeconfig_path))


@contextlib.asynccontextmanager
async def _hub(sim: simapiserver.SimApiserver, tmp: pathlib.Path) -> AsyncIterator[server.Hub]:
    identity = tmp / "hub.kubeconfig"
    sim.write_kubeconfig(identity, user="system:node:n1", groups=["system:masters"], auth="cert")
    hub = server.Hub(
        settings.HubSettings(
            node_name="n1",
            upstream=settings.UpstreamSettings(
                servers=(sim.url,), kubeconfig=identity, connect_timeout=1.0
            ),
            listen=settings.ListenSettings(serve_port=0, proxy_port=0),
            heartbeat=settings.HeartbeatSettings(interval=0.5, timeout=1.0),
            proxy=settings.ProxySettings(shutdown_grace=1.0),
            # Every agent cached: the hub also inflates a copy of the stream for its cache.
            cache=settings.CacheSettings(disk_cache_path=tmp / "cache", cache_agents=("*",)),
        )
    )
    await hub.start()
    try:
        assert hub.health is not None
        async with asyncio.timeout(10):
            await hub.health.initial_probe_done.wait()
        assert hub.health.any_healthy()
        yield hub
    finally:
        await hub.stop()


async def test_informer_syncs_through_the_hub(
    informer: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    async with (
        simapiserver.SimApiserver(workdir=tmp_path / "sim") as sim,
        _hub(sim, tmp_path) as hub,
    ):
        await _sync_then_see_an_add(informer, sim, "--server", hub.proxy_url)
