"""The README and docs/ hold together: every relative link and anchor resolves, every
``edgehub ...`` command line of a ``sh`` block parses against the current CLI (click's own
parser: the subcommands and flags exist and their values convert; nothing runs), every
``make`` target named exists, both indexes list every page, and the first build time is
stated once (docs/testbed.md) and only referred to elsewhere."""

from __future__ import annotations

import pathlib
import re
import shlex
from collections.abc import Iterator

import click
import pytest
from edgehub import cli

REPO = pathlib.Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
FENCE = re.compile(r"^(```|~~~)")


def unfenced(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def blocks(text: str, lang: str) -> Iterator[str]:
    """The fenced code blocks opened with ```lang."""
    yield from re.findall(rf"^\s*```{lang}\n(.*?)^\s*```", text, re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation dropped, spaces
    to dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: pathlib.Path) -> set[str]:
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in unfenced(path.read_text()):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m is None:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: pathlib.Path) -> Iterator[str]:
    # Code (fenced or inline) may hold "](": only links in prose are rendered as links.
    out = [re.sub(r"`[^`]*`", "``", line) for line in unfenced(path.read_text())]
    yield from re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", "\n".join(out))


def test_the_pages_are_there() -> None:
    names = {p.name for p in PAGES}
    assert {"README.md", "cli.md", "operating.md", "migrating.md", "performance.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(page: pathlib.Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:...
            continue
        file, _, anchor = target.partition("#")
        where = (page.parent / file).resolve() if file else page
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            broken.append(f"{target}: no heading #{anchor} in {where.relative_to(REPO)}")
    assert broken == []


def test_the_anchor_rule_is_githubs() -> None:
    assert slug("Akri's Helm values") == "akris-helm-values"
    assert slug("Brokers (`edgehub manager`: brokers, nodewatcher, the webhook)") == (
        "brokers-edgehub-manager-brokers-nodewatcher-the-webhook"
    )
    assert slug("An OpenYurt node's YurtHub, line by line") == (
        "an-openyurt-nodes-yurthub-line-by-line"
    )


SHELL_OPERATORS = {";", "&", "&&", "|", "||", "(", ")", "<", ">", ">>", "<<", "2>", "2>&1"}
COMMAND_WORDS = {"until", "while", "if", "then", "do", "else", "!", "time", "exec", "sudo"}


def edgehub_lines(script: str) -> Iterator[list[str]]:
    """The argument lists of every ``edgehub`` (or ``.venv/bin/edgehub``) command in a shell
    script, from the word after the program to the end of its command."""
    script = script.replace("\\\n", " ")
    for line in script.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.commenters = "#"
        lexer.whitespace_split = True
        words = list(lexer)
        start = True
        for i, word in enumerate(words):
            if start and (word == "edgehub" or word.endswith("/edgehub")):
                args: list[str] = []
                for arg in words[i + 1 :]:
                    if arg in SHELL_OPERATORS or set(arg) <= set(";&|<>()"):
                        break
                    args.append(arg)
                yield args
            start = word in SHELL_OPERATORS or set(word) <= set(";&|()") or word in COMMAND_WORDS


def parse(args: list[str]) -> None:
    """Parse ``edgehub ARGS`` as the CLI would, down to the leaf command; raise on what the
    CLI refuses. Nothing is invoked (no command callback runs)."""
    command: click.Command = cli.root
    parent: click.Context | None = None
    name = "edgehub"
    opened: list[click.Context] = []
    try:
        while True:
            ctx = command.make_context(name, list(args), parent=parent)
            opened.append(ctx)  # closed below: click.File values (--details FILE) are open
            if not isinstance(command, click.Group):
                if ctx.args:
                    raise click.UsageError(f"unexpected arguments {ctx.args}")
                return
            rest = [*ctx._protected_args, *ctx.args]  # as click's Group.invoke reads them
            if not rest:
                return
            found, sub, args = command.resolve_command(ctx, rest)
            assert sub is not None and found is not None
            command, parent, name = sub, ctx, found
    finally:
        for ctx in reversed(opened):
            ctx.close()


def sh_commands() -> list[tuple[str, list[str]]]:
    found = []
    for page in PAGES:
        for block in blocks(page.read_text(), "sh"):
            for args in edgehub_lines(block):
                found.append((str(page.relative_to(REPO)), args))
    return found


def test_the_command_finder_finds_what_it_should() -> None:
    script = (
        ".venv/bin/edgehub hub --node-name a \\\n    --server-addr https://x:1 & HUB=$!\n"
        "until .venv/bin/edgehub status -o json | grep -q x; do sleep 1; done\n"
        "echo x | edgehub discover udev --details -   # a comment\n"
        "helm install edgehub manifests/helm/edgehub\n"
        "crictl exec $(crictl ps -q --name hub) edgehub status\n"
    )
    assert list(edgehub_lines(script)) == [
        ["hub", "--node-name", "a", "--server-addr", "https://x:1"],
        ["status", "-o", "json"],
        ["discover", "udev", "--details", "-"],
        ["status"],
    ]


def test_the_parser_refuses_what_the_cli_refuses() -> None:
    for wrong in (
        ["nope"],
        ["hub", "--node-name", "a", "--server-addr", "https://x:1", "--bogus"],
        ["partition", "--mode", "blackhol"],
        ["status", "extra"],
    ):
        with pytest.raises(click.UsageError):
            parse(wrong)
    parse(["hub", "--node-name", "a", "--server-addr", "https://x:1", "--enable-dummy-if=false"])


def test_every_documented_command_line_parses() -> None:
    found = sh_commands()
    assert len(found) >= 12, found  # the finder finds them
    assert {args[0] for _, args in found} >= {"hub", "sim-apiserver", "status", "cluster"}
    refused = []
    for page, args in found:
        try:
            parse(args)
        except click.ClickException as e:
            refused.append(f"{page}: edgehub {shlex.join(args)}: {e.format_message()}")
    assert refused == [], "\n".join(refused)


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9_./-]+)\s*:(?!=)", text, re.M))


