"""Fixtures shared by the cache tests."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator

import pytest

from yurthub.cache import store


@pytest.fixture
async def cache(tmp_path: pathlib.Path) -> AsyncIterator[store.Store]:
    """A fresh disk cache in the test's directory, closed afterwards."""
    opened = await store.Store.open(tmp_path / "cache")
    try:
        yield opened
    finally:
        await opened.close()
