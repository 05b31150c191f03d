"""The hub's identity over TLS: client certificate from a kubeconfig, Bearer requests without it."""

from __future__ import annotations

import base64
import pathlib
import ssl

import aiohttp
import pytest
import yaml
from aiohttp import web

from yurthub import kubeconfigs, server, settings
from yurthub.testing.sim import pki as certs


@pytest.fixture
def pki(tmp_path: pathlib.Path) -> dict[str, pathlib.Path]:
    """A CA, a serving certificate for 127.0.0.1 and the hub's client certificate, as files."""
    authority = certs.Authority.create("test-ca")
    issued = {
        "server": authority.issue_serving(["127.0.0.1"]),
        "hub": authority.issue_client("system:node:hub"),
    }
    files = {}
    for name, (cert, key) in issued.items():
        (tmp_path / f"{name}.crt").write_bytes(cert)
        (tmp_path / f"{name}.key").write_bytes(key)
        files[name] = tmp_path / f"{name}.crt"
        files[f"{name}-key"] = tmp_path / f"{name}.key"
    (tmp_path / "ca.crt").write_bytes(authority.cert_pem)
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
