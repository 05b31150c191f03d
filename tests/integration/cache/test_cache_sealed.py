"""The disk cache sealed at rest, through a real hub in front of the simulator.

What a copy of the cache directory gives away: after Secrets, ConfigMaps and a ServiceAccount
token are cached, no byte of their values (raw or base64, as a Secret's data is) is anywhere
under the cache directory: the database, its WAL and shared memory, freed pages. The hub on its
own node still restarts offline and answers; a copy opened with another key reads nothing; a
plaintext cache of an older hub is sealed in place, leaving no plaintext behind.
"""

from __future__ import annotations

import base64
import os
import pathlib
import secrets
import shutil
from typing import Any

import aiohttp
import pytest

from tests.integration.cache import cache_edge
from yurthub import assembly, settings
from yurthub.cache import keysealing, sealing, store
from yurthub.testing import simapiserver

NS = "sealed"


def _key_file(path: pathlib.Path) -> sealing.Source:
    path.write_bytes(os.urandom(32))
    path.chmod(0o600)
    return sealing.Source(sealing.Kind.KEYFILE, path)


def _markers() -> dict[str, str]:
    return {name: f"{name}-{secrets.token_hex(24)}" for name in ("secret", "config", "token")}


def _needles(markers: dict[str, str]) -> list[bytes]:
    out: list[bytes] = []
    for value in markers.values():
        raw = value.encode()
        # A Secret's data is base64 in its JSON; any 24-byte window of the marker would show.
        out += [raw, raw[-24:], base64.b64encode(raw)[:24]]
    return out


def _leaks(root: pathlib.Path, needles: list[bytes]) -> list[str]:
    found = []
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files, f"nothing under {root}"
    for file in files:
        data = file.read_bytes()
        found += [f"{file.name}: {n[:12]!r}" for n in needles if n in data]
    return found


async def _cache_objects(edge: cache_edge.Edge, markers: dict[str, str]) -> None:
    secret_data = base64.b64encode(markers["secret"].encode()).decode()
    token_data = base64.b64encode(markers["token"].encode()).decode()
    objects: list[tuple[str, dict[str, Any]]] = [
        (
            "secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "db", "namespace": NS, "labels": {"tier": "db"}},
                "data": {"password": secret_data},
            },
        ),
        (
            "secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/service-account-token",
                "metadata": {
                    "name": "sa-token",
                    "namespace": NS,
                    "annotations": {"kubernetes.io/service-account.name": "default"},
                },
                "data": {"token": token_data},
            },
        ),
        (
            "configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "app", "namespace": NS, "labels": {"tier": "app"}},
                "data": {"settings": markers["config"]},
            },
        ),
    ]
    edge.sim.state.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    for _, obj in objects:
        edge.sim.state.create(obj)
    for resource, obj in objects:
        name = obj["metadata"]["name"]
        status, _ = await edge.get(f"/api/v1/namespaces/{NS}/{resource}/{name}")
        assert status == 200, obj
    # A TokenRequest through the hub: whatever of its answer the hub keeps is sealed too.
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    status, issued, _ = await edge.request(
        "POST", f"/api/v1/namespaces/{NS}/serviceaccounts/default/token", body=request
    )
    assert status == 201, issued
    markers["issued"] = issued["status"]["token"]
    for resource in ("secrets", "configmaps"):
        status, listed = await edge.get(f"/api/v1/namespaces/{NS}/{resource}")
        assert status == 200 and listed["items"]
    await edge.flush()


async def _offline_secret(edge: cache_edge.Edge) -> bytes:
    status, body = await edge.get(f"/api/v1/namespaces/{NS}/secrets/db")
    assert status == 200, body
    return base64.b64decode(body["data"]["password"])


async def test_no_plaintext_under_the_cache_dir_and_an_offline_restart_answers(
    tmp_path: pathlib.Path,
) -> None:
    source = _key_file(tmp_path / "kek")
    markers = _markers()
    async with cache_edge.edge_node(tmp_path, key_source=source) as edge:
        assert edge.rt.store.sealer.sealing
        await _cache_objects(edge, markers)
        needles = _needles(markers)
        # While the hub runs: the WAL holds the latest pages.
        assert (tmp_path / "cache" / "cache.db-wal").exists()
        assert _leaks(tmp_path / "cache", needles) == []
        await edge.cut()
        await edge.restart_hub()
        assert await _offline_secret(edge) == markers["secret"].encode()
        status, listed = await edge.get(f"/api/v1/namespaces/{NS}/configmaps")
        assert status == 200 and listed["items"][0]["data"]["settings"] == markers["config"]
        await edge.heal()
    assert _leaks(tmp_path / "cache", needles) == []


