"""pytest fixtures for the simulated apiserver; enable with
``pytest_plugins = ["yurthub.testing.fixtures"]`` in a conftest.

- ``sim_apiserver``: a started ``SimApiserver`` (demo seed) on this test's event
  loop, workdir under ``tmp_path``. Use it from async tests.
- ``sim_apiserver_thread``: the same on a background thread, for synchronous
  tests (blocking clients, ``subprocess.run``).
- ``kubectl``: runs the real ``kubectl`` against ``sim_apiserver_thread`` with its
  admin kubeconfig and a private discovery cache; returns the CompletedProcess
  and raises ``KubectlError`` (with stderr) on a non-zero exit unless
  ``check=False``.
- ``real_cluster``: one real control plane per test session (``realcluster.RealCluster``:
  etcd, kube-apiserver, controller-manager, scheduler built by ``make cluster-bins``), stopped
  at the end of the session; its processes die with the test run even if it is killed.
  Missing binaries fail the test with the command that builds them (never a skip).

``kubectl`` is ``$EDGEHUB_KUBECTL``, else the pinned one of the Go-built test bed when it is
built, else the one on ``PATH``.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import pytest_asyncio

from yurthub.testing import k8sbinaries, realcluster, simapiserver


def _kubectl() -> str:
    explicit = os.environ.get("EDGEHUB_KUBECTL")
    if explicit:
        return explicit
    try:
        return str(k8sbinaries.locate().path("kubectl"))
    except k8sbinaries.MissingBinariesError:
        return shutil.which("kubectl") or "/usr/bin/kubectl"


KUBECTL = _kubectl()


class KubectlError(AssertionError):
    def __init__(self, args: list[str], result: subprocess.CompletedProcess[str]) -> None:
        super().__init__(
            f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"
        )
        self.result = result


Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def kubectl_runner(kubeconfig: pathlib.Path, cache_dir: pathlib.Path) -> Kubectl:
    """A ``kubectl(*args, input=None, check=True, timeout=30)`` bound to one kubeconfig."""

    def run(
        *args: str, input: str | None = None, check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        argv = [KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache_dir), *args]
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise KubectlError(list(args), result)
        return result

    return run


@pytest_asyncio.fixture
async def sim_apiserver(tmp_path: pathlib.Path) -> AsyncIterator[simapiserver.SimApiserver]:
    async with simapiserver.SimApiserver(workdir=tmp_path / "simapiserver") as sim:
        yield sim


@pytest.fixture
def sim_apiserver_thread(
    tmp_path: pathlib.Path,
) -> Iterator[simapiserver.SimApiserverThread]:
    with simapiserver.SimApiserverThread(workdir=tmp_path / "simapiserver") as sim:
        yield sim


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[realcluster.RealCluster]:
    try:
        binaries = k8sbinaries.locate()
    except k8sbinaries.MissingBinariesError as e:
        pytest.fail(str(e), pytrace=False)
    cluster = realcluster.RealCluster(
        tmp_path_factory.mktemp("real-cluster"), binaries, die_with_parent=True
    )
    with cluster:
        yield cluster


@pytest.fixture
def kubectl(
    sim_apiserver_thread: simapiserver.SimApiserverThread, tmp_path: pathlib.Path
) -> Kubectl:
    return kubectl_runner(sim_apiserver_thread.sim.kubeconfig_path, tmp_path / "kubectl-cache")
