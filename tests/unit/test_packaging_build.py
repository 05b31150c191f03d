"""The build backend (pyproject.toml's ``[build-system]``) builds edgehub without a word of
warning: ``make`` installs it with pip, which shows every warning the backend raises as a
banner (setuptools' editable install of our two-root layout printed one at every first run).

The hooks run as pip runs them (``pyproject_hooks``, in a subprocess), with the backend of this
venv (the test extras install it). Anything the backend warns or prints to stderr fails here.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tomllib
import warnings
import zipfile
from collections.abc import Mapping, Sequence

import pyproject_hooks

REPO = pathlib.Path(__file__).resolve().parents[2]


def build_system() -> dict[str, object]:
    table: dict[str, object] = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]
    return table


class Runner:
    """pyproject_hooks' subprocess runner, keeping what the backend prints."""

    def __init__(self) -> None:
        self.stderr: list[str] = []

    def __call__(
        self,
        cmd: Sequence[str],
        cwd: str | None = None,
        extra_environ: Mapping[str, str] | None = None,
    ) -> None:
        env = {**os.environ, **(extra_environ or {})}
        done = subprocess.run(
            list(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        self.stderr.append(done.stderr)


def test_the_backend_builds_edgehub_without_warnings(tmp_path: pathlib.Path) -> None:
    system = build_system()
    backend = str(system["build-backend"])
    runner = Runner()
    for where in ("meta", "editable", "wheel"):
        (tmp_path / where).mkdir()
    hooks = pyproject_hooks.BuildBackendHookCaller(
        str(REPO), backend, python_executable=sys.executable, runner=runner
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hooks.get_requires_for_build_editable()
        metadata = hooks.prepare_metadata_for_build_editable(str(tmp_path / "meta"))
        editable = hooks.build_editable(str(tmp_path / "editable"))
        wheel = hooks.build_wheel(str(tmp_path / "wheel"))
    assert [str(w.message) for w in caught] == []
    assert "".join(runner.stderr).strip() == ""
    assert metadata.startswith("edgehub-")
    # The editable install puts both source roots on sys.path (edgehub lives in cmd/).
    with zipfile.ZipFile(tmp_path / "editable" / editable) as z:
        pth = [n for n in z.namelist() if n.endswith(".pth")]
        paths = {line.strip() for n in pth for line in z.read(n).decode().splitlines()}
    assert {str(REPO), str(REPO / "cmd")} <= paths
    # The wheel (the Dockerfile's) holds every package and its data files.
    with zipfile.ZipFile(tmp_path / "wheel" / wheel) as z:
        names = set(z.namelist())
    for needed in (
        "edgehub/cli.py",
        "edgehub/yurthubflags.json",
        "yurthub/kubeproto/gofields.json",
        "discovery/proto/discovery.proto",
        "inputbounds/__init__.py",
        "yurthub/py.typed",
    ):
        assert needed in names, needed
