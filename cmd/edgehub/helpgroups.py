"""Help that fits on a screen: every command's options grouped by topic.

The grouping is data: ``TOPICS`` maps a command (its path after ``edgehub``) to its topics, each
with the options ``--help`` shows (``common``) and those only ``--help-all`` shows (``more``).
A command opts in with ``cls=helpgroups.Command`` (``Group`` for a group) and ``topics=<path>``.
``--help`` ends by naming what it left out; ``--help-all`` (added to every such command) shows
every option; ``docs/cli.md`` (``clidoc``) is that form.

An option listed in no topic still works; it is shown under "Other options" and
``tests/unit/cli/test_cli_helpgroups.py`` fails naming it and this file: add every new flag to a
topic of its command here. Hidden options (tests' knobs) belong to no topic.

cloup lays the help out (its formatter aligns the option groups' sections). It is imported only
when help is written: it imports ``importlib.metadata``, which a running hub has no use for
(``tests/unit/hub/test_hub_imports.py``), so the commands are click's, grouped from ``TOPICS``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import click

HELP_ALL = "edgehub.help_all"
"""``ctx.meta`` key: the help being written is ``--help-all``'s (every topic, every option)."""

HELP_ALL_OPTION = "--help-all"


@dataclasses.dataclass(frozen=True)
class Topic:
    """One help section: its title and its options by their first long name (``--node-name``)."""

    title: str
    common: tuple[str, ...] = ()
    """Shown by ``--help`` and ``--help-all``."""
    more: tuple[str, ...] = ()
    """Shown by ``--help-all`` only."""

    @property
    def options(self) -> tuple[str, ...]:
        return self.common + self.more


def _all(title: str, *names: str) -> Topic:
    return Topic(title, common=names)


