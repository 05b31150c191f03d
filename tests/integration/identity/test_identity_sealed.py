"""The hub's private keys sealed under the node's data key, through a hub that joins a simulated
cluster with a bootstrap token (issue 25 item 1).

What a copy of the node's directories gives away: no byte of either private key (DER, PEM
body, the private scalar) is anywhere under the root dir or the cache dir; the hub on its own
node restarts with its identity (no new CSR); the same directories on another machine (another
key source) read nothing, and the hub there starts fresh with one error line, requesting new
certificates. A plaintext identity (an older hub's, or ``--cache-key-source none``) is sealed
in place; a rotated data key re-seals it, and only then is the older one dropped; a key source
that gives no key writes no key at all.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import pathlib
import shutil
from collections.abc import AsyncIterator

import pytest
from identity_keys import leaks, needles
from identity_support import NODE, hub_settings, readyz, until

from tests.integration.cache.swtpms import swtpm
from yurthub import assembly, privatekeys, settings
from yurthub.cache import keysealing, opening, sealing
from yurthub.certs import layout, pemfiles, sealedkeys
from yurthub.testing import joining, simapiserver

NAMES = (layout.CLIENT_PREFIX, layout.SERVING_PREFIX)


@pytest.fixture
async def sim(tmp_path: pathlib.Path) -> AsyncIterator[simapiserver.SimApiserver]:
    async with simapiserver.SimApiserver(workdir=tmp_path / "sim") as sim:
        yield sim


def _key_file(path: pathlib.Path) -> sealing.Source:
    path.write_bytes(os.urandom(32))
    path.chmod(0o600)
    return sealing.Source(sealing.Kind.KEYFILE, path)


@dataclasses.dataclass
class Node:
    sim: simapiserver.SimApiserver
    admin: joining.Admin
    token: str
    root: pathlib.Path
    cache: pathlib.Path
    sealed_with: dict[str, int | None] = dataclasses.field(default_factory=dict)
    """What /v1/status said seals each private key, at the last run."""

    def settings(self, source: sealing.Source | None) -> settings.HubSettings:
        s = hub_settings(
            (self.sim.url,), self.root, token=self.token, pins=(joining.ca_pin(self.sim.ca_pem),)
        )
        return dataclasses.replace(
            s, cache=settings.CacheSettings(disk_cache_path=self.cache, key_source=source)
        )

    async def run_until_joined(self, source: sealing.Source | None) -> dict[str, int]:
        """Start a hub, wait for both certificates and a healthy, ready proxy, stop it; the
        serial numbers of the certificates it used."""
        async with assembly.running(self.settings(source)) as node:
            hub = node.hub
            await until(lambda: hub.secure_url, what="the secure proxy")
            assert hub.health is not None
            await until(hub.health.any_healthy, what="a healthy apiserver")
            await until(lambda: hub.upstream is not None and hub.upstream.identity.subject)
            status, text = await readyz(hub)
            assert status == 200 and text.startswith("OK"), text  # a reset is a warning
            certs = hub.certs
            assert certs is not None and certs.client_pair and certs.serving_pair
            # Joining (no identity yet) is no outage: no record, no Event, no condition words.
            # Health told the recorder when it turned healthy, so this is not read too early.
            assert hub.outages.current is None and hub.outages.last is None, hub.outages.last
            self.sealed_with = {c["name"]: c["keySealedWith"] for c in hub.certificates()}
            return {
                "client": certs.client_pair.certificate.serial_number,
                "serving": certs.serving_pair.certificate.serial_number,
            }

    def keys(self, seal: sealedkeys.Seal) -> list[privatekeys.PrivateKey]:
        out = []
        for prefix in NAMES:
            pair = pemfiles.load_pair(layout.Layout(self.root).current(prefix), seal)
            block = privatekeys.key_block(pair.pem)
            assert block is not None
            out.append(privatekeys.open_key(block, seal.candidates())[0])
        return out

    def seal(self, source: sealing.Source) -> sealedkeys.Seal:
        sealer = keysealing.read_sealer(self.cache, source, {})
        return sealedkeys.from_data_keys(sealer.keys, sealer.current)


def _needles(keys: list[privatekeys.PrivateKey]) -> list[bytes]:
    return [needle for key in keys for needle in needles(key)]


@pytest.fixture
async def node(sim: simapiserver.SimApiserver, tmp_path: pathlib.Path) -> Node:
    admin = joining.Admin.from_kubeconfig(sim.kubeconfig_path)
    token = joining.new_token()
    await admin.create_bootstrap_token(token)
    return Node(sim, admin, token, tmp_path / "root", tmp_path / "cache")


async def test_sealed_keys_leave_no_plaintext_and_a_copy_elsewhere_starts_fresh(
    node: Node, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = _key_file(tmp_path / "kek")
    async with joining.approving(node.admin, node_name=NODE) as approver:
        first = await node.run_until_joined(source)
        assert len(approver.approved) == 2
        assert node.sealed_with == {"client": 1, "serving": 1}
        for prefix in NAMES:
            pem = layout.Layout(node.root).current(prefix).read_bytes()
            assert privatekeys.ENCRYPTED in pem and b"BEGIN EC PRIVATE KEY" not in pem
        found = _needles(node.keys(node.seal(source)))
        assert leaks([node.root, node.cache], found) == []

        # On its own node: the same identity, no new CSR.
        assert await node.run_until_joined(source) == first
        assert len(approver.approved) == 2

        # Both directories copied to another machine, whose key source is another key file.
        elsewhere = Node(
            node.sim, node.admin, node.token, tmp_path / "copy-root", tmp_path / "copy-cache"
        )
        shutil.copytree(node.root, elsewhere.root, symlinks=True)
        shutil.copytree(node.cache, elsewhere.cache, symlinks=True)
        caplog.clear()
        caplog.set_level(logging.INFO)
        other = await elsewhere.run_until_joined(_key_file(tmp_path / "other-kek"))
        assert len(approver.approved) == 4  # a fresh identity, with the bootstrap token
        assert set(other.values()).isdisjoint(first.values())
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert "does not open here" in errors[0] and "requested anew" in errors[0]
    assert leaks([elsewhere.root, elsewhere.cache], found) == []


async def test_the_scan_finds_plaintext_keys_and_they_are_sealed_in_place(
    node: Node, tmp_path: pathlib.Path
) -> None:
    """``--cache-key-source none``: plain PEM as YurtHub writes it, which the scan finds; then
    a key file: the same identity, sealed in place, no plaintext left (its history too)."""
    async with joining.approving(node.admin, node_name=NODE) as approver:
        plain = await node.run_until_joined(sealing.Source(sealing.Kind.NONE))
        assert node.sealed_with == {"client": None, "serving": None}
        for prefix in NAMES:
            assert b"BEGIN EC PRIVATE KEY" in layout.Layout(node.root).current(prefix).read_bytes()
        found = _needles(node.keys(sealedkeys.PLAIN))
        assert leaks([node.root], found)

        source = _key_file(tmp_path / "kek")
        assert await node.run_until_joined(source) == plain
        assert len(approver.approved) == 2
    assert leaks([node.root, node.cache], found) == []
    for prefix in NAMES:
        pair = pemfiles.load_pair(layout.Layout(node.root).current(prefix), node.seal(source))
        assert pair.key_id == 1


async def test_a_sealing_killed_after_its_link_swap_is_finished_at_the_next_start(
    node: Node, tmp_path: pathlib.Path
) -> None:
    """``pemfiles.reseal`` killed between writing the sealed pair (link swapped) and removing
    the plaintext files: the pair is sealed and current, so nothing re-seals it again; the next
    start still removes the plaintext files (they were kept as the pair's history before)."""
    async with joining.approving(node.admin, node_name=NODE) as approver:
        plain = await node.run_until_joined(sealing.Source(sealing.Kind.NONE))
        found = _needles(node.keys(sealedkeys.PLAIN))
        source = _key_file(tmp_path / "kek")
        opening.open_keys(node.cache, source)  # the data key the next start finds
        seal = node.seal(source)
        pki = layout.Layout(node.root).pki
        for prefix in NAMES:
            pair = pemfiles.load_pair(pki / layout.current_name(prefix))
            block = privatekeys.key_block(pair.pem)
            assert block is not None and not pair.sealed
            key, _ = privatekeys.open_key(block)
            chain = pair.pem[: pair.pem.index(b"-----BEGIN EC PRIVATE KEY-----")]
            later = pair.written + datetime.timedelta(seconds=1)
            pemfiles.write_pair(pki, prefix, sealedkeys.pair_pem(chain, key, seal), later)
        # The state the kill left: sealed pairs current, the plaintext ones beside them.
        assert leaks([node.root], found)
        assert await node.run_until_joined(source) == plain
        assert len(approver.approved) == 2
    assert node.sealed_with == {"client": 1, "serving": 1}
    assert leaks([node.root, node.cache], found) == []


async def test_a_rotated_data_key_reseals_the_keys_before_the_old_one_goes(
    node: Node, tmp_path: pathlib.Path
) -> None:
    source = _key_file(tmp_path / "kek")
    async with joining.approving(node.admin, node_name=NODE) as approver:
        first = await node.run_until_joined(source)
        kek = keysealing.resolve(source, {})
        assert kek is not None
        ring = keysealing.load_ring(node.cache, kek)
        assert ring is not None
        keysealing.save_ring(node.cache, keysealing.rotated(ring, os.urandom), kek, os.urandom)
        assert await node.run_until_joined(source) == first
        assert len(approver.approved) == 2
    ring = keysealing.load_ring(node.cache, kek)
    assert ring is not None and list(ring.keys) == [2]
    for prefix in NAMES:
        pair = pemfiles.load_pair(layout.Layout(node.root).current(prefix), node.seal(source))
        assert pair.key_id == 2


async def test_a_key_source_that_gives_no_key_writes_no_key(
    node: Node, tmp_path: pathlib.Path
) -> None:
    missing = sealing.Source(sealing.Kind.KEYFILE, tmp_path / "absent")
    async with (
        joining.approving(node.admin, node_name=NODE) as approver,
        assembly.running(node.settings(missing)) as running,
    ):
        certs = running.hub.certs
        assert certs is not None and running.cache is None
        await until(lambda: "gives no key now" in certs.client_problem, what="the client problem")
        status, text = await readyz(running.hub)
        assert status != 200 and "gives no key now" in text
    assert approver.approved == []
    assert not [p for p in node.root.rglob("*.pem")]
    asked = [r.path for r in node.sim.audit_log() if r.user != "kubernetes-admin"]
    assert asked == []  # no CSR, not even the join token's discovery


async def test_under_a_tpm_a_copy_on_another_machine_starts_fresh(
    node: Node, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The data key sealed to a TPM (``swtpm``): the hub restarts with its identity on its own
    node; the directories on a machine with another TPM read nothing there, and the hub
    there starts fresh with one error line; on a machine with no key source at all
    (``auto`` finds nothing) nothing sealed is read or written, and one error line says
    why."""
    async with joining.approving(node.admin, node_name=NODE) as approver:
        with swtpm(tmp_path / "tpm-a") as tcti:
            source = sealing.Source(sealing.Kind.TPM, tcti=tcti)
            first = await node.run_until_joined(source)
            found = _needles(node.keys(node.seal(source)))
            assert await node.run_until_joined(source) == first
        assert len(approver.approved) == 2
        assert leaks([node.root, node.cache], found) == []

        elsewhere = Node(
            node.sim, node.admin, node.token, tmp_path / "copy-root", tmp_path / "copy-cache"
        )
        shutil.copytree(node.root, elsewhere.root, symlinks=True)
        shutil.copytree(node.cache, elsewhere.cache, symlinks=True)
        bare = Node(node.sim, node.admin, node.token, tmp_path / "bare-root", tmp_path / "bare")
        shutil.copytree(node.root, bare.root, symlinks=True)
        shutil.copytree(node.cache, bare.cache, symlinks=True)
        caplog.set_level(logging.INFO)
        caplog.clear()
        with swtpm(tmp_path / "tpm-b") as other:
            fresh = await elsewhere.run_until_joined(sealing.Source(sealing.Kind.TPM, tcti=other))
        assert len(approver.approved) == 4 and set(fresh.values()).isdisjoint(first.values())
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "does not unseal on this node" in errors[0], errors

        caplog.clear()
        async with assembly.running(bare.settings(sealing.Source())) as running:
            certs = running.hub.certs
            assert certs is not None and running.cache is None
            await until(lambda: "auto finds no key" in certs.client_problem)
        assert len(approver.approved) == 4
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "auto finds no key" in errors[0], errors
    assert leaks([elsewhere.root, elsewhere.cache, bare.root, bare.cache], found) == []
