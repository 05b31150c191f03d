"""Device-plugin socket names: Akri's when they fit, else shortened to fit, never unreadable
unless the directory leaves no room, and a clear error when nothing fits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from discovery.agent import kubelet, naming

NOW = 1795962559
# The directory of the observed failure (a pytest tmp path): 84 bytes.
PYTEST_DIR = Path(
    "/tmp/pytest-of-root/pytest-119/test_demo_story_completes0/demo/kubelet/device-plugins"
)


@pytest.mark.parametrize(
    ("plugin", "room", "expected"),
    [
        # Akri's name whenever it fits (exactly fits included).
        ("akri-debug-echo-8120fe", 200, "akri-debug-echo-8120fe-1795962559.sock"),
        ("akri-debug-echo-8120fe", 38, "akri-debug-echo-8120fe-1795962559.sock"),
        # One byte short: a readable prefix and a digest, filling the room exactly.
        ("akri-debug-echo-8120fe", 37, "akri-debug-echo-8120f-{d}.sock"),
        ("akri-debug-echo-8120fe", 22, "akri-d-{d}.sock"),
        # A cut name never ends in a separator.
        ("akri-debug-echo-8120fe", 21, "akri-{d}.sock"),
        ("akri-debug-echo-8120fe", 17, "a-{d}.sock"),
        # No room for even one character and the dash: the digest alone.
        ("akri-debug-echo-8120fe", 16, "{d}.sock"),
        ("akri-debug-echo-8120fe", 15, "{d}.sock"),
        # Nothing fits.
        ("akri-debug-echo-8120fe", 14, None),
        ("akri-debug-echo-8120fe", 0, None),
        ("akri-debug-echo-8120fe", -30, None),
    ],
)
def test_plugin_socket_name(plugin: str, room: int, expected: str | None) -> None:
    name = naming.plugin_socket_name(plugin, NOW, room)
    if expected is None:
        assert name is None
        return
    assert name is not None
    digest = name.removesuffix(".sock").rpartition("-")[2]
    assert name == expected.format(d=digest)
    assert len(name.encode()) <= room
    if "{d}" in expected:
        assert len(digest) == 10 and int(digest, 16) >= 0


def test_shortened_names_stay_distinct() -> None:
    room = 22
    names = {naming.plugin_socket_name(f"akri-debug-echo-{i:06x}", NOW, room) for i in range(2000)}
    assert len(names) == 2000, "same readable prefix, still one socket per plugin"
    again = naming.plugin_socket_name("akri-debug-echo-000001", NOW + 1, room)
    assert again not in names, "a restarted plugin gets a fresh socket name, as with Akri's"


def test_observed_pytest_directory_now_fits_with_a_readable_name() -> None:
    for plugin in ("akri-debug-echo-8120fe", "akri-debug-echo"):
        path = kubelet.socket_path(PYTEST_DIR, plugin, NOW)
        assert len(os.fsencode(path)) <= naming.SOCKET_PATH_MAX
        assert path.parent == PYTEST_DIR
        assert path.name.startswith("akri-"), path.name


@pytest.mark.parametrize("plugin", ["c", "akri-debug-echo-8120fe", "x" * 253])
def test_every_directory_length_fits_or_fails_clearly(plugin: str) -> None:
    for length in range(1, 130):
        directory = Path("/" + "d" * (length - 1))
        room = naming.SOCKET_PATH_MAX - length - 1
        if room >= naming.SOCKET_NAME_MIN or len(f"{plugin}-{NOW}.sock") <= room:
            path = kubelet.socket_path(directory, plugin, NOW)
            assert len(os.fsencode(path)) <= naming.SOCKET_PATH_MAX
            assert path.parent == directory
        else:
            with pytest.raises(kubelet.SocketPathError) as info:
                kubelet.socket_path(directory, plugin, NOW)
            message = str(info.value)
            assert str(directory) in message and "too long" in message


def test_typical_kubelet_directory_keeps_akri_names() -> None:
    path = kubelet.socket_path(Path("/var/lib/kubelet/device-plugins"), "cfg-8120fe", NOW)
    assert path.name == "cfg-8120fe-1795962559.sock"
