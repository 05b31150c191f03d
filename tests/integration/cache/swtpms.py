"""Software TPMs for the sealed-key tests: ``swtpm`` (Debian's ``swtpm``; ``tpm2-tools`` drives
it; ``make tpm-tools`` installs both), one process per TPM, on free loopback ports, stopped when
the test leaves the context (a unique module name: several test directories have a
conftest)."""

from __future__ import annotations

import contextlib
import pathlib
import socket
import subprocess
import time
from collections.abc import Iterator

from yurthub.testing import ports


@contextlib.contextmanager
def swtpm(state: pathlib.Path) -> Iterator[str]:
    """A software TPM with its state in ``state``; yields its TCTI."""
    state.mkdir(parents=True, exist_ok=True)
    port = ports.Ports().pair(("127.0.0.1",))  # the TCTI finds the control port next to it
    ctrl = port + 1
    proc = subprocess.Popen(
        ["swtpm", "socket", "--tpm2",
         "--server", f"type=tcp,port={port},bindaddr=127.0.0.1",
         "--ctrl", f"type=tcp,port={ctrl},bindaddr=127.0.0.1",
         "--tpmstate", f"dir={state}", "--flags", "not-need-init,startup-clear"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while True:  # until it accepts connections (bounded)
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            assert time.monotonic() < deadline, "swtpm did not listen"
            time.sleep(0.02)
        yield f"swtpm:host=127.0.0.1,port={port}"
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()
