"""Private keys in PEM: found in a file, opened (encrypted or not), encrypted for ``ssl``.

PURE: bytes in, keys and bytes out; one-time passwords come from the ``random`` callable given.

Python's ``ssl`` loads a private key only from a file. A key the hub holds in memory (an inline
``client-key-data``, a key just opened) is therefore written for it as encrypted PKCS#8
(``ssl_pem``: PBES2, AES-256-CBC, a one-time 256-bit password) so that no plaintext key ever
goes to a file; a key already encrypted on disk (``certs.sealedkeys``) is handed to ``ssl``
with the password that opens it (``password_for``).

PBES2 is not an authenticated encryption: changed bytes are caught by what follows (the DER must
parse as a key, and callers check that it matches its certificate's public key).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey

ENCRYPTED = b"-----BEGIN ENCRYPTED PRIVATE KEY-----"
_MARKERS = (
    ENCRYPTED,
    b"-----BEGIN EC PRIVATE KEY-----",
    b"-----BEGIN PRIVATE KEY-----",
    b"-----BEGIN RSA PRIVATE KEY-----",
)
_ONE_TIME = 32


class BadKey(ValueError):
    """A key block that does not open (message says why, never the key)."""


class Locked(BadKey):
    """An encrypted key and no password given opens it."""


def key_block(data: bytes) -> bytes | None:
    """The first complete private-key PEM block in ``data`` (a pair file: certificates then the
    key), with its END line; None when there is none (or it is cut short)."""
    found = [(data.find(m), m) for m in _MARKERS]
    found = [(at, m) for at, m in found if at >= 0]
    if not found:
        return None
    start, marker = min(found)
    end_marker = marker.replace(b"BEGIN", b"END")
    end = data.find(end_marker, start)
    if end < 0:
        return None
    return data[start : end + len(end_marker)] + b"\n"


def is_encrypted(block: bytes) -> bool:
    return block.startswith(ENCRYPTED)


def open_key(block: bytes, passwords: Sequence[bytes] = ()) -> tuple[PrivateKey, int]:
    """The key in ``block`` and the index in ``passwords`` of the one that opened it (-1 for a
    plaintext key). Raises ``Locked`` (encrypted, nothing given opens it) or ``BadKey``."""
    if is_encrypted(block):
        if not passwords:
            raise Locked("the private key is encrypted and no password is given")
        for index, password in enumerate(passwords):
            try:
                key = serialization.load_pem_private_key(block, password=password)
            except (ValueError, TypeError):
                continue
            return _checked(key), index
        raise Locked("the private key does not open with any password given")
    try:
        key = serialization.load_pem_private_key(block, password=None)
    except (ValueError, TypeError) as e:
        raise BadKey("the private key does not load (half-written?)") from e
    return _checked(key), -1


def _checked(key: object) -> PrivateKey:
    if not isinstance(
        key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey
    ):
        raise BadKey(f"unsupported private key type {type(key).__name__}")
    return key


def encrypted_pem(key: PrivateKey, password: bytes) -> bytes:
    """``key`` as encrypted PKCS#8 PEM (PBES2: PBKDF2-HMAC-SHA256 and AES-256-CBC)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(password),
    )


def ssl_pem(
    block: bytes,
    passwords: Sequence[bytes] = (),
    random: Callable[[int], bytes] = secrets.token_bytes,
) -> tuple[bytes, bytes]:
    """(PEM, password) to write to a file for ``ssl.SSLContext.load_cert_chain``: an encrypted
    key as it is with the password that opens it; a plaintext one encrypted with a one-time
    password. Raises ``BadKey``."""
    key, index = open_key(block, passwords)
    if index >= 0:
        return block, passwords[index]
    password = random(_ONE_TIME).hex().encode()
    return encrypted_pem(key, password), password
