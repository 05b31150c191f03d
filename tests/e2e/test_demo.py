"""``edgehub demo --exit`` tells the whole story and ends with success; it clears only a
workdir it made."""

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
    # What an earlier run left: the demo's own directory, emptied at start.
    (workdir / "cache").mkdir(parents=True)
    (workdir / ".edgehub-demo").write_text("made by `edgehub demo`\n")
    (workdir / "cache" / "leftover").write_text("from an earlier run")
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
    assert not (workdir / "cache" / "leftover").exists()
    assert (workdir / ".edgehub-demo").is_file()  # the next run may empty it again
    shutil.rmtree(short, ignore_errors=True)


@pytest.mark.parametrize("where", ["default", "--workdir"])
def test_a_folder_the_demo_did_not_make_is_refused_and_left_alone(
    tmp_path: pathlib.Path, where: str
) -> None:
    """Issue 27: `edgehub demo` next to a `demo/` of the user's deleted it without asking."""
    mine = tmp_path / "demo"
    (mine / "photos").mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    args = ["--workdir", str(mine)] if where == "--workdir" else []
    proc = subprocess.run(
        [sys.executable, "-m", "edgehub", "demo", "--exit", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [
        f"edgehub demo: {mine} holds files edgehub did not make (it has no .edgehub-demo); "
        "left as it is: choose another with --workdir"
    ]
    assert proc.stdout == ""
    assert sorted(os.listdir(mine)) == ["notes.txt", "photos"]
    assert (mine / "notes.txt").read_text() == "mine"


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
