"""yurt-manager is built from YurtHub's OpenYurt pin: bench/yurtmanager/go.mod requires the
same openyurt version with the same replace lines as bench/yurthub/go.mod, and its build script
refuses anything else."""

from __future__ import annotations

import importlib.util
import pathlib
import re
from types import ModuleType

BENCH = pathlib.Path(__file__).resolve().parents[3] / "bench"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_{name}_build", BENCH / name / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_same_pin_and_replaces() -> None:
    yurthub, yurtmanager = load("yurthub"), load("yurtmanager")
    assert yurtmanager.pinned_version() == yurthub.pinned_version()
    assert re.search(
        r"^require github\.com/openyurtio/openyurt v\S+$",
        (BENCH / "yurtmanager/go.mod").read_text(),
        re.M,
    )
    assert yurtmanager.binary().parent == yurthub.binary().parent
    assert "cmd/yurt-manager" in (BENCH / "yurtmanager" / "tools.go").read_text()
