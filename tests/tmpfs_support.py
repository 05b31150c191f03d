"""A small tmpfs for tests that need a disk that fills up (root only, as CI runs)."""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def small_tmpfs(path: pathlib.Path, size: str) -> Iterator[pathlib.Path]:
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace')}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
