"""Project-wide test fixtures.

``no_leftover_tasks`` fails any async test that leaves a task running: every
task must have an owner that ends it (DESIGN.md, house style).

Every test drives the kubectl of the pinned, Go-built test bed (``make cluster-bins``), also
when pytest runs without ``make test``: ``EDGEHUB_KUBECTL`` is set here before any test module
reads it.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from yurthub.testing import k8sbinaries, ports

pytest_plugins = ["yurthub.testing.fixtures"]

ROOT = pathlib.Path(__file__).resolve().parent.parent
REAL_CLUSTER = ROOT / "tests" / "e2e" / "cluster"


def pytest_configure(config: pytest.Config) -> None:
    """Under ``make test``'s workers (pytest-xdist), each picks its test beds' ports from a
    part of the range of its own (``ports.RANGE_ENV``; the processes it starts inherit it)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw"):
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        low, high = ports.split_range(
            int(worker.removeprefix("gw")), count, 20000, ports.ephemeral_low() - 1
        )
        os.environ[ports.RANGE_ENV] = f"{low}-{high}"


@pytest.hookimpl(optionalhook=True)  # only xdist knows this hook (``-p no:xdist`` still runs)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``make test``'s workers (pytest-xdist) share the tests out one at a time, except the
    real-cluster tests: they share one control plane (a session fixture), so they all run on
    one worker, one after another, while the other workers take the rest; they mostly wait on
    kubelet's and the controllers' cadence. (xdist's own ``loadgroup`` marks do not group
    under pytest 9, whose node ids no longer take xdist's suffix.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ClusterTogether(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if (ROOT / path).resolve().is_relative_to(REAL_CLUSTER):
                return "real-cluster"
            return nodeid

    return ClusterTogether(config, log)


if "EDGEHUB_KUBECTL" not in os.environ:
    try:
        os.environ["EDGEHUB_KUBECTL"] = str(k8sbinaries.locate().path("kubectl"))
    except k8sbinaries.MissingBinariesError:
        pass  # the real-cluster tests fail with the build command; the rest use PATH's


@pytest.fixture(autouse=True)
async def no_leftover_tasks() -> AsyncIterator[None]:
    yield
    current = asyncio.current_task()
    # Let tasks that were cancelled during teardown run their last step.
    for _ in range(3):
        await asyncio.sleep(0)
    leftover = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
    if leftover:
        names = ", ".join(sorted(t.get_name() for t in leftover))
        for task in leftover:
            task.cancel()
        await asyncio.gather(*leftover, return_exceptions=True)
        pytest.fail(f"test left tasks running: {names}")


@pytest.fixture(scope="session")
def informer() -> pathlib.Path:
    """The client-go informer (``tests/cluster/informer``); a missing build fails with the
    command that makes it."""
    try:
        return k8sbinaries.tool("informer")
    except k8sbinaries.MissingBinariesError as e:
        pytest.fail(str(e), pytrace=False)
