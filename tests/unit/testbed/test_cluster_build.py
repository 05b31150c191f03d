"""tests/cluster/build.py: what each built program is keyed by."""

from __future__ import annotations

import importlib.util
import pathlib
import types

BUILD = pathlib.Path(__file__).resolve().parents[2] / "cluster" / "build.py"


def _build_module() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("cluster_build", BUILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_test_program_is_keyed_by_the_pin_and_its_own_sources(tmp_path: pathlib.Path) -> None:
    build = _build_module()
    (tmp_path / "go.mod").write_text("module x\n")
    (tmp_path / "go.sum").write_text("")
    (tmp_path / "tool").mkdir()
    (tmp_path / "tool" / "main.go").write_text("package main\n")
    first = build.tool_digest("tool", tmp_path)
    assert first.startswith(build.pin_digest(tmp_path) + "-")
    (tmp_path / "tool" / "main.go").write_text("package main\n\nfunc main() {}\n")
    edited = build.tool_digest("tool", tmp_path)
    assert edited != first
    (tmp_path / "go.sum").write_text("x v1 h1:y\n")
    assert build.tool_digest("tool", tmp_path) != edited
    assert dict(build.TOOLS)["informer"] == "informer"
    assert (BUILD.parent / "informer" / "main.go").is_file()
