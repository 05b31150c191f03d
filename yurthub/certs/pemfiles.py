"""Certificate/key files on disk: written so that a crash at any moment leaves a working pair.

BLOCKING file I/O: call through an executor from the event loop.

A rotation (``write_pair``):

1. the new pair goes to a new timestamped file (``O_EXCL``, mode 0600, written, ``fsync``ed);
2. a symlink ``<prefix>-updated.pem`` is made to it and renamed over ``<prefix>-current.pem``
   (``rename`` is atomic), then the directory is ``fsync``ed so the swap survives power loss;
3. old timestamped files beyond the last few are removed.

Killed before 2, ``-current.pem`` still names the old, complete pair (the new file is an
orphan, removed by a later rotation); killed after 2, it names the new one, complete because
it was synced before the link existed. Nothing ever writes into a file a link points to.
Symlinks are relative (the bare file name), so ``--root-dir`` may be mounted elsewhere.

``load_pair`` is strict: a truncated file, a key that does not match the certificate or a
missing key is a ``PairError``, never a partial identity. Keys are never logged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from yurthub import atomicfiles
from yurthub.certs import layout, renewal

MAX_PAIR_BYTES = 1 << 20


class PairError(ValueError):
    """A pair file that cannot be used (message names the file and why)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Pair:
    path: pathlib.Path
    """As asked for (usually the ``-current.pem`` link)."""
    target: pathlib.Path
    """What the link resolved to when read."""
    certificate: x509.Certificate
    pem: bytes
    """Certificate chain and key as read."""
    written: datetime.datetime
    """When the file was written (its mtime)."""

    @property
    def validity(self) -> renewal.Validity:
        return renewal.Validity(
            self.certificate.not_valid_before_utc, self.certificate.not_valid_after_utc
        )

    @property
    def renewal_window(self) -> renewal.Validity:
        """The validity the renewal deadline is a fraction of: from when we got the certificate
        (the file's mtime), not from ``notBefore``. Signers backdate ``notBefore`` (Kubernetes
        by 5 minutes); for a short certificate the backdated part would put the 70-90 % mark
        at once or in the past, and every new certificate would be renewed immediately."""
        start = max(self.validity.not_before, min(self.written, self.validity.not_after))
        return renewal.Validity(start, self.validity.not_after)

    @property
    def common_name(self) -> str:
        names = self.certificate.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)
        return str(names[0].value) if names else ""

    def describe(self) -> str:
        return (
            f"{self.target.name} (CN={self.common_name}, valid "
            f"{self.validity.not_before:%Y-%m-%dT%H:%M:%SZ}..{self.validity.not_after:%Y-%m-%dT%H:%M:%SZ})"
        )


def _read(path: pathlib.Path) -> bytes:
    return _read_stat(path)[0]


def _read_stat(path: pathlib.Path) -> tuple[bytes, float]:
    with open(path, "rb") as f:
        mtime = os.fstat(f.fileno()).st_mtime
        data = f.read(MAX_PAIR_BYTES + 1)
    if len(data) > MAX_PAIR_BYTES:
        raise PairError(f"{path}: larger than {MAX_PAIR_BYTES} bytes")
    return data, mtime


def load_pair(path: pathlib.Path) -> Pair:
    """The certificate + key PEM at ``path`` (a link or a file). ``FileNotFoundError`` when
    absent; ``PairError`` when present but unusable."""
    target = pathlib.Path(os.path.realpath(path))
    try:
        data, mtime = _read_stat(path)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise PairError(f"{path}: cannot read: {e.strerror}") from e
    try:
        chain = x509.load_pem_x509_certificates(data)
    except ValueError as e:
        raise PairError(f"{path}: no complete certificate (half-written?): {e}") from e
    try:
        key = serialization.load_pem_private_key(_key_block(data, path), password=None)
    except (ValueError, TypeError) as e:
        raise PairError(f"{path}: the private key does not load (half-written?)") from e
    if not isinstance(
        key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey
    ):
        raise PairError(f"{path}: unsupported private key type {type(key).__name__}")
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if key.public_key().public_bytes(der, spki) != chain[0].public_key().public_bytes(der, spki):
        raise PairError(f"{path}: the private key does not match the certificate")
    written = datetime.datetime.fromtimestamp(mtime, datetime.UTC)
    return Pair(path, target, chain[0], data, written)


def _key_block(data: bytes, path: pathlib.Path) -> bytes:
    for marker in (
        b"-----BEGIN EC PRIVATE KEY-----",
        b"-----BEGIN PRIVATE KEY-----",
        b"-----BEGIN RSA PRIVATE KEY-----",
    ):
        start = data.find(marker)
        if start >= 0:
            end_marker = marker.replace(b"BEGIN", b"END")
            end = data.find(end_marker, start)
            if end < 0:
                break
            return data[start : end + len(end_marker)] + b"\n"
    raise PairError(f"{path}: no private key (half-written?)")


def fsync_dir(directory: pathlib.Path) -> None:
    atomicfiles.fsync_dir(directory)


def ensure_dir(directory: pathlib.Path, mode: int = 0o700) -> None:
    directory.mkdir(mode=mode, parents=True, exist_ok=True)


def write_pair(pki: pathlib.Path, prefix: str, pem: bytes, now: datetime.datetime) -> pathlib.Path:
    """Write ``pem`` as the new current pair of ``prefix``; returns the timestamped file."""
    ensure_dir(pki)
    names = frozenset(os.listdir(pki))
    name = layout.stamped_name(prefix, now, names)
    stamped = pki / name
    fd = os.open(stamped, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(pem)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    updated = pki / layout.updated_name(prefix)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(updated)
    os.symlink(name, updated)
    os.replace(updated, pki / layout.current_name(prefix))
    fsync_dir(pki)
    for old in layout.stale(prefix, sorted(os.listdir(pki)), in_use=name):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(pki / old)
    return stamped


def write_atomic(path: pathlib.Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` in one ``rename`` (``atomicfiles``), its directory made
    first."""
    ensure_dir(path.parent)
    atomicfiles.write(path, data, mode=mode)


def remove_orphans(directory: pathlib.Path) -> None:
    """Temporary files a killed ``write_atomic`` left behind (never one of a live process:
    their names carry the writer's pid, and only this process writes here)."""
    for name in os.listdir(directory):
        pid = atomicfiles.writer_pid(name)
        if pid is not None and pid != os.getpid():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / name)


def read_small(path: pathlib.Path) -> bytes:
    """A kubeconfig or CA file, bounded."""
    return _read(path)
