"""Pair files with sealed keys on disk (``pemfiles``): loaded with the seal, re-sealed in place
with every plaintext key file removed securely, written back plain for a rollback."""

from __future__ import annotations

import datetime
import os
import pathlib

import pytest
from identity_keys import leaks, needles
from identity_keys import pair as _pair

from yurthub import atomicfiles
from yurthub.certs import layout, pemfiles, sealedkeys

ONE, TWO = os.urandom(32), os.urandom(32)
PREFIX = layout.CLIENT_PREFIX
T0 = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def test_a_plaintext_pair_and_its_history_are_resealed_and_the_plaintext_overwritten(
    tmp_path: pathlib.Path,
) -> None:
    pki = tmp_path / "pki"
    old_chain, old_key = _pair(1)
    chain, key = _pair(2)
    pemfiles.write_pair(pki, PREFIX, sealedkeys.pair_pem(old_chain, old_key, sealedkeys.PLAIN), T0)
    stamped = pemfiles.write_pair(
        pki, PREFIX, sealedkeys.pair_pem(chain, key, sealedkeys.PLAIN), T0
    )
    # A hard link shows what happens to the file's blocks once its name is gone.
    witness = tmp_path / "witness"
    os.link(stamped, witness)
    current = pki / layout.current_name(PREFIX)
    pair = pemfiles.load_pair(current)
    assert not pair.sealed and pair.password is None
    assert leaks([pki], needles(key) + needles(old_key))

    seal = sealedkeys.from_data_keys({1: ONE}, 1)
    resealed = pemfiles.reseal(pki, PREFIX, pair, seal, T0 + datetime.timedelta(hours=1))

    assert resealed.sealed and resealed.key_id == 1 and resealed.password is not None
    assert resealed.certificate.serial_number == 2
    assert resealed.written == pair.written  # the renewal deadline does not move
    assert leaks([pki], needles(key) + needles(old_key)) == []
    assert witness.read_bytes() == bytes(len(witness.read_bytes()))  # zeroed, then unlinked
    assert not stamped.exists()
    with pytest.raises(pemfiles.SealedKeyError) as raised:
        pemfiles.load_pair(current)
    assert raised.value.foreign
    with pytest.raises(pemfiles.SealedKeyError, match="does not hold") as raised:
        pemfiles.load_pair(current, sealedkeys.from_data_keys({1: TWO}, 1))
    assert raised.value.foreign
    with pytest.raises(pemfiles.SealedKeyError, match="gives no key now") as raised:
        pemfiles.load_pair(current, sealedkeys.unavailable("no key file"))
    assert not raised.value.foreign

    # A rotation: the older data key opens it, and it is sealed again under the new one.
    rotated = sealedkeys.from_data_keys({1: ONE, 2: TWO}, 2)
    under_old = pemfiles.load_pair(current, rotated)
    assert under_old.key_id == 1 and sealedkeys.stale(under_old.key_id, rotated)
    again = pemfiles.reseal(pki, PREFIX, under_old, rotated, T0 + datetime.timedelta(hours=2))
    assert again.key_id == 2
    assert pemfiles.load_pair(current, sealedkeys.from_data_keys({2: TWO}, 2)).key_id == 2


def test_a_plain_file_in_place_of_the_link_is_overwritten_once_replaced(
    tmp_path: pathlib.Path,
) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    chain, key = _pair(3)
    current = pki / layout.current_name(PREFIX)
    current.write_bytes(sealedkeys.pair_pem(chain, key, sealedkeys.PLAIN))
    witness = tmp_path / "witness"
    os.link(current, witness)
    seal = sealedkeys.from_data_keys({1: ONE}, 1)
    resealed = pemfiles.reseal(pki, PREFIX, pemfiles.load_pair(current), seal, T0)
    assert current.is_symlink() and resealed.sealed
    assert witness.read_bytes() == bytes(len(witness.read_bytes()))
    assert leaks([pki], needles(key)) == []


def test_unseal_writes_plain_pem_back_for_yurthub(tmp_path: pathlib.Path) -> None:
    pki = tmp_path / "pki"
    chain, key = _pair(4)
    seal = sealedkeys.from_data_keys({1: ONE}, 1)
    pemfiles.write_pair(pki, PREFIX, sealedkeys.pair_pem(chain, key, seal), T0)
    plain = pemfiles.unseal(pki, PREFIX, seal, T0 + datetime.timedelta(seconds=1))
    assert plain is not None and not plain.sealed
    assert b"-----BEGIN EC PRIVATE KEY-----" in plain.pem
    assert pemfiles.unseal(pki, PREFIX, seal, T0) is None  # already plain


def test_remove_securely_zeroes_the_blocks_and_never_follows_a_link(
    tmp_path: pathlib.Path,
) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"s3cr3t" * 20000)
    witness = tmp_path / "witness"
    os.link(secret, witness)
    link = tmp_path / "link"
    os.symlink(witness, link)
    with pytest.raises(OSError):
        atomicfiles.remove_securely(link)
    assert witness.read_bytes() == b"s3cr3t" * 20000
    atomicfiles.remove_securely(secret)
    assert not secret.exists()
    assert witness.read_bytes() == bytes(120000)
