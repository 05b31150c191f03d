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

Sealed keys (``sealedkeys``): the key of a pair is encrypted PKCS#8 under the node's data key;
``load_pair`` opens it with the ``Seal`` given and says which data key did (``Pair.key_id``) and
the password ``ssl`` loads the file with (``Pair.password``). A key that is sealed but does not
open is a ``SealedKeyError``. ``reseal`` writes a plaintext pair (an older hub's, or YurtHub's
adopted files) or one under an older data key again, sealed under the current one, as a
rotation does, and removes every plaintext key file of that pair with
``atomicfiles.remove_securely`` (see there what a file system cannot promise). Killed between
the two, the pair is sealed and its plaintext files are still there: ``remove_plaintext``
(the certificate manager runs it once per start on a sealed pair) finishes the job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from yurthub import atomicfiles, privatekeys
from yurthub.certs import layout, renewal, sealedkeys

MAX_PAIR_BYTES = 1 << 20


class PairError(ValueError):
    """A pair file that cannot be used (message names the file and why)."""


class SealedKeyError(PairError):
    """A sealed key that does not open: ``foreign`` when this node holds data keys and none
    opens it (a copy from another node, or the data key was replaced); else the key source
    gives no data key now."""

    def __init__(self, message: str, *, foreign: bool) -> None:
        super().__init__(message)
        self.foreign = foreign


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
    key_id: int | None = None
    """The data key the private key is sealed under; None: a plaintext key."""
    password: bytes | None = dataclasses.field(default=None, repr=False)
    """What ``ssl.SSLContext.load_cert_chain`` opens ``target`` with (None: plaintext)."""

    @property
    def sealed(self) -> bool:
        return self.key_id is not None

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


def load_pair(path: pathlib.Path, seal: sealedkeys.Seal = sealedkeys.PLAIN) -> Pair:
    """The certificate + key PEM at ``path`` (a link or a file), a sealed key opened with
    ``seal``. ``FileNotFoundError`` when absent; ``PairError`` when present but unusable
    (``SealedKeyError``: sealed, and ``seal`` does not open it)."""
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
    key, key_id, password = _open_key(data, path, seal)
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if key.public_key().public_bytes(der, spki) != chain[0].public_key().public_bytes(der, spki):
        raise PairError(f"{path}: the private key does not match the certificate")
    written = datetime.datetime.fromtimestamp(mtime, datetime.UTC)
    return Pair(path, target, chain[0], data, written, key_id, password)


def _open_key(
    data: bytes, path: pathlib.Path, seal: sealedkeys.Seal
) -> tuple[privatekeys.PrivateKey, int | None, bytes | None]:
    block = privatekeys.key_block(data)
    if block is None:
        raise PairError(f"{path}: no private key (half-written?)")
    try:
        key, index = privatekeys.open_key(block, seal.candidates())
    except privatekeys.Locked as e:
        if seal.unavailable:
            raise SealedKeyError(
                f"{path}: the private key is sealed and the cache key source gives no key now"
                f" ({seal.unavailable})",
                foreign=False,
            ) from e
        if not seal.sealing:
            raise SealedKeyError(
                f"{path}: the private key is sealed, and --cache-key-source none gives no data"
                " key to open it",
                foreign=True,
            ) from e
        raise SealedKeyError(
            f"{path}: the private key is sealed under a data key this node does not hold (a"
            " copy from another node, or the cache's data key was replaced)",
            foreign=True,
        ) from e
    except privatekeys.BadKey as e:
        raise PairError(f"{path}: {e}") from e
    if index < 0:
        return key, None, None
    return key, seal.ids()[index], seal.candidates()[index]


def fsync_dir(directory: pathlib.Path) -> None:
    atomicfiles.fsync_dir(directory)


def ensure_dir(directory: pathlib.Path, mode: int = 0o700) -> None:
    directory.mkdir(mode=mode, parents=True, exist_ok=True)