def test_every_make_target_named_exists() -> None:
    targets = makefile_targets()
    assert {"demo", "test", "lint", "readme", "cluster-bins"} <= targets
    named: set[tuple[str, str]] = set()
    for page in PAGES:
        text = page.read_text()
        named |= {(page.name, t) for t in re.findall(r"`make ([A-Za-z0-9_./-]+)", text)}
        for block in blocks(text, "sh"):
            named |= {
                (page.name, t) for t in re.findall(r"^\s*make ([A-Za-z0-9_./-]+)", block, re.M)
            }
    assert named, "no make target found in the docs"
    assert sorted((p, t) for p, t in named if t not in targets) == []


def test_the_readme_starts_with_the_two_commands() -> None:
    text = README.read_text()
    head = text.split("\n## ", 1)[0]
    first = next(blocks(head, "sh"))
    commands = [line.split("#")[0].strip() for line in first.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]


def test_the_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= 300


INDEXES = [README, DOCS / "README.md"]


@pytest.mark.parametrize("index", INDEXES, ids=lambda p: str(p.relative_to(REPO)))
def test_each_index_lists_every_page(index: pathlib.Path) -> None:
    listed = {(index.parent / t).resolve() for t in links(index) if t.endswith(".md")}
    pages = {p.resolve() for p in DOCS.glob("*.md") if p.name != "README.md"}
    assert sorted(str(p.relative_to(REPO)) for p in pages - listed) == []


FIRST_BUILD = re.compile(r"first build[^.\n]*?(\d+)\s*(?:min|minutes)\b", re.I)


def test_the_first_build_time_is_stated_once() -> None:
    # docs/testbed.md holds the measured times (its table's last row, the total); the Makefile
    # refers to it without a figure, and the README's figure is a link to it that must agree.
    testbed = (DOCS / "testbed.md").read_text()
    total = re.search(
        r"^\| \*\*the first build, from nothing\*\* \|.*?(\d+) minutes", testbed, re.M
    )
    assert total is not None, "docs/testbed.md: no total row in 'The first build'"
    stated = {
        str(p.relative_to(REPO))
        for p in [*PAGES, REPO / "Makefile"]
        if FIRST_BUILD.search(p.read_text())
    }
    assert stated == {"docs/testbed.md"}, (
        "state first build times in docs/testbed.md ('The first build') only, and link to it"
    )
    makefile = (REPO / "Makefile").read_text()
    assert "docs/testbed.md" in makefile
    assert not re.search(r"\d+\s*min\b", makefile), (
        "a build time in the Makefile: put it in docs/testbed.md's 'The first build' table "
        "and refer to it from the Makefile"
    )
    readme = re.findall(r"\[([^\]]*)\]\(docs/testbed\.md#the-first-build\)", README.read_text())
    assert readme, "the README links its first-build time to docs/testbed.md#the-first-build"
    for text in readme:
        assert re.findall(r"\d+", text)[:1] == [total.group(1)], (text, total.group(1))
