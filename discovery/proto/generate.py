"""Regenerate the committed Python stubs for every ``*.proto`` under this directory.

Run as ``python -m discovery.proto.generate`` (``make proto``); ``--check`` compares a
fresh generation with the committed files instead of writing them, and exits 1 on drift.

protoc names a generated module after the ``.proto`` file relative to its include root, and
writes cross-file imports as top-level imports (``import api_pb2 as api__pb2``). Those only
work with this directory on ``sys.path``, so every import of a module generated from this tree
is rewritten to an absolute one inside the package (``from discovery.proto import api_pb2 as
api__pb2``); imports of the well-known types (``google.protobuf``) are left alone.

Invariants:
  * This directory is the only include root besides grpc_tools' bundled well-known types, so
    the descriptor file names ("discovery.proto", "deviceplugin/api.proto") are unique within
    the default descriptor pool even when two files share a base name in sub-directories.
  * Output is a pure function of the ``.proto`` texts and the grpcio-tools version: the
    freshness test regenerates into a temporary directory and compares bytes.
  * Stale stubs (whose ``.proto`` was removed) are reported by ``--check`` and deleted by a
    normal run, so the committed set always equals the generated set.

Danger: grpcio-tools stamps its version into ``*_pb2_grpc.py`` and the runtime refuses
stubs newer than the installed grpcio; regenerate after changing the grpcio-tools pin
(pyproject.toml, test extras).
"""

from __future__ import annotations

import argparse
import importlib.resources
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
PACKAGE = __package__ or "discovery.proto"

# Suffixes protoc produces per .proto with the plugins we run.
STUB_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


class GenerationError(RuntimeError):
    """protoc rejected the sources (syntax error, missing import, ...)."""


def proto_files(proto_dir: Path) -> list[Path]:
    """Every ``.proto`` below ``proto_dir``, relative to it, in a stable order."""
    return sorted(p.relative_to(proto_dir) for p in proto_dir.rglob("*.proto"))


def module_name(proto: Path) -> str:
    """Dotted module name (relative to the package) protoc gives ``proto``'s ``_pb2``."""
    parts = [*proto.parent.parts, proto.stem.replace("-", "_") + "_pb2"]
    return ".".join(parts)


def fix_imports(text: str, local_modules: set[str], package: str) -> str:
    """Rewrite imports of modules generated from this tree into package-absolute imports.

    protoc emits two shapes, ``import x_pb2 as alias`` (file at the include root) and
    ``from sub import x_pb2 as alias`` (file in a sub-directory); the ``.pyi`` files use
    the same shapes with ``_alias`` names.
    """

    def plain(match: re.Match[str]) -> str:
        module, alias = match.group(2), match.group(3)
        if module not in local_modules:
            return match.group(0)
        return f"{match.group(1)}from {package} import {module} as {alias}"

    def dotted(match: re.Match[str]) -> str:
        parent, module, alias = match.group(2), match.group(3), match.group(4)
        if f"{parent}.{module}" not in local_modules:
            return match.group(0)
        return f"{match.group(1)}from {package}.{parent} import {module} as {alias}"

    text = re.sub(r"^(\s*)import (\w+) as (\w+)$", plain, text, flags=re.MULTILINE)
    return re.sub(r"^(\s*)from ([\w.]+) import (\w+) as (\w+)$", dotted, text, flags=re.MULTILINE)


def generate_into(proto_dir: Path, out_dir: Path, package: str = PACKAGE) -> list[Path]:
    """Generate stubs for every ``.proto`` of ``proto_dir`` into ``out_dir``.

    Returns the generated stub paths relative to ``out_dir``. Sub-directories of
    ``out_dir`` that receive stubs get an empty ``__init__.py`` if they lack one.
    """
    # grpc_tools is a test/dev dependency; import it only when generating.
    from grpc_tools import protoc

    protos = proto_files(proto_dir)
    if not protos:
        raise GenerationError(f"no .proto files under {proto_dir}")
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"--proto_path={proto_dir}",
        f"--proto_path={well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(p) for p in protos),
    ]
    if protoc.main(args) != 0:
        raise GenerationError(f"protoc failed for {', '.join(map(str, protos))}")

    local_modules = {module_name(p) for p in protos}
    generated: list[Path] = []
    for proto in protos:
        stem = proto.with_name(proto.stem.replace("-", "_"))
        for suffix in STUB_SUFFIXES:
            stub = stem.with_name(stem.name + suffix)
            path = out_dir / stub
            if not path.exists():
                continue
            text = path.read_text(encoding="utf-8")
            path.write_text(fix_imports(text, local_modules, package), encoding="utf-8")
            generated.append(stub)
        init = out_dir / proto.parent / "__init__.py"
        if proto.parent != Path(".") and not init.exists():
            init.write_text("", encoding="utf-8")
    return sorted(generated)


def committed_stubs(proto_dir: Path) -> list[Path]:
    """Stub files currently present below ``proto_dir`` (relative paths)."""
    found = {
        p.relative_to(proto_dir) for suffix in STUB_SUFFIXES for p in proto_dir.rglob(f"*{suffix}")
    }
    return sorted(found)


def drift(proto_dir: Path = PROTO_DIR, package: str = PACKAGE) -> list[str]:
    """Differences between committed stubs and a fresh generation (empty when in sync)."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="edgehub-proto-") as tmp:
        fresh_dir = Path(tmp)
        fresh = generate_into(proto_dir, fresh_dir, package)
        for stub in fresh:
            committed = proto_dir / stub
            if not committed.exists():
                problems.append(f"{stub}: missing (run `make proto`)")
            elif committed.read_bytes() != (fresh_dir / stub).read_bytes():
                problems.append(f"{stub}: differs from a fresh generation (run `make proto`)")
        for stub in sorted(set(committed_stubs(proto_dir)) - set(fresh)):
            problems.append(f"{stub}: stale, no .proto generates it (run `make proto`)")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m discovery.proto.generate")
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare committed stubs with a fresh generation; exit 1 on drift",
    )
    args = parser.parse_args(argv)
    try:
        if args.check:
            problems = drift()
            for line in problems:
                print(line, file=sys.stderr)
            return 1 if problems else 0
        stale = set(committed_stubs(PROTO_DIR))
        written = generate_into(PROTO_DIR, PROTO_DIR)
        for stub in sorted(stale - set(written)):
            (PROTO_DIR / stub).unlink()
            print(f"removed stale {stub}")
        for stub in written:
            print(f"wrote {stub}")
    except GenerationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
