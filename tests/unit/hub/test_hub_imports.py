"""The hub imports only what it uses: discovery's gRPC, OPC UA, udev and the Kubernetes client
stay out of a hub without ``--enable-discovery`` (each costs memory on a small edge node)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("grpc", "asyncua", "pyudev", "kubernetes_asyncio", "kubernetes", "discovery", "managers")
UNUSED = ("importlib.metadata",)
"""Modules the hub has no use for at run time (``importlib.metadata``: 0.8 MB, for --version)."""


def test_the_hub_command_loads_no_discovery_stack() -> None:
    script = (
        "import sys\n"
        "from edgehub import cli\n"
        "cli.LazyGroup().get_command(None, 'hub')\n"
        "import yurthub.assembly, yurthub.lifecycle\n"
        "tops = {m.split('.')[0] for m in sys.modules}\n"
        f"found = sorted(tops & set({HEAVY!r})) + [m for m in {UNUSED!r} if m in sys.modules]\n"
        "print(','.join(found))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "", f"the hub imported {done.stdout.strip()}"
