"""YurtHub's Go pflag spellings translated for click (``edgehub.pflags``), and the hub command
accepting an OpenYurt static Pod's arguments."""

from __future__ import annotations

import pathlib

import pytest
from click import testing
from edgehub import cli, hub, hubsettings, pflags

from yurthub.certs import modes

BOOLS = ("enable-dummy-if", "discovery-token-unsafe-skip-ca-verification")
VALUES = ("server-addr", "node-name", "v", "bind-address")


@pytest.mark.parametrize(
    ("args", "out", "dropped"),
    [
        (["--enable-dummy-if=false"], ["--no-enable-dummy-if"], []),
        (["--enable-dummy-if=FALSE"], ["--no-enable-dummy-if"], []),
        (["--enable-dummy-if=0"], ["--no-enable-dummy-if"], []),
        (["--enable-dummy-if=true"], ["--enable-dummy-if"], []),
        (["--enable-dummy-if=t"], ["--enable-dummy-if"], []),
        (["--enable-dummy-if"], ["--enable-dummy-if"], []),
        (["--no-enable-dummy-if"], ["--no-enable-dummy-if"], []),
        (["--v=2", "--bind-address=127.0.0.1"], ["--v=2", "--bind-address=127.0.0.1"], []),
        (["--v", "2"], ["--v", "2"], []),
        # YurtHub flags we do not build: dropped with their value, named once.
        (["--working-mode=edge", "--node-name=n"], ["--node-name=n"], ["working-mode"]),
        (["--working-mode", "edge", "--node-name=n"], ["--node-name=n"], ["working-mode"]),
        (["--profiling", "--profiling=false", "x"], ["x"], ["profiling"]),
        (["--logtostderr=true", "--gc-frequency", "120"], [], ["logtostderr", "gc-frequency"]),
        # Unknown to both: left for click to refuse; nothing after "--" is touched.
        (["--bogus=1"], ["--bogus=1"], []),
        (["--", "--enable-dummy-if=false"], ["--", "--enable-dummy-if=false"], []),
        (["-h"], ["-h"], []),
    ],
)
def test_translate(args: list[str], out: list[str], dropped: list[str]) -> None:
    assert pflags.translate(args, bool_flags=BOOLS, value_flags=VALUES) == (out, dropped)


def test_translate_refuses_a_non_boolean() -> None:
    with pytest.raises(pflags.PflagError, match="not a boolean"):
        pflags.translate(["--enable-dummy-if=maybe"], bool_flags=BOOLS, value_flags=VALUES)


# A missing kubeconfig ends the command before anything starts: enough to see what parsed.
OPENYURT_ARGS = [
    "--v=2",
    "--bind-address=127.0.0.1",
    "--server-addr=https://127.0.0.1:6443",
    "--node-name=edge-1",
    "--working-mode=edge",
    "--namespace=kube-system",
    "--enable-dummy-if=false",
    "--profiling=true",
    "--kubeconfig=/nonexistent/kubeconfig",
]


def test_openyurt_static_pod_arguments_parse(caplog: pytest.LogCaptureFixture) -> None:
    result = testing.CliRunner().invoke(hub.command, OPENYURT_ARGS)
    assert result.exit_code == cli.EXIT_STARTUP_FAILURE, result.output
    # Parsing got as far as reading the kubeconfig: every flag above was understood.
    assert "/nonexistent/kubeconfig" in result.output and "No such option" not in result.output
    warnings = [r.getMessage() for r in caplog.records if "does not implement" in r.getMessage()]
    assert warnings == ["ignoring YurtHub flags this hub does not implement: --profiling"]


def test_unknown_flags_still_fail() -> None:
    result = testing.CliRunner().invoke(hub.command, [*OPENYURT_ARGS, "--no-such-flag=1"])
    assert result.exit_code == 2 and "No such option" in result.output


def test_bad_boolean_is_a_usage_error() -> None:
    result = testing.CliRunner().invoke(hub.command, [*OPENYURT_ARGS, "--enable-dummy-if=maybe"])
    assert result.exit_code == 2 and "not a boolean" in result.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--join-token=bad"], "not of the form"),
        (["--join-token=abcdef.0123456789abcdef"], "--discovery-token-ca-cert-hash"),
        (
            ["--join-token=abcdef.0123456789abcdef", "--discovery-token-ca-cert-hash=md5:00"],
            "sha256:<64 hex digits>",
        ),
        (
            ["--bootstrap-file=/nonexistent/boot.conf", "--kubeconfig=/nonexistent/k"],
            "--kubeconfig gives the hub a fixed",
        ),
        (["--bootstrap-file=/nonexistent/boot.conf"], "/nonexistent/boot.conf"),
        (
            ["--bootstrap-mode=kubeletcertificate", "--kubelet-kubeconfig=/nonexistent/k"],
            "/nonexistent/k",
        ),
        (["--dummy-if-ip=10.0.0.1", "--enable-dummy-if"], "169.254.0.0/16"),
        (["--dummy-if-ip=169.254.31.5", "--enable-dummy-if"], "169.254.31.0/24"),
        (["--dummy-if-name=a-name-longer-than-15", "--enable-dummy-if"], "1-15 characters"),
    ],
)
def test_bad_identity_flags(extra: list[str], message: str, tmp_path: object) -> None:
    base = [a for a in OPENYURT_ARGS if not a.startswith("--kubeconfig")]
    result = testing.CliRunner().invoke(hub.command, [*base, f"--root-dir={tmp_path}", *extra])
    assert result.exit_code == cli.EXIT_STARTUP_FAILURE, result.output
    assert message in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("server", "address"),
    [("https://127.0.0.1:6443", "127.0.0.1"), ("https://[::1]:6443", "::1"), ("bad://x", "")],
)
def test_node_ip_defaults_to_the_address_towards_the_cloud(server: str, address: str) -> None:
    assert hubsettings.local_address(server) == address


TOKEN = "abcdef.0123456789abcdef"


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        # Read and taken as the join token: the CA pin is then required, as for --join-token.
        (f"{TOKEN}\n", [], "--discovery-token-ca-cert-hash"),
        # Not there yet: still join-token mode (read again at each bootstrap).
        (None, [], "--discovery-token-ca-cert-hash"),
        ("not a token\n", [], "not of the form"),
        (TOKEN, [f"--join-token={TOKEN}"], "use one"),
    ],
)
def test_join_token_file(
    content: str | None, extra: list[str], message: str, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "join-token"
    if content is not None:
        path.write_text(content)
    base = [a for a in OPENYURT_ARGS if not a.startswith("--kubeconfig")]
    result = testing.CliRunner().invoke(
        hub.command,
        [*base, f"--root-dir={tmp_path}", f"--join-token-file={path}", *extra],
    )
    assert result.exit_code == cli.EXIT_STARTUP_FAILURE, result.output
    assert message in result.output and "Traceback" not in result.output


def test_join_token_file_makes_join_token_mode(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "join-token"
    opts = {
        "root_dir": tmp_path,
        "join_token_file": path,
        "discovery_token_ca_cert_hash": ("sha256:" + "0" * 64,),
    }
    built = hubsettings.cert_settings(opts, None)
    assert built.source is modes.Source.JOIN_TOKEN
    assert (built.join_token, built.join_token_file) == ("", path)
