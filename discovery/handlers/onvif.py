"""``onvif``: IP cameras found with WS-Discovery and checked over ONVIF SOAP; shared devices.

Details (Akri §8.4): optional filter lists ``ipAddresses``, ``macAddresses``, ``scopes``,
``uuids`` (``{items: [...], action: Include|Exclude}``) and ``discoveryTimeoutSeconds``
(default 1). Properties: credentials (``onvif_credentials``).

One pass: send a Probe (multicast 239.255.255.250:3702, or unicast to
``ONVIF_PROBE_TARGET=host:port``), collect ProbeMatches for the timeout, keep matches whose
scopes pass the scope filter, map every XAddr to the device uuid, apply the uuid filter, keep
URLs that answer ``GetSystemDateAndTime`` with HTTP 200 within 1 s, fetch IPv4 and MAC
with ``GetNetworkInterfaces`` (WS-Security UsernameToken when a credential exists; cached
for URLs already seen in the previous pass), and apply the ip/mac filters: a camera whose
ip/mac could not be fetched is dropped when that filter could reject anything.

Device: id ``<service url>-<uuid>``; properties ``ONVIF_DEVICE_SERVICE_URL``,
``ONVIF_DEVICE_UUID`` and, when known, ``ONVIF_DEVICE_IP_ADDRESS``/``ONVIF_DEVICE_MAC_ADDRESS``.

Dangers: XAddrs come from the network, so the handler only follows ``http``/``https`` URLs,
reads at most :data:`MAX_SOAP_BYTES` of a reply and talks to at most
:data:`MAX_CONCURRENT_REQUESTS` cameras at once. The multicast probe needs host networking.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import hashlib
import logging
import os
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from discovery import details, devices, filtering, sdk
from discovery.handlers import onvif_credentials, wsdiscovery

logger = logging.getLogger(__name__)

NAME = "onvif"
SERVICE_URL_PROPERTY = "ONVIF_DEVICE_SERVICE_URL"
UUID_PROPERTY = "ONVIF_DEVICE_UUID"
IP_PROPERTY = "ONVIF_DEVICE_IP_ADDRESS"
MAC_PROPERTY = "ONVIF_DEVICE_MAC_ADDRESS"
DEFAULT_DISCOVERY_TIMEOUT = 1.0
SOAP_TIMEOUT = 1.0
DEFAULT_INTERVAL = 10.0
MAX_SOAP_BYTES = 256 * 1024
MAX_CONCURRENT_REQUESTS = 16

DEVICE_WSDL = "http://www.onvif.org/ver10/device/wsdl"
WSSE = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd"
WSU = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd"
PASSWORD_DIGEST = (
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0"
    "#PasswordDigest"
)
BASE64_BINARY = (
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary"
)


@dataclasses.dataclass(frozen=True, slots=True)
class Details:
    ip_addresses: filtering.FilterList | None = None
    mac_addresses: filtering.FilterList | None = None
    scopes: filtering.FilterList | None = None
    uuids: filtering.FilterList | None = None
    discovery_timeout: float = DEFAULT_DISCOVERY_TIMEOUT
    warnings: tuple[str, ...] = ()


def parse_details(text: str) -> Details:
    keys = ("ipAddresses", "macAddresses", "scopes", "uuids", "discoveryTimeoutSeconds")
    values = details.mapping(details.load(text), "", keys)
    timeout = DEFAULT_DISCOVERY_TIMEOUT
    if details.optional(values, "discoveryTimeoutSeconds") is not None:
        timeout = details.number(
            values["discoveryTimeoutSeconds"], "discoveryTimeoutSeconds", minimum=0.01, maximum=300
        )
    return Details(
        ip_addresses=filtering.parse(values.get("ipAddresses"), "ipAddresses"),
        mac_addresses=filtering.parse(values.get("macAddresses"), "macAddresses"),
        scopes=filtering.parse(values.get("scopes"), "scopes"),
        uuids=filtering.parse(values.get("uuids"), "uuids"),
        discovery_timeout=timeout,
        warnings=details.warnings_of(values),
    )


# --------------------------------------------------------------------------- pure decisions


def scopes_pass(scope_filter: filtering.FilterList | None, scopes: Sequence[str]) -> bool:
    """Include: some scope is listed; Exclude: no scope is listed (exact tokens)."""
    if scope_filter is None:
        return True
    listed = any(scope in scope_filter.items for scope in scopes)
    return listed if scope_filter.action is filtering.Action.INCLUDE else not listed


def candidates(
    matches: Sequence[wsdiscovery.ProbeMatch], scope_filter: filtering.FilterList | None
) -> dict[str, str]:
    """Service URL -> device uuid for matches passing the scope filter (first wins)."""
    found: dict[str, str] = {}
    for match in matches:
        if not scopes_pass(scope_filter, match.scopes):
            continue
        for url in match.xaddrs:
            try:
                scheme = urlsplit(url).scheme
            except ValueError:  # e.g. an unbalanced IPv6 bracket from a broken device
                continue
            if scheme in ("http", "https"):
                found.setdefault(url, match.uuid)
    return found


def value_passes(value_filter: filtering.FilterList | None, value: str | None) -> bool:
    """Case-insensitive filter; an unknown value passes only a filter that rejects nothing."""
    if value is None:
        return not filtering.is_active(value_filter)
    if value_filter is None:
        return True
    return filtering.should_include(value_filter.normalised(), value.lower())


def device_for(url: str, uuid: str, ip: str | None, mac: str | None) -> devices.Device:
    properties = {SERVICE_URL_PROPERTY: url, UUID_PROPERTY: uuid}
    if ip is not None:
        properties[IP_PROPERTY] = ip
    if mac is not None:
        properties[MAC_PROPERTY] = mac
    return devices.Device(id=f"{url}-{uuid}", properties=properties)


def password_digest(nonce: bytes, created: str, password: str) -> str:
    """WS-Security PasswordDigest = base64(SHA1(nonce + created + password))."""
    raw = hashlib.sha1(nonce + created.encode() + password.encode(), usedforsecurity=False)
    return base64.b64encode(raw.digest()).decode()


def security_header(credential: onvif_credentials.Credential, nonce: bytes, created: str) -> str:
    digest = password_digest(nonce, created, credential.password or "")
    return (
        f'<Security s:mustUnderstand="1" xmlns="{WSSE}"><UsernameToken>'
        f"<Username>{_escape(credential.username)}</Username>"
        f'<Password Type="{PASSWORD_DIGEST}">{digest}</Password>'
        f'<Nonce EncodingType="{BASE64_BINARY}">{base64.b64encode(nonce).decode()}</Nonce>'
        f'<Created xmlns="{WSU}">{created}</Created>'
        "</UsernameToken></Security>"
    )


def _escape(value: str) -> str:
    return (
        value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def envelope(body: str, header: str = "") -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<s:Envelope xmlns:s="{wsdiscovery.SOAP_ENV}" xmlns:tds="{DEVICE_WSDL}">'
        f"<s:Header>{header}</s:Header><s:Body>{body}</s:Body></s:Envelope>"
    ).encode()


def parse_network_interfaces(data: bytes) -> tuple[str | None, str | None]:
    """(first IPv4 config address, first hardware address) of a GetNetworkInterfaces reply."""
    root = wsdiscovery.parse_xml(data)
    ip = mac = None
    for interface in wsdiscovery.descendants(root, "NetworkInterfaces"):
        if mac is None:
            for info in wsdiscovery.children(interface, "Info"):
                for hw in wsdiscovery.children(info, "HwAddress"):
                    mac = mac or (wsdiscovery.text(hw) or None)
        if ip is None:
            for ipv4 in wsdiscovery.children(interface, "IPv4"):
                for config in wsdiscovery.children(ipv4, "Config"):
                    for kind in config:
                        for address in wsdiscovery.children(kind, "Address"):
                            ip = ip or (wsdiscovery.text(address) or None)
    return ip, mac


# --------------------------------------------------------------------------- I/O


class SoapError(Exception):
    """A SOAP call failed (transport, non-200 status, oversized or malformed reply)."""


def _now() -> str:
    moment = datetime.datetime.now(datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


async def soap_call(
    session: Any, url: str, operation: str, credential: onvif_credentials.Credential | None
) -> bytes:
    import aiohttp

    header = ""
    if credential is not None:
        header = security_header(credential, os.urandom(16), _now())
    action = f"{DEVICE_WSDL}/{operation}"
    headers = {"Content-Type": f'application/soap+xml; charset=utf-8; action="{action}"'}
    try:
        async with asyncio.timeout(SOAP_TIMEOUT):
            async with session.post(
                url, data=envelope(f"<tds:{operation}/>", header), headers=headers
            ) as response:
                body: bytes = await response.content.read(MAX_SOAP_BYTES + 1)
                status = response.status
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        raise SoapError(f"{operation} to {url} failed: {str(e) or type(e).__name__}") from e
    if status != 200:
        raise SoapError(f"{operation} to {url} answered HTTP {status}")
    if len(body) > MAX_SOAP_BYTES:
        raise SoapError(f"{operation} reply from {url} is larger than {MAX_SOAP_BYTES} bytes")
    return body


async def is_alive(session: Any, url: str) -> bool:
    try:
        await soap_call(session, url, "GetSystemDateAndTime", None)
    except SoapError as e:
        logger.info("dropping ONVIF service %s: %s", url, e)
        return False
    return True


async def network_info(
    session: Any, url: str, credential: onvif_credentials.Credential | None
) -> tuple[str | None, str | None]:
    try:
        reply = await soap_call(session, url, "GetNetworkInterfaces", credential)
        return parse_network_interfaces(reply)
    except (SoapError, wsdiscovery.XmlError) as e:
        logger.info("no network interfaces for %s: %s", url, e)
        return None, None


def parse_target(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if (
        not sep
        or not host
        or not (port.isascii() and port.isdecimal())
        or not 0 < int(port) < 65536
    ):
        raise ValueError(f"ONVIF_PROBE_TARGET must be host:port, got {value!r}")
    return host, int(port)


@dataclasses.dataclass(frozen=True, slots=True)
class Onvif:
    probe_target: tuple[str, int] = wsdiscovery.MULTICAST_TARGET
    interval: float = DEFAULT_INTERVAL
    name: str = NAME
    shared: bool = True

    def parse_details(self, text: str) -> Details:
        return parse_details(text)

    async def discover(
        self, details: Details, properties: Mapping[str, bytes]
    ) -> AsyncGenerator[list[devices.Device], None]:
        import aiohttp  # only the onvif handler pays for aiohttp

        store = onvif_credentials.load(properties)
        known: dict[tuple[str, str], tuple[str | None, str | None]] = {}
        limit = asyncio.Semaphore(MAX_CONCURRENT_REQUESTS)
        connector = aiohttp.TCPConnector(limit=MAX_CONCURRENT_REQUESTS)
        async with aiohttp.ClientSession(connector=connector) as session:
            while True:
                found, known = await self._pass(session, details, store, known, limit)
                yield found
                await asyncio.sleep(self.interval)

    async def _pass(
        self,
        session: Any,
        parsed: Details,
        store: Mapping[str, onvif_credentials.Credential],
        known: Mapping[tuple[str, str], tuple[str | None, str | None]],
        limit: asyncio.Semaphore,
    ) -> tuple[list[devices.Device], dict[tuple[str, str], tuple[str | None, str | None]]]:
        replies = await wsdiscovery.probe(self.probe_target, parsed.discovery_timeout)
        matches = wsdiscovery.matches_from_replies(replies)
        # The uuid filter before any SOAP call: a camera it drops is not worth a request.
        services = {
            url: uuid
            for url, uuid in candidates(matches, parsed.scopes).items()
            if value_passes(parsed.uuids, uuid)
        }

        async def check(url: str, uuid: str) -> tuple[str, str, bool, str | None, str | None]:
            async with limit:
                if not await is_alive(session, url):
                    return url, uuid, False, None, None
                if (url, uuid) in known:
                    ip, mac = known[(url, uuid)]
                else:
                    credential = onvif_credentials.lookup(store, uuid)
                    ip, mac = await network_info(session, url, credential)
                return url, uuid, True, ip, mac

        async with asyncio.TaskGroup() as tg:
            tasks = [
                tg.create_task(check(url, uuid), name=f"onvif check {url}")
                for url, uuid in services.items()
            ]
        found = []
        seen: dict[tuple[str, str], tuple[str | None, str | None]] = {}
        for task in tasks:
            url, uuid, keep, ip, mac = task.result()
            if not keep:
                continue
            seen[(url, uuid)] = (ip, mac)
            if value_passes(parsed.ip_addresses, ip) and value_passes(parsed.mac_addresses, mac):
                found.append(device_for(url, uuid, ip, mac))
        return found, seen


def create(options: sdk.HandlerOptions) -> Onvif:
    env = options.environ
    target = wsdiscovery.MULTICAST_TARGET
    if env.get("ONVIF_PROBE_TARGET"):
        target = parse_target(env["ONVIF_PROBE_TARGET"])
    interval = options.poll_interval("ONVIF_DISCOVERY_INTERVAL_SECONDS", DEFAULT_INTERVAL)
    return Onvif(probe_target=target, interval=interval)
