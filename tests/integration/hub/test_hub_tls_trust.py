"""How the hub trusts the cloud: only the kubeconfig's CA, unless an operator says otherwise.

Before: a kubeconfig with ``insecure-skip-tls-verify`` connected silently (any server, any
certificate), and one without a CA trusted the whole system store, against THREAT_MODEL.md.
Now both are refused with a message naming the flag that accepts the risk; accepted, they are
logged as a warning at start and at every identity reload.
"""

from __future__ import annotations

import logging
import pathlib
from typing import Any

import pytest
import yaml
from click import testing
from edgehub import cli, hub

from yurthub import kubeconfigs, server, settings
from yurthub.proxy import upstream
from yurthub.testing import simapiserver


def kubeconfig(path: pathlib.Path, cluster: dict[str, Any]) -> pathlib.Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", **cluster}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_insecure_skip_tls_verify_is_refused_unless_allowed(tmp_path: pathlib.Path) -> None:
    path = kubeconfig(tmp_path / "k", {"insecure-skip-tls-verify": True})
    with pytest.raises(kubeconfigs.KubeconfigError, match="--allow-insecure-skip-tls-verify"):
        kubeconfigs.load(path)
    identity = kubeconfigs.load(path, kubeconfigs.TrustPolicy(allow_insecure=True))
    assert identity.trust is kubeconfigs.Trust.INSECURE


def test_a_kubeconfig_without_a_ca_is_refused_unless_allowed(tmp_path: pathlib.Path) -> None:
    path = kubeconfig(tmp_path / "k", {})
    with pytest.raises(kubeconfigs.KubeconfigError, match="--allow-system-trust-store"):
        kubeconfigs.load(path)
    identity = kubeconfigs.load(path, kubeconfigs.TrustPolicy(allow_system_store=True))
    assert identity.trust is kubeconfigs.Trust.SYSTEM


@pytest.mark.parametrize(
    ("cluster", "flag"),
    [({"insecure-skip-tls-verify": True}, "insecure"), ({}, "trust-store")],
)
def test_the_command_refuses_before_anything_starts(
    tmp_path: pathlib.Path, cluster: dict[str, Any], flag: str
) -> None:
    path = kubeconfig(tmp_path / "k", cluster)
    args = ["--node-name", "n1", "--server-addr", "https://127.0.0.1:1", "--kubeconfig", str(path)]
    result = testing.CliRunner().invoke(hub.command, args)
    assert result.exit_code == cli.EXIT_STARTUP_FAILURE, result.output
    assert flag in result.output and "Traceback" not in result.output


def test_no_kubeconfig_over_https_is_the_system_store_too(tmp_path: pathlib.Path) -> None:
    args = ["--node-name", "n1", "--server-addr", "https://127.0.0.1:1"]
    result = testing.CliRunner().invoke(hub.command, args)
    assert result.exit_code == cli.EXIT_STARTUP_FAILURE, result.output
    assert "--allow-system-trust-store" in result.output


async def test_allowed_insecure_trust_is_loud_and_works(
    sim_apiserver: simapiserver.SimApiserver,
    tmp_path: pathlib.Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = sim_apiserver.write_kubeconfig(tmp_path / "sim.kubeconfig")
    doc = yaml.safe_load(path.read_text())
    cluster = doc["clusters"][0]["cluster"]
    cluster.pop("certificate-authority-data", None)
    cluster.pop("certificate-authority", None)
    cluster["insecure-skip-tls-verify"] = True
    path.write_text(yaml.safe_dump(doc))
    hub_settings = settings.HubSettings(
        node_name="edge-node-1",
        upstream=settings.UpstreamSettings(
            servers=(sim_apiserver.url,), kubeconfig=path, allow_insecure_tls=True
        ),
        listen=settings.ListenSettings(serve_port=0, proxy_port=0),
    )
    the_hub = server.Hub(hub_settings)
    with caplog.at_level(logging.WARNING):
        await the_hub.start()
    try:
        assert the_hub.health is not None
        await the_hub.health.initial_probe_done.wait()
        assert the_hub.health.any_healthy()
    finally:
        await the_hub.stop()
    loud = [r for r in caplog.records if "insecure-skip-tls-verify" in r.getMessage()]
    assert loud and loud[0].levelno == logging.WARNING
    assert "ANY server" in loud[0].getMessage()


async def test_a_rotated_kubeconfig_cannot_drop_its_ca(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: pathlib.Path
) -> None:
    path = sim_apiserver.write_kubeconfig(tmp_path / "sim.kubeconfig")
    identity = kubeconfigs.load(path)
    client = upstream.Upstream(settings.UpstreamSettings(servers=(sim_apiserver.url,)), identity,
                               kubeconfig=path)  # fmt: skip
    await client.start()
    try:
        doc = yaml.safe_load(path.read_text())
        cluster = doc["clusters"][0]["cluster"]
        cluster.pop("certificate-authority-data", None)
        cluster.pop("certificate-authority", None)
        path.write_text(yaml.safe_dump(doc) + "\n# rotated\n")
        assert not await client.check_identity()
        assert client.identity is identity  # the working, verifying identity stays
    finally:
        await client.close()
