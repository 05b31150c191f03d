"""The other identity sources: ``--bootstrap-file`` and ``kubeletcertificate`` (simulated
cluster)."""

from __future__ import annotations

import base64
import pathlib

import pytest
import yaml
from identity_support import NODE, hub_settings, running, until

from yurthub.certs import modes
from yurthub.testing import joining, simapiserver


@pytest.fixture
async def sim(tmp_path: pathlib.Path) -> simapiserver.SimApiserver:
    async with simapiserver.SimApiserver(workdir=tmp_path / "sim") as sim:
        yield sim  # type: ignore[misc]


async def test_bootstrap_file(sim: simapiserver.SimApiserver, tmp_path: pathlib.Path) -> None:
    admin = joining.Admin.from_kubeconfig(sim.kubeconfig_path)
    token = joining.new_token()
    await admin.create_bootstrap_token(token)
    boot = tmp_path / "bootstrap.conf"
    boot.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": sim.url,
                            "certificate-authority-data": base64.b64encode(sim.ca_pem).decode(),
                        },
                    }
                ],
                "users": [{"name": "b", "user": {"token": token}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "b"}}],
                "current-context": "x",
            }
        )
    )
    root = tmp_path / "root"
    s = hub_settings((sim.url,), root, source=modes.Source.BOOTSTRAP_FILE, bootstrap_file=boot)
    async with joining.approving(admin, node_name=NODE), running(s) as hub:
        await until(lambda: hub.secure_url)
        assert (root / "pki" / "ca.crt").read_bytes() == sim.ca_pem  # from the bootstrap file
        assert not (root / "bootstrap-hub.conf").exists()  # no discovery was needed


async def test_kubelet_certificate_mode(
    sim: simapiserver.SimApiserver, tmp_path: pathlib.Path
) -> None:
    kubelet_conf = tmp_path / "kubelet.conf"
    sim.write_kubeconfig(kubelet_conf, user=f"system:node:{NODE}", groups=("system:nodes",))
    admin = joining.Admin.from_kubeconfig(sim.kubeconfig_path)
    root = tmp_path / "root"
    s = hub_settings((sim.url,), root, source=modes.Source.KUBELET, kubelet_kubeconfig=kubelet_conf)
    async with joining.approving(admin, node_name=NODE), running(s) as hub:
        await until(lambda: hub.secure_url)
        assert hub.upstream is not None and hub.upstream.identity.subject == f"system:node:{NODE}"
        assert not (root / "pki" / "yurthub-current.pem").exists()  # kubelet's is used
        assert (root / "pki" / "yurthub-server-current.pem").is_symlink()
        assert (root / "pki" / "ca.crt").read_bytes() == sim.ca_pem
        makers = {
            (r.user, r.verb)
            for r in sim.audit_log()
            if r.resource == "certificatesigningrequests" and r.verb == "create"
        }
        assert makers == {(f"system:node:{NODE}", "create")}
