"""The installed ``edgehub hub`` killed with SIGKILL in the middle of an outage and started again
while the link is still cut: one outage is recorded, whole (the counts it had saved before the
kill, and what the new process answered), and after the heal one Node Event says so;
``edgehub status --history`` shows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import sqlite3
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from yurthub.outages import history, records
from yurthub.testing import partition, processes, simapiserver

EDGEHUB = str(pathlib.Path(sys.executable).parent / "edgehub")
NODE = "edge-1"
KUBELET = {"User-Agent": "kubelet/v1.32.4 (linux/amd64) e2e", "Accept": "application/json"}
KEY = ("kubelet", "list", "namespaces")
pytestmark = pytest.mark.slow


class Hub:
    def __init__(self, proc: asyncio.subprocess.Process, fields: dict[str, str]) -> None:
        self.proc = proc
        self.proxy, self.server = fields["proxy"], fields["server"]


@contextlib.asynccontextmanager
async def hub_process(
    tmp: pathlib.Path, server: str, kubeconfig: pathlib.Path
) -> AsyncIterator[Hub]:
    log = tmp / "hub.log"
    with log.open("ab") as err:
        proc = await asyncio.create_subprocess_exec(
            EDGEHUB,
            "hub",
            f"--server-addr={server}",
            f"--node-name={NODE}",
            f"--kubeconfig={kubeconfig}",
            f"--disk-cache-path={tmp / 'cache'}",
            f"--root-dir={tmp / 'root'}",
            "--proxy-port=0",
            "--serve-port=0",
            "--heartbeat-interval-seconds=1",
            "--heartbeat-timeout-seconds=1",
            "--heartbeat-healthy-threshold=1",
            "--heartbeat-failed-retry=1",
            "--outage-save-interval-seconds=1",  # what a kill -9 may lose of the counts
            "--outage-flap-window-seconds=1",  # the Event once the link stayed up 1 s
            env=dict(os.environ, EDGEHUB_LOG_LEVEL="info"),
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
        )
    try:
        assert proc.stdout is not None
        try:
            fields = await processes.read_announcement(proc.stdout, "EDGEHUB_HUB_LISTENING", 30)
        except (TimeoutError, processes.ProcessError) as e:
            raise AssertionError(log.read_text()) from e
        yield Hub(proc, fields)
    finally:
        if proc.returncode is None:
            proc.terminate()
            async with asyncio.timeout(20):
                await proc.wait()


async def outages(session: aiohttp.ClientSession, hub: Hub) -> dict[str, Any]:
    async with session.get(hub.server + "/v1/outages") as resp:
        assert resp.status == 200
        found: dict[str, Any] = await resp.json()
        return found


async def wait_for(check: Any, within: float = 30.0) -> Any:
    async with asyncio.timeout(within):
        while not (found := await check()):
            await asyncio.sleep(0.1)
    return found


def saved_answers(cache: pathlib.Path) -> int:
    """kubelet's namespace lists answered locally in the ongoing outage, as saved on disk
    (read-only, beside the hub)."""
    path = cache / history.FILE_NAME
    if not path.exists():
        return 0
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
        row = con.execute("SELECT record FROM outages WHERE ended IS NULL").fetchone()
    if row is None:
        return 0
    tally = history.decode(row[0]).tallies.get(KEY)
    return tally.answered if tally is not None else 0


async def test_a_hub_killed_during_an_outage_records_it_once_whole(tmp_path: pathlib.Path) -> None:
    async with (
        simapiserver.SimApiserver(workdir=tmp_path / "sim") as sim,
        partition.Partition("127.0.0.1", sim.port) as link,
        aiohttp.ClientSession(headers=KUBELET) as session,
    ):
        server = f"https://{link.address}"
        async with hub_process(tmp_path, server, sim.kubeconfig_path) as hub:
            namespaces = hub.proxy + "/api/v1/namespaces"

            async def list_ok() -> bool:
                async with session.get(namespaces) as resp:
                    return resp.status == 200

            await wait_for(list_ok)  # online, and cached as kubelet's
            await link.set_mode(partition.Mode.REFUSE)

            began = await wait_for(ongoing_of(session, hub))
            assert began["cause"] == "refused"
            for _ in range(4):
                assert await list_ok()

            async def saved() -> bool:
                return saved_answers(tmp_path / "cache") >= 4

            await wait_for(saved)  # within the save interval
            hub.proc.kill()
            await hub.proc.wait()

        async with hub_process(tmp_path, server, sim.kubeconfig_path) as hub:
            resumed = await wait_for(ongoing_of(session, hub))
            assert resumed["id"] == began["id"] and resumed["hubRestarts"] == 1
            assert resumed["answered"] >= 4
            for _ in range(3):
                async with session.get(hub.proxy + "/api/v1/namespaces") as resp:
                    assert resp.status == 200
            await link.set_mode(partition.Mode.PASS)

            def events() -> list[dict[str, Any]]:
                return [
                    e
                    for e in sim.state.list("events", "default")
                    if e.get("reason") == records.EVENT_REASON
                ]

            async def posted() -> list[dict[str, Any]]:
                return events()

            # After the requests begun offline settle and a random delay (the fleet's spread).
            (event,) = await wait_for(posted, within=60)
            assert event["metadata"]["name"] == records.event_name(NODE, began["id"])
            assert "The hub restarted once during it." in event["message"]

            async def history_posted() -> dict[str, Any] | None:
                found = (await outages(session, hub))["outages"]
                return found[0] if found and found[0]["event"] == records.POSTED else None

            outage = await wait_for(history_posted)
            by_key = {(a["component"], a["verb"], a["resource"]): a for a in outage["answers"]}
            assert by_key[KEY]["answered"] == 7  # 4 saved before the kill, 3 after
            assert outage["hubRestarts"] == 1 and outage["began"] == began["began"]
            assert len(events()) == 1

            text = await cli("status", "--history", "--server", hub.server)
            assert f"edgehub hub on node {NODE}" in text and "1 outages recorded" in text
            row = next(line for line in text.splitlines() if line.startswith(f"  {began['began']}"))
            assert row.split()[3:6] == ["refused", "0", str(outage["answered"])]  # no flaps
            assert row.split()[-1] == "posted"
            shown = json.loads(
                await cli("status", "--history", "--server", hub.server, "-o", "json")
            )
            assert shown["outages"][0]["id"] == began["id"]


def ongoing_of(session: aiohttp.ClientSession, hub: Hub) -> Any:
    async def check() -> dict[str, Any] | None:
        found: dict[str, Any] | None = (await outages(session, hub))["ongoing"]
        return found

    return check


async def cli(*args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        EDGEHUB, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()
