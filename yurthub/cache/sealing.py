"""Cache entries sealed at rest: AES-256-GCM over each stored value, bound to its key.

PURE: bytes in, bytes out; the nonces come from the ``random`` callable given (``os.urandom``
in the hub), the data keys from ``keysealing``.

A sealed value is ``SEALED_MAGIC | u16 key id | 12-byte nonce | AES-GCM(value) | 16-byte tag``,
where ``value`` is the whole plaintext entry (``entries``: ``MAGIC | CRC | header | body``, the
header holding labels, so it is sealed too). The associated data is the magic, the key id and
the entry's cache key: a sealed value moved to another key (a Secret's bytes under a ConfigMap's
name) fails authentication, as does one flipped bit anywhere. The key id names which data key
sealed it, so several coexist while a rotation re-encrypts (``Sealer.stale``).

Invariants:

- A ``Sealer`` with no keys (``PLAIN``) writes plaintext entries as before and refuses sealed
  ones (it cannot read them). A sealing one writes only sealed values; ``unseal`` refuses a
  plaintext value (``strict``) except while migrating at open, which rewrites every plaintext
  entry sealed (``opening``).
- Nonces are random 96-bit per value: with at most a few million writes per data key between
  rotations, the chance of a repeat is negligible (NIST's bound is 2**32 values per key).
- ``unseal`` returns the plaintext entry unchanged in layout: every decoder in ``entries`` reads
  it as before; the CRC inside it stays a check against a failing disk, the tag is the check
  against someone else's bytes.

Danger: cache *keys* (component, resource, namespace, name) stay plaintext in SQLite's index:
they say which objects exist, never what they hold.
"""

from __future__ import annotations

import dataclasses
import enum
import pathlib
import struct
from collections.abc import Callable, Mapping

from cryptography import exceptions
from cryptography.hazmat.primitives.ciphers import aead

from yurthub.cache import entries

SEALED_MAGIC = b"EHS1"
_ID = struct.Struct(">H")
_NONCE = 12
_TAG = 16
_PREFIX = len(SEALED_MAGIC) + _ID.size
_HEAD = _PREFIX + _NONCE
KEY_BYTES = 32
MAX_KEY_ID = 0xFFFF


class SealError(entries.CorruptEntry):
    """A sealed value that does not open: another data key, another cache key, changed bytes."""


def is_sealed(value: bytes) -> bool:
    return value[: len(SEALED_MAGIC)] == SEALED_MAGIC


