"""The OPC UA handler against a real asyncua server (a Local Discovery Server) on loopback."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from discovery import devices, sdk
from discovery.handlers import opcua

SERVER_SCRIPT = Path(__file__).with_name("opcua_test_server.py")


@pytest.fixture(scope="module")
def lds() -> Iterator[dict[str, str]]:
    proc = subprocess.Popen(
        [sys.executable, str(SERVER_SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        info: dict[str, str] = json.loads(proc.stdout.readline())
        yield info
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


@pytest.fixture
async def silent_server() -> AsyncIterator[str]:
    """Accepts TCP connections and never answers (a port that is not OPC UA)."""
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"opc.tcp://127.0.0.1:{port}/"
    for writer in held:
        writer.close()
    server.close()
    await server.wait_closed()


def _details(*urls: str, names: str = "") -> str:
    listed = ", ".join(f"'{u}'" for u in urls)
    text = f"opcuaDiscoveryMethod: {{standard: {{discoveryUrls: [{listed}]}}}}"
    return text + (f"\napplicationNames: {names}" if names else "")


async def _discover(text: str, connect_timeout: float = 2.0) -> list[devices.Device]:
    handler = opcua.OpcUa(connect_timeout=connect_timeout, interval=60)
    async with asyncio.timeout(15):
        return await sdk.discover_once(handler, text, {})


async def test_find_servers_through_a_discovery_server(lds: dict[str, str]) -> None:
    found = await _discover(_details(lds["url"]))
    base = lds["base"]
    # Sorted by id; the HTTP URL of B loses to its opc.tcp one; B2 duplicates B;
    # the discovery server and the client are not devices.
    assert [d.id for d in found] == [f"{base}/b/", f"{base}/c/", f"{base}/lds/"]
    assert found[0].properties == {"OPCUA_DISCOVERY_URL": f"{base}/b/"}


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ("{items: ['Server B']}", ["/b/"]),
        ("{items: ['Server B', 'Server B2', 'Test LDS'], action: Exclude}", ["/c/"]),
        ("{items: [], action: Include}", []),
        ("{items: [], action: Exclude}", ["/b/", "/c/", "/lds/"]),
    ],
)
async def test_application_name_filter(
    lds: dict[str, str], names: str, expected: list[str]
) -> None:
    found = await _discover(_details(lds["url"], names=names))
    assert [d.id.removeprefix(lds["base"]) for d in found] == expected


async def test_unreachable_urls_are_skipped_quickly(
    lds: dict[str, str], silent_server: str
) -> None:
    started = time.monotonic()
    found = await _discover(
        _details("opc.tcp://127.0.0.1:1/", silent_server, lds["url"]), connect_timeout=0.5
    )
    assert len(found) == 3
    assert time.monotonic() - started < 3.0
    assert await _discover(_details("opc.tcp://127.0.0.1:1/"), connect_timeout=0.5) == []
