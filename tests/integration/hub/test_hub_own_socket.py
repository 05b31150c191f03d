"""The hub's own socket: only this process may use it, and nothing of it outlives the hub.

Before: the hub knew its own clients by their ``yurthub/...`` User-Agent, which any local
process can send (and so skip the in-flight limits and the readiness gate).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
from hubfakes import FakeApiserver

from yurthub import listening

MakeHub = Callable[..., Any]


OTHER_PROCESS = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
answer = b""
while chunk := s.recv(65536):
    answer += chunk
print(answer.split(b"\\r\\n", 1)[0].decode())
"""
"""Another process connecting to the hub's own socket: the first line of what it is told (the
hub answers at once, before any request)."""


async def test_another_process_cannot_use_the_hubs_own_socket(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    async with make_hub([apiserver.url]) as hub:
        path = hub.own_route.socket_path
        assert path is not None
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", OTHER_PROCESS, path],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert done.stdout.strip() == "HTTP/1.1 403 Forbidden", done.stdout


async def test_the_socket_goes_with_the_hub(apiserver: FakeApiserver, make_hub: MakeHub) -> None:
    async with make_hub([apiserver.url]) as hub:
        path = hub.own_route.socket_path
        assert path is not None and pathlib.Path(path).is_socket()
        directory = pathlib.Path(path).parent
        assert directory.stat().st_mode & 0o777 == 0o700
    assert not directory.exists()


def test_what_a_killed_hub_left_is_removed(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    stale = tmp_path / f"edgehub-own-{gone.stdout.strip()}-abc"
    alive = tmp_path / f"edgehub-own-{os.getpid()}-def"
    other = tmp_path / "edgehub-own-notapid"
    for directory in (stale, alive, other):
        directory.mkdir()
    own = listening.OwnSocket()
    try:
        assert not stale.exists() and alive.exists() and other.exists()
        assert own.directory.parent == tmp_path and own.directory.name.startswith(
            f"edgehub-own-{os.getpid()}-"
        )
    finally:
        own.remove()
    assert not own.directory.exists()


def test_a_directory_whose_socket_still_listens_is_kept(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pid that does not run here may run in another PID namespace sharing the temporary
    directory (a hub in a container with the host's /tmp): while its socket listens, its
    directory is not stale."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    elsewhere = tmp_path / f"edgehub-own-{gone.stdout.strip()}-xyz"
    elsewhere.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(elsewhere / "proxy.sock"))
        listener.listen()
        own = listening.OwnSocket()
        try:
            assert (elsewhere / "proxy.sock").is_socket()
        finally:
            own.remove()
    listening.OwnSocket().remove()  # nothing listens any more: now it is stale
    assert not elsewhere.exists()


async def test_the_hubs_own_short_requests_take_turns(
    apiserver: FakeApiserver, make_hub: MakeHub
) -> None:
    """However many of the hub's own lists and gets are in flight, at most ``OWN_SHORT_SHARE``
    go upstream at once (its background work has a bounded share); all are answered."""
    from yurthub.proxy import routing

    async with make_hub([apiserver.url]) as hub:
        route = hub.own_route
        async with route.session() as session:

            async def get() -> int:
                async with session.get(
                    route.url + "/api/v1/namespaces/d/configmaps/slow?sleep=0.3",
                    headers={"User-Agent": "yurthub/edgehub", "Accept": "application/json"},
                ) as resp:
                    await resp.read()
                    return resp.status

            codes = await asyncio.gather(*(get() for _ in range(3 * routing.OWN_SHORT_SHARE)))
    assert codes == [200] * (3 * routing.OWN_SHORT_SHARE)
    assert 2 <= apiserver.peak_in_flight <= routing.OWN_SHORT_SHARE, apiserver.peak_in_flight
