"""The Configuration webhook of ``edgehub manager`` over real HTTPS (the apiserver's side is
played by the test: AdmissionReviews posted as kube-apiserver posts them): verdicts with field
names, metadata-only updates let through, malformed requests refused, the dry-run made as the
manager, and a rotated serving certificate picked up without a restart."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from managers_support import (
    akri_settings,
    configuration,
    eventually,
    get_text,
    install_crds,
    service_account_dir,
)

from managers import running, settings
from yurthub.testing import simapiserver
from yurthub.testing.sim import pki

BROKER = {"containers": [{"name": "broker", "image": "nginx"}]}


def review(operation: str, obj: Any, old: Any = None, uid: str = "rev-1") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "akri.sh", "version": "v0", "kind": "Configuration"},
            "resource": {"group": "akri.sh", "version": "v0", "resource": "configurations"},
            "name": "cfg",
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": "admin"},
            "object": obj,
            "oldObject": old,
            "dryRun": False,
        },
    }


def write_pair(directory: Path, authority: pki.Authority, *names: str) -> tuple[Path, Path]:
    cert, key = authority.issue_serving(names)
    # Written next to the files and renamed over them, as kubelet updates a mounted Secret.
    for name, data in (("tls.key", key), ("tls.crt", cert)):
        tmp = directory / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, directory / name)
    return directory / "tls.crt", directory / "tls.key"


async def peer_names(port: int, context: ssl.SSLContext) -> set[str]:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        cert = writer.get_extra_info("peercert")
        return {value for kind, value in cert.get("subjectAltName", ()) if kind == "DNS"}
    finally:
        writer.close()
        await writer.wait_closed()


async def test_webhook_verdicts_and_certificate_rotation(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    sim = sim_apiserver
    install_crds(sim)
    account = service_account_dir(sim, tmp_path / "sa")
    authority = pki.Authority.create("webhook-ca")
    tls = tmp_path / "tls"
    tls.mkdir()
    cert, key = write_pair(tls, authority, "127.0.0.1", "first.example")
    webhook = settings.Webhook(
        cert_file=cert, key_file=key, bind_address="127.0.0.1", port=0, reload_interval=0.1
    )
    trust = ssl.create_default_context(cadata=authority.cert_pem.decode())
    trust.check_hostname = False  # the apiserver checks the IP SAN; names vary below
    async with (
        running.running(
            akri_settings(sim, account, controllers=("brokers",), webhook=webhook)
        ) as manager,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust)) as session,
    ):
        port = manager.webhook_port
        assert port
        url = f"https://127.0.0.1:{port}/validate"

        async def post(doc: Any) -> tuple[int, Any]:
            async with session.post(url, json=doc) as resp:
                text = await resp.text()
                is_json = resp.content_type == "application/json"
                return resp.status, (await resp.json()) if is_json else text

        good = configuration(
            brokerSpec={"brokerPodSpec": BROKER},
            instanceServiceSpec={"ports": [{"port": 80}]},
        )
        status, answer = await post(review("CREATE", good))
        assert status == 200
        assert answer["apiVersion"] == "admission.k8s.io/v1"
        assert answer["response"] == {"uid": "rev-1", "allowed": True}
        # The broker and its Service were checked by the apiserver, as the manager, stored not.
        # (No Instance exists: every create the manager made was the webhook's dry run.)
        manager_creates = [
            r
            for r in sim.audit_log()
            if r.verb == "create" and r.user.endswith(":edgehub-manager") and r.code == 201
        ]
        assert sorted(r.resource for r in manager_creates) == ["pods", "services"]
        assert not [p for p in sim.state.list("pods", "default") if "cfg-000000" in str(p)]
        assert not [s for s in sim.state.list("services", "default") if "cfg-000000" in str(s)]

        # Details Akri's debugEcho accepts: non-string scalars as text, an unknown key ignored.
        # Admitted, the unknown key named in an admission warning (kubectl prints it).
        typo = configuration()
        typo["spec"]["discoveryHandler"]["discoveryDetails"] = (
            "descriptions: [1, yes, 0x1F, 1.50, ~]\ndescriptons: [b]"
        )
        status, answer = await post(review("CREATE", typo, uid="typo"))
        assert status == 200
        assert answer["response"]["allowed"] is True
        assert answer["response"]["warnings"] == [
            "spec.discoveryHandler.discoveryDetails: descriptons: unknown key, ignored "
            "(expected descriptions)"
        ]

        bad_udev = configuration()
        bad_udev["spec"]["discoveryHandler"] = {
            "name": "udev",
            "discoveryDetails": 'udevRules: ["TYPO==\\"x\\""]',
        }
        cases = {
            "spec.discoveryHandler.discoveryDetails: udevRules[0]": bad_udev,
            "spec.capacity": configuration(capacity=-3),
            "spec.brokerSpec.brokerPodSpec.containers": configuration(
                brokerSpec={"brokerPodSpec": {"containers": "nginx"}}
            ),
        }
        for field, config in cases.items():
            status, answer = await post(review("CREATE", config, uid=field))
            assert status == 200
            response = answer["response"]
            assert response["uid"] == field
            assert response["allowed"] is False
            assert response["status"]["code"] == 422
            assert response["status"]["message"].startswith(field), response

        # An agent putting its finalizer on a Configuration admitted before the webhook.
        old = configuration(capacity=-3)
        new = configuration(capacity=-3)
        new["metadata"]["finalizers"] = ["edge-node-1"]
        status, answer = await post(review("UPDATE", new, old))
        assert answer["response"]["allowed"] is True
        # A real change of spec on UPDATE is checked.
        status, answer = await post(review("UPDATE", configuration(capacity=-1), old))
        assert answer["response"]["allowed"] is False

        for bad in (b"not json", b"[]", b'{"kind": "AdmissionReview"}'):
            async with session.post(
                url, data=bad, headers={"Content-Type": "application/json"}
            ) as resp:
                assert resp.status == 400
        async with session.post(
            url, data=io.BytesIO(b"x" * (4 << 20)), headers={"Content-Type": "application/json"}
        ) as resp:
            assert resp.status == 413

        status, text = await get_text(manager.health_port or 0, "/readyz")
        assert status == 200 and f"[+]webhook ok (port {port})" in text
        metrics = (await get_text(manager.health_port or 0, "/metrics"))[1]
        assert 'edgehub_manager_webhook_reviews_total{allowed="false"} 4.0' in metrics

        # Rotation: new files, new connections get the new certificate; nothing restarted.
        assert await peer_names(port, trust) == {"first.example"}
        write_pair(tls, authority, "127.0.0.1", "second.example")

        async def rotated() -> bool:
            return await peer_names(port, trust) == {"second.example"}

        deadline = asyncio.get_running_loop().time() + 5
        while not await rotated():
            assert asyncio.get_running_loop().time() < deadline, "certificate not reloaded"
            await asyncio.sleep(0.05)
        # A broken pair (key of another certificate) is refused; the good one stays.
        other_cert, _ = authority.issue_serving(("127.0.0.1", "third.example"))
        (tls / "tls.crt").write_bytes(other_cert)
        await asyncio.sleep(0.4)
        assert await peer_names(port, trust) == {"second.example"}
        status, answer = await post(review("CREATE", good))
        assert answer["response"]["allowed"] is True
        await eventually(lambda: manager.certificates is not None)


async def test_a_certificate_that_does_not_load_stops_the_manager_at_startup(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    account = service_account_dir(sim_apiserver, tmp_path / "sa")
    (tmp_path / "tls.crt").write_text("not a certificate")
    (tmp_path / "tls.key").write_text("not a key")
    webhook = settings.Webhook(
        cert_file=tmp_path / "tls.crt", key_file=tmp_path / "tls.key", port=0
    )
    try:
        async with running.running(
            akri_settings(sim_apiserver, account, controllers=("brokers",), webhook=webhook)
        ):
            raise AssertionError("the manager started with a broken certificate")
    except running.StartupError as e:
        assert "tls.crt" in str(e)


async def test_a_certificate_that_is_not_there_yet_is_waited_for(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path
) -> None:
    install_crds(sim_apiserver)
    account = service_account_dir(sim_apiserver, tmp_path / "sa")
    tls = tmp_path / "tls"
    tls.mkdir()
    webhook = settings.Webhook(
        cert_file=tls / "tls.crt",
        key_file=tls / "tls.key",
        bind_address="127.0.0.1",
        port=0,
        reload_interval=0.1,
    )
    authority = pki.Authority.create("webhook-ca")
    trust = ssl.create_default_context(cadata=authority.cert_pem.decode())
    trust.check_hostname = False
    async with running.running(
        akri_settings(sim_apiserver, account, controllers=("brokers",), webhook=webhook)
    ) as manager:
        port = manager.webhook_port
        assert port
        await eventually(lambda: manager.controllers[0].synced)
        status, text = await get_text(manager.health_port or 0, "/readyz")
        assert status == 200 and "waiting for its certificate" in text, text
        try:
            await peer_names(port, trust)
            raise AssertionError("a handshake succeeded without a certificate")
        except (ssl.SSLError, ConnectionError):
            pass
        write_pair(tls, authority, "127.0.0.1", "late.example")
        deadline = asyncio.get_running_loop().time() + 5
        while True:
            try:
                if await peer_names(port, trust) == {"late.example"}:
                    break
            except (ssl.SSLError, ConnectionError):
                pass
            assert asyncio.get_running_loop().time() < deadline, "never served"
            await asyncio.sleep(0.05)
        status, text = await get_text(manager.health_port or 0, "/readyz")
        assert f"[+]webhook ok (port {port})" in text


async def test_deeply_nested_configurations_are_denied_not_crashed_on(
    sim_apiserver: simapiserver.SimApiserver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 27 item 6: 5,000 nested ``[`` in discoveryDetails (``RecursionError`` in the
    handler's YAML parser) and a broker spec 600 deep (in the deep copies) were 500s with a
    traceback; now denied reviews naming the field, one log line each."""
    caplog.set_level(logging.INFO)
    sim = sim_apiserver
    install_crds(sim)
    account = service_account_dir(sim, tmp_path / "sa")
    authority = pki.Authority.create("webhook-ca")
    tls = tmp_path / "tls"
    tls.mkdir()
    cert, key = write_pair(tls, authority, "127.0.0.1")
    webhook = settings.Webhook(cert_file=cert, key_file=key, bind_address="127.0.0.1", port=0)
    trust = ssl.create_default_context(cadata=authority.cert_pem.decode())
    deep: Any = "x"
    for _ in range(600):
        deep = {"x": deep}
    brackets = configuration()
    brackets["spec"]["discoveryHandler"] = {
        "name": "udev",
        "discoveryDetails": "[" * 5_000 + "]" * 5_000,
    }
    cases = {
        "spec.discoveryHandler.discoveryDetails: discoveryDetails are not valid YAML at line 1, "
        "column 201: nested deeper than 200 levels (the udev discovery handler would refuse it)": (
            brackets
        ),
        "spec: nested deeper than 200 levels": configuration(
            brokerSpec={"brokerPodSpec": {**BROKER, "x": deep}}
        ),
    }
    async with (
        running.running(
            akri_settings(sim, account, controllers=("brokers",), webhook=webhook)
        ) as manager,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust)) as session,
    ):
        url = f"https://127.0.0.1:{manager.webhook_port}/validate"
        for message, config in cases.items():
            caplog.clear()
            # json, not orjson: it encodes deeper than 254 levels.
            body = json.dumps(review("CREATE", config))
            headers = {"Content-Type": "application/json"}
            async with session.post(url, data=body, headers=headers) as resp:
                assert resp.status == 200
                answer = await resp.json()
            response = answer["response"]
            assert response["allowed"] is False and response["status"]["code"] == 422
            assert response["status"]["message"] == message
            denials = [r for r in caplog.records if "webhook denied" in r.getMessage()]
            assert len(denials) == 1 and message in denials[0].getMessage()
            assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
