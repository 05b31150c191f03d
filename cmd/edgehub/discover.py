"""``edgehub discover <handler> --details FILE|-``: run one handler once, print its devices.

Lets an operator try ``discoveryDetails`` before writing a Configuration. The handler runs
in-process (no agent, no sockets); the first device list it reports is printed as a table or,
with ``-o json``, as a JSON list of ``{id, properties, mounts, deviceSpecs}``. ``--details`` may
also be a whole Configuration (``kind: Configuration``): its ``spec.discoveryHandler`` gives
the details and the literal ``discoveryProperties`` (ones read from a Secret or ConfigMap must
be given with ``--property``); a handler name other than HANDLER is an error naming both.

Exit codes: 0 devices printed (possibly none); 2 bad details or properties (one-line error);
1 the handler failed or reported nothing within ``--timeout``; 3 unknown handler.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any, NoReturn, TextIO

import click
import yaml

from discovery import details, devices, sdk
from edgehub import cli, helpgroups
from inputbounds import nesting

EXIT_BAD_INPUT = 2


@click.command(
    "discover", cls=helpgroups.Command, topics="discover", context_settings=cli.COMMAND_CONTEXT
)
@click.argument("handler_name", metavar="HANDLER")
@click.option(
    "--details",
    "details_file",
    required=True,
    type=click.File("r", encoding="utf-8"),
    help="File with the discoveryDetails (YAML or JSON); '-' reads standard input.",
)
@click.option(
    "--property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="A discoveryProperties entry (repeatable), e.g. username_default=admin.",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json"]),
    default="table",
    help="Output format.",
)
@click.option(
    "--timeout",
    default=10.0,
    type=click.FloatRange(min=0.1),
    help="Seconds to wait for the handler's first device list.",
)
def command(
    handler_name: str,
    details_file: TextIO,
    properties: tuple[str, ...],
    output: str,
    timeout: float,
) -> None:
    """Discover devices once with HANDLER and print them."""
    try:
        text = details_file.read(details.MAX_DETAILS_BYTES + 1)
    except UnicodeDecodeError as e:
        _fail(EXIT_BAD_INPUT, f"--details is not UTF-8 text ({e.reason})")
    try:
        text, from_configuration = configuration_details(text, handler_name)
    except ValueError as e:
        _fail(EXIT_BAD_INPUT, str(e))
    parsed_properties: dict[str, bytes] = {}
    missing = [n for n, v in from_configuration.items() if v is None]
    parsed_properties.update({n: v for n, v in from_configuration.items() if v is not None})
    for item in properties:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(EXIT_BAD_INPUT, f"--property must be KEY=VALUE, got {item!r}")
        parsed_properties[key] = value.encode()
    unresolved = [n for n in missing if n not in parsed_properties]
    if unresolved:
        _fail(
            EXIT_BAD_INPUT,
            "discoveryProperties read from a Secret or ConfigMap cannot be resolved here: give "
            + ", ".join(f"--property {n}=..." for n in unresolved),
        )
    try:
        handler = sdk.load(handler_name, sdk.HandlerOptions(environ=dict(os.environ)))
    except sdk.HandlerNotFoundError as e:
        _fail(cli.EXIT_STARTUP_FAILURE, str(e))
    except ValueError as e:
        _fail(cli.EXIT_STARTUP_FAILURE, f"cannot start {handler_name}: {e}")
    try:
        found = asyncio.run(_discover(handler, text, parsed_properties, timeout))
    except details.DetailsError as e:
        _fail(EXIT_BAD_INPUT, f"invalid discoveryDetails for {handler_name}: {e}")
    except TimeoutError:
        _fail(1, f"{handler_name} reported no device list within {timeout:g}s")
    except Exception as e:  # a handler failure is reported, not dumped as a traceback
        _fail(1, f"{handler_name} discovery failed: {e}")
    for warning in sdk.details_warnings(handler.parse_details(text)):
        click.echo(f"warning: {warning}", err=True)
    if output == "json":
        click.echo(json.dumps([devices.to_json(d) for d in found], indent=2))
    else:
        click.echo(render_table(found), nl=False)


def configuration_details(text: str, handler_name: str) -> tuple[str, dict[str, bytes | None]]:
    """(discoveryDetails text, discoveryProperties) of ``text`` when it is a whole
    Configuration, else (``text``, {}). A property read from elsewhere maps to None. Pure."""
    try:
        doc = nesting.load_yaml(text)
    except yaml.YAMLError:
        return text, {}  # not YAML at all: the handler's parser reports it
    if not isinstance(doc, dict) or doc.get("kind") != "Configuration":
        return text, {}
    handler = ((doc.get("spec") or {}).get("discoveryHandler")) or {}
    if not isinstance(handler, dict):
        raise ValueError("the Configuration's spec.discoveryHandler is not an object")
    name = handler.get("name")
    if name != handler_name:
        raise ValueError(
            f"the Configuration's spec.discoveryHandler.name is {name!r}, not {handler_name!r}"
        )
    found = handler.get("discoveryDetails", "")
    if not isinstance(found, str):
        raise ValueError("the Configuration's spec.discoveryHandler.discoveryDetails is not text")
    out: dict[str, bytes | None] = {}
    for prop in handler.get("discoveryProperties") or []:
        if isinstance(prop, dict) and isinstance(prop.get("name"), str):
            value = prop.get("value")
            out[prop["name"]] = value.encode() if isinstance(value, str) else None
    return found, out


def _fail(code: int, message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


async def _discover(
    handler: sdk.Handler[Any], text: str, properties: dict[str, bytes], seconds: float
) -> list[devices.Device]:
    async with asyncio.timeout(seconds):
        return await sdk.discover_once(handler, text, properties)


def render_table(found: list[devices.Device]) -> str:
    """Aligned columns: ID, PROPERTIES (k=v, sorted), DEVICES (host device nodes)."""
    rows = [("ID", "PROPERTIES", "DEVICE NODES")]
    for device in found:
        props = ",".join(f"{k}={v}" for k, v in sorted(device.properties.items())) or "-"
        nodes = ",".join(s.host_path for s in device.device_specs) or "-"
        rows.append((device.id, props, nodes))
    if len(rows) == 1:
        return "No devices found.\n"
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = [
        f"{row[0].ljust(widths[0])}  {row[1].ljust(widths[1])}  {row[2]}".rstrip() for row in rows
    ]
    return "\n".join(lines) + "\n"
