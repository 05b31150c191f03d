"""``edgehub cluster up|down``: a real control plane from the installed binary, and what a
broken start reports."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from yurthub.testing import k8sbinaries, processes, realcluster, workdirs

pytestmark = pytest.mark.slow


def edgehub(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgehub", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def built(binaries: k8sbinaries.Binaries) -> dict[str, tuple[int, int, int]]:
    """The control plane's binaries' (inode, size, mtime): a rebuild or download rewrites them."""
    out = {}
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        st = (binaries.directory / name).stat()
        out[name] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out


def test_up_serves_a_real_cluster_and_down_stops_every_process(tmp_path: pathlib.Path) -> None:
    directory = tmp_path / "k8s"
    binaries = k8sbinaries.locate()
    before = built(binaries)
    up = edgehub("cluster", "up", "--dir", str(directory))
    try:
        assert up.returncode == 0, up.stderr
        assert f"kubeconfig={directory.resolve() / 'admin.kubeconfig'}" in up.stdout
        # Once built, `up` only starts what is there: the pinned binaries, untouched.
        state = json.loads((directory / "cluster.json").read_text())
        assert state["binaries"] == str(binaries.directory)
        assert built(binaries) == before
        names = [p["name"] for p in state["processes"]]
        assert names == ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]
        pids = [p["pid"] for p in state["processes"]]
        # Each started once and still the process `up` started (none crashed and came back).
        for record in state["processes"]:
            assert processes.start_time(record["pid"]) == record["start_time"], record

        # `up` returned once the cluster serves: asked once, without waiting, it is ready.
        cluster = realcluster.RealCluster.attach(directory)
        assert cluster.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
        version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
        assert version["serverVersion"]["gitVersion"] == k8sbinaries.locate().version
        assert version["clientVersion"]["gitVersion"] == k8sbinaries.locate().version
        # The controllers run: the default ServiceAccount and the root CA ConfigMap exist.
        cluster.kubectl("get", "serviceaccount", "default")
        cluster.kubectl("get", "configmap", "kube-root-ca.crt")

        again = edgehub("cluster", "up", "--dir", str(directory))
        assert again.returncode == 3 and "already holds a cluster" in again.stderr
    finally:
        down = edgehub("cluster", "down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
    assert "stopped: kube-scheduler, kube-controller-manager, kube-apiserver, etcd" in down.stdout
    assert not any(processes.start_time(pid) for pid in pids)
    assert edgehub("cluster", "down", "--dir", str(directory)).stdout.strip() == (
        "stopped: nothing was running"
    )


def test_a_component_that_fails_to_start_is_named_with_its_last_log_lines(
    tmp_path: pathlib.Path,
) -> None:
    cluster = realcluster.RealCluster(
        tmp_path / "bad", extra_args={"kube-apiserver": {"no-such-flag": "1"}}
    )
    with pytest.raises(processes.ProcessError) as failed:
        cluster.up(timeout=60)
    message = str(failed.value)
    assert message.startswith("kube-apiserver exited while starting (exited with 1)")
    assert "unknown flag: --no-such-flag" in message
    # etcd, started before it, was stopped again.
    assert not (tmp_path / "bad" / "cluster.json").exists()


def test_a_directory_up_did_not_make_is_refused_and_left_alone(tmp_path: pathlib.Path) -> None:
    """Issue 27: `up --dir` into a folder of the user's emptied its logs/ and etcd/."""
    mine = tmp_path / "work"
    (mine / "logs").mkdir(parents=True)
    (mine / "logs" / "today.txt").write_text("mine")
    # No binaries where --bin-dir points: the directory is refused before they are looked for.
    up = edgehub("cluster", "up", "--dir", str(mine), "--bin-dir", str(tmp_path / "no-bins"))
    assert up.returncode == 3, up.stdout + up.stderr
    assert up.stderr.splitlines() == [
        f"edgehub cluster: {mine} holds files edgehub did not make (it has no .edgehub-cluster); "
        "left as it is: choose another with --dir"
    ]
    # The library refuses too, before it starts or writes anything.
    cluster = realcluster.RealCluster(mine, k8sbinaries.Binaries(tmp_path / "no-bins"))
    with pytest.raises(workdirs.NotOursError):
        cluster.up(timeout=5)
    assert os.listdir(mine) == ["logs"]
    assert os.listdir(mine / "logs") == ["today.txt"]
    assert (mine / "logs" / "today.txt").read_text() == "mine"


def test_node_identity_is_what_kubelet_holds(real_cluster: realcluster.RealCluster) -> None:
    kubeconfig = real_cluster.node_kubeconfig("identity-check")
    who = json.loads(
        real_cluster.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig).stdout
    )
    info = who["status"]["userInfo"]
    assert info["username"] == "system:node:identity-check"
    assert "system:nodes" in info["groups"]
    # The Node authorizer is on: a node reads only the Secrets its pods reference.
    denied = real_cluster.kubectl(
        "get", "secrets", "-n", "kube-system", kubeconfig=kubeconfig, check=False
    )
    assert denied.returncode != 0 and "forbidden" in denied.stderr, denied.stderr
