"""Every top-level package is packaged, type-checked and held by an import contract.

A new top-level package (``inputbounds`` was one) must be named in four places that nothing else
ties together: the wheel's package list (``[tool.hatch.build.targets.wheel]``, or the wheel
lacks it and the installed binary fails to import), import-linter's ``root_packages`` (or its
contracts silently ignore it), a contract whose source it is (what it may import), and the
Makefile's mypy invocation (or ``make lint`` never type-checks it). The Dockerfile's COPY lines
are checked against the same list in ``tests/integration/manifests/test_manifests_contract.py``.
"""

from __future__ import annotations

import pathlib
import re
import tomllib
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[2]


def pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def top_level_packages() -> set[str]:
    """Import names of the repository's top-level packages (the CLI lives in ``cmd/``)."""
    found = {p.parent.name for p in REPO.glob("*/__init__.py")}
    found |= {p.parent.name for p in (REPO / "cmd").glob("*/__init__.py")}
    return found


def test_the_layout_has_the_packages_we_know() -> None:
    # Guards the glob itself: a wrong REPO would make every check below vacuous.
    assert {"yurthub", "kubecontrol", "discovery", "managers", "nodeautonomy", "inputbounds"} | {
        "edgehub"
    } == top_level_packages()


def wheel_packages() -> dict[str, str]:
    """Import name -> source directory of each package the wheel installs."""
    listed = pyproject()["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    return {pathlib.PurePosixPath(p).name: p for p in listed}


def test_every_package_is_in_the_wheel() -> None:
    wheel = wheel_packages()
    assert set(wheel) == top_level_packages()
    for source in wheel.values():
        assert (REPO / source / "__init__.py").is_file(), source
    # An editable install puts each source root on sys.path.
    roots = {str(pathlib.PurePosixPath(s).parent) for s in wheel.values()}
    dev = pyproject()["tool"]["hatch"]["build"]["targets"]["wheel"]["dev-mode-dirs"]
    assert set(dev) == roots


def test_every_package_is_under_the_import_contracts() -> None:
    linter = pyproject()["tool"]["importlinter"]
    assert set(linter["root_packages"]) == top_level_packages()
    sources = {
        module
        for contract in linter["contracts"]
        if contract["type"] == "forbidden"
        for module in contract["source_modules"]
    }
    for package in top_level_packages() - {"edgehub"}:  # the CLI may import everything
        assert package in sources, package


def test_inputbounds_imports_nothing_of_ours_and_everyone_may_import_it() -> None:
    contracts = pyproject()["tool"]["importlinter"]["contracts"]
    own = [c for c in contracts if c["source_modules"] == ["inputbounds"]]
    assert len(own) == 1
    assert set(own[0]["forbidden_modules"]) == top_level_packages() - {"inputbounds"}
    for contract in contracts:
        if contract["source_modules"][0].split(".")[0] in {
            "yurthub",
            "kubecontrol",
            "discovery",
            "managers",
        }:
            assert "inputbounds" not in contract["forbidden_modules"], contract["name"]


def test_make_lint_type_checks_every_package() -> None:
    makefile = (REPO / "Makefile").read_text()
    lines = [line.split() for line in makefile.splitlines() if re.search(r"/mypy\s", line)]
    assert len(lines) == 1, lines
    checked = {pathlib.PurePath(word).name for word in lines[0][1:]}
    assert top_level_packages() <= checked, top_level_packages() - checked
