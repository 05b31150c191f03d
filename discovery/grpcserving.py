"""Listening on a Unix socket and stopping a ``grpc.aio`` server, for every gRPC server of ours.

Every gRPC server of ours (the registry's registration socket, a handler served by the SDK,
each kubelet device plugin) listens through :func:`prepare_unix_socket` and
:func:`add_unix_port`, and is stopped through :func:`stop`.

Socket modes are explicit, never the umask's: :func:`add_unix_port` binds in a fresh
private directory (0700) next to the final path, and :meth:`StagedSocket.publish`, called
after ``server.start()``, sets the mode and renames the socket into place. Nobody can
connect before the mode is set, and no process-wide ``umask`` is changed (the hub runs other
threads). A connection follows the socket's inode, so the rename does not disturb grpc.

Listening: grpc reports a failed bind only as "Failed to bind" (or a bare port 0), so
:func:`prepare_unix_socket` checks what it can first and raises :class:`ServeError` naming the
path and the reason (path too long for ``sun_path``, directory not creatable, permission,
read-only file system). A stale socket of an earlier run is replaced; anything else at the
path is refused, never deleted.

Removing: a server removes its socket at shutdown through :meth:`BoundSocket.remove`, which
unlinks the path only while it still is the inode that :meth:`StagedSocket.publish` put there.
Another process that replaced the socket meanwhile (a second handler of the same name, a
restarted agent) keeps serving: we never delete a socket we did not create. The check and the
unlink are two syscalls; a replacement landing between them is not detected (no syscall
unlinks by inode).

Dialling: every client channel of ours to a Unix socket goes through :func:`unix_channel`.
grpc-python derives a unix: target's ``:authority`` from the path, percent-encoded
(``var%2Flib%2F...``): not a valid authority, so the h2 crate under Akri's tonic resets every
such stream with PROTOCOL_ERROR. :data:`UNIX_AUTHORITY` (``localhost``) is sent instead, as
grpc-go and tonic clients do for Unix sockets.

Stopping: :func:`stop` exists because grpcio's ``Server.stop(grace)`` mishandles cancellation in
three ways (grpcio 1.85 on Python 3.11; each is reproduced in
``tests/integration/discovery/test_discovery_grpcserving.py``):

* Swallowed: the grace wait is ``asyncio.wait_for(shield(shutdown_completed), grace)``; on 3.11
  a cancellation arriving as the shutdown completes is dropped by ``wait_for`` and ``stop``
  returns normally, so the owner of the stopping task keeps running.
* Half-stopped: a cancellation during the grace wait propagates, but nothing then cuts the
  in-flight RPCs short: their handler tasks (owned by grpc, not by us) run on after we left.
* Invented: ``stop(None)`` awaits grpc's shared shutdown future unshielded, so a cancelled stop
  can cancel that future, and every later ``stop`` raises ``CancelledError`` in a task that
  nobody cancelled, which silently ends that task inside a TaskGroup.

Invariant of :func:`stop`: it raises ``CancelledError`` if and only if its task was cancelled
while it ran (counted with ``Task.cancelling()``), and when it raises, the server's calls have
been cancelled. A caller already unwinding a cancellation (``stop`` in a ``finally``) is not
interrupted, so its remaining cleanup still runs and its own ``CancelledError`` carries on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import grpc
import grpc.aio

logger = logging.getLogger(__name__)

MAX_SOCKET_PATH = 107
"""Bytes of a Unix socket path: ``sun_path`` is 108 bytes on Linux, one is the final NUL."""


class ServeError(RuntimeError):
    """A server cannot listen; the message names the path (or address) and why.

    ``reason`` is the why alone (e.g. ``Permission denied``), for callers whose paths change
    from one attempt to the next but who report a failure only when it changes.
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


def prepare_unix_socket(path: Path) -> None:
    """Make ``path`` ready to be served on, or raise :class:`ServeError` saying why not.

    Blocking (a few syscalls): call it from a thread on a hot path. Creates the directory,
    removes a stale socket, and binds once itself so that a failure carries the errno that
    grpc would hide; the probe socket is removed again before returning.
    """
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise ServeError(f"socket path {path} is longer than {MAX_SOCKET_PATH} bytes")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISSOCK(mode):
                raise ServeError(f"{path} exists and is not a socket; refusing to replace it")
            path.unlink()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.bind(str(path))
        path.unlink()
    except OSError as e:
        reason = e.strerror or str(e)
        raise ServeError(f"cannot listen on {path}: {reason}", reason) from e


