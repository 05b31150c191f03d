"""``--enable-dummy-if`` in a network namespace this test creates (the machine's own network is
never touched): the hub makes ``hub-dummy0`` with 169.254.2.1, serves both proxies there (the
serving certificate names the address), re-creates the interface when it is deleted, and
removes it when it stops. Needs root (``ip netns``), as the hub needs NET_ADMIN."""

from __future__ import annotations

import json
import pathlib
import secrets
import subprocess
import sys

import pytest
from click import testing
from edgehub import cli, hub

HERE = pathlib.Path(__file__).parent
pytestmark = pytest.mark.slow


@pytest.fixture
def netns() -> str:
    name = f"edgehub-test-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        yield name  # type: ignore[misc]
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_dummy_interface_in_a_namespace(netns: str) -> None:
    done = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, str(HERE / "dummyif_inside.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert "169.254.2.1/32" in found["addresses"]
    assert found["secure_url"].startswith("https://169.254.2.1:")
    assert found["secure_status"] == 200
    assert found["secure_anonymous"] == 401
    assert found["plain_status"] == 200
    status, text = found["token_from_afar"]
    assert status == 403 and "on this node only" in text and "169.254.2.1" in text
    assert found["ota_from_afar"] == 403
    for path in ("/v1/outages", "/v1/status"):  # pods, ServiceAccounts, apiservers, files
        status, text = found[f"{path}_from_afar"]
        assert status == 403 and f"{path} answers callers on this node only" in text
        assert "169.254.2.1" in text
        assert found[f"{path}_from_loopback"] == 200
    assert found["healthz_from_afar"] == 200
    assert found["recreated"] is True
    assert found["after_stop"] == ""  # removed with the hub


def test_without_net_admin_the_hub_says_so_and_exits(tmp_path: pathlib.Path) -> None:
    # An `ip` that fails the way a missing capability does.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ip").write_text(
        "#!/bin/sh\necho 'RTNETLINK answers: Operation not permitted' >&2\nexit 2\n"
    )
    (fake / "ip").chmod(0o755)
    kubeconfig = tmp_path / "k"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    result = testing.CliRunner().invoke(
        hub.command,
        [
            "--server-addr=http://127.0.0.1:1",
            "--node-name=n1",
            f"--kubeconfig={kubeconfig}",
            f"--disk-cache-path={tmp_path / 'cache'}",
            "--proxy-port=0",
            "--serve-port=0",
            "--enable-dummy-if=true",
            "--allow-system-trust-store",  # the kubeconfig names no CA (nothing is dialled)
        ],
        env={"PATH": f"{fake}:/usr/bin:/bin"},
    )
    assert result.exit_code == cli.EXIT_STARTUP_FAILURE, result.output
    assert "Operation not permitted" in result.output and "Traceback" not in result.output
