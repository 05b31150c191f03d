"""``edgehub handler <name>``: run one discovery handler as an Akri-compatible process.

Serves ``v0.DiscoveryHandler`` on ``$DISCOVERY_HANDLERS_DIRECTORY/<name>.sock`` (or TCP on
``$POD_IP:10000``) and keeps it registered with the agent. SIGTERM/SIGINT stop it cleanly
(socket removed, exit 0); a second signal exits at once.

Imports stay lean on purpose: only the SDK and the selected handler module are loaded (the
handler process budget is 40 MB RSS), never aiohttp or the Kubernetes client.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import click

from discovery import sdk, signalling
from edgehub import cli, helpgroups


@click.command(
    "handler", cls=helpgroups.Command, topics="handler", context_settings=cli.COMMAND_CONTEXT
)
@click.argument("name")
@click.option(
    "--discovery-handlers-directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/var/lib/akri"),
    envvar=["DISCOVERY_HANDLERS_DIRECTORY", "EDGEHUB_DISCOVERY_HANDLERS_DIRECTORY"],
    help="Directory with the agent's registration socket (Akri: DISCOVERY_HANDLERS_DIRECTORY).",
)
@click.option(
    "--pod-ip",
    default=None,
    envvar=["POD_IP", "EDGEHUB_POD_IP"],
    help="Serve on TCP <pod-ip>:<port> and register a NETWORK endpoint (Akri: POD_IP).",
)
@click.option(
    "--port",
    default=sdk.DISCOVERY_PORT,
    type=click.IntRange(0, 65535),
    help="TCP port used with --pod-ip (0 picks a free port).",
)
@click.option(
    "--socket-path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Unix socket to serve on instead of <directory>/<name>.sock (it must be directly in "
    "the directory: the agent accepts no other).",
)
@click.option(
    "--registration-retry",
    default=10.0,
    type=click.FloatRange(min=0.05),
    help="Seconds between registration attempts while the agent is unreachable.",
)
@click.option(
    "--interval",
    default=None,
    type=click.FloatRange(min=0.01),
    help="Poll interval in seconds for polling handlers (default: the handler's).",
)
def command(
    name: str,
    discovery_handlers_directory: Path,
    pod_ip: str | None,
    port: int,
    socket_path: Path | None,
    registration_retry: float,
    interval: float | None,
) -> None:
    """Run the discovery handler NAME (debugEcho, udev, opcua, onvif, or a plugin)."""
    try:
        handler = sdk.load(name, sdk.HandlerOptions(environ=dict(os.environ), interval=interval))
    except (sdk.HandlerNotFoundError, ValueError) as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e
    settings = sdk.ServeSettings(
        directory=discovery_handlers_directory,
        pod_ip=pod_ip or None,
        port=port,
        socket_path=socket_path,
        registration_retry=registration_retry,
    )
    try:
        asyncio.run(signalling.run_until_signalled(sdk.serve(handler, settings)))
    except sdk.ServeError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(cli.EXIT_STARTUP_FAILURE) from e
