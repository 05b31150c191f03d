"""``debugEcho``: reports one device per configured description, for tests and demos.

Details: ``descriptions: [<string>, ...]`` (required; an empty list is allowed; any scalar is
taken as its text, as Akri's serde_yaml does, so ``[1, yes, 0x1F]`` are three descriptions;
other keys are ignored with a warning). Each description ``d`` becomes
``Device(id=d, properties={"DEBUG_ECHO_DESCRIPTION": d})``.

Availability: while the availability file (default ``/tmp/debug-echo-availability.txt``,
env ``DEBUG_ECHO_AVAILABILITY_FILE``) contains ``OFFLINE`` the handler reports an empty
list. The file is polled (default every second, env ``DEBUG_ECHO_POLL_SECONDS`` or the
handler interval) rather than every 10 s as in Akri, so toggling it shows up quickly; a read
is a tiny file and goes through the executor.

``shared`` comes from ``DEBUG_ECHO_INSTANCES_SHARED`` (``true``/``false``); any other value is
a startup error. **Difference from Akri:** Akri's debugEcho *requires* the variable (it exits at
startup when it is unset) and its Helm chart always sets it (``debugEcho.configuration.shared``,
default ``true``); ours defaults an unset variable to ``true``, the chart's value, and says so
in one log line. Set it explicitly where a manifest must also suit Akri's handler.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncGenerator, Mapping
from pathlib import Path

from discovery import details, devices, sdk

logger = logging.getLogger(__name__)

NAME = "debugEcho"
SHARED_VARIABLE = "DEBUG_ECHO_INSTANCES_SHARED"
DEFAULT_SHARED = "true"
"""Used when ``SHARED_VARIABLE`` is unset, where Akri's handler refuses to start (see above)."""
DESCRIPTION_PROPERTY = "DEBUG_ECHO_DESCRIPTION"
DEFAULT_AVAILABILITY_FILE = Path("/tmp/debug-echo-availability.txt")
OFFLINE = "OFFLINE"
DEFAULT_POLL_SECONDS = 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class Details:
    descriptions: tuple[str, ...]
    warnings: tuple[str, ...] = ()


def parse_details(text: str) -> Details:
    values = details.mapping(details.load(text), "", ("descriptions",))
    descriptions = details.string_list(details.required(values, "descriptions"), "descriptions")
    return Details(tuple(descriptions), details.warnings_of(values))


def devices_for(parsed: Details, available: bool) -> list[devices.Device]:
    if not available:
        return []
    return [devices.Device(id=d, properties={DESCRIPTION_PROPERTY: d}) for d in parsed.descriptions]


def _read_available(path: Path) -> bool:
    try:
        return OFFLINE not in path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return True
    except OSError:
        # An unreadable file is not a statement that devices are offline.
        return True


@dataclasses.dataclass(frozen=True, slots=True)
class DebugEcho:
    shared: bool = True
    availability_file: Path = DEFAULT_AVAILABILITY_FILE
    poll_seconds: float = DEFAULT_POLL_SECONDS
    name: str = NAME

    def parse_details(self, text: str) -> Details:
        return parse_details(text)

    async def discover(
        self, details: Details, properties: Mapping[str, bytes]
    ) -> AsyncGenerator[list[devices.Device], None]:
        while True:
            available = await asyncio.to_thread(_read_available, self.availability_file)
            yield devices_for(details, available)
            await asyncio.sleep(self.poll_seconds)


def parse_bool(text: str, variable: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"{variable} must be true or false, got {text!r}")
    return lowered == "true"


def create(options: sdk.HandlerOptions) -> DebugEcho:
    env = options.environ
    raw = env.get(SHARED_VARIABLE)
    if raw is None:
        # Akri's debugEcho exits here; we take its Helm chart's value instead.
        logger.info(
            "%s is unset: devices are shared (%s); Akri's debugEcho requires it to be set",
            SHARED_VARIABLE,
            DEFAULT_SHARED,
        )
        raw = DEFAULT_SHARED
    shared = parse_bool(raw, SHARED_VARIABLE)
    poll = options.poll_interval("DEBUG_ECHO_POLL_SECONDS", DEFAULT_POLL_SECONDS)
    path = Path(env.get("DEBUG_ECHO_AVAILABILITY_FILE", str(DEFAULT_AVAILABILITY_FILE)))
    return DebugEcho(shared=shared, availability_file=path, poll_seconds=poll)