TOPICS: dict[str, tuple[Topic, ...]] = {
    "": (_all("Options", "--log-level", "--version"),),
    "hub": (
        Topic(
            "Cloud and node",
            common=("--server-addr", "--node-name", "--kubeconfig", "--working-mode"),
            more=(
                "--nodepool-name",
                "--namespace",
                "--lb-mode",
                "--allow-insecure-skip-tls-verify",
                "--allow-system-trust-store",
                "--static-pod-path",
            ),
        ),
        Topic(
            "Certificates and tokens (docs/identity.md)",
            common=("--join-token", "--join-token-file", "--discovery-token-ca-cert-hash"),
            more=(
                "--bootstrap-mode",
                "--bootstrap-file",
                "--discovery-token-unsafe-skip-ca-verification",
                "--root-dir",
                "--hub-cert-organizations",
                "--kubelet-kubeconfig",
                "--node-ip",
                "--api-audiences",
            ),
        ),
        Topic(
            "Cache (docs/cache.md)",
            common=("--disk-cache-path", "--cache-agents"),
            more=(
                "--cache-key-source",
                "--cache-key-file",
                "--offline-event-qps",
                "--outage-save-interval-seconds",
                "--outage-flap-window-seconds",
            ),
        ),
        Topic(
            "Listening",
            common=("--enable-dummy-if",),
            more=(
                "--bind-address",
                "--serve-port",
                "--metrics-bind-address",
                "--metrics-port",
                "--bind-proxy-address",
                "--proxy-port",
                "--proxy-secure-port",
                "--proxy-accept-hosts",
                "--dummy-if-ip",
                "--dummy-if-name",
            ),
        ),
        Topic(
            "Health checks and storms",
            more=(
                "--heartbeat-interval-seconds",
                "--heartbeat-timeout-seconds",
                "--heartbeat-healthy-threshold",
                "--heartbeat-failed-retry",
                "--kubelet-health-grace-period",
                "--relist-spread-seconds",
                "--leader-relist-spread-seconds",
                "--heal-spread-seconds",
                "--max-retry-after-seconds",
            ),
        ),
        Topic(
            "Limits and timeouts",
            more=(
                "--max-requests-in-flight",
                "--max-long-running-requests",
                "--max-requests-in-flight-per-client",
                "--max-long-running-requests-per-client",
                "--proxy-max-connections",
                "--proxy-read-header-timeout-seconds",
                "--proxy-idle-timeout-seconds",
                "--upstream-header-deadline-seconds",
                "--upstream-idle-timeout-seconds",
                "--upstream-http2-watches",
                "--min-request-timeout",
                "--shutdown-grace-seconds",
            ),
        ),
        Topic(
            "Filters (docs/filters.md)",
            more=(
                "--enable-resource-filter",
                "--disabled-resource-filters",
                "--enable-node-pool",
                "--enable-pool-service-topology",
            ),
        ),
        Topic(
            "Pool scope (docs/pool.md)",
            more=("--pool-scope-resources", "--multiplexer-port", "--multiplexer-max-memory-mib"),
        ),
        Topic(
            "Migrating from YurtHub (docs/migrating.md)",
            more=(
                "--migrate-from-yurthub",
                "--yurthub-cache-dir",
                "--yurthub-root-dir",
                "--port-wait-timeout",
            ),
        ),
        Topic(
            "Device discovery in the hub's process (docs/discovery.md)",
            common=("--enable-discovery", "--embedded-handlers"),
            more=(
                "--discovery-handlers-directory",
                "--device-plugins-dir",
                "--pod-resources-socket",
                "--cdi-dir",
                "--handler-networks",
                "--writable-mount-handlers",
                "--protected-mount-paths",
            ),
        ),
        _all("Logging and version", "--v", "--version"),
    ),
    "agent": (
        Topic(
            "Cloud and node",
            common=("--node-name", "--kubeconfig", "--server-addr"),
            more=("--service-account-dir",),
        ),
        Topic(
            "Discovery handlers",
            common=("--discovery-handlers-directory", "--embedded-handlers", "--enable-debug-echo"),
            more=("--handler-networks", "--writable-mount-handlers", "--protected-mount-paths"),
        ),
        Topic(
            "kubelet and CDI",
            more=("--device-plugins-dir", "--pod-resources-socket", "--cdi-dir"),
        ),
        _all("Metrics", "--metrics-address", "--metrics-port"),
        Topic(
            "Timing",
            more=(
                "--reclaim-interval",
                "--reclaim-grace",
                "--settle-seconds",
                "--registration-window-seconds",
                "--requeue-seconds",
            ),
        ),
    ),
    "manager": (
        _all("Cloud", "--kubeconfig", "--service-account-dir", "--controllers"),
        Topic(
            "Leader election",
            common=("--leader-elect",),
            more=(
                "--leader-elect-namespace",
                "--leader-elect-lease-name",
                "--leader-elect-lease-duration",
                "--leader-elect-renew-deadline",
                "--leader-elect-retry-period",
            ),
        ),
        _all("Health and metrics", "--bind-address", "--health-port"),
        Topic(
            "Configuration webhook",
            common=("--webhook-tls-cert-file", "--webhook-tls-key-file"),
            more=("--webhook-bind-address", "--webhook-port"),
        ),
        Topic(
            "csrapprover (hub certificates)",
            more=(
                "--hub-cert-organizations",
                "--cluster-domain",
                "--hub-dummy-if-ips",
                "--concurrent-csr-workers",
            ),
        ),
        Topic("brokers", more=("--concurrent-broker-workers",)),
        Topic("hubleaderconfig", more=("--namespace",)),
        Topic(
            "autonomy",
            more=(
                "--default-not-ready-toleration-seconds",
                "--default-unreachable-toleration-seconds",
            ),
        ),
        Topic(
            "yurtstaticset",
            more=(
                "--yurtstaticset-owner",
                "--static-pod-upgrade-image",
                "--static-pod-path",
                "--static-pod-upgrade-timeout",
                "--rollout-node-ready-timeout",
                "--yurt-manager-lease",
            ),
        ),
    ),
    "rollout": (),
    "rollout status": (_all("Options", "--pool", "--namespace", "--output", "--kubeconfig"),),
    "rollout history": (_all("Options", "--namespace", "--pool", "--kubeconfig"),),
    "rollout undo": (_all("Options", "--namespace", "--pool", "--to-revision", "--kubeconfig"),),
    "rollout resume": (_all("Options", "--namespace", "--pool", "--kubeconfig"),),
    "rollout pause": (_all("Options", "--namespace", "--pool", "--reason", "--kubeconfig"),),
    "static-pod-upgrade": (
        _all(
            "The static Pod",
            "--name",
            "--namespace",
            "--manifest",
            "--hash",
            "--mode",
            "--static-pod-path",
            "--configmap-dir",
        ),
        _all("Readiness", "--timeout", "--readyz-url", "--status-url", "--poll-interval"),
    ),
    "handler": (
        _all(
            "Options",
            "--discovery-handlers-directory",
            "--pod-ip",
            "--port",
            "--socket-path",
            "--registration-retry",
            "--interval",
        ),
    ),
    "discover": (_all("Options", "--details", "--property", "--output", "--timeout"),),
    "sim-apiserver": (
        _all(
            "Options",
            "--host",
            "--port",
            "--seed",
            "--kubeconfig-out",
            "--insecure-port",
            "--workdir",
            "--bookmark-interval",
        ),
    ),
    "partition": (
        _all(
            "Options",
            "--listen",
            "--upstream",
            "--mode",
            "--latency",
            "--interval",
            "--control",
        ),
    ),
    "demo": (_all("Options", "--workdir", "--exit"),),
    "status": (_all("Options", "--server", "--agent", "--output", "--history"),),
    "cache": (),
    "cache get": (_all("Options", "--disk-cache-path", "--cache-key-source", "--cache-key-file"),),
    "cache import-yurthub": (
        _all("Options", "--disk-cache-path", "--from", "--cache-key-source", "--cache-key-file"),
    ),
    "cache ls": (_all("Options", "--disk-cache-path", "--cache-key-source", "--cache-key-file"),),
    "cache rotate-key": (
        _all("Options", "--disk-cache-path", "--cache-key-source", "--cache-key-file"),
    ),
    "cache stats": (_all("Options", "--disk-cache-path"),),
    "cache verify": (
        _all("Options", "--disk-cache-path", "--cache-key-source", "--cache-key-file"),
    ),
    "cache unseal-identity": (
        _all(
            "Options", "--disk-cache-path", "--root-dir", "--cache-key-source", "--cache-key-file"
        ),
    ),
    "cluster": (),
    "cluster up": (_all("Options", "--dir", "--bin-dir", "--timeout"),),
    "cluster down": (_all("Options", "--dir"),),
    "cluster node": (_all("Options", "--dir", "--bin-dir", "--name", "--server", "--no-proxy"),),
}
"""Command path (after ``edgehub``; "" is ``edgehub`` itself) -> its topics, in help order."""


