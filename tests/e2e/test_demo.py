"""``edgehub demo --exit`` tells the whole story and ends with success."""

from __future__ import annotations

import os
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
        # edgehub status, offline: the apiserver unhealthy and why, the cache, the devices.
        "status --server http://",
        "UNHEALTHY  ",
        "CACHE  ",
        "default/akri-debug-echo",
    ):
        assert line in out, f"missing {line!r} in demo output:\n{out}\n{proc.stderr}"
    # What the demo leaves for the user to try.
    assert (workdir / "kubeconfig").is_file()
    assert (workdir / "hub.kubeconfig").is_file()
    assert (workdir / "cache").is_dir()
    shutil.rmtree(short, ignore_errors=True)


async def test_the_prompt_answers_every_word(capsys: pytest.CaptureFixture[str]) -> None:
    """cut / heal switch the link, status shows the screen, anything else is answered."""
    from edgehub import demo

    from yurthub.testing import partition

    read_end, write_end = os.pipe()
    async with partition.Partition("127.0.0.1", 9) as link:
        with os.fdopen(read_end, "rb", buffering=0) as stream:
            os.write(write_end, b"cut\nhelp\nstatus\nheal\n")
            os.close(write_end)
            await demo._commands(
                link, demo.Progress(color=False), "http://127.0.0.1:9", stream=stream
            )
        assert link.mode is partition.Mode.PASS
    out = capsys.readouterr().out
    assert "link cut (blackhole)" in out and "link restored" in out
    assert "unknown command 'help': type cut, heal or status" in out
    assert "edgehub hub: no answer from http://127.0.0.1:9" in out  # status, no hub there
