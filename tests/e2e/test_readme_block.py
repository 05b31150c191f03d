"""The README's "Trying the pieces by hand" block, run as written: in a network and mount
namespace of its own (its fixed ports 6443, 10261, 10267, 16443, 16444 and its /tmp files
collide with nothing), with the pinned kubectl as ``kubectl`` and a fresh HOME (no kubectl
discovery cache: offline it must still work). Needs root (``unshare``), as the dummy-interface
test does."""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess

import pytest

from yurthub.testing import fixtures

REPO = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def block() -> str:
    text = (REPO / "README.md").read_text()
    parts = re.split(r"^#+ Trying the pieces by hand\n", text, maxsplit=1, flags=re.M)
    assert len(parts) == 2, "README.md: no 'Trying the pieces by hand' heading"
    found = re.search(r"```sh\n(.*?)```", parts[1], re.S)
    assert found is not None
    return found.group(1)


ASIDE = "/run/edgehub-readme-block"
"""Where a checkout under /tmp waits while the namespace's own /tmp is mounted."""


def _under_tmp() -> bool:
    return pathlib.Path(REPO).resolve().is_relative_to("/tmp")


def test_the_hand_run_block_works_as_written() -> None:
    script = block()
    assert "kill $HUB $LINK $SIM" in script  # it tears down what it started
    kubectl_dir = str(pathlib.Path(fixtures.KUBECTL).parent)
    repo = shlex.quote(str(REPO))
    # A private /tmp; a checkout under /tmp is carried into it (bound aside, then back).
    keep = f"mkdir -p {ASIDE} && mount --bind {repo} {ASIDE} && " if _under_tmp() else ""
    back = f"mkdir -p {repo} && mount --bind {ASIDE} {repo} && " if _under_tmp() else ""
    wrapper = (
        f"set -u; {keep}mount -t tmpfs tmpfs /tmp && {back}ip link set lo up "
        f"&& mkdir -p /tmp/home && cd {repo} && exec bash -s"
    )
    done = subprocess.run(
        ["unshare", "--mount", "--net", "--fork", "bash", "-c", wrapper],
        input=script,
        capture_output=True,
        text=True,
        timeout=150,
        env={
            "PATH": f"{kubectl_dir}:{os.environ['PATH']}",
            "HOME": "/tmp/home",
            "LANG": "C.UTF-8",
        },
        check=False,
    )
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, err[-4000:]
    # The cloud, then the hub: ready, and kubectl through it.
    assert re.search(r"^NAME\s+STATUS", out, re.M), out
    assert "\nOK\n" in out
    assert out.count("kube-system") >= 4, out  # pods listed online and offline alike
    # Offline: the status screen says why, and a never-listed resource says so.
    assert re.search(r"https://127\.0\.0\.1:16443\s+UNHEALTHY", out), out
    assert "CACHE  /tmp/edge-cache" in out
    assert "not in the hub's offline cache (never listed while online)" in err
    assert "couldn't get current server API group list" not in err
    # The partition's control port: JSON state after each switch.
    assert '"mode":"blackhole"' in out and '"mode":"pass"' in out
    # Devices.
    assert re.search(r"^foo0\s+DEBUG_ECHO_DESCRIPTION=foo0", out, re.M), out
    assert "Traceback" not in err
