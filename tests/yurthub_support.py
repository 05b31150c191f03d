"""Where ``make yurthub-bin`` put OpenYurt's YurtHub (``bench/yurthub/build.py`` decides); a test
that needs it fails, never skips, when it is missing (``make test`` builds it first)."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


def path() -> pathlib.Path:
    spec = importlib.util.spec_from_file_location(
        "yurthub_build", REPO / "bench" / "yurthub" / "build.py"
    )
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    binary: pathlib.Path = build.binary()
    if not binary.is_file():
        pytest.fail(f"{binary} is missing: run `make yurthub-bin`", pytrace=False)
    return binary
