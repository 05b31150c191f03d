"""The hub's identity over TLS: client certificate from a kubeconfig, Bearer requests without it."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import pathlib
import ssl
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from yurthub import kubeconfigs, server, settings


def _cert(
    name: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Name, Any] | None, **kw: Any
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_name, issuer_key = issuer if issuer else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
    )
    if kw.get("ca"):
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
    if kw.get("san"):
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(obj: Any) -> bytes:
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM)
    assert isinstance(obj, ec.EllipticCurvePrivateKey)
    return obj.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@pytest.fixture
def pki(tmp_path: pathlib.Path) -> dict[str, pathlib.Path]:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("test-ca", ca_key, None, ca=True)
    files = {}
    for name, san in (("server", True), ("hub", False)):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _cert(f"system:node:{name}", key, (ca.subject, ca_key), san=san)
        (tmp_path / f"{name}.crt").write_bytes(_pem(cert))
        (tmp_path / f"{name}.key").write_bytes(_pem(key))
        files[name] = tmp_path / f"{name}.crt"
        files[f"{name}-key"] = tmp_path / f"{name}.key"
    (tmp_path / "ca.crt").write_bytes(_pem(ca))
    files["ca"] = tmp_path / "ca.crt"
    return files


def write_kubeconfig(path: pathlib.Path, pki: dict[str, pathlib.Path], inline: bool) -> None:
    user: dict[str, str]
    if inline:
        user = {
            "client-certificate-data": base64.b64encode(pki["hub"].read_bytes()).decode(),
            "client-key-data": base64.b64encode(pki["hub-key"].read_bytes()).decode(),
        }
    else:
        user = {"client-certificate": "hub.crt", "client-key": "hub.key"}
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": "https://127.0.0.1:1", "certificate-authority": "ca.crt"},
            }
        ],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(doc))


@pytest.mark.parametrize("inline", [True, False])
async def test_hub_presents_its_certificate_unless_bearer(
    tmp_path: pathlib.Path, pki: dict[str, pathlib.Path], inline: bool
) -> None:
    seen: list[tuple[str, str]] = []

    async def handler(request: web.Request) -> web.Response:
        transport = request.transport
        peer = transport.get_extra_info("peercert") if transport else None
        cn = ""
        if peer:
            cn = dict(x[0] for x in peer["subject"]).get("commonName", "")
        seen.append((request.path, cn or request.headers.get("Authorization", "")))
        if request.path.endswith("/leases/n1"):
            return web.json_response({"metadata": {"name": "n1"}, "spec": {}})
        return web.json_response({"kind": "PodList", "items": []})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(pki["server"], pki["server-key"])
    server_ctx.load_verify_locations(pki["ca"])
    server_ctx.verify_mode = ssl.CERT_OPTIONAL
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
    await site.start()
    port = runner.addresses[0][1]
    kubeconfig = tmp_path / "hub.kubeconfig"
    write_kubeconfig(kubeconfig, pki, inline)
    hub = server.Hub(
        settings.HubSettings(
            node_name="n1",
            upstream=settings.UpstreamSettings(
                servers=(f"https://127.0.0.1:{port}",), kubeconfig=kubeconfig
            ),
            listen=settings.ListenSettings(serve_port=0, proxy_port=0),
        )
    )
    await hub.start()
    try:
        assert hub.health is not None
        await hub.health.initial_probe_done.wait()
        assert hub.health.any_healthy()
        async with aiohttp.ClientSession() as s:
            async with s.get(hub.proxy_url + "/api/v1/pods") as r:
                assert r.status == 200
            async with s.get(
                hub.proxy_url + "/api/v1/namespaces/x/pods", headers={"Authorization": "Bearer t"}
            ) as r:
                assert r.status == 200
    finally:
        await hub.stop()
        await runner.cleanup()
    assert ("/api/v1/pods", "system:node:hub") in seen
    assert ("/api/v1/namespaces/x/pods", "Bearer t") in seen


def test_kubeconfig_errors(tmp_path: pathlib.Path, pki: dict[str, pathlib.Path]) -> None:
    with pytest.raises(kubeconfigs.KubeconfigError, match="cannot read"):
        kubeconfigs.load(tmp_path / "missing")
    bad = tmp_path / "bad"
    bad.write_text("- just a list")
    with pytest.raises(kubeconfigs.KubeconfigError, match="not a kubeconfig"):
        kubeconfigs.load(bad)
    good = tmp_path / "k"
    write_kubeconfig(good, pki, inline=False)
    doc = yaml.safe_load(good.read_text())
    doc["users"][0]["user"] = {"client-certificate": "hub.crt"}
    good.write_text(yaml.safe_dump(doc))
    with pytest.raises(kubeconfigs.KubeconfigError, match="both be set"):
        kubeconfigs.load(good)
    doc["users"][0]["user"] = {"tokenFile": "tok"}
    good.write_text(yaml.safe_dump(doc))
    (tmp_path / "tok").write_text("secret-token\n")
    identity = kubeconfigs.load(good)
    assert identity.token == "secret-token" and "secret-token" not in repr(identity)
    assert identity.auth_headers() == {"Authorization": "Bearer secret-token"}
