"""WS-Discovery for ONVIF: the Probe message, ProbeMatches parsing, a bounded UDP probe, and
the safe XML parser every ONVIF reply goes through.

Safety: replies come from anything on the network. :func:`parse_xml` refuses any document
type declaration (so no entity expansion, internal or external — the defusedxml policy),
limits input size, and builds ElementTree elements from expat events directly. Parse
failures raise :class:`XmlError`; callers drop that reply and keep going.

Probe (SOAP 1.2, as Akri sends it): ``MessageID uuid:<v4>``, ``To
urn:schemas-xmlsoap-org:ws:2005:04:discovery``, ``Action .../discovery/Probe``, ``Types
dn:NetworkVideoTransmitter``; sent to 239.255.255.250:3702 unless a unicast target is given.
Replies are collected until the timeout, at most :data:`MAX_DATAGRAM` bytes each and
:data:`MAX_REPLIES` in total.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import uuid
import xml.etree.ElementTree as ET
from xml.parsers import expat

logger = logging.getLogger(__name__)

MULTICAST_TARGET = ("239.255.255.250", 3702)
MAX_DATAGRAM = 16 * 1024
MAX_REPLIES = 1024
MAX_XML_BYTES = 1024 * 1024

SOAP_ENV = "http://www.w3.org/2003/05/soap-envelope"
ADDRESSING = "http://schemas.xmlsoap.org/ws/2004/08/addressing"
DISCOVERY = "http://schemas.xmlsoap.org/ws/2005/04/discovery"
NETWORK_WSDL = "http://www.onvif.org/ver10/network/wsdl"
PROBE_ACTION = "http://schemas.xmlsoap.org/ws/2005/04/discovery/Probe"
DISCOVERY_TO = "urn:schemas-xmlsoap-org:ws:2005:04:discovery"


class XmlError(ValueError):
    """An XML document was malformed, too large, or declared a DTD."""


def parse_xml(data: bytes) -> ET.Element:
    """Parse ``data`` into an Element tree, refusing DTDs and oversized input."""
    if len(data) > MAX_XML_BYTES:
        raise XmlError(f"document larger than {MAX_XML_BYTES} bytes")
    builder = ET.TreeBuilder()
    parser = expat.ParserCreate(namespace_separator="}")
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)

    def refuse_dtd(*_: object) -> None:
        raise XmlError("document type declarations are not allowed")

    def refuse_external(*_: object) -> int:
        raise XmlError("external entities are not allowed")

    def start(name: str, attrs: dict[str, str]) -> None:
        builder.start(_qualified(name), {_qualified(k): v for k, v in attrs.items()})

    def end(name: str) -> None:
        builder.end(_qualified(name))

    parser.StartDoctypeDeclHandler = refuse_dtd
    parser.EntityDeclHandler = refuse_dtd
    parser.ExternalEntityRefHandler = refuse_external
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = builder.data
    try:
        parser.Parse(data, True)
    except expat.ExpatError as e:
        raise XmlError(f"malformed XML: {e}") from e
    try:
        return builder.close()
    except AssertionError as e:  # TreeBuilder asserts when nothing was parsed
        raise XmlError("empty XML document") from e


def _qualified(name: str) -> str:
    """expat gives ``uri}local``; ElementTree spells it ``{uri}local``."""
    return f"{{{name}" if "}" in name else name


def local(tag: str) -> str:
    return tag.rpartition("}")[2]


def children(element: ET.Element, name: str) -> list[ET.Element]:
    """Direct children with local name ``name`` (namespace-agnostic: devices vary)."""
    return [child for child in element if local(child.tag) == name]


def descendants(element: ET.Element, name: str) -> list[ET.Element]:
    return [node for node in element.iter() if local(node.tag) == name]


def text(element: ET.Element | None) -> str:
    return "".join(element.itertext()).strip() if element is not None else ""


def probe_message(message_id: str | None = None) -> bytes:
    mid = message_id or f"uuid:{uuid.uuid4()}"
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<e:Envelope xmlns:e="{SOAP_ENV}" xmlns:w="{ADDRESSING}" '
        f'xmlns:d="{DISCOVERY}" xmlns:dn="{NETWORK_WSDL}">'
        f"<e:Header><w:MessageID>{mid}</w:MessageID>"
        f"<w:To>{DISCOVERY_TO}</w:To><w:Action>{PROBE_ACTION}</w:Action></e:Header>"
        "<e:Body><d:Probe><d:Types>dn:NetworkVideoTransmitter</d:Types></d:Probe></e:Body>"
        "</e:Envelope>"
    ).encode()


@dataclasses.dataclass(frozen=True, slots=True)
class ProbeMatch:
    uuid: str
    xaddrs: tuple[str, ...]
    scopes: tuple[str, ...]
    types: tuple[str, ...]


def normalise_uuid(address: str) -> str:
    """EndpointReference address -> device uuid: strip ``urn:`` then ``uuid:``, lower-case."""
    value = address.strip()
    value = value.removeprefix("urn:")
    value = value.removeprefix("uuid:")
    return value.lower()


def parse_probe_matches(data: bytes) -> list[ProbeMatch]:
    """Every ProbeMatch of one reply; raises :class:`XmlError` for a malformed document."""
    root = parse_xml(data)
    matches = []
    for match in descendants(root, "ProbeMatch"):
        addresses = [text(a) for ref in children(match, "EndpointReference")
                     for a in children(ref, "Address")]  # fmt: skip
        xaddrs = tuple(dict.fromkeys(" ".join(text(x) for x in children(match, "XAddrs")).split()))
        if not addresses or not addresses[0] or not xaddrs:
            continue
        matches.append(
            ProbeMatch(
                uuid=normalise_uuid(addresses[0]),
                xaddrs=xaddrs,
                scopes=tuple(" ".join(text(s) for s in children(match, "Scopes")).split()),
                types=tuple(" ".join(text(t) for t in children(match, "Types")).split()),
            )
        )
    return matches


class _Collector(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.replies: list[bytes] = []
        self.dropped = 0

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        if len(self.replies) >= MAX_REPLIES or len(data) > MAX_DATAGRAM:
            self.dropped += 1
            return
        self.replies.append(data)

    def error_received(self, exc: Exception) -> None:
        logger.debug("WS-Discovery socket error: %s", exc)


async def probe(target: tuple[str, int], seconds: float) -> list[bytes]:
    """Send one Probe to ``target`` and return the raw replies received within ``seconds``."""
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in target[0] else socket.AF_INET
    transport, protocol = await loop.create_datagram_endpoint(
        _Collector, family=family, local_addr=("::" if family == socket.AF_INET6 else "0.0.0.0", 0)
    )
    try:
        transport.sendto(probe_message(), target)
        await asyncio.sleep(seconds)
    finally:
        transport.close()
    if protocol.dropped:
        logger.warning("dropped %d oversized or excess WS-Discovery replies", protocol.dropped)
    return protocol.replies


def matches_from_replies(replies: list[bytes]) -> list[ProbeMatch]:
    found: list[ProbeMatch] = []
    for reply in replies:
        try:
            found.extend(parse_probe_matches(reply))
        except XmlError as e:
            logger.warning("ignoring a malformed WS-Discovery reply: %s", e)
    return found