async def test_plaintext_shows_without_sealing(tmp_path: pathlib.Path) -> None:
    """The scan above finds what it looks for: without a key, the markers are on disk."""
    markers = _markers()
    async with cache_edge.edge_node(tmp_path) as edge:
        assert not edge.rt.store.sealer.sealing
        await _cache_objects(edge, markers)
    assert _leaks(tmp_path / "cache", _needles(markers))


async def test_a_copy_opened_with_another_key_reads_nothing(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = _key_file(tmp_path / "kek")
    async with cache_edge.edge_node(tmp_path, key_source=source) as edge:
        await _cache_objects(edge, _markers())
        held = len(edge.rt.store)
    assert held >= 3
    copy = tmp_path / "elsewhere"
    shutil.copytree(tmp_path / "cache", copy)
    other = _key_file(tmp_path / "other-kek")
    opened = await store.Store.open(copy, key_source=other)
    try:
        assert len(opened) == 0 and opened.list_records() == []
        assert "does not open here" in opened.reset
    finally:
        await opened.close()
    # The same copy with this node's key file, but the data key file left behind: each entry
    # is dropped, counted in one line.
    bare = tmp_path / "bare"
    shutil.copytree(tmp_path / "cache", bare)
    (bare / keysealing.KEY_FILE).unlink()
    opened = await store.Store.open(bare, key_source=source)
    try:
        assert len(opened) == 0
        assert opened.corrupt_at_load
    finally:
        await opened.close()
    assert any("do not open with this node's data key" in r.message for r in caplog.records)
    # The original still opens on its own node.
    opened = await store.Store.open(tmp_path / "cache", key_source=source)
    try:
        assert len(opened) == held
    finally:
        await opened.close()


async def test_a_plaintext_cache_is_sealed_in_place(tmp_path: pathlib.Path) -> None:
    markers = _markers()
    async with cache_edge.edge_node(tmp_path) as edge:
        await _cache_objects(edge, markers)
        held = len(edge.rt.store)
    needles = _needles(markers)
    assert _leaks(tmp_path / "cache", needles)
    source = _key_file(tmp_path / "kek")
    opened = await store.Store.open(tmp_path / "cache", key_source=source)
    try:
        assert len(opened) == held
        assert opened.sealer.sealing
        key = next(k for k, _ in opened.objects(next(iter(opened.scopes()))))
        assert await opened.body(key) is not None
    finally:
        await opened.close()
    assert _leaks(tmp_path / "cache", needles) == []


async def test_a_sealed_cache_refuses_a_tool_without_its_key(tmp_path: pathlib.Path) -> None:
    source = _key_file(tmp_path / "kek")
    opened = await store.Store.open(tmp_path / "cache", key_source=source)
    await opened.close()
    with pytest.raises(store.StoreError, match="is sealed"):
        await store.Store.open(tmp_path / "cache")


async def test_a_missing_key_file_is_one_clear_error(tmp_path: pathlib.Path) -> None:
    source = sealing.Source(sealing.Kind.KEYFILE, tmp_path / "absent")
    with pytest.raises(store.StoreError, match=r"cannot seal the cache.*absent"):
        await store.Store.open(tmp_path / "cache", key_source=source)


async def test_a_readable_key_file_is_refused(tmp_path: pathlib.Path) -> None:
    source = _key_file(tmp_path / "kek")
    (tmp_path / "kek").chmod(0o644)
    with pytest.raises(store.StoreError, match="lets others read it"):
        await store.Store.open(tmp_path / "cache", key_source=source)


async def test_a_systemd_credential_seals_and_rotation_re_encrypts(tmp_path: pathlib.Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / sealing.DEFAULT_CREDENTIAL).write_bytes(os.urandom(32))
    environ = {"CREDENTIALS_DIRECTORY": str(creds)}
    auto = sealing.Source()
    markers = _markers()
    async with cache_edge.edge_node(tmp_path) as edge:
        await _cache_objects(edge, markers)
        held = len(edge.rt.store)
    needles = _needles(markers)
    opened = await store.Store.open(tmp_path / "cache", key_source=auto, environ=environ)
    assert opened.sealed_by.startswith("systemd credential")
    await opened.close()
    assert _leaks(tmp_path / "cache", needles) == []
    kek = keysealing.resolve(auto, environ)
    assert kek is not None
    ring = keysealing.load_ring(tmp_path / "cache", kek)
    assert ring is not None and list(ring.keys) == [1]
    keysealing.save_ring(tmp_path / "cache", keysealing.rotated(ring, os.urandom), kek, os.urandom)
    opened = await store.Store.open(tmp_path / "cache", key_source=auto, environ=environ)
    try:
        assert len(opened) == held
    finally:
        await opened.close()
    ring = keysealing.load_ring(tmp_path / "cache", kek)
    assert ring is not None and list(ring.keys) == [2]
    opened = await store.Store.open(tmp_path / "cache", key_source=auto, environ=environ)
    try:
        assert len(opened) == held
    finally:
        await opened.close()


async def test_an_unsealed_cache_is_a_loud_warning_and_an_unsealable_one_a_plain_proxy(
    sim_apiserver: simapiserver.SimApiserver,
    tmp_path: pathlib.Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def hub(source: sealing.Source) -> settings.HubSettings:
        return settings.HubSettings(
            node_name=cache_edge.NODE,
            upstream=settings.UpstreamSettings(servers=(sim_apiserver.url,), kubeconfig=kubeconfig),
            listen=settings.ListenSettings(serve_port=0, proxy_port=0),
            proxy=settings.ProxySettings(shutdown_grace=1.0),
            cache=settings.CacheSettings(disk_cache_path=tmp_path / "cache", key_source=source),
        )

    kubeconfig = sim_apiserver.write_kubeconfig(tmp_path / "id.kubeconfig")
    async with (
        assembly.running(hub(sealing.Source(sealing.Kind.NONE))) as node,
        aiohttp.ClientSession() as http,
    ):
        assert node.cache is not None
        async with http.get(node.hub.server_url + "/v1/status") as resp:
            status = await resp.json()
    wanted = f"the disk cache is not sealed: anyone who copies {tmp_path / 'cache'} reads"
    assert any(wanted in w for w in status["warnings"]), status["warnings"]
    assert any(wanted in r.getMessage() for r in caplog.records if r.levelname == "WARNING")

    missing = sealing.Source(sealing.Kind.KEYFILE, tmp_path / "absent")
    async with (
        assembly.running(hub(missing)) as node,
        aiohttp.ClientSession(headers={"User-Agent": cache_edge.KUBELET_UA}) as http,
    ):
        assert node.cache is None
        async with http.get(node.hub.proxy_url + "/api/v1/namespaces") as resp:
            assert resp.status == 200  # still a proxy
    assert any("cannot seal the cache" in r.getMessage() for r in caplog.records)


async def test_auto_finding_no_key_for_a_sealed_cache_never_starts_it_over_in_plaintext(
    tmp_path: pathlib.Path,
) -> None:
    """The systemd credential that sealed the cache is not passed this time (the unit was
    changed): ``auto`` finds no key. Starting over unsealed would cache Secrets in plaintext
    from then on; the cache is refused (the hub runs as a plain proxy) and left as it is."""
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / sealing.DEFAULT_CREDENTIAL).write_bytes(os.urandom(32))
    auto = sealing.Source()
    sealed = await store.Store.open(
        tmp_path / "cache", key_source=auto, environ={"CREDENTIALS_DIRECTORY": str(creds)}
    )
    assert sealed.sealed_by.startswith("systemd credential")
    await sealed.close()
    with pytest.raises(store.StoreError, match=r"is sealed.*auto finds no key"):
        await store.Store.open(tmp_path / "cache", key_source=auto, environ={})
    assert keysealing.has_ring(tmp_path / "cache")
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if ".damaged" in p.name) == []
    # Saying so is the operator's way to start over unsealed.
    plain = await store.Store.open(
        tmp_path / "cache", key_source=sealing.Source(sealing.Kind.NONE), environ={}
    )
    try:
        assert plain.sealed_by == "" and not plain.sealer.sealing
    finally:
        await plain.close()
