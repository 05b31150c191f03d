"""Where the Go-built Kubernetes binaries of the real-cluster test bed are.

``make cluster-bins`` (``tests/cluster/build.py``) builds etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kubemark and kubectl from the modules pinned in
``tests/cluster/go.mod`` into ``<cache>/k8s-<version>/`` and writes a ``.pin`` file there
last, so a directory with a ``.pin`` holds a complete set.

The module's test programs (``TOOLS``: ``informer``, a client-go shared informer, from
``tests/cluster/informer``) are built into the same directory; ``tool`` finds one.

Lookup order: an explicit directory, ``$EDGEHUB_K8S_BIN``, then the newest complete
``<cache>/k8s-*`` (cache = ``$EDGEHUB_CACHE``, else ``$XDG_CACHE_HOME/edgehub``, else
``~/.cache/edgehub``). Nothing is downloaded here; a missing binary is an error that says how
to build it.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

NAMES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubemark",
    "kubectl",
)
TOOLS = ("informer",)
"""Built beside ``NAMES`` from the same pin; not part of what makes a directory complete."""
ENV_DIR = "EDGEHUB_K8S_BIN"


class MissingBinariesError(RuntimeError):
    """The test bed's binaries are not built (or not where we were told)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Binaries:
    directory: pathlib.Path

    def path(self, name: str) -> pathlib.Path:
        if name not in NAMES and name not in TOOLS:
            known = ", ".join((*NAMES, *TOOLS))
            raise KeyError(f"not a test-bed binary: {name!r} (one of {known})")
        return self.directory / name

    @property
    def version(self) -> str:
        """The Kubernetes version the directory is named after (``k8s-v1.37.2`` -> v1.37.2)."""
        name = self.directory.name
        return name.removeprefix("k8s-") if name.startswith("k8s-") else "unknown"


def cache_root() -> pathlib.Path:
    explicit = os.environ.get("EDGEHUB_CACHE")
    if explicit:
        return pathlib.Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return pathlib.Path(xdg) / "edgehub"


def missing(directory: pathlib.Path) -> list[str]:
    """The binaries ``directory`` lacks (not a file or not executable)."""
    return [n for n in NAMES if not os.access(directory / n, os.X_OK)]


def locate(directory: str | os.PathLike[str] | None = None) -> Binaries:
    """The binaries to run, or ``MissingBinariesError`` naming what is missing and the fix."""
    hint = "build them with `make cluster-bins` (or point $EDGEHUB_K8S_BIN at a directory)"
    chosen = directory or os.environ.get(ENV_DIR)
    if chosen:
        path = pathlib.Path(chosen)
        lacking = missing(path)
        if lacking:
            raise MissingBinariesError(f"{path} lacks {', '.join(lacking)}; {hint}")
        return Binaries(path)
    root = cache_root()
    complete = [
        d for d in root.glob("k8s-v*") if d.is_dir() and (d / ".pin").is_file() and not missing(d)
    ]
    if not complete:
        raise MissingBinariesError(f"no complete k8s-* build under {root}; {hint}")
    return Binaries(max(complete, key=lambda d: (d / ".pin").stat().st_mtime))


def tool(name: str, directory: str | os.PathLike[str] | None = None) -> pathlib.Path:
    """The test program ``name`` (one of ``TOOLS``) of the binaries ``locate`` finds, or
    ``MissingBinariesError`` when it is not built there."""
    if name not in TOOLS:
        raise KeyError(f"not a test program: {name!r} (one of {', '.join(TOOLS)})")
    path = locate(directory).path(name)
    if not os.access(path, os.X_OK):
        raise MissingBinariesError(
            f"{path} is not built; build it with `make cluster-bins` (tests/cluster/{name})"
        )
    return path
