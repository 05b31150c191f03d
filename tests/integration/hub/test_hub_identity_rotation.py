"""The hub picks up rotated credentials while it runs, against the real simulated apiserver.

Who the apiserver saw is read from the sim's audit log (one record per request, with the
authenticated user and the User-Agent); which connections the hub still holds is read from the
kernel (``/proc/net/tcp``), so pooled connections of the old identity are seen to be closed.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import pathlib
import time
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest
import yaml

from yurthub import health, kubeconfigs, metrics, server, settings
from yurthub.proxy import upstream
from yurthub.testing import simapiserver

NODE = "edge-node-1"
UA = "rotation-test/1.0"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


# --- credentials on disk, laid out as kubelet does ---------------------------------------------


def write_kubeconfig(
    path: pathlib.Path, sim: simapiserver.SimApiserver, user: dict[str, str]
) -> None:
    (path.parent / "ca.crt").write_bytes(sim.ca_pem)
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": sim.url, "certificate-authority": "ca.crt"}}
        ],
        "users": [{"name": "hub", "user": user}],
        "contexts": [{"name": "hub", "context": {"cluster": "c", "user": "hub"}}],
        "current-context": "hub",
    }
    path.write_text(yaml.safe_dump(doc))


def rotate_symlink(pki: pathlib.Path, pem: bytes, serial: int) -> None:
    """kubelet's rotation: a new ``kubelet-client-<stamp>.pem`` (cert + key), then an atomic
    swap of the ``kubelet-client-current.pem`` symlink."""
    target = pki / f"kubelet-client-{serial}.pem"
    target.write_bytes(pem)
    tmp = pki / ".current.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target.name)
    os.replace(tmp, pki / "kubelet-client-current.pem")


def replace_atomically(path: pathlib.Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# --- observing ----------------------------------------------------------------------------------


def established_to(port: int) -> set[int]:
    """Local ports of this host's ESTABLISHED IPv4 connections to ``port`` (the hub's side)."""
    ports = set()
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            local, remote, state = fields[1], fields[2], fields[3]
            if state == "01" and int(remote.split(":")[1], 16) == port:
                ports.add(int(local.split(":")[1], 16))
    return ports


def users_seen(sim: simapiserver.SimApiserver, agent: str = UA) -> list[str]:
    return [r.user for r in sim.audit_log() if r.user_agent == agent]


async def eventually(check: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


async def get_as_hub(
    hub: server.Hub, path: str = CONFIGMAPS, headers: dict[str, str] | None = None
) -> int:
    async with (
        aiohttp.ClientSession() as client,
        client.get(hub.proxy_url + path, headers={"User-Agent": UA, **(headers or {})}) as resp,
    ):
        await resp.read()
        return resp.status


def hub_settings(
    sim: simapiserver.SimApiserver,
    kubeconfig: pathlib.Path,
    heartbeat: float = 0.5,
    check_interval: float = 10.0,
) -> settings.HubSettings:
    return settings.HubSettings(
        node_name=NODE,
        upstream=settings.UpstreamSettings(
            servers=(sim.url,), kubeconfig=kubeconfig, identity_check_interval=check_interval
        ),
        listen=settings.ListenSettings(serve_port=0, proxy_port=0),
        heartbeat=settings.HeartbeatSettings(interval=heartbeat, timeout=2.0),
    )


@pytest.fixture
async def sim(tmp_path: pathlib.Path) -> AsyncIterator[simapiserver.SimApiserver]:
    async with simapiserver.SimApiserver(workdir=tmp_path / "sim", seed="demo") as running:
        yield running


async def started(
    sim: simapiserver.SimApiserver,
    kubeconfig: pathlib.Path,
    check_interval: float,
    heartbeat: float = 0.5,
) -> server.Hub:
    hub = server.Hub(hub_settings(sim, kubeconfig, heartbeat, check_interval))
    await hub.start()
    assert hub.health is not None
    await hub.health.initial_probe_done.wait()
    return hub


# --- tests --------------------------------------------------------------------------------------


async def test_rotated_kubelet_certificate_is_used_for_new_connections(
    sim: simapiserver.SimApiserver, tmp_path: pathlib.Path
) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    rotate_symlink(pki, b"".join(sim.issue_client_cert("system:node:old", ["system:nodes"])), 1)
    current = str(pki / "kubelet-client-current.pem")
    kubeconfig = tmp_path / "kubelet.conf"
    write_kubeconfig(kubeconfig, sim, {"client-certificate": current, "client-key": current})
    hub = await started(sim, kubeconfig, check_interval=0.1)
    try:
        assert hub.upstream is not None and hub.health is not None
        assert hub.health.any_healthy()
        assert await get_as_hub(hub) == 200
        before = hub.upstream.identity

        async with aiohttp.ClientSession() as client:
            # A watch opened with the old identity keeps streaming through the rotation, then
            # ends normally (timeoutSeconds) so its connection could go back to the pool.
            async with client.get(
                hub.proxy_url + CONFIGMAPS + "?watch=1&timeoutSeconds=2",
                headers={"User-Agent": UA},
            ) as watch:
                assert watch.status == 200
                await eventually(lambda: users_seen(sim).count("system:node:old") >= 2)
                # The watch holds one connection; this GET leaves a second one idle in the pool.
                assert await get_as_hub(hub) == 200
                old_conns = established_to(sim.port)
                assert len(old_conns) >= 2

                cert, key = sim.issue_client_cert("system:node:new", ["system:nodes"])
                rotate_symlink(pki, cert + key, 2)
                await eventually(lambda: hub.upstream is not None and hub.upstream.reloads == 1)

                # Idle connections of the old identity are gone; only the watch's remains.
                await eventually(lambda: len(old_conns & established_to(sim.port)) == 1)
                sim.state.create(
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": "after-rotation", "namespace": "default"},
                    }
                )
                async with asyncio.timeout(5):
                    while b"after-rotation" not in await watch.content.readline():
                        pass
                    assert await watch.read() == b""  # the server ended the watch cleanly
            # Its old-identity connection is closed rather than pooled.
            await eventually(lambda: not old_conns & established_to(sim.port))

        sim.clear_audit_log()
        assert await get_as_hub(hub) == 200
        # A request carrying its own token is forwarded with it, not with the hub's certificate.
        admin = {"Authorization": f"Bearer {sim.admin_token}"}
        assert await get_as_hub(hub, headers=admin) == 200
        assert users_seen(sim) == ["system:node:new", simapiserver.ADMIN_USER]
        # The heartbeat renews the node lease with the new certificate too.
        await eventually(
            lambda: any(
                r.user == "system:node:new" and r.resource == "leases" for r in sim.audit_log()
            )
        )
        after = hub.upstream.identity
        assert after.subject == "system:node:new"
        assert after.with_identity is not before.with_identity
        assert after.bare is before.bare, "Bearer-token requests keep their pooled connections"
    finally:
        await hub.stop()


async def test_half_written_or_mismatched_files_keep_the_working_identity(
    sim: simapiserver.SimApiserver, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    cert_file, key_file = tmp_path / "client.crt", tmp_path / "client.key"
    cert_a, key_a = sim.issue_client_cert("system:node:a", ["system:nodes"])
    cert_file.write_bytes(cert_a)
    key_file.write_bytes(key_a)
    kubeconfig = tmp_path / "hub.conf"
    write_kubeconfig(
        kubeconfig, sim, {"client-certificate": str(cert_file), "client-key": str(key_file)}
    )
    hub = await started(sim, kubeconfig, check_interval=0.05)
    try:
        assert hub.upstream is not None
        cert_b, key_b = sim.issue_client_cert("system:node:b", ["system:nodes"])
        caplog.set_level(logging.INFO, logger="yurthub.proxy.upstream")

        # Half-written in place (no atomic rename): the old identity stays, one error line.
        cert_file.write_bytes(cert_b[: len(cert_b) // 2])
        await eventually(lambda: any("not usable" in r.getMessage() for r in caplog.records))
        await asyncio.sleep(0.6)  # a dozen checks more: still the one line
        rejected = [r for r in caplog.records if "not usable" in r.getMessage()]
        assert len(rejected) == 1, [r.getMessage() for r in rejected]
        assert rejected[0].levelno == logging.ERROR
        assert "system:node:a" in rejected[0].getMessage()
        assert hub.upstream.reloads == 0
        sim.clear_audit_log()
        assert await get_as_hub(hub) == 200
        assert users_seen(sim) == ["system:node:a"]

        # The certificate is complete but the key is still the old one: refused as well.
        cert_file.write_bytes(cert_b)
        await eventually(lambda: sum("not usable" in r.getMessage() for r in caplog.records) == 2)
        assert "do not load" in caplog.records[-1].getMessage()
        assert hub.upstream.reloads == 0

        # Garbage in the kubeconfig itself.
        text = kubeconfig.read_text()
        kubeconfig.write_text(text[: len(text) // 3] + "\n  - [unbalanced")
        await eventually(lambda: sum("not usable" in r.getMessage() for r in caplog.records) == 3)
        kubeconfig.write_text(text)

        # The key arrives: the next check switches.
        key_file.write_bytes(key_b)
        await eventually(lambda: hub.upstream is not None and hub.upstream.reloads == 1)
        sim.clear_audit_log()
        assert await get_as_hub(hub) == 200
        assert users_seen(sim) == ["system:node:b"]
        assert any("hub identity reloaded" in r.getMessage() for r in caplog.records)
    finally:
        await hub.stop()


async def test_token_file_rotation_and_a_401_recheck_at_once(
    sim: simapiserver.SimApiserver, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    token_file = tmp_path / "token"
    token_a = sim.issue_token("token-user-a", ["system:nodes"])
    token_file.write_text(token_a + "\n")
    kubeconfig = tmp_path / "hub.conf"
    write_kubeconfig(kubeconfig, sim, {"tokenFile": "token"})
    # Periodic checks and heartbeats are far away: only the rejected proxied request can
    # trigger the reload here.
    hub = await started(sim, kubeconfig, check_interval=3600, heartbeat=3600)
    try:
        assert hub.upstream is not None and hub.health is not None
        assert hub.health.any_healthy()
        assert await get_as_hub(hub) == 200
        assert users_seen(sim) == ["token-user-a"]
        before = hub.upstream.identity

        token_b = sim.issue_token("token-user-b", ["system:nodes"])
        replace_atomically(token_file, token_b.encode())
        del sim.state.static_tokens[token_a]  # the old token is revoked
        # The request that met the revoked token gets its 401; the next one is the new user.
        first = await get_as_hub(hub)
        await eventually(lambda: hub.upstream is not None and hub.upstream.reloads == 1)
        sim.clear_audit_log()
        assert await get_as_hub(hub) == 200
        assert users_seen(sim) == ["token-user-b"]
        assert first in (200, 401)
        after = hub.upstream.identity
        # Same certificate material (none) and CA: the TLS contexts and their pools are kept.
        assert after.with_identity is before.with_identity and after.bare is before.bare
        assert "token-user" not in caplog.text and token_b not in caplog.text

        # An emptied token file never turns the hub anonymous.
        caplog.set_level(logging.ERROR, logger="yurthub.proxy.upstream")
        token_file.write_text("")
        assert not await hub.upstream.check_identity()
        assert "is empty" in caplog.text
        sim.clear_audit_log()
        assert await get_as_hub(hub) == 200
        assert users_seen(sim) == ["token-user-b"]
    finally:
        await hub.stop()


async def test_expired_certificate_warns_and_a_refused_handshake_reloads_at_once(
    sim: simapiserver.SimApiserver, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="yurthub.proxy.upstream")
    pki = tmp_path / "pki"
    pki.mkdir()
    cert, key = sim.state.authority.issue_client(
        "system:node:expired", lifetime=datetime.timedelta(minutes=-1)
    )
    rotate_symlink(pki, cert + key, 1)
    current = str(pki / "kubelet-client-current.pem")
    kubeconfig = tmp_path / "kubelet.conf"
    write_kubeconfig(kubeconfig, sim, {"client-certificate": current, "client-key": current})
    hub = await started(sim, kubeconfig, check_interval=3600)
    try:
        assert hub.upstream is not None and hub.health is not None
        assert "has expired" in caplog.text
        assert not hub.health.any_healthy()  # the apiserver refuses the handshake

        cert, key = sim.state.authority.issue_client(
            "system:node:fresh", lifetime=datetime.timedelta(hours=2)
        )
        rotate_symlink(pki, cert + key, 2)
        # No periodic check for an hour: the next refused handshake triggers the reload.
        await eventually(lambda: hub.upstream is not None and hub.upstream.reloads == 1)
        assert "expires at" in caplog.text  # valid for 2 h: within the 24 h warning window
        await eventually(lambda: hub.health is not None and hub.health.any_healthy(), 10)
        sim.clear_audit_log()
        assert await get_as_hub(hub) == 200
        assert users_seen(sim) == ["system:node:fresh"]
    finally:
        await hub.stop()


async def test_heartbeat_meeting_a_rotated_token_retries_at_once(
    sim: simapiserver.SimApiserver, tmp_path: pathlib.Path
) -> None:
    token_file = tmp_path / "token"
    token_a = sim.issue_token("token-user-a", ["system:nodes"])
    token_file.write_text(token_a)
    kubeconfig = tmp_path / "hub.conf"
    write_kubeconfig(kubeconfig, sim, {"tokenFile": "token"})
    s = hub_settings(sim, kubeconfig, check_interval=3600)
    client = upstream.Upstream(s.upstream, kubeconfigs.load(kubeconfig), kubeconfig=kubeconfig)
    await client.start()
    try:
        # Rotated and revoked before the first probe, with no identity follower running.
        replace_atomically(token_file, sim.issue_token("token-user-b", ["system:nodes"]).encode())
        del sim.state.static_tokens[token_a]
        checker = health.HealthChecker(s, client, metrics.Metrics())
        async with asyncio.TaskGroup() as tg:
            prober = tg.create_task(checker.run(), name="prober under test")
            await checker.initial_probe_done.wait()
            prober.cancel()
        assert checker.any_healthy(), "the first probe must succeed with the reloaded token"
        assert client.reloads == 1
        leases = [(r.code, r.user) for r in sim.audit_log() if r.resource == "leases"]
        assert leases[0][0] == 401, leases  # the revoked token
        assert leases[-1] == (200, "token-user-b") or leases[-1] == (201, "token-user-b"), leases
    finally:
        await client.close()
