"""Where our gRPC servers listen: ``grpcserving.prepare_unix_socket`` under the registry and
the SDK, on real Unix sockets. A path that cannot be served is a ``ServeError`` naming it and
why (never a bare ``OSError`` traceback), and a file that is not a socket is never deleted."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import pytest

from discovery import grpcserving, registry, sdk
from discovery.handlers import debug_echo

SETTINGS = registry.RegistrySettings(directory=None)


def _blocked_directory(sock_dir: Path) -> Path:
    """A directory path that cannot be created: its parent is a regular file."""
    (sock_dir / "file").write_text("not a directory")
    return sock_dir / "file" / "akri"


async def test_registry_refuses_and_keeps_a_file_that_is_not_a_socket(sock_dir: Path) -> None:
    placeholder = sock_dir / sdk.REGISTRATION_SOCKET
    placeholder.write_text("someone else's file")
    with pytest.raises(sdk.ServeError, match="is not a socket"):
        async with registry.running(dataclasses.replace(SETTINGS, directory=sock_dir)):
            pass
    assert placeholder.read_text() == "someone else's file"


async def test_registry_names_a_directory_it_cannot_create(sock_dir: Path) -> None:
    directory = _blocked_directory(sock_dir)
    with pytest.raises(sdk.ServeError, match=f"cannot listen on {directory}/"):
        async with registry.running(dataclasses.replace(SETTINGS, directory=directory)):
            pass


async def test_sdk_names_a_directory_it_cannot_create(sock_dir: Path) -> None:
    directory = _blocked_directory(sock_dir)
    handler = debug_echo.DebugEcho(availability_file=sock_dir / "availability")
    with pytest.raises(sdk.ServeError, match=f"cannot listen on {directory}/debugEcho.sock"):
        await sdk.serve(handler, sdk.ServeSettings(directory=directory))


def test_prepare_replaces_a_stale_socket_and_leaves_the_path_free(sock_dir: Path) -> None:
    path = sock_dir / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(path))  # bound, never listened on: what a killed server leaves behind
    grpcserving.prepare_unix_socket(path)
    assert not path.exists()


def test_prepare_refuses_a_path_too_long_for_a_unix_socket(sock_dir: Path) -> None:
    path = sock_dir / ("x" * grpcserving.MAX_SOCKET_PATH)
    with pytest.raises(grpcserving.ServeError, match="longer than 107 bytes"):
        grpcserving.prepare_unix_socket(path)
    assert not path.exists()
