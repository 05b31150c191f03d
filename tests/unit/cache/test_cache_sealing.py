"""Sealed cache entries (``yurthub.cache.sealing``): round trip, tamper, swap, rotation, sources."""

from __future__ import annotations

import itertools
import os
import pathlib

import pytest

from yurthub.cache import entries, keysealing, opening, sealing
from yurthub.certs import sealedkeys

KEY_A = bytes(range(32))
KEY_B = bytes(range(1, 33))
NAME = "kubelet/secrets.v1.core/default/db"


def _counter() -> sealing.Sealer:
    counter = itertools.count()
    return sealing.Sealer({1: KEY_A}, 1, lambda n: next(counter).to_bytes(n, "big"))


def _value() -> bytes:
    entry = entries.Entry("7", 7, "Secret", "v1", {"app": "db"}, {}, frozenset({""}), 10)
    return entries.encode_object(entry, b'{"data":{"password":"aHVudGVyMg=="}}')


def test_round_trip_keeps_the_entry_as_written() -> None:
    sealer = _counter()
    sealed = sealer.seal(NAME, _value())
    assert sealing.is_sealed(sealed)
    assert sealing.key_id_of(sealed) == 1
    assert b"aHVudGVyMg" not in sealed and b"app" not in sealed
    assert sealer.unseal(NAME, sealed) == _value()
    entry, body = entries.decode_object(sealer.unseal(NAME, sealed))
    assert entry.labels == {"app": "db"} and body.startswith(b'{"data"')


def test_two_seals_of_one_value_differ() -> None:
    sealer = _counter()
    assert sealer.seal(NAME, _value()) != sealer.seal(NAME, _value())


@pytest.mark.parametrize("offset", [4, 6, 12, 20, -1])
def test_any_changed_byte_fails_authentication(offset: int) -> None:
    sealer = _counter()
    sealed = bytearray(sealer.seal(NAME, _value()))
    sealed[offset] ^= 0x01
    with pytest.raises(sealing.SealError):
        sealer.unseal(NAME, bytes(sealed))


def test_a_value_moved_to_another_key_fails() -> None:
    sealer = _counter()
    sealed = sealer.seal(NAME, _value())
    with pytest.raises(sealing.SealError, match="authentication"):
        sealer.unseal("kubelet/configmaps.v1.core/default/db", sealed)


def test_another_data_key_fails() -> None:
    sealed = _counter().seal(NAME, _value())
    other = sealing.Sealer({1: KEY_B}, 1, bytes)
    with pytest.raises(sealing.SealError, match="authentication"):
        other.unseal(NAME, sealed)


def test_rotation_reads_old_writes_new_and_marks_old_stale() -> None:
    old = _counter()
    sealed_old = old.seal(NAME, _value())
    both = sealing.Sealer({1: KEY_A, 2: KEY_B}, 2, lambda n: b"\x01" * n)
    assert both.unseal(NAME, sealed_old) == _value()
    assert both.stale(sealed_old)
    sealed_new = both.seal(NAME, _value())
    assert sealing.key_id_of(sealed_new) == 2 and not both.stale(sealed_new)
    only_new = sealing.Sealer({2: KEY_B}, 2, bytes)
    with pytest.raises(sealing.SealError, match="data key 1"):
        only_new.unseal(NAME, sealed_old)
    assert only_new.unseal(NAME, sealed_new) == _value()


def test_plaintext_is_refused_by_a_sealed_cache_except_while_migrating() -> None:
    sealer = _counter()
    with pytest.raises(sealing.SealError, match="plaintext"):
        sealer.unseal(NAME, _value())
    assert sealer.unseal(NAME, _value(), strict=False) == _value()
    assert sealer.stale(_value())


def test_plain_writes_plaintext_and_cannot_read_sealed() -> None:
    assert sealing.PLAIN.seal(NAME, _value()) == _value()
    assert sealing.PLAIN.unseal(NAME, _value()) == _value()
    assert not sealing.PLAIN.stale(_value())
    with pytest.raises(sealing.SealError):
        sealing.PLAIN.unseal(NAME, _counter().seal(NAME, _value()))


