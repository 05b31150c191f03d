"""``migrating.adopt_certificates``: YurtHub's identity copied (never moved) into a hub whose
``--root-dir`` is another directory and holds none; YurtHub's files stay byte for byte."""

from __future__ import annotations

import os
import pathlib

from tests.integration.identity.identity_keys import leaks, needles
from tests.integration.identity.identity_keys import pair as _pair
from yurthub import migrating, settings
from yurthub.certs import layout, pemfiles, sealedkeys

STAMPED = "yurthub-2026-01-02-03-04-05.pem"
SERVING = "yurthub-server-2026-01-02-03-04-05.pem"


def _yurthub_root(root: pathlib.Path) -> None:
    """What YurtHub leaves under its --root-dir (reference §7): symlinked current pairs."""
    pki = root / "pki"
    pki.mkdir(parents=True)
    (pki / "ca.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n")
    (pki / STAMPED).write_bytes(b"client cert and key\n")
    (pki / SERVING).write_bytes(b"serving cert and key\n")
    os.symlink(STAMPED, pki / "yurthub-current.pem")
    os.symlink(SERVING, pki / "yurthub-server-current.pem")
    (root / "bootstrap-hub.conf").write_text("apiVersion: v1\nkind: Config\n")
    (root / "yurthub.conf").write_text("names YurtHub's paths\n")


def _snapshot(root: pathlib.Path) -> dict[str, str | bytes]:
    return {
        str(p.relative_to(root)): (os.readlink(p) if p.is_symlink() else p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


def _migration(yurthub: pathlib.Path) -> settings.MigrationSettings:
    return settings.MigrationSettings(mode=settings.MigrationMode.AUTO, yurthub_root_dir=yurthub)


def test_yurthubs_identity_is_copied_once_and_left_alone(tmp_path: pathlib.Path) -> None:
    yurthub, own = tmp_path / "var-lib-yurthub", tmp_path / "edgehub"
    _yurthub_root(yurthub)
    before = _snapshot(yurthub)

    copied = migrating.adopt_certificates(own, _migration(yurthub))

    assert copied == [
        "pki/ca.crt",
        "pki/yurthub-current.pem",
        "pki/yurthub-server-current.pem",
        "bootstrap-hub.conf",
    ]
    found = layout.Layout(own)
    assert os.readlink(found.client_pair) == STAMPED  # the layout the identity manager keeps
    assert found.client_pair.read_bytes() == b"client cert and key\n"
    assert found.serving_pair.read_bytes() == b"serving cert and key\n"
    assert found.ca_cert.read_bytes() == (yurthub / "pki/ca.crt").read_bytes()
    assert (found.pki / STAMPED).stat().st_mode & 0o777 == 0o600
    assert not found.hub_kubeconfig.exists()  # YurtHub's names YurtHub's paths
    assert _snapshot(yurthub) == before  # rolling back finds YurtHub's files as they were

    assert migrating.adopt_certificates(own, _migration(yurthub)) == []  # it has one now


def test_a_hub_with_its_own_identity_keeps_it(tmp_path: pathlib.Path) -> None:
    yurthub, own = tmp_path / "var-lib-yurthub", tmp_path / "edgehub"
    _yurthub_root(yurthub)
    (own / "pki").mkdir(parents=True)
    (own / "pki" / "yurthub-current.pem").write_bytes(b"mine\n")

    assert migrating.adopt_certificates(own, _migration(yurthub)) == []
    assert (own / "pki" / "yurthub-current.pem").read_bytes() == b"mine\n"
    assert not (own / "pki" / "ca.crt").exists()


def test_the_same_directory_is_left_as_it_is(tmp_path: pathlib.Path) -> None:
    yurthub = tmp_path / "var-lib-yurthub"
    _yurthub_root(yurthub)
    before = _snapshot(yurthub)
    assert migrating.adopt_certificates(yurthub, _migration(yurthub)) == []
    assert _snapshot(yurthub) == before


def test_the_copied_keys_are_sealed_and_yurthubs_stay_plain(tmp_path: pathlib.Path) -> None:
    """With a data key, no plaintext copy of YurtHub's keys is made under this hub's root:
    the copies are sealed as they are written; YurtHub's files stay byte for byte."""
    yurthub, own = tmp_path / "var-lib-yurthub", tmp_path / "edgehub"
    _yurthub_root(yurthub)
    chain, key = _pair(9)
    (yurthub / "pki" / STAMPED).write_bytes(sealedkeys.pair_pem(chain, key, sealedkeys.PLAIN))
    before = _snapshot(yurthub)
    seal = sealedkeys.from_data_keys({1: os.urandom(32)}, 1)

    copied = migrating.adopt_certificates(own, _migration(yurthub), seal)

    assert "pki/yurthub-current.pem" in copied
    assert leaks([own], needles(key)) == []
    pair = pemfiles.load_pair(layout.Layout(own).client_pair, seal)
    assert pair.sealed and pair.certificate.serial_number == 9
    assert _snapshot(yurthub) == before
    # The fake serving file holds no key: copied as it is.
    assert layout.Layout(own).serving_pair.read_bytes() == b"serving cert and key\n"


def test_a_key_that_cannot_be_sealed_is_not_copied(tmp_path: pathlib.Path) -> None:
    yurthub, own = tmp_path / "var-lib-yurthub", tmp_path / "edgehub"
    _yurthub_root(yurthub)
    chain, key = _pair(10)
    (yurthub / "pki" / STAMPED).write_bytes(sealedkeys.pair_pem(chain, key, sealedkeys.PLAIN))

    copied = migrating.adopt_certificates(
        own, _migration(yurthub), sealedkeys.unavailable("no key file")
    )

    assert "pki/yurthub-current.pem" not in copied
    assert not (own / "pki" / STAMPED).exists()
