"""Where a kubeconfig's inline certificates and key go while the client is built, and only then.

kubernetes_asyncio writes a kubeconfig's ``client-key-data`` (and certificates) to files, since
Python's ``ssl`` loads them from files only; by default it writes them to the system's
temporary directory and removes them at a normal interpreter exit. A process killed (OOM,
SIGKILL, a node losing power) leaves the private key behind, and each run leaves another copy.

``scratch_directory`` gives the loader a fresh directory only this user may enter; once the
client's TLS context is built (``ApiClient`` loads the files when it is made), the directory
goes with everything in it, and the loader forgets the names it cached for those files (a
later load writes them again). A process killed within those milliseconds leaves one directory
named ``edgehub-kubeconfig-<pid>-*`` in the temporary directory, readable by its user only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

from kubernetes_asyncio.config import kube_config

PREFIX = "edgehub-kubeconfig-"


@contextlib.contextmanager
def scratch_directory() -> Iterator[str]:
    """A new 0700 directory (``mkdtemp``), removed with its files on leaving."""
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        _forget_files_in(path)


def _forget_files_in(directory: str) -> None:
    """Drop kubernetes_asyncio's cached names of files in ``directory`` (its module-level
    ``_temp_files``, content -> file name): a later load of the same kubeconfig would be given
    the removed file's name. Private to the library:
    ``tests/integration/kubecontrol/test_kubecontrol_kubeconfig_key.py`` fails if an upgrade moves
    it."""
    cached: dict[str, str] = getattr(kube_config, "_temp_files", {})
    inside = directory.rstrip(os.sep) + os.sep
    for content, name in list(cached.items()):
        if name.startswith(inside):
            del cached[content]
