"""The root command group.

Sub-commands are imported lazily: ``edgehub handler udev`` should not pay for
importing aiohttp and the hub, and a broken optional dependency of one command
must not break the others.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import importlib
import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import click

from edgehub import helpgroups

T = TypeVar("T")

# name -> "module:attribute" of a click command. Keep sorted.
COMMANDS: dict[str, str] = {
    "agent": "edgehub.agent:command",
    "cache": "edgehub.cache:command",
    "cluster": "edgehub.cluster:command",
    "demo": "edgehub.demo:command",
    "discover": "edgehub.discover:command",
    "handler": "edgehub.handler:command",
    "hub": "edgehub.hub:command",
    "manager": "edgehub.manager:command",
    "partition": "edgehub.partition:command",
    "rollout": "edgehub.rollout:command",
    "sim-apiserver": "edgehub.sim_apiserver:command",
    "static-pod-upgrade": "edgehub.staticpodupgrade:command",
    "status": "edgehub.status:command",
}

ENV_PREFIX = "EDGEHUB"

# Sub-commands pass this as ``context_settings`` so that every flag ``--foo-bar``
# also reads ``EDGEHUB_FOO_BAR`` (not click's default EDGEHUB_<CMD>_FOO_BAR).
COMMAND_CONTEXT: dict[str, object] = {
    "auto_envvar_prefix": ENV_PREFIX,
    "show_default": True,
    "max_content_width": 100,
}

# Exit code for failures before the program could start (bad flags, unreadable
# files, ports in use): distinct from 1 so supervisors can tell config errors
# from crashes.
EXIT_STARTUP_FAILURE = 3


class LazyGroup(helpgroups.Group):
    default_topics = ""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in COMMANDS if _available(name))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, _, attr = target.partition(":")
        module = importlib.import_module(module_name)
        command = getattr(module, attr)
        assert isinstance(command, click.Command)
        return command


def _available(name: str) -> bool:
    module_name = COMMANDS[name].partition(":")[0]
    return importlib.util.find_spec(module_name) is not None


EVENT_LOOP_ENV = "EDGEHUB_EVENT_LOOP"
"""``uvloop`` runs the hub and the partition injector on uvloop instead of the standard loop."""

EVENT_LOOPS = ("asyncio", "uvloop")


def loop_factory(default: str = "asyncio") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop ``EDGEHUB_EVENT_LOOP`` names, else the command's ``default``; None: the
    standard loop.

    The standard loop is the default since a fleet storm met uvloop's descriptor bug
    (uvloop#653: a connect cancelled inside ``create_connection`` leaves the loop holding a
    transport on a descriptor the OS then reuses; docs/fleet.md). uvloop costs ~0.8x the CPU
    per proxied GET (``bench/proxy.py`` runs both side by side) and stays an opt-in. A value
    that names no loop, or uvloop where it is not installed, is an error, not a silent
    fallback. ``edgehub partition``, a test tool relaying every byte of the traffic it cuts,
    defaults to uvloop: the cheaper relay keeps the harness out of what a bench measures."""
    name = os.environ.get(EVENT_LOOP_ENV, "").strip().lower() or default
    if name not in EVENT_LOOPS:
        raise click.UsageError(
            f"{EVENT_LOOP_ENV}={name!r} names no event loop; use one of {', '.join(EVENT_LOOPS)}"
        )
    if name == "asyncio":
        return None
    try:
        import uvloop
    except ImportError as error:
        raise click.UsageError(
            f"{EVENT_LOOP_ENV}=uvloop, but uvloop is not installed ({error})"
        ) from error
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


TLS_READ_BUFFER = 64 * 1024
"""Bytes the standard loop reads from a TLS connection's socket at a time, and so what each
TLS connection holds as its read buffer (``asyncio.sslproto.SSLProtocol.max_size``, 256 KiB
in CPython, zero-filled: resident memory from the first byte). A hub holds one TLS
connection to the apiserver per watch it forwards (HTTP/1.1), about 45 for a node with 30
pods: 13 MiB of buffers at 256 KiB, 4.5 MiB at 64 KiB; in the 09:12 fleet run the standard
loop's hubs were 128.6 MiB against YurtHub's 99.1 (measured here: 50 connections, both
ends, grow a process by 28.8 MiB at 256 KiB, 10.1 MiB at 64 KiB). A TLS record carries at
most 16 KiB, so a 64 KiB read still takes several records at once. uvloop has its own TLS
code and is not affected."""


def size_tls_buffers(read_buffer: int = TLS_READ_BUFFER) -> None:
    """Set the standard loop's TLS read buffer (``TLS_READ_BUFFER``) for this process: a
    documented class attribute of ``asyncio.sslproto.SSLProtocol``, read by every TLS
    connection the loop makes or accepts from then on."""
    asyncio.sslproto.SSLProtocol.max_size = read_buffer


def run(main: Coroutine[Any, Any, T], *, default_loop: str = "asyncio") -> T:
    """``asyncio.run`` on the loop ``loop_factory`` picks (``default_loop`` when
    ``EDGEHUB_EVENT_LOOP`` is unset), with its TLS read buffers sized (``size_tls_buffers``)."""
    size_tls_buffers()
    with asyncio.Runner(loop_factory=loop_factory(default_loop)) as runner:
        return runner.run(main)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # asyncio's own debug chatter is noise unless someone asks for it.
    if level.upper() != "DEBUG":
        logging.getLogger("asyncio").setLevel(logging.WARNING)


@click.group(cls=LazyGroup, context_settings={"auto_envvar_prefix": ENV_PREFIX})
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    help="Logging threshold.",
)
@click.version_option(package_name="edgehub")
def root(log_level: str) -> None:
    """edgehub: edge autonomy hub and device discovery for Kubernetes."""
    configure_logging(log_level)


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    # The image's ENTRYPOINT is `edgehub`: `ctr run IMAGE ID edgehub cache ...` runs
    # `edgehub edgehub cache ...`. A leading `edgehub` word is the program's own name: drop it.
    if len(sys.argv) > 1 and sys.argv[1] == "edgehub":
        del sys.argv[1]
    root(prog_name="edgehub")
