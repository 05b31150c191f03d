"""The hub's private keys sealed under the node's data key (``sealedkeys``, ``privatekeys``)."""

from __future__ import annotations

import datetime
import pathlib
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from yurthub import privatekeys
from yurthub.certs import sealedkeys

ONE, TWO = bytes(range(32)), bytes(range(1, 33))


def _pair() -> tuple[bytes, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "system:node:n")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(7)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), key


def _scalar(key: privatekeys.PrivateKey) -> int:
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key.private_numbers().private_value


def test_the_password_is_derived_from_the_data_key_and_differs_per_key() -> None:
    assert sealedkeys.password(ONE) == sealedkeys.password(ONE)
    assert sealedkeys.password(ONE) != sealedkeys.password(TWO)
    assert len(sealedkeys.password(ONE)) == 64  # 32 bytes, hex
    assert ONE.hex().encode() not in sealedkeys.password(ONE)


@pytest.mark.parametrize(
    ("keys", "current", "ids"),
    [
        ({}, 0, ()),
        ({1: ONE}, 1, (1,)),
        ({1: ONE, 3: TWO}, 3, (3, 1)),
        ({2: TWO, 1: ONE}, 1, (1, 2)),
    ],
)
def test_candidates_put_the_current_key_first(
    keys: dict[int, bytes], current: int, ids: tuple[int, ...]
) -> None:
    seal = sealedkeys.from_data_keys(keys, current)
    assert seal.sealing is bool(keys)
    assert seal.candidates() == tuple(sealedkeys.password(keys[i]) for i in ids)
    if keys:
        assert seal.ids() == ids


@pytest.mark.parametrize(
    ("key_id", "seal", "stale"),
    [
        (None, sealedkeys.PLAIN, False),  # plain PEM wanted and found
        (None, sealedkeys.from_data_keys({1: ONE}, 1), True),  # plaintext: seal it
        (1, sealedkeys.from_data_keys({1: ONE}, 1), False),
        (1, sealedkeys.from_data_keys({1: ONE, 2: TWO}, 2), True),  # after a rotation
        (None, sealedkeys.unavailable("no key file"), False),  # nothing can be written
    ],
)
def test_stale(key_id: int | None, seal: sealedkeys.Seal, stale: bool) -> None:
    assert sealedkeys.stale(key_id, seal) is stale


def test_a_sealed_pair_opens_only_with_its_data_key_and_ssl_loads_it(
    tmp_path: pathlib.Path,
) -> None:
    chain, key = _pair()
    seal = sealedkeys.from_data_keys({1: ONE}, 1)
    pem = sealedkeys.pair_pem(chain, key, seal)
    block = privatekeys.key_block(pem)
    assert block is not None and privatekeys.is_encrypted(block)
    opened, index = privatekeys.open_key(block, seal.candidates())
    assert index == 0 and _scalar(opened) == _scalar(key)
    with pytest.raises(privatekeys.Locked):
        privatekeys.open_key(block, sealedkeys.from_data_keys({1: TWO}, 1).candidates())
    with pytest.raises(privatekeys.Locked):
        privatekeys.open_key(block)
    # An older data key still opens it (a rotation in progress): index names which.
    rotated = sealedkeys.from_data_keys({1: ONE, 2: TWO}, 2)
    assert privatekeys.open_key(block, rotated.candidates())[1] == 1
    # ssl reads certificate and key from the one file, with the password.
    path = tmp_path / "pair.pem"
    path.write_bytes(pem)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_cert_chain(str(path), password=seal.candidates()[0])
    with pytest.raises(ssl.SSLError):
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(str(path), password=b"x" * 64)


def test_plain_pem_is_what_client_go_writes_and_unavailable_writes_nothing() -> None:
    chain, key = _pair()
    pem = sealedkeys.pair_pem(chain, key, sealedkeys.PLAIN)
    assert b"-----BEGIN EC PRIVATE KEY-----" in pem and pem.startswith(chain)
    with pytest.raises(sealedkeys.Unavailable, match="no key file"):
        sealedkeys.pair_pem(chain, key, sealedkeys.unavailable("no key file"))
    assert "ONE" not in repr(sealedkeys.from_data_keys({1: ONE}, 1))
    assert sealedkeys.password(ONE).decode() not in repr(sealedkeys.from_data_keys({1: ONE}, 1))


@pytest.mark.parametrize(
    ("cut", "found"),
    [
        (lambda pem: pem, True),
        (lambda pem: pem[: pem.index(b"-----END")], False),  # no END line yet
        (lambda pem: pem[: pem.index(b"-----BEGIN EC")], False),  # no key yet
    ],
)
def test_key_block_finds_only_a_complete_block(cut: object, found: bool) -> None:
    chain, key = _pair()
    pem = sealedkeys.pair_pem(chain, key, sealedkeys.PLAIN)
    assert callable(cut)
    assert (privatekeys.key_block(cut(pem)) is not None) is found


def test_ssl_pem_never_hands_out_a_plaintext_key(tmp_path: pathlib.Path) -> None:
    chain, key = _pair()
    plain = privatekeys.key_block(sealedkeys.pair_pem(chain, key, sealedkeys.PLAIN))
    assert plain is not None
    pem, password = privatekeys.ssl_pem(plain, random=lambda n: b"\x01" * n)
    assert privatekeys.is_encrypted(pem) and password == (b"\x01" * 32).hex().encode()
    (tmp_path / "c.pem").write_bytes(chain)
    (tmp_path / "k.pem").write_bytes(pem)
    ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(
        str(tmp_path / "c.pem"), str(tmp_path / "k.pem"), password=password
    )
    seal = sealedkeys.from_data_keys({1: ONE}, 1)
    sealed = privatekeys.key_block(sealedkeys.pair_pem(chain, key, seal))
    assert sealed is not None
    assert privatekeys.ssl_pem(sealed, seal.candidates()) == (sealed, seal.candidates()[0])
