"""``edgehub demo --exit`` tells the whole story and ends with success."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_demo_story_completes(tmp_path: pathlib.Path) -> None:
    # A short path like a user's checkout: unix socket paths are limited to 107 bytes.
    short = pathlib.Path(tempfile.mkdtemp(prefix="ehd-", dir="/tmp"))
    workdir = short / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "edgehub", "demo", "--exit", "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for line in (
        "kubectl get pods -A through the hub",
        "2 Instances in",
        "2 broker pods Running on edge-node-1",
        "devices OFFLINE -> Instances removed",
        "their broker pods stopped",
        "devices ONLINE again -> Instances restored",
        "their broker pods Running again",
        "hub detected the partition",
        "still answers",
        "no failed read offline",
        "hub healthy again",
        "converged: kubelet-like client saw default/late-arrival",
        "demo finished",
    ):
        assert line in out, f"missing {line!r} in demo output:\n{out}\n{proc.stderr}"
    # What the demo leaves for the user to try.
    assert (workdir / "kubeconfig").is_file()
    assert (workdir / "hub.kubeconfig").is_file()
    assert (workdir / "cache").is_dir()
    shutil.rmtree(short, ignore_errors=True)
