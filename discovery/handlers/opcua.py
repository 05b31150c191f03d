"""``opcua``: OPC UA servers found with FindServers (asyncua), shared across nodes.

Details (Akri §8.3)::

    opcuaDiscoveryMethod:
      standard:
        discoveryUrls: ["opc.tcp://10.0.0.5:4840/"]   # default ["opc.tcp://localhost:4840/"]
    applicationNames: {items: ["Server A"], action: Include}   # optional

Each discovery URL (a server or a Local Discovery Server) gets a TCP reachability check
(``OPCUA_CONNECT_TIMEOUT_SECONDS``, default 3 s), then ``FindServers``. Of the returned
applications, servers are kept, filtered by application name, and reported by their first
``opc.tcp`` discovery URL; a URL whose host does not resolve gets the queried URL's scheme,
host and port with its own path (servers often advertise an internal host name). Device
``id`` and property ``OPCUA_DISCOVERY_URL`` are that URL.

Deliberate differences from Akri ([quirk]s or careful-user choices):
  * A malformed discovery URL (not ``opc.tcp://host:port``) is skipped, as Akri skips it, but
    not silently: a details warning names the entry (the handler logs it, the webhook returns
    it as an admission warning) instead of nothing at every poll.
  * All duplicate URLs are removed (Akri removes only consecutive ones).
  * ``ClientAndServer`` applications are servers too and are kept (Akri keeps only
    ``Server``); discovery servers and clients are ignored.
  * ``opcuaDiscoveryMethod`` may be omitted (defaults to ``standard`` with the default URL).
An unreachable URL is logged and contributes no devices; it never fails the stream.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from discovery import details, devices, filtering, sdk

logger = logging.getLogger(__name__)

NAME = "opcua"
URL_PROPERTY = "OPCUA_DISCOVERY_URL"
DEFAULT_URL = "opc.tcp://localhost:4840/"
DEFAULT_CONNECT_TIMEOUT = 3.0
DEFAULT_INTERVAL = 10.0
MAX_CONCURRENT_QUERIES = 8
RESOLVE_TIMEOUT = 2.0


@dataclasses.dataclass(frozen=True, slots=True)
class Details:
    discovery_urls: tuple[str, ...] = (DEFAULT_URL,)
    application_names: filtering.FilterList | None = None
    warnings: tuple[str, ...] = ()


def _check_url(url: str, field: str) -> str:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise details.DetailsError(field, f"invalid URL {url!r}: {e}") from e
    if parts.scheme != "opc.tcp":
        raise details.DetailsError(field, f"scheme must be opc.tcp, got {url!r}")
    if not parts.hostname or port is None:
        raise details.DetailsError(field, f"URL needs a host and an explicit port: {url!r}")
    return url


def parse_details(text: str) -> Details:
    values = details.mapping(details.load(text), "", ("opcuaDiscoveryMethod", "applicationNames"))
    urls: tuple[str, ...] = (DEFAULT_URL,)
    if details.optional(values, "opcuaDiscoveryMethod") is not None:
        # An enum in Akri (one variant, ``standard``): another key is an error, as in serde.
        method = details.mapping(
            values["opcuaDiscoveryMethod"], "opcuaDiscoveryMethod", ("standard",), variants=True
        )
        field = "opcuaDiscoveryMethod.standard"
        if "standard" not in method:
            raise details.DetailsError("opcuaDiscoveryMethod", "required: standard")
        standard = details.mapping(method["standard"], field, ("discoveryUrls",))
        if details.optional(standard, "discoveryUrls") is not None:
            field = f"{field}.discoveryUrls"
            listed = details.string_list(standard["discoveryUrls"], field)
            kept = []
            for i, url in enumerate(listed):
                try:
                    kept.append(_check_url(url, details.join(field, i)))
                except details.DetailsError as e:
                    details.warn(values, f"{e}; skipped, as Akri skips it")
            urls = tuple(kept)
    names = filtering.parse(values.get("applicationNames"), "applicationNames")
    return Details(urls, names, details.warnings_of(values))


# --------------------------------------------------------------------------- pure decisions


@dataclasses.dataclass(frozen=True, slots=True)
class Application:
    """The fields of a FindServers ``ApplicationDescription`` that discovery uses."""

    name: str
    kind: str
    """``Server``, ``Client``, ``ClientAndServer`` or ``DiscoveryServer``."""
    discovery_urls: tuple[str, ...]


SERVER_KINDS = frozenset({"Server", "ClientAndServer"})


def pick_url(app: Application) -> str | None:
    """First ``opc.tcp`` discovery URL, else the first one at all."""
    for url in app.discovery_urls:
        if url.startswith("opc.tcp"):
            return url
    return app.discovery_urls[0] if app.discovery_urls else None


def with_queried_host(url: str, queried: str) -> str:
    """``url`` with the scheme, host and port of ``queried`` (keeps ``url``'s path)."""
    own, base = urlsplit(url), urlsplit(queried)
    return urlunsplit((base.scheme, base.netloc, own.path, own.query, own.fragment))


def host_of(url: str) -> str | None:
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None


def selected_urls(
    apps: Sequence[Application],
    queried: str,
    names: filtering.FilterList | None,
    resolvable: Mapping[str, bool],
) -> list[str]:
    """Server URLs to report for one FindServers answer (``resolvable``: host -> resolves)."""
    urls = []
    for app in apps:
        if app.kind not in SERVER_KINDS or not filtering.should_include(names, app.name):
            continue
        url = pick_url(app)
        if url is None:
            continue
        host = host_of(url)
        if host is None or not resolvable.get(host, False):
            url = with_queried_host(url, queried)
        urls.append(url)
    return urls


def unique(urls: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(urls))


def to_devices(urls: Sequence[str]) -> list[devices.Device]:
    return [devices.Device(id=url, properties={URL_PROPERTY: url}) for url in unique(urls)]


# --------------------------------------------------------------------------- I/O


async def _reachable(url: str, seconds: float) -> bool:
    parts = urlsplit(url)
    try:
        async with asyncio.timeout(seconds):
            _, writer = await asyncio.open_connection(parts.hostname, parts.port)
    except (OSError, TimeoutError) as e:
        logger.warning("OPC UA discovery URL %s is unreachable: %s", url, str(e) or "timeout")
        return False
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return True


async def _resolves(host: str) -> bool:
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT):
            await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError):
        return False
    return True