def option_name(option: click.Option) -> str:
    """The name an option goes by in ``TOPICS``: its first long flag, else its first flag."""
    longs = [o for o in option.opts if o.startswith("--")]
    return (longs or option.opts)[0]


def problems(command: click.Command, path: str) -> list[str]:
    """What keeps ``command`` (``edgehub <path>``) from grouped help, one sentence each: an
    option in no topic, a topic naming an option the command does not have, an option in two
    topics, a command that is not a ``helpgroups`` one. Empty: all is well."""
    where = f"TOPICS[{path!r}] in cmd/edgehub/helpgroups.py"
    shown = f"edgehub {path}".strip()
    options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
    names = [option_name(o) for o in options if option_name(o) != HELP_ALL_OPTION]
    if not isinstance(command, TopicsMixin):
        if not names:
            return []
        return [
            f"{shown} is a plain click command: give it cls=helpgroups.Command, topics={path!r}"
        ]
    out: list[str] = []
    listed: list[str] = [n for t in command.topics for n in t.options]
    for name in names:
        if name not in listed:
            out.append(
                f"{shown} {name} is in no help topic: add it to a topic of {where} "
                "(common: --help shows it; more: only --help-all)"
            )
    for name in sorted(set(listed) - set(names)):
        out.append(f"{shown} has no option {name}, yet {where} lists it")
    for name in sorted({n for n in listed if listed.count(n) > 1}):
        out.append(f"{shown} {name} is in two topics of {where}")
    return out


