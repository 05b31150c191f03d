"""The hub's private keys sealed at rest, under the node's data key (issue 25).

PURE: keys and bytes in, bytes out; nothing is read or written here.

The pair files under ``--root-dir/pki`` (``layout``) keep their YurtHub layout, certificate
chain then key, but the key is encrypted PKCS#8 (``-----BEGIN ENCRYPTED PRIVATE KEY-----``;
``privatekeys.encrypted_pem``: PBES2 with AES-256-CBC). Its password is derived from the
node's data key, the one that seals the disk cache (``cache.keysealing``): HKDF-SHA256 of data
key *n* with the info ``edgehub hub private key v1``, 32 bytes, in hex. ``ssl`` loads such a
file with that password (``load_cert_chain(file, password=...)``), so no plaintext key is ever
written anywhere. A copy of the root directory opens nowhere else: the data key is itself
sealed by the TPM, a key file or a systemd credential that the copy does not carry.

``Seal`` is what the certificate manager, the upstream identity and the migration are given:

- ``PLAIN``: ``--cache-key-source none`` (or no key source, tools and tests): plain PEM as
  YurtHub writes it (the hub warns loudly at start);
- ``from_data_keys``: every data key of the ring (id -> password), the current one sealing;
  a key sealed under an older data key (after ``edgehub cache rotate-key``) still opens and is
  re-sealed under the current one (``stale``);
- ``unavailable(reason)``: the key source gives no key now (a key file not there): nothing
  sealed opens, and nothing is written, never a plaintext key instead.

Invariants: passwords never leave memory and are never logged; a key sealed here opens only
with a password derived from a data key of this node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.kdf import hkdf

from yurthub import privatekeys

_INFO = b"edgehub hub private key v1"


class Unavailable(ValueError):
    """The key source gives no data key now: a sealed key cannot be made (message says why)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Seal:
    """How the hub's private keys are kept on disk (see the module docstring)."""

    passwords: Mapping[int, bytes] = dataclasses.field(default_factory=dict)
    """data key id -> the password derived from it; empty: plain PEM."""
    current: int = 0
    """The data key id new keys are sealed under."""
    unavailable: str = ""
    """Why the key source gives no key ("" when it does, or when none is wanted)."""
    reset: str = ""
    """Why the data keys were started anew at this start ("" when they were not): keys sealed
    under the old ones no longer open, and one line has said so already."""

    @property
    def sealing(self) -> bool:
        return bool(self.passwords)

    def ids(self) -> tuple[int, ...]:
        """The data key ids, the current one first (the order of ``candidates``)."""
        return (self.current, *sorted(k for k in self.passwords if k != self.current))

    def candidates(self) -> tuple[bytes, ...]:
        """Passwords to try on a sealed key, the current one first."""
        if not self.passwords:
            return ()
        return tuple(self.passwords[k] for k in self.ids())

    def __repr__(self) -> str:  # never show a password
        return f"Seal(ids={sorted(self.passwords)}, current={self.current})"


PLAIN = Seal()


def password(data_key: bytes) -> bytes:
    """The password of the hub's keys sealed under ``data_key``."""
    derived = hkdf.HKDF(hashes.SHA256(), 32, salt=None, info=_INFO).derive(data_key)
    return derived.hex().encode()


def from_data_keys(keys: Mapping[int, bytes], current: int, reset: str = "") -> Seal:
    """The seal of a ring of data keys (``cache.sealing.Sealer.keys``); ``PLAIN`` for none.
    ``reset``: why the ring was started anew at this start (``Seal.reset``)."""
    if not keys:
        return PLAIN
    if current not in keys:
        raise ValueError(f"current data key {current} is not in the ring")
    return Seal({key_id: password(key) for key_id, key in keys.items()}, current, reset=reset)


def unavailable(reason: str) -> Seal:
    return Seal(unavailable=reason)


def key_pem(key: privatekeys.PrivateKey, seal: Seal) -> bytes:
    """``key`` as it goes into a pair file: sealed under the current data key, or plain PEM
    (SEC 1 for ECDSA, as client-go writes it). Raises ``Unavailable``."""
    if seal.unavailable:
        raise Unavailable(f"cannot seal the hub's private key: {seal.unavailable}")
    if seal.sealing:
        return privatekeys.encrypted_pem(key, seal.passwords[seal.current])
    form = serialization.PrivateFormat
    legacy = isinstance(key, ec.EllipticCurvePrivateKey)
    return key.private_bytes(
        serialization.Encoding.PEM,
        form.TraditionalOpenSSL if legacy else form.PKCS8,
        serialization.NoEncryption(),
    )


def pair_pem(chain: bytes, key: privatekeys.PrivateKey, seal: Seal) -> bytes:
    """Certificate chain then key, in one PEM (client-go's FileStore layout)."""
    body = chain if chain.endswith(b"\n") else chain + b"\n"
    return body + key_pem(key, seal)


def stale(key_id: int | None, seal: Seal) -> bool:
    """Whether a key read with ``key_id`` (None: plaintext) is to be written again: plaintext
    while sealing, or sealed under a data key that is not the current one."""
    return seal.sealing and key_id != seal.current
