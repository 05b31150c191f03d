"""What goes wrong while a hub gets its identity: one clear line, capped back-off, ``/v1/readyz``
naming what is missing, and recovery once the cause is fixed (simulated cluster)."""

from __future__ import annotations

import asyncio
import datetime
import pathlib

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from identity_support import NODE, hub_settings, readyz, running, until

from yurthub import server
from yurthub.certs import hubconfigs, layout, modes, pemfiles
from yurthub.testing import joining, ports, simapiserver


@pytest.fixture
async def sim(tmp_path: pathlib.Path) -> simapiserver.SimApiserver:
    async with simapiserver.SimApiserver(workdir=tmp_path / "sim") as sim:
        yield sim  # type: ignore[misc]


@pytest.fixture
def admin(sim: simapiserver.SimApiserver) -> joining.Admin:
    return joining.Admin.from_kubeconfig(sim.kubeconfig_path)


async def wait_readyz(hub: server.Hub, *needles: str, timeout: float = 15.0) -> str:
    last = ""

    async def check() -> bool:
        nonlocal last
        status, last = await readyz(hub)
        return status == 500 and all(n in last for n in needles)

    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"/v1/readyz never named {needles}: {last!r}")
        await asyncio.sleep(0.1)
    return last


async def post_token(hub: server.Hub, body: bytes) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.post(hub.server_url + "/v1/token", data=body) as r:
        return r.status, await r.text()


def csrs_made(sim: simapiserver.SimApiserver) -> int:
    return len(
        [
            r
            for r in sim.audit_log()
            if r.resource == "certificatesigningrequests" and r.verb == "create"
        ]
    )


