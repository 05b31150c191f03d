"""Fixtures for discovery integration tests (helpers live in discovery_support.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from discovery_support import FakeAgent, HandlerProcesses, IndependentProto


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory: Unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="ehd-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def handler_processes() -> Iterator[HandlerProcesses]:
    procs = HandlerProcesses()
    yield procs
    procs.stop_all()


@pytest.fixture
def independent_proto(tmp_path: Path) -> IndependentProto:
    return IndependentProto(tmp_path)


@pytest.fixture
async def fake_agent(
    independent_proto: IndependentProto, sock_dir: Path
) -> AsyncIterator[FakeAgent]:
    agent = FakeAgent(independent_proto, sock_dir / "agent-registration.sock")
    await agent.start()
    yield agent
    await agent.stop()
