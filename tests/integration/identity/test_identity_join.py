"""A hub that joins with a bootstrap token and nothing else (simulated cluster): both
certificates requested, approved (the test approver, as ``kubectl certificate approve``) and
signed; the secure port serves pods with their own tokens and refuses everyone else."""

from __future__ import annotations

import os
import pathlib
import stat

import aiohttp
import pytest
from identity_support import NODE, get, hub_settings, readyz, running, trusting, until

from yurthub import kubeconfigs
from yurthub.certs import pemfiles
from yurthub.testing import joining, simapiserver


@pytest.fixture
async def sim(tmp_path: pathlib.Path) -> simapiserver.SimApiserver:
    async with simapiserver.SimApiserver(workdir=tmp_path / "sim") as sim:
        yield sim  # type: ignore[misc]


async def test_join_with_a_token_and_nothing_else(
    sim: simapiserver.SimApiserver, tmp_path: pathlib.Path
) -> None:
    admin = joining.Admin.from_kubeconfig(sim.kubeconfig_path)
    token = joining.new_token()
    await admin.create_bootstrap_token(token)
    root = tmp_path / "root"
    s = hub_settings((sim.url,), root, token=token, pins=(joining.ca_pin(sim.ca_pem),))
    async with joining.approving(admin, node_name=NODE) as approver, running(s) as hub:
        await until(lambda: hub.secure_url, what="the secure proxy")
        assert hub.health is not None
        await until(hub.health.any_healthy, what="a healthy apiserver")
        assert await readyz(hub) == (200, "OK")
        assert len(approver.approved) == 2

        # YurtHub's files: links to timestamped 0600 pairs, the CA, both kubeconfigs.
        for name in ("yurthub", "yurthub-server"):
            link = root / "pki" / f"{name}-current.pem"
            assert link.is_symlink() and "/" not in os.readlink(link)
            assert stat.S_IMODE(link.stat().st_mode) == 0o600
            assert pemfiles.load_pair(link).common_name == f"system:node:{NODE}"
        assert stat.S_IMODE((root / "bootstrap-hub.conf").stat().st_mode) == 0o600
        assert (root / "pki" / "ca.crt").read_bytes() == sim.ca_pem
        identity = kubeconfigs.load(root / "yurthub.conf")
        assert identity.subject == f"system:node:{NODE}"
        assert token not in (root / "yurthub.conf").read_text()

        # The hub is now the node upstream: its own requests carry its certificate.
        assert hub.upstream is not None and hub.upstream.identity.subject == f"system:node:{NODE}"
        csr_makers = {
            r.user
            for r in sim.audit_log()
            if r.resource == "certificatesigningrequests" and r.verb == "create"
        }
        assert csr_makers == {f"system:bootstrap:{token.split('.')[0]}", f"system:node:{NODE}"}

        # A pod with its ServiceAccount token lists through 10268; upstream sees the pod.
        pod_token = sim.service_account_token("kube-system", "default")
        ca = trusting(sim.ca_pem)
        answer = await get(
            f"{hub.secure_url}/api/v1/namespaces/kube-system/pods", ctx=ca, token=pod_token
        )
        assert answer.status == 200 and answer.body["kind"] == "PodList"
        # Pods name the port as the apiserver (kubernetes.default.svc): the plain port's
        # DNS-rebinding guard does not apply to callers that authenticate.
        async with aiohttp.ClientSession() as s:
            async with s.get(
                f"{hub.secure_url}/api/v1/namespaces/kube-system/pods",
                headers={"Authorization": f"Bearer {pod_token}", "Host": "kubernetes.default.svc"},
                ssl=ca,
            ) as r:
                assert r.status == 200
            async with s.get(
                f"{hub.proxy_url}/api/v1/namespaces/kube-system/pods",
                headers={"Host": "kubernetes.default.svc"},
            ) as r:
                assert r.status == 403  # the plain port still refuses a foreign name
        last = [r for r in sim.audit_log() if r.path == "/api/v1/namespaces/kube-system/pods"][-1]
        assert last.user == "system:serviceaccount:kube-system:default"

        # No credentials: 401 as a Status, never the hub's identity.
        sim.clear_audit_log()
        answer = await get(f"{hub.secure_url}/api/v1/secrets", ctx=ca)
        assert answer.status == 401 and answer.body["kind"] == "Status"
        assert answer.body["reason"] == "Unauthorized"
        assert not [r for r in sim.audit_log() if r.resource == "secrets"]

        # This node's certificate is the node; anyone else's is refused.
        node_cert = tmp_path / "node.pem"
        node_cert.write_bytes(
            b"".join(sim.issue_client_cert(f"system:node:{NODE}", ["system:nodes"]))
        )
        answer = await get(
            f"{hub.secure_url}/api/v1/nodes/{NODE}", ctx=trusting(sim.ca_pem, node_cert)
        )
        assert answer.status in (200, 404)
        other = tmp_path / "other.pem"
        other.write_bytes(b"".join(sim.issue_client_cert("system:node:other", ["system:nodes"])))
        answer = await get(f"{hub.secure_url}/api/v1/nodes", ctx=trusting(sim.ca_pem, other))
        assert answer.status == 403 and "system:node:other" in answer.body["message"]


async def test_join_with_a_token_file_written_after_the_start(
    sim: simapiserver.SimApiserver, tmp_path: pathlib.Path
) -> None:
    """The chart's flow: the static Pod names --join-token-file, the token arrives later."""
    admin = joining.Admin.from_kubeconfig(sim.kubeconfig_path)
    token = joining.new_token()
    await admin.create_bootstrap_token(token)
    root = tmp_path / "root"
    token_file = root / "join-token"
    s = hub_settings(
        (sim.url,), root, pins=(joining.ca_pin(sim.ca_pem),), join_token_file=token_file
    )
    async with joining.approving(admin, node_name=NODE) as approver, running(s) as hub:
        certs = hub.certs
        assert certs is not None
        await until(
            lambda: f"write one into {token_file}" in certs.client_problem,
            what="the client problem naming the token file",
        )
        assert approver.approved == []
        root.mkdir(exist_ok=True)
        token_file.write_text(token + "\n")
        await until(lambda: hub.secure_url, what="the secure proxy")
        assert len(approver.approved) == 2
        assert pemfiles.load_pair(root / "pki" / "yurthub-current.pem").common_name == (
            f"system:node:{NODE}"
        )
    # Joined: the token file can go; a restart has what it needs.
    token_file.unlink()
    async with running(s) as hub:
        await until(lambda: hub.secure_url, what="the secure proxy after a restart")
        assert hub.health is not None
        await until(hub.health.any_healthy, what="a healthy apiserver")
        assert await readyz(hub) == (200, "OK")
