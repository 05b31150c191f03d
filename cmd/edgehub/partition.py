"""``edgehub partition``: the partition injector as a process, for manual tests and demos.

    edgehub partition --listen 127.0.0.1:16443 --upstream 127.0.0.1:6443 --mode pass \\
        --control 127.0.0.1:16444

Switch modes at run time over the control port::

    curl -X PUT '127.0.0.1:16444/mode?mode=blackhole'
    curl -X PUT '127.0.0.1:16444/mode?mode=latency&latency=0.5'
    curl -X PUT 127.0.0.1:16444/cut        # = blackhole;  /heal = pass
    curl 127.0.0.1:16444/mode              # read only (mode, bytes "relayed" each way)

or by typing ``blackhole``, ``pass``, ``cut``, ``heal``, ``latency 0.5``, ``flap 2`` ... on
stdin (an unknown word is answered with the list of known ones). Only loopback
addresses are accepted. Prints one line ``partition listening=<addr> upstream=<addr>
control=<url>`` once ready (tests parse it); SIGINT/SIGTERM stop it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
import sys
from collections.abc import Awaitable

import click
import orjson
from aiohttp import web

from edgehub import cli, helpgroups
from yurthub.testing import partition


def _address(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"{value!r} is not HOST:PORT")
    host = host.strip("[]") or "127.0.0.1"
    try:
        partition.require_loopback(host)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e
    return host, int(port)


@click.command(cls=helpgroups.Command, topics="partition", context_settings=cli.COMMAND_CONTEXT)
@click.option("--listen", default="127.0.0.1:0", help="HOST:PORT the hub connects to.")
@click.option("--upstream", required=True, help="HOST:PORT of the apiserver (loopback only).")
@click.option(
    "--mode",
    default=partition.Mode.PASS.value,
    type=click.Choice([m.value for m in partition.Mode]),
    help="Mode at start.",
)
@click.option("--latency", default=0.2, type=click.FloatRange(min=0), help="Seconds per chunk.")
@click.option("--interval", default=1.0, type=click.FloatRange(min=0.01), help="Flap period (s).")
@click.option("--control", default="127.0.0.1:0", help="HOST:PORT of the HTTP control port.")
def command(
    listen: str, upstream: str, mode: str, latency: float, interval: float, control: str
) -> None:
    """A TCP proxy that cuts, stalls, resets or slows the link to an apiserver on demand."""
    try:
        listen_at = _address(listen)
        upstream_at = _address(upstream)
        control_at = _address(control)
    except click.BadParameter as e:
        click.echo(f"edgehub partition: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e
    link = partition.Partition(
        upstream_at[0],
        upstream_at[1],
        listen_host=listen_at[0],
        listen_port=listen_at[1],
        mode=partition.Mode(mode),
        latency=latency,
        interval=interval,
    )
    try:
        cli.run(run(link, control_at), default_loop="uvloop")
    except OSError as e:
        click.echo(f"edgehub partition: cannot start: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e


def _state(link: partition.Partition) -> bytes:
    return orjson.dumps(
        {
            "mode": link.mode.value,
            "effective": link.effective().value,
            "latency": link.latency,
            "interval": link.interval,
            "accepted": link.accepted,
            "relayed": {"to_upstream": link.bytes_up, "from_upstream": link.bytes_down},
        }
    )


ALIASES = {"cut": partition.Mode.BLACKHOLE.value, "heal": partition.Mode.PASS.value}
"""The demo's words: ``cut`` is a silent link (blackhole), ``heal`` lets everything pass."""


def _mode(word: str) -> partition.Mode:
    word = ALIASES.get(word.strip().lower(), word.strip().lower())
    try:
        return partition.Mode(word)
    except ValueError:
        known = ", ".join([*(m.value for m in partition.Mode), *ALIASES])
        raise ValueError(f"unknown mode {word!r} (known: {known})") from None


async def _apply(link: partition.Partition, words: list[str]) -> None:
    """``<mode> [seconds]``: the number is the latency for ``latency``, the period for ``flap``."""
    if not words:
        return
    mode = _mode(words[0])
    number = float(words[1]) if len(words) > 1 else None
    if mode is partition.Mode.LATENCY:
        await link.set_mode(mode, latency=number)
    elif mode is partition.Mode.FLAP:
        await link.set_mode(mode, interval=number)
    else:
        await link.set_mode(mode)


def _control_app(link: partition.Partition) -> web.Application:
    async def get_mode(request: web.Request) -> web.Response:
        if "mode" in request.query:
            # A GET is a read (curl without -X, a browser, a prefetcher): never a switch.
            return web.Response(
                status=405,
                headers={"Allow": "GET, PUT, POST"},
                text="a GET only reads the mode; switch it with PUT (curl -X PUT "
                "'.../mode?mode=blackhole', or PUT /cut, /heal)\n",
            )
        return web.Response(body=_state(link), content_type="application/json")

    async def put_mode(request: web.Request) -> web.Response:
        query = request.query
        word = request.match_info.get("word") or query.get("mode", "")
        try:
            latency = float(query["latency"]) if "latency" in query else None
            interval = float(query["interval"]) if "interval" in query else None
            await link.set_mode(_mode(word), latency=latency, interval=interval)
        except ValueError as e:
            modes = ", ".join(m.value for m in partition.Mode)
            usage = f"want ?mode=<{modes}>[&latency=s][&interval=s], or PUT /cut, /heal"
            return web.Response(status=400, text=f"{e}; {usage}\n")
        return web.Response(body=_state(link), content_type="application/json")

    app = web.Application()
    app.router.add_get("/mode", get_mode)
    app.router.add_put("/mode", put_mode)
    app.router.add_post("/mode", put_mode)
    for word in ALIASES:
        app.router.add_put(f"/{{word:{word}}}", put_mode)
        app.router.add_post(f"/{{word:{word}}}", put_mode)
    return app


def _stdin_is_a_stream() -> bool:
    # epoll refuses regular files and /dev/null: read commands only from a pipe or a terminal.
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or sys.stdin.isatty()


async def _stdin_commands(link: partition.Partition) -> None:
    if not _stdin_is_a_stream():
        return
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    except (OSError, ValueError):
        return  # no usable stdin (closed, a terminal we cannot attach to): control port only
    while line := await reader.readline():
        words = line.decode(errors="replace").split()
        try:
            await _apply(link, words)
        except ValueError as e:
            print(f"bad command {' '.join(words)!r}: {e}", file=sys.stderr, flush=True)
            continue
        print(_state(link).decode(), flush=True)


async def _listening(what: str, at: tuple[str, int], start: Awaitable[None]) -> None:
    """Await ``start``; an ``OSError`` (uvloop's says only "Address already in use") is raised
    again naming what could not listen, and where."""
    try:
        await start
    except OSError as e:
        raise OSError(e.errno, f"{what} cannot listen on {at[0]}:{at[1]}: {e.strerror}") from e


async def run(link: partition.Partition, control_at: tuple[str, int]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(_control_app(link), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, control_at[0], control_at[1])
        await _listening("the control port", control_at, site.start())
        await _listening("the link", (link.listen_host, link.port), link.start())
        port = runner.addresses[0][1] if runner.addresses else control_at[1]
        print(
            f"partition listening={link.address} upstream={link.upstream_host}:"
            f"{link.upstream_port} control=http://{control_at[0]}:{port}",
            flush=True,
        )
        async with asyncio.TaskGroup() as tg:
            commands = tg.create_task(_stdin_commands(link), name="partition-stdin")
            await stop.wait()
            commands.cancel()
    finally:
        with contextlib.suppress(Exception):
            await link.stop()
        await runner.cleanup()
