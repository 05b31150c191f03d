"""The cache's data keys, and what seals them: ``--cache-key-source``.

BLOCKING file I/O: call from the cache's open executor (``opening``), or the CLI.

The cache's values are sealed with a random 32-byte data key (``sealing``). The data key is kept
in ``cache.key`` beside the database (0600), itself sealed (AES-256-GCM) under a key-encrypting
key (KEK) that is *not* in the cache directory:

- ``keyfile:<path>``: 32 bytes in a file the operator keeps on another medium (refused when
  group- or world-readable, or not 32 bytes; ``head -c 32 /dev/urandom``);
- ``systemd-creds:<name>``: ``$CREDENTIALS_DIRECTORY/<name>`` (systemd's ``LoadCredential=`` or
  ``LoadCredentialEncrypted=``), 32 bytes;
- ``tpm[:<tcti>]``: a random KEK sealed to the node's TPM 2.0 (``tpmsealing``);
- ``none``: no sealing, plaintext entries as before, and a loud warning (``UNSEALED_WARNING``);
- ``auto`` (the default): the TPM when there is one (``/dev/tpmrm0`` or ``$TPM2TOOLS_TCTI``,
  with ``tpm2-tools`` installed) and it works, or it already seals this cache's key; else the
  systemd credential ``edgehub-cache-key`` when systemd passed one, else ``--cache-key-file``
  when given, else ``none``.

``cache.key`` is JSON: ``{"version": 1, "current": <id>, "keys": {"<id>": "<base64 nonce |
sealed key>"}}``; each data key is sealed with its id as associated data. A cache directory
copied to another machine holds ``cache.key`` but not the KEK: nothing in it opens there.

Rotation (``rotated``) adds a data key and makes it current; the hub rewrites the entries of the
older keys at its next open (``opening``) and then drops them from ``cache.key``.

Invariants: the data key never leaves memory unsealed; no KEK or data key is ever logged;
``cache.key`` is written atomically (temp, fsync, rename, fsync the directory) with mode 0600.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import logging
import os
import pathlib
import stat
from collections.abc import Callable, Mapping

import orjson
from cryptography import exceptions
from cryptography.hazmat.primitives.ciphers import aead

from yurthub import atomicfiles
from yurthub.cache import sealing, tpmsealing

logger = logging.getLogger(__name__)

KEY_FILE = "cache.key"
_WRAP_AAD = b"edgehub cache data key "
_MAX_KEK_FILE = 4096
UNSEALED_WARNING = (
    "the disk cache is not sealed: anyone who copies {path} reads every cached Secret{also}"
    " (set --cache-key-source)"
)


KeySourceError = sealing.KeySourceError
Kind = sealing.Kind
Source = sealing.Source
parse_source = sealing.parse_source
DEFAULT_CREDENTIAL = sealing.DEFAULT_CREDENTIAL


class Unsealable(KeySourceError):
    """``cache.key`` exists but does not open with this KEK (another machine's, or changed)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Kek:
    """The key-encrypting key a source gave, and what to call it in logs (never the bytes: its
    repr leaves them out)."""

    key: bytes = dataclasses.field(repr=False)
    describe: str


def resolve(
    source: Source,
    environ: Mapping[str, str],
    directory: pathlib.Path | None = None,
    *,
    create: bool = True,
    random: Callable[[int], bytes] = os.urandom,
) -> Kek | None:
    """The KEK of ``source``; None for ``none`` (and ``auto`` with nothing to seal with).
    Raises ``KeySourceError`` naming the file when the source was named but gives no key, and
    ``Unsealable`` for TPM blobs in ``directory`` that this TPM does not open. A TPM key is
    made (and its blobs written into ``directory``) when there is none yet and ``create``."""
    if source.kind is Kind.NONE:
        return None
    tcti = source.tcti if source.kind is Kind.TPM else ""
    if source.kind is Kind.AUTO:
        tcti = tpmsealing.present(environ)
    if source.kind is Kind.TPM or tcti:
        if directory is None:
            raise KeySourceError("a TPM-sealed key needs the cache directory")
        try:
            key = tpmsealing.kek(directory, tcti, random, create=create)
        except tpmsealing.TpmUnsealable as e:
            raise Unsealable(str(e)) from e
        except tpmsealing.TpmError as e:
            # ``auto`` tries the TPM only while nothing is sealed to it yet: a TPM that seals
            # this cache's key and fails is an error, never a silent switch to another key.
            if source.kind is Kind.TPM or tpmsealing.has_blobs(directory):
                raise
            logger.warning("cache key source auto: the TPM at %s is not usable (%s)", tcti, e)
        else:
            return Kek(key, f"TPM at {tcti or tpmsealing.DEVICE_TCTI}")
    if source.kind in (Kind.SYSTEMD, Kind.AUTO):
        creds = environ.get("CREDENTIALS_DIRECTORY", "")
        credential = pathlib.Path(creds) / source.credential if creds else None
        if credential is not None and (source.kind is Kind.SYSTEMD or credential.is_file()):
            return Kek(_read_kek(credential, check_mode=False), f"systemd credential {credential}")
        if source.kind is Kind.SYSTEMD:
            raise KeySourceError(
                f"systemd credential {source.credential}: $CREDENTIALS_DIRECTORY is not set"
            )
    if source.path is not None:
        return Kek(_read_kek(source.path, check_mode=True), f"key file {source.path}")
    return None


def _read_kek(path: pathlib.Path, *, check_mode: bool) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise KeySourceError(f"cache key {path}: {e.strerror}") from e
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise KeySourceError(f"cache key {path}: not a regular file")
        if check_mode and stat.S_IMODE(info.st_mode) & 0o077:
            raise KeySourceError(
                f"cache key {path}: mode {stat.S_IMODE(info.st_mode):04o} lets others read it"
                " (want 0600 or 0400)"
            )
        data = os.read(fd, _MAX_KEK_FILE)
    finally:
        os.close(fd)
    if len(data) != sealing.KEY_BYTES:
        raise KeySourceError(
            f"cache key {path}: holds {len(data)} bytes, want {sealing.KEY_BYTES} raw bytes"
            " (head -c 32 /dev/urandom)"
        )
    return data


# --- cache.key ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Ring:
    """The data keys of one cache (id -> key) and the current one (its repr shows the ids
    only)."""

    keys: Mapping[int, bytes] = dataclasses.field(repr=False)
    current: int

    def __repr__(self) -> str:
        return f"Ring(ids={sorted(self.keys)}, current={self.current})"

    def sealer(self, random: Callable[[int], bytes]) -> sealing.Sealer:
        return sealing.Sealer(dict(self.keys), self.current, random)


def _wrap(kek: bytes, key_id: int, key: bytes, random: Callable[[int], bytes]) -> str:
    nonce = random(12)
    sealed = aead.AESGCM(kek).encrypt(nonce, key, _WRAP_AAD + str(key_id).encode())
    return base64.b64encode(nonce + sealed).decode()


def _unwrap(kek: bytes, key_id: int, text: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
        key = aead.AESGCM(kek).decrypt(raw[:12], raw[12:], _WRAP_AAD + str(key_id).encode())
    except (binascii.Error, ValueError, exceptions.InvalidTag) as e:
        raise Unsealable(f"data key {key_id} does not open with this KEK") from e
    if len(key) != sealing.KEY_BYTES:
        raise Unsealable(f"data key {key_id} is not {sealing.KEY_BYTES} bytes")
    return key


def has_ring(directory: pathlib.Path) -> bool:
    return (directory / KEY_FILE).exists()


def load_ring(directory: pathlib.Path, kek: Kek) -> Ring | None:
    """The data keys in ``directory/cache.key``; None when there is no such file. Raises
    ``Unsealable`` when it does not open with ``kek`` (or does not parse)."""
    try:
        raw = (directory / KEY_FILE).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise KeySourceError(f"{directory / KEY_FILE}: {e.strerror}") from e
    try:
        doc = orjson.loads(raw)
        current = int(doc["current"])
        wrapped = {int(k): str(v) for k, v in dict(doc["keys"]).items()}
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise Unsealable(f"{directory / KEY_FILE} does not parse") from e
    if current not in wrapped:
        raise Unsealable(f"{directory / KEY_FILE} names no current key")
    return Ring(
        {key_id: _unwrap(kek.key, key_id, text) for key_id, text in wrapped.items()}, current
    )


def save_ring(
    directory: pathlib.Path, ring: Ring, kek: Kek, random: Callable[[int], bytes]
) -> None:
    doc = {
        "version": 1,
        "current": ring.current,
        "keys": {str(k): _wrap(kek.key, k, v, random) for k, v in sorted(ring.keys.items())},
    }
    atomicfiles.write(directory / KEY_FILE, orjson.dumps(doc))


def new_ring(random: Callable[[int], bytes]) -> Ring:
    return Ring({1: random(sealing.KEY_BYTES)}, 1)


def rotated(ring: Ring, random: Callable[[int], bytes]) -> Ring:
    """PURE (given ``random``). ``ring`` with a new current data key; the old ones stay until
    no entry uses them (``pruned``)."""
    new_id = max(ring.keys) % sealing.MAX_KEY_ID + 1
    while new_id in ring.keys:
        new_id = new_id % sealing.MAX_KEY_ID + 1
    return Ring({**ring.keys, new_id: random(sealing.KEY_BYTES)}, new_id)


def pruned(ring: Ring) -> Ring:
    """PURE. Only the current key (once every entry is sealed with it)."""
    return Ring({ring.current: ring.keys[ring.current]}, ring.current)


def read_sealer(
    directory: pathlib.Path, source: Source, environ: Mapping[str, str]
) -> sealing.Sealer:
    """The sealer of the cache at ``directory`` for a tool that only reads (nothing is made or
    moved): ``PLAIN`` for a plaintext cache. Raises ``KeySourceError`` (``Unsealable``) when
    the cache is sealed and ``source`` gives no key, or one its data keys do not open with."""
    kek = resolve(source, environ, directory, create=False)
    if kek is None:
        if has_ring(directory):
            raise Unsealable(f"the cache at {directory} is sealed: give its --cache-key-source")
        return sealing.PLAIN
    ring = load_ring(directory, kek)
    return sealing.PLAIN if ring is None else ring.sealer(os.urandom)


def copy_ring(directory: pathlib.Path, suffix: str) -> None:
    """Copy ``cache.key`` (and the TPM's blobs) to ``<name><suffix>``, beside a damaged
    database moved aside; the originals stay in use."""
    for name in (KEY_FILE, tpmsealing.PUBLIC, tpmsealing.PRIVATE):
        with contextlib.suppress(FileNotFoundError):
            atomicfiles.write(directory / f"{name}{suffix}", (directory / name).read_bytes())


def remove_ring(directory: pathlib.Path, suffix: str) -> None:
    """Move ``cache.key`` (and the TPM's blobs) aside with the database (``<name><suffix>``)."""
    with contextlib.suppress(FileNotFoundError):
        (directory / KEY_FILE).rename(directory / f"{KEY_FILE}{suffix}")
    tpmsealing.remove_blobs(directory, suffix)
