"""The Akri test peer (``tests/akripeer``: Rust, on Akri's own tonic 0.13 / h2 0.4 stack) as a
subprocess, for tests that try edgehub's agent and handlers against the HTTP/2 peer Akri's
binaries are.

``make test`` builds the peer (``make akri-peer``) and names it in ``EDGEHUB_AKRI_PEER``;
without it the cache directory the Makefile builds into is used. A missing binary fails the
test with the command that builds it: these tests are never skipped.

The peer prints one JSON object per line on stdout for each thing it does (see
``tests/akripeer/src/main.rs``); :meth:`Peer.next_event` waits for the next one of a kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

DEFAULT_BINARY = Path.home() / ".cache/edgehub/akripeer-target/release/akripeer"


def binary() -> Path:
    """The peer's executable, or a test failure saying how to build it."""
    path = Path(os.environ.get("EDGEHUB_AKRI_PEER") or DEFAULT_BINARY)
    if not os.access(path, os.X_OK):
        pytest.fail(
            f"the Akri test peer {path} is missing: build it with `make akri-peer` "
            "(needs cargo; `make test` does it), or point EDGEHUB_AKRI_PEER at it"
        )
    return path


class Peer:
    """One running peer process; its stdout events, in order."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.events: list[dict[str, Any]] = []
        self.other: list[str] = []
        """Lines that were not events (stderr goes here too), for failure messages."""

    async def next_event(self, kind: str, seconds: float = 20.0) -> dict[str, Any]:
        """The next event of ``kind`` not yet returned; fails the test if the peer exits or
        ``seconds`` pass first (both mean the protocol did not get through)."""
        stdout = self.process.stdout
        assert stdout is not None
        try:
            async with asyncio.timeout(seconds):
                while True:
                    line = await stdout.readline()
                    if not line:
                        code = await self.process.wait()
                        pytest.fail(
                            f"akripeer exited ({code}) before a {kind!r} event; "
                            f"events: {self.events}; output: {self.other}"
                        )
                    try:
                        event = json.loads(line)
                    except ValueError:
                        self.other.append(line.decode(errors="replace").rstrip())
                        continue
                    self.events.append(event)
                    if event.get("event") == kind:
                        return dict(event)
        except TimeoutError:
            pytest.fail(
                f"no {kind!r} event from akripeer within {seconds:g}s; events: {self.events}"
            )


@contextlib.asynccontextmanager
async def running(*args: str) -> AsyncIterator[Peer]:
    """Run ``akripeer ARGS...`` for the block; killed (and reaped) when it exits."""
    process = await asyncio.create_subprocess_exec(
        str(binary()),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        yield Peer(process)
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
