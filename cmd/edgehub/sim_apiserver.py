"""``edgehub sim-apiserver``: run the simulated kube-apiserver until SIGINT/SIGTERM.

Prints the URL (and the insecure URL when enabled) on stdout once it serves, so
scripts can start it with ``--port 0`` and read where it landed. The first
signal stops it cleanly (listeners closed, open watches ended); a second one
exits at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import signal
import sys

import click

from edgehub import cli, helpgroups
from yurthub.testing import simapiserver
from yurthub.testing.sim import seeding


async def run(
    *,
    host: str,
    port: int,
    seed: str,
    kubeconfig_out: pathlib.Path | None,
    insecure_port: int | None,
    workdir: pathlib.Path | None,
    bookmark_interval: float,
) -> None:
    sim = simapiserver.SimApiserver(
        host=host,
        port=port,
        seed=seed,
        insecure_port=insecure_port,
        workdir=workdir,
        bookmark_interval=bookmark_interval,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            # Second signal: the user does not want to wait for a clean stop.
            os._exit(130)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    await sim.start()
    try:
        if kubeconfig_out is not None:
            sim.write_kubeconfig(
                kubeconfig_out, user=simapiserver.ADMIN_USER, groups=simapiserver.ADMIN_GROUPS
            )
        click.echo(sim.url)
        if sim.insecure_url:
            click.echo(sim.insecure_url)
        if kubeconfig_out is not None:
            click.echo(f"kubeconfig written to {kubeconfig_out}", err=True)
        sys.stdout.flush()
        await stop.wait()
    finally:
        await sim.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)


@click.command(
    "sim-apiserver",
    cls=helpgroups.Command,
    topics="sim-apiserver",
    context_settings=cli.COMMAND_CONTEXT,
)
@click.option("--host", default="127.0.0.1", help="Address to listen on (keep it on loopback).")
@click.option(
    "--port", default=6443, type=click.IntRange(0, 65535), help="HTTPS port; 0 picks one."
)
@click.option(
    "--seed",
    default="demo",
    help="Initial cluster: demo, none, or scale:N (demo plus N pods).",
)
@click.option(
    "--kubeconfig-out",
    type=click.Path(dir_okay=False, path_type=pathlib.Path),
    default=None,
    help="Write an admin kubeconfig (client certificate, CA embedded) here.",
)
@click.option(
    "--insecure-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Also serve plain HTTP without authentication on this port (0 picks one).",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=pathlib.Path),
    default=None,
    help="Where CA, serving certificate and admin kubeconfig go (default: a temp dir).",
)
@click.option(
    "--bookmark-interval",
    type=click.FloatRange(min=0.05),
    default=60.0,
    help="Seconds between BOOKMARK events on idle watches that ask for them.",
)
def command(
    host: str,
    port: int,
    seed: str,
    kubeconfig_out: pathlib.Path | None,
    insecure_port: int | None,
    workdir: pathlib.Path | None,
    bookmark_interval: float,
) -> None:
    """Run a simulated kube-apiserver that kubectl and client libraries accept.

    Every authenticated user may do everything (no RBAC). Stop with Ctrl-C.
    """
    try:
        seeding.parse(seed)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--seed") from e
    try:
        asyncio.run(
            run(
                host=host,
                port=port,
                seed=seed,
                kubeconfig_out=kubeconfig_out,
                insecure_port=insecure_port,
                workdir=workdir,
                bookmark_interval=bookmark_interval,
            )
        )
    except OSError as e:
        click.echo(f"edgehub sim-apiserver: cannot listen on {host}:{port}: {e}", err=True)
        sys.exit(cli.EXIT_STARTUP_FAILURE)