def test_a_seal_error_is_a_corrupt_entry() -> None:
    # The store's readers drop what fails, as they drop a row whose CRC fails.
    assert issubclass(sealing.SealError, entries.CorruptEntry)


@pytest.mark.parametrize(
    ("keys", "current"), [({1: b"short"}, 1), ({1: KEY_A}, 2), ({70000: KEY_A}, 70000)]
)
def test_bad_key_rings_are_refused(keys: dict[int, bytes], current: int) -> None:
    with pytest.raises(ValueError):
        sealing.Sealer(keys, current, bytes)


@pytest.mark.parametrize(
    ("text", "key_file", "want"),
    [
        ("auto", "", sealing.Source(sealing.Kind.AUTO)),
        ("", "/k", sealing.Source(sealing.Kind.AUTO, pathlib.Path("/k"))),
        ("none", "/k", sealing.Source(sealing.Kind.NONE)),
        ("keyfile:/a/b", "", sealing.Source(sealing.Kind.KEYFILE, pathlib.Path("/a/b"))),
        ("keyfile", "/k", sealing.Source(sealing.Kind.KEYFILE, pathlib.Path("/k"))),
        ("systemd-creds", "", sealing.Source(sealing.Kind.SYSTEMD)),
        ("systemd-creds:hub", "", sealing.Source(sealing.Kind.SYSTEMD, credential="hub")),
    ],
)
def test_key_sources_parse(text: str, key_file: str, want: sealing.Source) -> None:
    assert sealing.parse_source(text, key_file) == want


@pytest.mark.parametrize("text", ["keyfile", "systemd-creds:../x", "tpm2", "plain"])
def test_bad_key_sources_are_named(text: str) -> None:
    with pytest.raises(sealing.KeySourceError, match="cache-key-source"):
        sealing.parse_source(text)


def test_body_opens_and_checks_like_unseal_then_body_of() -> None:
    sealer = _counter()
    sealed = sealer.seal(NAME, _value())
    assert sealer.body(NAME, sealed) == entries.body_of(_value())
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(sealing.SealError, match="authentication"):
        sealer.body(NAME, tampered)
    with pytest.raises(sealing.SealError):
        sealer.body("kubelet/secrets.v1.core/default/other", sealed)
    with pytest.raises(sealing.SealError, match="plaintext"):
        sealer.body(NAME, _value())
    assert sealing.PLAIN.body(NAME, _value()) == entries.body_of(_value())
    with pytest.raises(sealing.SealError):
        sealing.PLAIN.body(NAME, sealed)


def test_tpm_sources_parse() -> None:
    assert sealing.parse_source("tpm") == sealing.Source(sealing.Kind.TPM)
    assert sealing.parse_source("tpm:swtpm:host=127.0.0.1,port=2321") == sealing.Source(
        sealing.Kind.TPM, tcti="swtpm:host=127.0.0.1,port=2321"
    )


def test_an_authenticated_header_decodes_without_its_crc() -> None:
    value = _value()
    assert entries.decode_header(value, authenticated=True) == entries.decode_header(value)
    with pytest.raises(entries.CorruptEntry):
        entries.decode_header(b"EHS1" + value[4:], authenticated=True)


def test_no_repr_shows_a_key() -> None:
    """A data key or the key that seals it in a log line, an assertion message or a traceback's
    locals would undo the sealing: the reprs name ids and sources only."""
    data, other, kek = b"\x11" * 32, b"\x22" * 32, b"\x33" * 32
    sealer = sealing.Sealer({1: data, 2: other}, 2, os.urandom)
    ring = keysealing.Ring({1: data, 2: other}, 2)
    wrapping = keysealing.Kek(kek, "key file /k")
    keys = opening.Keys(sealer, ring, wrapping)
    seal = sealedkeys.from_data_keys(ring.keys, ring.current)
    shown = " ".join(repr(x) for x in (sealer, ring, wrapping, keys, seal))
    assert "ids=[1, 2]" in shown and "key file /k" in shown
    for secret in (data, other, kek, *seal.passwords.values()):
        for form in (repr(secret), secret.hex(), secret.decode("latin-1")):
            assert form not in shown