def write_pair(
    pki: pathlib.Path,
    prefix: str,
    pem: bytes,
    now: datetime.datetime,
    *,
    mtime: float | None = None,
) -> pathlib.Path:
    """Write ``pem`` as the new current pair of ``prefix``; returns the timestamped file.
    ``mtime``: the time to give the new file (a re-sealed pair keeps when it was obtained: the
    renewal deadline counts from there). Older timestamped files beyond the last few are
    removed securely (they may hold a key from before sealing)."""
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
        if mtime is not None:
            os.utime(fd, (mtime, mtime))
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
            atomicfiles.remove_securely(pki / old)
    return stamped


def reseal(
    pki: pathlib.Path, prefix: str, pair: Pair, seal: sealedkeys.Seal, now: datetime.datetime
) -> Pair:
    """Write ``pair`` (the current one of ``prefix``) again with its key sealed under the
    current data key, then remove securely every timestamped file of ``prefix`` still holding
    a plaintext key (and ``-current.pem`` itself when it was a plain file, not a link). Raises
    ``PairError``, ``OSError``."""
    block = privatekeys.key_block(pair.pem)
    if block is None:
        raise PairError(f"{pair.path}: no private key (half-written?)")
    key, _ = privatekeys.open_key(block, seal.candidates())
    chain = b"".join(
        c.public_bytes(serialization.Encoding.PEM)
        for c in x509.load_pem_x509_certificates(pair.pem)
    )
    current = pki / layout.current_name(prefix)
    # A plain file at the link's name (not client-go's layout, but possible): kept open, so
    # its bytes can be overwritten once the link has replaced it (never before: until then it
    # is the identity).
    plain_fd = None
    if not current.is_symlink() and current.is_file():
        plain_fd = os.open(current, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        written = write_pair(
            pki,
            prefix,
            sealedkeys.pair_pem(chain, key, seal),
            now,
            mtime=pair.written.timestamp(),
        )
        if plain_fd is not None:
            atomicfiles.overwrite(plain_fd)
    finally:
        if plain_fd is not None:
            os.close(plain_fd)
    remove_plaintext(pki, prefix, keep=written.name)
    return load_pair(current, seal)


def remove_plaintext(pki: pathlib.Path, prefix: str, keep: str = "") -> list[str]:
    """Remove securely every timestamped file of ``prefix`` (but ``keep``) that holds a
    plaintext key; the names removed. ``reseal``'s last step, and what finishes it at the next
    start when a crash came between its link swap and this (the sealed pair is current then,
    the plaintext files are not, and nothing else would look at them). Raises ``OSError``."""
    removed = []
    for name in layout.stamped_of(prefix, sorted(os.listdir(pki))):
        if name != keep and _holds_plaintext_key(pki / name):
            with contextlib.suppress(FileNotFoundError):
                atomicfiles.remove_securely(pki / name)
                removed.append(name)
    return removed


def unseal(
    pki: pathlib.Path, prefix: str, seal: sealedkeys.Seal, now: datetime.datetime
) -> Pair | None:
    """Write the current pair of ``prefix`` again with a plaintext key (rolling back to YurtHub,
    which reads only plain PEM); None when it is plaintext already. Raises ``PairError``
    (``SealedKeyError`` when ``seal`` does not open it), ``FileNotFoundError``, ``OSError``."""
    current = pki / layout.current_name(prefix)
    pair = load_pair(current, seal)
    if not pair.sealed:
        return None
    block = privatekeys.key_block(pair.pem)
    assert block is not None  # load_pair opened it
    key, _ = privatekeys.open_key(block, seal.candidates())
    chain = b"".join(
        c.public_bytes(serialization.Encoding.PEM)
        for c in x509.load_pem_x509_certificates(pair.pem)
    )
    plain = sealedkeys.pair_pem(chain, key, sealedkeys.PLAIN)
    write_pair(pki, prefix, plain, now, mtime=pair.written.timestamp())
    return load_pair(current)


def _holds_plaintext_key(path: pathlib.Path) -> bool:
    try:
        data = _read(path)
    except (OSError, PairError):
        return False
    block = privatekeys.key_block(data)
    return block is not None and not privatekeys.is_encrypted(block)


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
