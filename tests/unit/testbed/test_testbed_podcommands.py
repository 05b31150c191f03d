"""``podcommands``: a Pod's container as a host process, as kubelet and the runtime build it
(ENTRYPOINT/CMD, ``$(VAR)``, the downward API) plus the named stand-ins (the image's program,
the node's ports, its volumes in a private mount namespace)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from yurthub.testing import podcommands

REPO = Path(__file__).resolve().parents[3]
EDGEHUB = podcommands.Image(
    commands={"edgehub": ("/venv/python", "-m", "edgehub")},
    entrypoint=("edgehub",),
    cmd=("--help",),
)
PORTS = {10261: 40001, 10267: 40002, 6443: 40009}


def pod(container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "hub", "namespace": "kube-system"},
        "spec": {"nodeName": "edge-1", "containers": [container], **spec},
    }


# (container fields) -> host argv: command replaces ENTRYPOINT, args replace CMD
ARGV = [
    ("neither: ENTRYPOINT + CMD", {}, ["/venv/python", "-m", "edgehub", "--help"]),
    ("args only: ENTRYPOINT + args", {"args": ["cache", "ls"]},
     ["/venv/python", "-m", "edgehub", "cache", "ls"]),
    ("command only: no CMD", {"command": ["edgehub", "status"]},
     ["/venv/python", "-m", "edgehub", "status"]),
    ("both", {"command": ["edgehub"], "args": ["hub"]}, ["/venv/python", "-m", "edgehub", "hub"]),
    ("the node's ports and apiserver", {"command": [
        "edgehub", "hub", "--proxy-port=10261", "--serve-port=10267", "--other-port=5",
        "--server-addr=https://127.0.0.1:6443", "--x=http://localhost:10267/v1",
        "--y=10.0.0.1:10261"]},
     ["/venv/python", "-m", "edgehub", "hub", "--proxy-port=40001", "--serve-port=40002",
      "--other-port=5", "--server-addr=https://127.0.0.1:40009", "--x=http://localhost:40002/v1",
      "--y=10.0.0.1:10261"]),
]  # fmt: skip


@pytest.mark.parametrize(("container", "argv"), [c[1:] for c in ARGV], ids=[c[0] for c in ARGV])
def test_argv(container: dict[str, Any], argv: list[str]) -> None:
    assert podcommands.host_argv(pod({"name": "c", **container}), container, EDGEHUB, PORTS) == argv


def test_variables_and_the_downward_api() -> None:
    container = {
        "command": ["edgehub", "hub", "--node-name=$(NODE_NAME)", "--x=$(UNSET)",
                    "--y=$$(NODE_NAME)", "--ns=$(NS)", "--z=$(BOTH)"],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "BOTH", "value": "$(NODE_NAME)/$(NS)"},
        ],
    }  # fmt: skip
    argv = podcommands.host_argv(pod(container), container, EDGEHUB, PORTS)
    assert argv[4:] == ["--node-name=edge-1", "--x=$(UNSET)", "--y=$(NODE_NAME)",
                        "--ns=kube-system", "--z=edge-1/kube-system"]  # fmt: skip


def test_implicit_flags_are_added_unless_given() -> None:
    flags = {"static-pod-upgrade": ("--readyz-url=http://127.0.0.1:10267/v1/readyz", "--a=1")}
    container = {"command": ["edgehub", "static-pod-upgrade", "--a=2"]}
    argv = podcommands.host_argv(pod(container), container, EDGEHUB, PORTS, flags)
    assert argv[3:] == [
        "static-pod-upgrade",
        "--a=2",
        "--readyz-url=http://127.0.0.1:40002/v1/readyz",
    ]
    other = {"command": ["edgehub", "hub"]}
    assert podcommands.host_argv(pod(other), other, EDGEHUB, PORTS, flags)[3:] == ["hub"]


def test_an_unknown_program_is_refused() -> None:
    container = {"command": ["sh", "-c", "true"]}
    with pytest.raises(ValueError, match="no program for command 'sh'"):
        podcommands.host_argv(pod(container), container, EDGEHUB, PORTS)


def test_the_repositorys_dockerfile_entrypoint() -> None:
    entrypoint, cmd = podcommands.dockerfile_entrypoint((REPO / "Dockerfile").read_text())
    assert entrypoint == ("edgehub",) and cmd == ("--help",)
    text = 'FROM a\nENTRYPOINT ["x"]\nFROM b\nCMD ["y", "z"]\n'
    assert podcommands.dockerfile_entrypoint(text) == ((), ("y", "z"))
    with pytest.raises(ValueError, match="exec form"):
        podcommands.dockerfile_entrypoint("ENTRYPOINT edgehub hub\n")


def test_volumes_are_the_nodes_directories() -> None:
    container = {
        "volumeMounts": [
            {"name": "cache", "mountPath": "/etc/kubernetes/cache"},
            {"name": "manifests", "mountPath": "/etc/kubernetes/manifests"},
            {"name": "cm", "mountPath": "/data", "readOnly": True},
            {"name": "tmp", "mountPath": "/scratch"},
        ]
    }
    spec = pod(
        container,
        volumes=[
            {"name": "cache", "hostPath": {"path": "/etc/kubernetes/cache"}},
            {"name": "manifests", "hostPath": {"path": "/etc/kubernetes/manifests"}},
            {"name": "cm", "configMap": {"name": "yurt-static-set-hub"}},
            {"name": "tmp", "emptyDir": {}},
        ],
    )
    plan = podcommands.mounts(
        spec, container, {"/etc/kubernetes/manifests": Path("/k/static")}, Path("/n"),
        {"cm": Path("/c/cm")}, Path("/e"),
    )  # fmt: skip
    assert plan == [
        podcommands.Mount("/etc/kubernetes/cache", Path("/n/etc/kubernetes/cache")),
        podcommands.Mount("/etc/kubernetes/manifests", Path("/k/static")),
        podcommands.Mount("/data", Path("/c/cm"), read_only=True),
        podcommands.Mount("/scratch", Path("/e/tmp")),
    ]
    existing = {Path("/"), Path("/etc"), Path("/n/etc/kubernetes/cache"), Path("/k/static"),
                Path("/c/cm"), Path("/e/tmp"), Path("/tmp")}  # fmt: skip
    script, create = podcommands.mount_script(
        [*plan[:3], podcommands.Mount("/tmp", Path("/e/tmp"))],
        Path("/s"),
        exists=lambda p: p in existing,
        is_dir=lambda p: True,
    )
    # /etc exists: one overlay of it takes the missing mount points; /data is under / (made
    # on the host); /tmp exists (bound as it is).
    assert create == [Path("/data")]
    lines = script.splitlines()
    assert lines[0] == "set -e" and lines[-1] == 'exec "$@"'
    assert (
        "mount -t overlay overlay -o lowerdir=/etc,upperdir=/s/upper0,workdir=/s/work0 /etc"
        in lines
    )
    assert sum(line.startswith("mount -t overlay") for line in lines) == 1
    assert "mount --bind /k/static /etc/kubernetes/manifests" in lines
    assert "mount -o remount,bind,ro /data" in lines
    assert "mount --bind /e/tmp /tmp" in lines
