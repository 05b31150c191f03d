"""Grouped help (``edgehub.helpgroups``): every option of every command is in a topic, ``--help``
fits on a screen and names what it leaves out, ``--help-all`` shows everything, grouped."""

from __future__ import annotations

import re

import click
import pytest
from click import testing
from edgehub import cli, helpgroups, hub

SCREEN = 60
"""Lines ``edgehub hub --help`` may take on an 80-column terminal."""


def commands() -> list[tuple[str, click.Command]]:
    """Every command of the CLI, as (path after ``edgehub``, command)."""
    found: list[tuple[str, click.Command]] = []

    def walk(command: click.Command, path: list[str], parent: click.Context | None) -> None:
        ctx = click.Context(command, info_name=(path or ["edgehub"])[-1], parent=parent)
        found.append((" ".join(path), command))
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                walk(sub, [*path, name], ctx)

    walk(cli.root, [], None)
    return found


def help_text(args: list[str]) -> str:
    result = testing.CliRunner().invoke(
        cli.root, args, prog_name="edgehub", terminal_width=80, catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return result.output


def flags(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", text))


def test_every_option_of_every_command_is_in_a_topic() -> None:
    found = commands()
    assert {"", "hub", "agent", "manager", "cache ls"} <= {path for path, _ in found}
    wrong = [line for path, command in found for line in helpgroups.problems(command, path)]
    paths = {path for path, _ in found}
    wrong += [
        f"TOPICS[{path!r}] in cmd/edgehub/helpgroups.py: there is no command edgehub {path}"
        for path in sorted(set(helpgroups.TOPICS) - paths)
    ]
    assert wrong == [], "\n".join(wrong)


def test_a_flag_added_without_a_topic_is_named() -> None:
    @click.command(cls=helpgroups.Command, topics="status")
    @click.option("--server")
    @click.option("--agent")
    @click.option("-o", "--output")
    @click.option("--history")
    @click.option("--brand-new-flag")
    def status(**_: object) -> None:
        pass

    assert helpgroups.problems(status, "status") == [
        "edgehub status --brand-new-flag is in no help topic: add it to a topic of "
        "TOPICS['status'] in cmd/edgehub/helpgroups.py (common: --help shows it; more: only "
        "--help-all)"
    ]
    # It still works, and its help still shows it.
    assert "--brand-new-flag" in help_of(status)


def test_a_plain_click_command_with_options_is_named() -> None:
    @click.command()
    @click.option("--port")
    def plain(**_: object) -> None:
        pass

    assert helpgroups.problems(plain, "plain") == [
        "edgehub plain is a plain click command: give it cls=helpgroups.Command, topics='plain'"
    ]


def test_a_topic_naming_a_flag_the_command_lacks_is_named() -> None:
    @click.command(cls=helpgroups.Command, topics="status")
    @click.option("--server")
    @click.option("-o", "--output")
    @click.option("--history")
    def status(**_: object) -> None:
        pass

    assert helpgroups.problems(status, "status") == [
        "edgehub status has no option --agent, yet TOPICS['status'] in "
        "cmd/edgehub/helpgroups.py lists it"
    ]


def help_of(command: click.Command) -> str:
    result = testing.CliRunner().invoke(command, ["--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.output


def test_hub_help_fits_on_a_screen_and_names_the_rest() -> None:
    short = help_text(["hub", "--help"])
    assert len(short.splitlines()) <= SCREEN, short
    assert {"--server-addr", "--node-name", "--join-token", "--help-all"} <= flags(short)
    assert "--heartbeat-interval-seconds" not in short
    assert "edgehub hub --help-all shows" in short
    for title in hub.command.folded():
        assert title.split(" (")[0] in " ".join(short.split()), title


def test_help_all_shows_every_option_under_its_topic() -> None:
    for path in ("hub", "agent", "manager"):
        full = help_text([*path.split(), "--help-all"])
        command = dict(commands())[path]
        expected = {
            name
            for p in command.params
            if isinstance(p, click.Option) and not p.hidden
            for name in p.opts + p.secondary_opts
            if name.startswith("--")
        }
        assert expected <= flags(full), sorted(expected - flags(full))
        headings = re.findall(r"^(\S[^\n]*):$", full, re.M)
        titles = [t.title for t in helpgroups.TOPICS[path]]
        assert headings == [*titles, "Help"], headings
        assert "--help-all shows" not in full


@pytest.mark.parametrize("path", ["hub", "agent", "manager"])
def test_short_help_is_shorter_than_help_all(path: str) -> None:
    short = help_text([*path.split(), "--help"])
    full = help_text([*path.split(), "--help-all"])
    assert flags(short) < flags(full)


def test_a_small_command_has_one_options_section() -> None:
    text = help_text(["status", "--help"])
    assert re.findall(r"^(\S[^\n]*):$", text, re.M) == ["Options"]
    assert {"--server", "--agent", "--output", "--help-all", "--help"} <= flags(text)


def test_help_all_takes_the_pflag_spelling() -> None:
    # YurtHub-style arguments go through pflags first: --help-all=true is the flag.
    result = testing.CliRunner().invoke(hub.command, ["--help-all=true"], terminal_width=80)
    assert result.exit_code == 0, result.output
    assert "--heartbeat-interval-seconds" in result.output


def test_every_commands_help_fits_on_a_screen() -> None:
    long = []
    for path, _ in commands():
        lines = len(help_text([*path.split(), "--help"]).splitlines())
        if lines > SCREEN:
            long.append(f"edgehub {path} --help: {lines} lines (move options to `more`)")
    assert long == []