async def test_wrong_token_then_a_good_one_by_post(
    sim: simapiserver.SimApiserver,
    admin: joining.Admin,
    tmp_path: pathlib.Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = joining.new_token()
    await admin.create_bootstrap_token(good)
    wrong = f"{good.split('.')[0]}.{'0' * 16}"
    s = hub_settings((sim.url,), tmp_path / "root", token=wrong, pins=(joining.ca_pin(sim.ca_pem),))
    async with joining.approving(admin, node_name=NODE), running(s) as hub:
        text = await wait_readyz(hub, "client-certificate", "does not verify")
        assert "serving-certificate" in text and wrong.split(".")[1] not in text
        assert csrs_made(sim) == 0  # nothing was sent with an unverified token
        # The secret never reaches a log line.
        assert not [r for r in caplog.records if wrong.split(".")[1] in r.getMessage()]
        # Bad requests to /v1/token, then the good token: the hub joins at once.
        assert (await post_token(hub, b"not json"))[0] == 400
        assert (await post_token(hub, b'{"jointoken": "short"}'))[0] == 400
        status, text = await post_token(hub, f'{{"jointoken": "{wrong}"}}'.encode())
        assert status == 500 and "does not verify" in text
        status, text = await post_token(hub, f'{{"jointoken": "{good}"}}'.encode())
        assert status == 200 and text.startswith("update bootstrap token successfully")
        await until(lambda: hub.secure_url, what="certificates after the new token")
    # One line per failure, not a traceback.
    errors = [
        r
        for r in caplog.records
        if r.levelname == "ERROR" and "client certificate" in r.getMessage()
    ]
    assert errors and all(r.exc_info is None for r in errors)


async def test_unknown_token_id(sim: simapiserver.SimApiserver, tmp_path: pathlib.Path) -> None:
    s = hub_settings(
        (sim.url,),
        tmp_path / "root",
        token="zzzzzz.0123456789abcdef",
        pins=(joining.ca_pin(sim.ca_pem),),
    )
    async with running(s) as hub:
        await wait_readyz(hub, "not signed for token id 'zzzzzz'")


async def test_ca_pin_mismatch(
    sim: simapiserver.SimApiserver, admin: joining.Admin, tmp_path: pathlib.Path
) -> None:
    token = joining.new_token()
    await admin.create_bootstrap_token(token)
    s = hub_settings((sim.url,), tmp_path / "root", token=token, pins=("sha256:" + "0" * 64,))
    async with running(s) as hub:
        await wait_readyz(hub, "matches none of --discovery-token-ca-cert-hash")
        assert not (tmp_path / "root" / "pki" / "ca.crt").exists()  # nothing trusted
        assert csrs_made(sim) == 0


async def test_unsafe_skip_ca_verification_joins_without_a_pin(
    sim: simapiserver.SimApiserver, admin: joining.Admin, tmp_path: pathlib.Path
) -> None:
    token = joining.new_token()
    await admin.create_bootstrap_token(token)
    s = hub_settings((sim.url,), tmp_path / "root", token=token, skip_ca=True)
    async with joining.approving(admin, node_name=NODE), running(s) as hub:
        await until(lambda: hub.secure_url)


async def test_denied_then_approved(
    sim: simapiserver.SimApiserver, admin: joining.Admin, tmp_path: pathlib.Path
) -> None:
    token = joining.new_token()
    await admin.create_bootstrap_token(token)
    s = hub_settings((sim.url,), tmp_path / "root", token=token, pins=(joining.ca_pin(sim.ca_pem),))
    async with running(s) as hub:
        async with joining.approving(admin, node_name=NODE, deny=True) as denier:
            await wait_readyz(hub, "was denied", "EdgehubTestDenied")
            await until(lambda: len(denier.denied) >= 2, what="a retry after the denial")
        async with joining.approving(admin, node_name=NODE):
            await until(lambda: hub.secure_url, what="certificates once approved")


async def test_never_approved(
    sim: simapiserver.SimApiserver, admin: joining.Admin, tmp_path: pathlib.Path
) -> None:
    token = joining.new_token()
    await admin.create_bootstrap_token(token)
    s = hub_settings(
        (sim.url,),
        tmp_path / "root",
        token=token,
        pins=(joining.ca_pin(sim.ca_pem),),
        csr_wait_timeout=1.0,
    )
    async with running(s) as hub:
        await wait_readyz(hub, "waiting for CSR csr-")
        await wait_readyz(
            hub, "was not approved and signed within 1s", "kubectl certificate approve"
        )
        await until(lambda: csrs_made(sim) >= 2, what="a new CSR after the timeout")


async def test_unreachable_apiserver_at_bootstrap(tmp_path: pathlib.Path) -> None:
    port = ports.free_port()
    sim = simapiserver.SimApiserver(port=port, workdir=tmp_path / "sim")
    token = joining.new_token()
    s = hub_settings(
        (f"https://127.0.0.1:{port}",),
        tmp_path / "root",
        token=token,
        pins=(joining.ca_pin(sim.ca_pem),),
    )
    async with running(s) as hub:
        await wait_readyz(hub, "cannot connect")
        await sim.start()
        try:
            admin = joining.Admin.from_kubeconfig(sim.kubeconfig_path)
            await admin.create_bootstrap_token(token)
            async with joining.approving(admin, node_name=NODE):
                await until(lambda: hub.secure_url, what="certificates once the cloud is there")
        finally:
            await sim.stop()


def _write_existing(root: pathlib.Path, sim: simapiserver.SimApiserver, pem: bytes) -> None:
    """An OpenYurt node's files: yurthub.conf with absolute paths, a pair behind a link."""
    paths = layout.Layout(root)
    pemfiles.write_pair(paths.pki, layout.CLIENT_PREFIX, pem, datetime.datetime.now(datetime.UTC))
    pemfiles.write_atomic(paths.ca_cert, sim.ca_pem, 0o644)
    text = hubconfigs.hub_kubeconfig(sim.url, paths.ca_cert, paths.client_pair)
    pemfiles.write_atomic(paths.hub_kubeconfig, text.encode())


async def test_half_written_pair_is_replaced(
    sim: simapiserver.SimApiserver,
    admin: joining.Admin,
    tmp_path: pathlib.Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cert, key = sim.issue_client_cert(f"system:node:{NODE}", ["system:nodes"])
    root = tmp_path / "root"
    _write_existing(root, sim, (cert + key)[: len(cert) + 20])  # cut inside the key
    token = joining.new_token()
    await admin.create_bootstrap_token(token)
    s = hub_settings((sim.url,), root, token=token, pins=(joining.ca_pin(sim.ca_pem),))
    async with joining.approving(admin, node_name=NODE), running(s) as hub:
        await until(lambda: hub.secure_url)
        assert pemfiles.load_pair(root / "pki" / "yurthub-current.pem").common_name
    assert any("half-written" in r.getMessage() for r in caplog.records)


async def test_expired_certificate_at_start_rebootstraps(
    sim: simapiserver.SimApiserver, admin: joining.Admin, tmp_path: pathlib.Path
) -> None:
    cert, key = sim.state.authority.issue_client(
        f"system:node:{NODE}", ["system:nodes"], lifetime=datetime.timedelta(minutes=-1)
    )
    root = tmp_path / "root"
    _write_existing(root, sim, cert + key)
    token = joining.new_token()
    await admin.create_bootstrap_token(token)
    s = hub_settings((sim.url,), root, token=token, pins=(joining.ca_pin(sim.ca_pem),))
    async with joining.approving(admin, node_name=NODE), running(s) as hub:
        await until(lambda: hub.secure_url)
        makers = {
            r.user
            for r in sim.audit_log()
            if r.resource == "certificatesigningrequests" and r.verb == "create"
        }
        assert f"system:bootstrap:{token.split('.')[0]}" in makers  # re-bootstrapped


async def test_existing_openyurt_files_without_any_flag(
    sim: simapiserver.SimApiserver, admin: joining.Admin, tmp_path: pathlib.Path
) -> None:
    cert, key = sim.issue_client_cert(f"system:node:{NODE}", ["openyurt:yurthub", "system:nodes"])
    root = tmp_path / "root"
    _write_existing(root, sim, cert + key)
    s = hub_settings((sim.url,), root, source=modes.Source.EXISTING)
    async with joining.approving(admin, node_name=NODE), running(s) as hub:
        await until(lambda: hub.secure_url)
        assert hub.upstream is not None and hub.upstream.identity.subject == f"system:node:{NODE}"
        makers = [
            r.user
            for r in sim.audit_log()
            if r.resource == "certificatesigningrequests" and r.verb == "create"
        ]
        assert makers == [f"system:node:{NODE}"]  # only the serving certificate was asked for


async def test_expired_and_no_token_asks_for_one(
    sim: simapiserver.SimApiserver, admin: joining.Admin, tmp_path: pathlib.Path
) -> None:
    cert, key = sim.state.authority.issue_client(
        f"system:node:{NODE}", ["system:nodes"], lifetime=datetime.timedelta(minutes=-1)
    )
    root = tmp_path / "root"
    _write_existing(root, sim, cert + key)
    s = hub_settings((sim.url,), root, source=modes.Source.EXISTING)
    async with joining.approving(admin, node_name=NODE), running(s) as hub:
        text = await wait_readyz(hub, "client-certificate-expiry", "/v1/token")
        assert "waiting for a valid client certificate" in text
        # The gate is open: an expired identity is still one (the cache answers offline).
        assert hub.health is not None
        await hub.health.initial_probe_done.wait()
        assert hub.readiness.not_ready() == []
        token = joining.new_token()
        await admin.create_bootstrap_token(token)
        pin = joining.ca_pin(sim.ca_pem)
        assert pin  # discovery without a pin flag: the hub was started without one...
        status, body = await post_token(hub, f'{{"jointoken": "{token}"}}'.encode())
        # ...so it cannot trust cluster-info: the operator must restart it with a pin.
        assert status == 500 and "discovery-token-ca-cert-hash" in body


async def test_clock_skew_is_named(
    sim: simapiserver.SimApiserver, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    authority = sim.state.authority
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{NODE}")]))
        .issuer_name(authority.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + datetime.timedelta(hours=2))
        .not_valid_after(now + datetime.timedelta(days=2))
        .sign(authority.key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    root = tmp_path / "root"
    _write_existing(root, sim, pem)
    s = hub_settings((sim.url,), root, source=modes.Source.EXISTING)
    async with running(s):
        await until(lambda: any("clock skew" in r.getMessage() for r in caplog.records))


async def test_token_endpoint_in_kubeconfig_mode(
    sim: simapiserver.SimApiserver, tmp_path: pathlib.Path
) -> None:
    identity = tmp_path / "node.kubeconfig"
    sim.write_kubeconfig(identity, user=f"system:node:{NODE}")
    s = hub_settings((sim.url,), tmp_path / "root", source=modes.Source.KUBECONFIG)
    import dataclasses

    from yurthub import settings

    s = dataclasses.replace(s, upstream=dataclasses.replace(s.upstream, kubeconfig=identity))
    assert isinstance(s, settings.HubSettings)
    async with running(s) as hub:
        status, text = await post_token(hub, b'{"jointoken": "abcdef.0123456789abcdef"}')
        assert status == 409 and "--kubeconfig" in text
        assert hub.certs is None and not hub.secure_url