def key_id_of(value: bytes) -> int:
    """The key id of a sealed value; -1 for a value that is not sealed (or is truncated)."""
    if not is_sealed(value) or len(value) < _PREFIX:
        return -1
    (key_id,) = _ID.unpack_from(value, len(SEALED_MAGIC))
    return int(key_id)


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Sealer:
    """Seals with the ``current`` data key, opens with any of ``keys`` (id -> 32 bytes).

    No keys: plaintext (the ``none`` key source). Its repr never shows a key."""

    keys: Mapping[int, bytes] = dataclasses.field(repr=False)
    current: int
    random: Callable[[int], bytes]
    _ciphers: dict[int, aead.AESGCM] = dataclasses.field(init=False, repr=False)
    read_body: Callable[[str, bytes], bytes] = dataclasses.field(init=False, repr=False)
    """``body`` as one closure (``_body_reader``): what the reader threads call per row."""

    def __repr__(self) -> str:
        return f"Sealer(ids={sorted(self.keys)}, current={self.current})"

    def __post_init__(self) -> None:
        for key_id, key in self.keys.items():
            if not 0 <= key_id <= MAX_KEY_ID:
                raise ValueError(f"key id {key_id} out of range")
            if len(key) != KEY_BYTES:
                raise ValueError(f"data key {key_id} is not {KEY_BYTES} bytes")
        if self.keys and self.current not in self.keys:
            raise ValueError(f"current key id {self.current} has no key")
        object.__setattr__(
            self, "_ciphers", {key_id: aead.AESGCM(key) for key_id, key in self.keys.items()}
        )
        object.__setattr__(self, "read_body", self._body_reader())

    @property
    def sealing(self) -> bool:
        return bool(self.keys)

    def seal(self, key: str, value: bytes) -> bytes:
        """The value to store under ``key``: sealed with the current data key (as is for
        ``PLAIN``)."""
        if not self.keys:
            return value
        prefix = SEALED_MAGIC + _ID.pack(self.current)
        nonce = self.random(_NONCE)
        sealed = self._ciphers[self.current].encrypt(nonce, value, prefix + key.encode())
        return b"".join((prefix, nonce, sealed))

    def unseal(self, key: str, value: bytes, *, strict: bool = True) -> bytes:
        """The plaintext entry stored under ``key``. Raises ``SealError`` for a sealed value that
        does not open (or any sealed value for ``PLAIN``), and, when ``strict``, for a plaintext
        value in a sealed cache (nothing but the migration at open may read one)."""
        # The hot path of every offline list (one call per object): a handful of C calls.
        if value[:4] != SEALED_MAGIC:
            if self.keys and strict:
                raise SealError("a plaintext entry in a sealed cache")
            return value
        if len(value) < _HEAD + _TAG:
            raise SealError("truncated sealed entry")
        cipher = self._ciphers.get(int.from_bytes(value[4:_PREFIX], "big"))
        if cipher is None:
            raise SealError(
                f"sealed under data key {key_id_of(value)}, which this hub does not hold"
            )
        try:
            return cipher.decrypt(
                value[_PREFIX:_HEAD], value[_HEAD:], value[:_PREFIX] + key.encode()
            )
        except exceptions.InvalidTag as e:
            raise SealError("sealed entry fails authentication (another key, or changed)") from e

    def body(self, key: str, value: bytes) -> bytes:
        """The checked body of the object entry stored under ``key`` (``entries.body_of`` of
        ``unseal``): the hot path of offline lists. A sealed entry's tag authenticated every
        byte, so its CRC is not computed again. Raises ``CorruptEntry``."""
        return self.read_body(key, value)

    def _body_reader(self) -> Callable[[str, bytes], bytes]:
        """``body`` as one closure over the current data key: per entry, one comparison, the
        decryption and a slice (``entries.body_span``). Anything else (another data key, a
        plaintext or truncated value) takes ``_slow_body``, which says what is wrong."""
        if not self.keys:
            return self._plain_body
        prefix = SEALED_MAGIC + _ID.pack(self.current)
        decrypt = self._ciphers[self.current].decrypt
        body_start = entries.body_start_unchecked
        slow = self._slow_body
        minimum = _HEAD + _TAG

        def body(key: str, value: bytes) -> bytes:
            if value[:_PREFIX] != prefix or len(value) < minimum:
                return slow(key, value)
            try:
                plain = decrypt(value[_PREFIX:_HEAD], value[_HEAD:], prefix + key.encode())
            except exceptions.InvalidTag as e:
                raise SealError(
                    "sealed entry fails authentication (another key, or changed)"
                ) from e
            return plain[body_start(plain) :]

        return body

    def _plain_body(self, key: str, value: bytes) -> bytes:
        if value[:4] == SEALED_MAGIC:
            raise SealError("a sealed entry, and this hub holds no data key")
        return entries.body_of(value)

    def _slow_body(self, key: str, value: bytes) -> bytes:
        return entries.body_after_header(self.unseal(key, value))  # raises, naming why

    def stale(self, value: bytes) -> bool:
        """True when ``value`` should be rewritten: plaintext in a sealed cache, or sealed with a
        data key that is not the current one (rotation)."""
        if not self.keys:
            return False
        return key_id_of(value) != self.current


PLAIN = Sealer({}, 0, bytes)
"""No sealing: the ``none`` key source (a constant, not state: it holds no key)."""


# --- --cache-key-source ------------------------------------------------------------------

DEFAULT_CREDENTIAL = "edgehub-cache-key"


class KeySourceError(ValueError):
    """A ``--cache-key-source`` that does not parse, or a KEK that cannot be had."""


class Kind(enum.StrEnum):
    AUTO = "auto"
    NONE = "none"
    KEYFILE = "keyfile"
    SYSTEMD = "systemd-creds"
    TPM = "tpm"


@dataclasses.dataclass(frozen=True, slots=True)
class Source:
    """A parsed ``--cache-key-source`` (PURE: nothing is read)."""

    kind: Kind = Kind.AUTO
    path: pathlib.Path | None = None
    """``keyfile``: the KEK file (for ``auto``: ``--cache-key-file``, when given)."""
    credential: str = DEFAULT_CREDENTIAL
    """``systemd-creds``: the credential's name."""
    tcti: str = ""
    """``tpm``: the TCTI of the TPM (``device:/dev/tpmrm0`` when empty)."""


def parse_source(text: str, key_file: str = "") -> Source:
    """PURE. ``--cache-key-source`` (and ``--cache-key-file``) as a ``Source``."""
    text = text.strip()
    file = pathlib.Path(key_file) if key_file else None
    if text in ("", "auto"):
        return Source(Kind.AUTO, file)
    if text == "none":
        return Source(Kind.NONE)
    if text == "keyfile" or text.startswith("keyfile:"):
        path = text.partition(":")[2] or key_file
        if not path:
            raise KeySourceError("--cache-key-source keyfile needs a path (keyfile:<path>)")
        return Source(Kind.KEYFILE, pathlib.Path(path))
    if text == "systemd-creds" or text.startswith("systemd-creds:"):
        name = text.partition(":")[2] or DEFAULT_CREDENTIAL
        if "/" in name or name in (".", ".."):
            raise KeySourceError(f"--cache-key-source: bad credential name {name!r}")
        return Source(Kind.SYSTEMD, credential=name)
    if text == "tpm" or text.startswith("tpm:"):
        return Source(Kind.TPM, tcti=text.partition(":")[2])
    raise KeySourceError(
        f"--cache-key-source {text!r}: want auto, none, tpm[:<tcti>], keyfile:<path> or"
        " systemd-creds:<name>"
    )
