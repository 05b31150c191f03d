"""The README and the CLI reference (docs/cli.md, generated from the commands themselves)."""

from __future__ import annotations

import pathlib

from edgehub import clidoc

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
REFERENCE = README.parent / "docs" / "cli.md"


def test_cli_reference_is_current() -> None:
    assert clidoc.update(REFERENCE, check=True), "docs/cli.md is stale: run `make readme`"


def test_readme_shows_the_two_commands_first() -> None:
    head = README.read_text().split("\n## ", 1)[0]
    assert "make demo" in head and "make test" in head


def test_reference_covers_every_command() -> None:
    text = REFERENCE.read_text()
    for name in (
        "hub",
        "agent",
        "handler",
        "discover",
        "cache",
        "partition",
        "sim-apiserver",
        "manager",
    ):
        assert f"## `edgehub {name}`" in text


def test_readme_points_only_at_what_users_have() -> None:
    # The team's design notes live outside the repository: users do not have them.
    assert "../shared" not in README.read_text()


def test_pyproject_license_is_an_spdx_string() -> None:
    # A `license = {text = ...}` table makes setuptools print a deprecation warning at install.
    import tomllib

    project = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
