"""Talking to kubelet: plugin registration and noticing a kubelet restart.

``register`` calls ``v1beta1.Registration/Register`` on
``<device-plugins dir>/kubelet.sock`` with the plugin's socket *file name*
(kubelet joins it with its own directory) and both options off, as Akri.

``SocketWatch`` identifies kubelet's socket by (device, inode, ctime). kubelet
re-creates it on every start and at the same time forgets every plugin (and
wipes the directory), so a changed identity means "restart and re-register
all plugins" — Akri never noticed (reference §5.1 [quirk]). Polling a stat is
portable and costs nothing at 1 s.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import grpc
import grpc.aio

from discovery import grpcserving
from discovery.agent import naming
from discovery.proto import deviceplugin_v1beta1_pb2 as pb
from discovery.proto import deviceplugin_v1beta1_pb2_grpc as pb_grpc

logger = logging.getLogger(__name__)

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"


class RegistrationFailed(Exception):
    pass


class SocketPathError(OSError):
    """The device-plugins directory leaves no room for a plugin socket name."""


def socket_path(directory: Path, plugin_name: str, now: float | None = None) -> Path:
    """``<dir>/<plugin>-<unix seconds>.sock`` (Akri's name), shortened so that the whole path
    fits a Unix socket (``naming.plugin_socket_name``); ``SocketPathError`` naming the
    directory when even the shortest name does not fit."""
    seconds = int(time.time() if now is None else now)
    room = naming.SOCKET_PATH_MAX - len(os.fsencode(directory)) - 1  # the "/" after it
    name = naming.plugin_socket_name(plugin_name, seconds, room)
    if name is None:
        raise SocketPathError(
            f"device-plugins directory {directory} is too long for a Unix socket: "
            f"{len(os.fsencode(directory))} bytes leave {max(room, 0)} for a socket name, "
            f"plugins need {naming.SOCKET_NAME_MIN} (paths are limited to "
            f"{naming.SOCKET_PATH_MAX} bytes)"
        )
    return directory / name


async def register(
    directory: Path, plugin_socket: Path, resource_name: str, deadline: float = 5.0
) -> None:
    kubelet = directory / KUBELET_SOCKET
    request = pb.RegisterRequest(
        version=API_VERSION,
        endpoint=plugin_socket.name,
        resource_name=resource_name,
        options=pb.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=False
        ),
    )
    try:
        async with grpcserving.unix_channel(kubelet) as channel:
            stub = pb_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
            await stub.Register(request, timeout=deadline)
    except grpc.aio.AioRpcError as e:
        raise RegistrationFailed(
            f"kubelet refused {resource_name}: {e.code().name}: {e.details()}"
        ) from e


SocketId = tuple[int, int, int]


def socket_identity(directory: Path) -> SocketId | None:
    try:
        st = (directory / KUBELET_SOCKET).stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


class SocketWatch:
    """Remembers kubelet's socket identity; ``changed()`` reports a re-creation once."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.identity = socket_identity(directory)

    def changed(self) -> bool:
        current = socket_identity(self.directory)
        if current == self.identity:
            return False
        self.identity = current
        return current is not None

    @property
    def present(self) -> bool:
        return self.identity is not None