def _application(description: Any) -> Application:
    kind = getattr(description.ApplicationType, "name", str(description.ApplicationType))
    name = description.ApplicationName.Text if description.ApplicationName else ""
    return Application(name or "", kind, tuple(description.DiscoveryUrls or ()))


async def find_servers(url: str, seconds: float) -> list[Application]:
    """FindServers on ``url`` (a server or an LDS); raises on protocol/transport errors."""
    from asyncua.client.client import Client  # heavy: only opcua handler processes load it

    client = Client(url, timeout=seconds)
    async with asyncio.timeout(seconds * 2):
        found = await client.connect_and_find_servers()
    return [_application(d) for d in found]


async def query(url: str, parsed: Details, connect_timeout: float) -> list[str]:
    """Server URLs found through one discovery URL; [] when it is unreachable or fails."""
    if not await _reachable(url, connect_timeout):
        return []
    try:
        apps = await find_servers(url, connect_timeout)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # asyncua raises many types for a misbehaving peer
        logger.warning("FindServers on %s failed: %s", url, str(e) or type(e).__name__)
        return []
    hosts = {h for app in apps for u in app.discovery_urls if (h := host_of(u)) is not None}
    resolved = {host: await _resolves(host) for host in sorted(hosts)}
    return selected_urls(apps, url, parsed.application_names, resolved)


async def discover_once(parsed: Details, connect_timeout: float) -> list[devices.Device]:
    limit = asyncio.Semaphore(MAX_CONCURRENT_QUERIES)

    async def bounded(url: str) -> list[str]:
        async with limit:
            return await query(url, parsed, connect_timeout)

    async with asyncio.TaskGroup() as tg:
        tasks = [
            tg.create_task(bounded(url), name=f"opcua FindServers {url}")
            for url in parsed.discovery_urls
        ]
    return to_devices([u for task in tasks for u in task.result()])


@dataclasses.dataclass(frozen=True, slots=True)
class OpcUa:
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    interval: float = DEFAULT_INTERVAL
    name: str = NAME
    shared: bool = True

    def parse_details(self, text: str) -> Details:
        return parse_details(text)

    async def discover(
        self, details: Details, properties: Mapping[str, bytes]
    ) -> AsyncGenerator[list[devices.Device], None]:
        while True:
            yield await discover_once(details, self.connect_timeout)
            await asyncio.sleep(self.interval)


def create(options: sdk.HandlerOptions) -> OpcUa:
    return OpcUa(
        connect_timeout=sdk.env_seconds(
            options.environ, "OPCUA_CONNECT_TIMEOUT_SECONDS", DEFAULT_CONNECT_TIMEOUT
        ),
        interval=options.poll_interval("OPCUA_DISCOVERY_INTERVAL_SECONDS", DEFAULT_INTERVAL),
    )
