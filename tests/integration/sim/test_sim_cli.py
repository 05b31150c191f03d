"""``edgehub sim-apiserver``: prints its URL, writes a kubeconfig kubectl uses, stops on SIGTERM."""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys

from yurthub.testing import fixtures


def test_cli_serves_until_sigterm(tmp_path: pathlib.Path) -> None:
    kubeconfig = tmp_path / "admin.kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "edgehub", "--log-level", "warning", "sim-apiserver",
            "--port", "0", "--insecure-port", "0", "--seed", "scale:5",
            "--kubeconfig-out", str(kubeconfig), "--workdir", str(tmp_path / "work"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url, insecure = proc.stdout.readline().strip(), proc.stdout.readline().strip()
        assert url.startswith("https://127.0.0.1:") and insecure.startswith("http://127.0.0.1:")
        kubectl = fixtures.kubectl_runner(kubeconfig, tmp_path / "cache")
        names = kubectl("get", "pods", "-l", "app=scale", "-o", "name").stdout.split()
        assert len(names) == 5
        assert oct(kubeconfig.stat().st_mode & 0o777) == "0o600"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err


def test_cli_rejects_a_bad_seed_and_a_busy_port(tmp_path: pathlib.Path) -> None:
    bad = subprocess.run(
        [sys.executable, "-m", "edgehub", "sim-apiserver", "--seed", "lots"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2 and "unknown seed 'lots'" in bad.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = subprocess.run(
            [
                sys.executable,
                "-m",
                "edgehub",
                "sim-apiserver",
                "--port",
                str(port),
                "--seed",
                "none",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert taken.returncode == 3 and "cannot listen" in taken.stderr
