"""The test bed's command lines: what the real control plane runs with."""

from __future__ import annotations

import os
import pathlib

import pytest

from yurthub.testing import clusterflags, hollownodes, k8sbinaries, processes

LAYOUT = clusterflags.Layout(pathlib.Path("/c"))
PORTS = clusterflags.Ports(2379, 2380, 6443, 10257, 10259)
BIN = pathlib.Path("/bin/x")


def flags(argv: list[str]) -> dict[str, str]:
    return dict(a.removeprefix("--").split("=", 1) for a in argv[1:])


def test_apiserver_is_secured_as_a_real_cluster_is() -> None:
    f = flags(clusterflags.apiserver_argv(BIN, LAYOUT, PORTS))
    assert f["authorization-mode"] == "Node,RBAC"
    assert "NodeRestriction" in f["enable-admission-plugins"].split(",")
    assert f["client-ca-file"] == "/c/pki/ca.crt"
    assert f["service-account-signing-key-file"] == "/c/pki/sa.key"
    assert f["enable-bootstrap-token-auth"] == "true"
    assert f["bind-address"] == "127.0.0.1" and f["secure-port"] == "6443"
    assert f["etcd-servers"] == "http://127.0.0.1:2379"
    # extra flags override, for tests that need other timings
    f = flags(clusterflags.apiserver_argv(BIN, LAYOUT, PORTS, {"v": "4"}))
    assert f["v"] == "4"


def test_controller_manager_signs_with_the_cluster_ca_and_runs_token_controllers() -> None:
    f = flags(clusterflags.controller_manager_argv(BIN, LAYOUT, PORTS))
    assert f["cluster-signing-cert-file"] == "/c/pki/ca.crt"
    assert f["cluster-signing-key-file"] == "/c/pki/ca.key"
    assert f["controllers"] == "*,bootstrapsigner,tokencleaner"
    assert f["use-service-account-credentials"] == "true"
    assert f["kubeconfig"] == "/c/controller-manager.kubeconfig"


def test_etcd_and_scheduler_stay_on_loopback() -> None:
    f = flags(clusterflags.etcd_argv(BIN, LAYOUT, PORTS))
    assert f["listen-client-urls"] == "http://127.0.0.1:2379"
    assert f["listen-peer-urls"] == "http://127.0.0.1:2380"
    f = flags(clusterflags.scheduler_argv(BIN, LAYOUT, PORTS))
    assert f["bind-address"] == "127.0.0.1" and f["secure-port"] == "10259"


def test_hollow_kubelet_talks_to_the_hub_without_credentials() -> None:
    argv = hollownodes.kubelet_argv(BIN, "edge-1", pathlib.Path("/k"), 4242, {"zone": "a"})
    assert "--morph=kubelet" in argv and "--kubelet-read-only-port=0" in argv
    assert "--node-labels=zone=a" in argv
    text = hollownodes.hub_kubeconfig("http://127.0.0.1:10261")
    assert "http://127.0.0.1:10261" in text and "token" not in text and "client-key" not in text


def test_a_process_record_tells_a_reused_pid_apart() -> None:
    me = processes.start_time(os.getpid())
    assert me is not None
    stale = processes.Record("x", os.getpid(), "1")  # same pid, another start time
    assert processes.stop_recorded([stale]) == []  # not signalled: we are still here
    assert processes.start_time(2**22 + 12345) is None


def test_missing_binaries_name_the_build_command(tmp_path: pathlib.Path) -> None:
    (tmp_path / "etcd").write_text("")
    with pytest.raises(k8sbinaries.MissingBinariesError, match="make cluster-bins"):
        k8sbinaries.locate(tmp_path)


def test_missing_test_program_names_the_build_command(tmp_path: pathlib.Path) -> None:
    for name in k8sbinaries.NAMES:
        (tmp_path / name).write_text("")
        (tmp_path / name).chmod(0o755)
    with pytest.raises(k8sbinaries.MissingBinariesError, match=r"informer.*make cluster-bins"):
        k8sbinaries.tool("informer", tmp_path)
    (tmp_path / "informer").write_text("")
    (tmp_path / "informer").chmod(0o755)
    assert k8sbinaries.tool("informer", tmp_path) == tmp_path / "informer"