UNIX_AUTHORITY = "localhost"
"""``:authority`` of our requests over Unix sockets (see the module docstring)."""


def unix_channel(
    path: Path | str, options: tuple[tuple[str, str | int], ...] = ()
) -> grpc.aio.Channel:
    """An insecure ``grpc.aio`` channel to the Unix socket ``path`` that an HTTP/2 peer with a
    strict ``:authority`` check (h2, tonic: Akri's stack) accepts."""
    return grpc.aio.insecure_channel(
        f"unix:{path}", options=(("grpc.default_authority", UNIX_AUTHORITY), *options)
    )


@dataclasses.dataclass(frozen=True, slots=True)
class BoundSocket:
    """A socket we put at ``path``, known by its device and inode."""

    path: Path
    device: int
    inode: int

    def still_ours(self) -> bool:
        """Whether ``path`` still is our socket (blocking: one ``lstat``)."""
        try:
            st = os.lstat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (self.device, self.inode)

    def remove(self) -> bool:
        """Unlink ``path`` if it still is our socket (see the module docstring); whether it was
        removed. Blocking: two syscalls. ``OSError`` from the unlink propagates."""
        if not self.still_ours():
            if self.path.exists():
                logger.info("left %s in place: another process has replaced our socket", self.path)
            return False
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        return True


class StagedSocket:
    """A socket bound in a private directory; :meth:`publish` moves it to ``path``."""

    def __init__(self, path: Path, staging: Path) -> None:
        self.path = path
        self.staging = staging

    def publish(self, mode: int) -> BoundSocket:
        """Set ``mode`` and rename the socket into place (blocking: a few syscalls); the
        socket, for :meth:`BoundSocket.remove` at shutdown."""
        try:
            os.chmod(self.staging, mode)
            # A rename keeps the inode: this identity is the one that lands at ``path``.
            st = os.lstat(self.staging)
            os.replace(self.staging, self.path)
        except OSError as e:
            raise ServeError(f"cannot listen on {self.path}: {e.strerror or e}") from e
        finally:
            self.discard()
        return BoundSocket(self.path, st.st_dev, st.st_ino)

    def discard(self) -> None:
        shutil.rmtree(self.staging.parent, ignore_errors=True)


def add_unix_port(server: grpc.aio.Server, path: Path) -> StagedSocket:
    """Listen on ``path`` (prepared by :func:`prepare_unix_socket`) once published; see the
    module docstring. ``ServeError`` if grpc refuses."""
    try:
        staging = Path(tempfile.mkdtemp(prefix=".", dir=path.parent)) / "s"
    except OSError as e:
        raise ServeError(f"cannot listen on {path}: {e.strerror or e}", e.strerror) from e
    staged = StagedSocket(path, staging)
    if len(os.fsencode(staging)) > MAX_SOCKET_PATH:
        staged.discard()
        raise ServeError(f"socket path {path} is too long to be bound and renamed into place")
    try:
        bound = server.add_insecure_port(f"unix:{staging}")
    except RuntimeError as e:
        staged.discard()
        raise ServeError(f"cannot listen on {path}: {e}") from e
    if bound == 0:
        staged.discard()
        raise ServeError(f"cannot listen on {path}")
    return staged


def _cancel_requests() -> int:
    task = asyncio.current_task()
    return 0 if task is None else task.cancelling()


async def stop(server: grpc.aio.Server, grace: float | None) -> None:
    """Stop ``server``: in-flight RPCs get ``grace`` seconds (``None``: none), then are cut.

    Raises ``CancelledError`` exactly when the calling task is cancelled meanwhile.
    """
    before = _cancel_requests()
    try:
        await server.stop(grace)
    except asyncio.CancelledError:
        if _cancel_requests() == before:
            # grpc's shared shutdown future was cancelled by an earlier, cancelled stop: the
            # calls were already cut then. Not a cancellation of ours; do not pass it on.
            logger.debug("grpc server shutdown was already cancelled; treating it as stopped")
            return
        # Ours, mid-grace: cut the remaining calls so no handler outlives its owner.
        with contextlib.suppress(asyncio.CancelledError):
            await server.stop(None)
        raise
    if _cancel_requests() > before:
        # The shutdown completed, but the cancellation that arrived meanwhile was dropped.
        raise asyncio.CancelledError
