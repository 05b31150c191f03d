"""Files replaced whole or not at all: the one atomic write of the hub and its commands.

``write(path, data)`` puts ``data`` in a temporary file beside ``path`` (``staging``, or
``.<name>.tmp-<pid>``), sets its mode (``O_CREAT``'s is masked by the umask), fsyncs it, renames
it over ``path`` and fsyncs the directory: after a crash ``path`` holds the old bytes or the
new, never a mix, and a failed write removes its temporary file. The temporary file is always a
new one: whatever is at its name (a crashed write's leftover, a link) is removed, never written
through. Used for the hub's keys and
kubeconfigs (``certs.pemfiles``), the sealed cache's key files, a migration's copies, and the
static-Pod manifests an OTA upgrade or ``edgehub static-pod-upgrade`` installs (whose staging
names start with a dot, so kubelet never reads a half-written manifest).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import secrets


def write(
    path: pathlib.Path | str,
    data: bytes,
    *,
    mode: int = 0o600,
    staging: pathlib.Path | str | None = None,
) -> None:
    """Replace ``path`` with ``data`` (mode ``mode``) in one rename; ``staging`` must be in the
    same directory. Raises ``OSError``."""
    target = pathlib.Path(path)
    temp = pathlib.Path(staging) if staging is not None else temporary(target)
    # The staging name is made fresh: a leftover (a crashed write) or a link someone put there
    # is removed, never opened, so the writer (root, for the static Pod path) cannot be made
    # to write through a link; one put back in between makes O_EXCL fail.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, 0o600)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    fsync_dir(target.parent)


def temporary(path: pathlib.Path) -> pathlib.Path:
    """The default staging name: hidden, naming the writer's pid (``pemfiles`` removes those of
    dead writers), and unique to this write, so two writers of one file never share it."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def writer_pid(name: str) -> int | None:
    """The pid in a default staging name (``temporary``), or None for any other name."""
    if not name.startswith(".") or ".tmp-" not in name:
        return None
    pid = name.rsplit(".tmp-", 1)[1].split("-", 1)[0]
    return int(pid) if pid.isdigit() else None


def fsync_dir(directory: pathlib.Path | str) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_securely(path: pathlib.Path | str) -> None:
    """Overwrite ``path``'s bytes with zeros, fsync, unlink it and fsync its directory: what a
    file system lets a program do to make a file's old bytes unreadable. Never through a link
    (``O_NOFOLLOW``: a link raises ``OSError``). Missing: ``FileNotFoundError``.

    What it cannot promise: on an SSD (the controller writes the zeros elsewhere and keeps the
    old flash pages until it erases them), a copy-on-write or log-structured file system (btrfs,
    ZFS, F2FS: the zeros go to new blocks), a journal holding file data (ext4 ``data=journal``),
    snapshots, backups or an overlay file system's lower layer, the old bytes may survive on
    the medium. Only never writing the plaintext (or full-disk encryption) covers those."""
    target = pathlib.Path(path)
    fd = os.open(target, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        overwrite(fd)
    finally:
        os.close(fd)
    os.unlink(target)
    fsync_dir(target.parent)


def overwrite(fd: int) -> None:
    """Zero the whole file open at ``fd`` (written in place, then fsynced)."""
    size = os.fstat(fd).st_size
    zeros = bytes(min(size, 1 << 16))
    done = 0
    while done < size:
        done += os.pwrite(fd, zeros[: min(len(zeros), size - done)], done)
    os.fsync(fd)
