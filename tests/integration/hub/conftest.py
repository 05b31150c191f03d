"""Fixtures of the hub integration tests; the fakes live in ``hubfakes`` (a unique module name:
several test directories have a conftest, and ``from conftest import ...`` would pick one at
random)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

import pytest
from hubfakes import FakeApiserver, running_hub

from yurthub import server


@pytest.fixture
async def apiserver() -> AsyncIterator[FakeApiserver]:
    api = FakeApiserver()
    await api.start()
    yield api
    await api.stop()


@pytest.fixture
def make_hub() -> Callable[..., contextlib.AbstractAsyncContextManager[server.Hub]]:
    return running_hub