def _show_all(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        ctx.meta[HELP_ALL] = True
        click.echo(ctx.get_help(), color=ctx.color)
        ctx.exit()


def _help_all_option() -> click.Option:
    return click.Option(
        [HELP_ALL_OPTION],
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_show_all,
        help="Show every option, grouped by topic, and exit.",
    )


class HelpContext(click.Context):
    """A context whose help is laid out by cloup's formatter (imported only for help)."""

    def make_formatter(self) -> click.HelpFormatter:
        import cloup

        return cloup.HelpFormatter(width=self.terminal_width, max_width=self.max_content_width)


@dataclasses.dataclass(frozen=True)
class Section:
    """PURE data: one section of a command's help, (option, help) rows."""

    heading: str
    rows: list[tuple[str, str]]


class TopicsMixin:
    """Groups a command's options by ``TOPICS[topics]``: ``--help`` shows the common ones (and
    names what it left out), ``--help-all`` every one."""

    context_class: type[click.Context] = HelpContext
    default_topics: str | None = None
    """``topics`` when the constructor is given none (the root group: "")."""

    def __init__(self, *args: Any, topics: str | None = None, **kwargs: Any) -> None:
        topics = self.default_topics if topics is None else topics
        if topics is None:
            raise TypeError("a helpgroups command needs topics=<its path in TOPICS>")
        if topics not in TOPICS:
            raise KeyError(f"edgehub {topics}: no entry in TOPICS (cmd/edgehub/helpgroups.py)")
        self.topics: tuple[Topic, ...] = TOPICS[topics]
        self.topics_key = topics
        kwargs["params"] = [*(kwargs.get("params") or ()), _help_all_option()]
        super().__init__(*args, **kwargs)

    @property
    def common(self) -> frozenset[str]:
        return frozenset(n for t in self.topics for n in t.common)

    def folded(self) -> list[str]:
        """PURE: titles of the topics ``--help`` leaves out entirely."""
        return [t.title for t in self.topics if not t.common and t.more]

    def hidden_count(self) -> int:
        """PURE: how many options only ``--help-all`` shows."""
        return sum(len(t.more) for t in self.topics)

    def sections(self, ctx: click.Context, *, every: bool) -> list[Section]:
        """The option sections of the help: one per topic with something to show, in
        ``TOPICS`` order, then what no topic lists (``--help``, ``--help-all``...)."""
        command = ctx.command
        options = [
            p for p in command.get_params(ctx) if isinstance(p, click.Option) and not p.hidden
        ]
        by_name = {option_name(o): o for o in options}
        shown = {n for t in self.topics for n in (t.options if every else t.common)}
        out: list[Section] = []
        for topic in self.topics:
            rows = [
                record
                for name in topic.options
                if name in shown and name in by_name
                if (record := by_name[name].get_help_record(ctx)) is not None
            ]
            if rows:
                out.append(Section(topic.title, rows))
        listed = {n for t in self.topics for n in t.options}
        rest = [o for o in options if option_name(o) not in listed]
        rows = [r for o in rest if (r := o.get_help_record(ctx)) is not None]
        if rows:
            helps = {
                id(command.get_help_option(ctx)),
                *(id(o) for o in rest if option_name(o) == HELP_ALL_OPTION),
            }
            plain = all(id(o) in helps for o in rest)
            if plain and len(out) == 1 and out[0].heading == "Options":
                out[0] = Section("Options", [*out[0].rows, *rows])
            else:
                heading = "Other options" if not plain else "Help" if out else "Options"
                out.append(Section(heading, rows))
        return out

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections = self.sections(ctx, every=bool(ctx.meta.get(HELP_ALL)))
        write_many = getattr(formatter, "write_many_sections", None)
        if write_many is not None:  # cloup's formatter (HelpContext): aligned sections
            from cloup.formatting import HelpSection

            write_many([HelpSection(s.heading, s.rows) for s in sections], aligned=True)
        else:  # a plain click formatter: one definition list per section
            for s in sections:
                with formatter.section(s.heading):
                    formatter.write_dl(s.rows)
        if isinstance(self, click.Group):
            self.format_commands(ctx, formatter)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)  # type: ignore[misc]
        more = self.hidden_count()
        if ctx.meta.get(HELP_ALL) or not more:
            return
        folded = self.folded()
        formatter.write_paragraph()
        formatter.write_text(
            f"{ctx.command_path} {HELP_ALL_OPTION} shows {more} more options"
            + (f", among them: {', '.join(folded)}." if folded else ".")
        )


class Command(TopicsMixin, click.Command):
    """A command whose options ``TOPICS`` groups."""


class Group(TopicsMixin, click.Group):
    """A command group whose options ``TOPICS`` groups."""
