"""A simulated ONVIF network on loopback: a WS-Discovery responder plus a SOAP device service.

For tests and demos of the ``onvif`` handler without cameras or multicast::

    camera = onvif_sim.Camera("a1b2...", "10.0.0.7", "00:11:22:33:44:55")
    async with onvif_sim.running([camera]) as sim:
        env = {"ONVIF_PROBE_TARGET": sim.probe_target_text}

The UDP responder answers every Probe with one ProbeMatches datagram per camera (XAddrs point
at the SOAP server, ``http://127.0.0.1:<port>/onvif/<uuid>/device_service``) and then sends
``extra_replies`` verbatim (to exercise malformed replies). The SOAP server answers
``GetSystemDateAndTime`` (HTTP 500 for a camera marked offline) and ``GetNetworkInterfaces``,
which requires a valid WS-Security UsernameToken digest when the camera has a username.

Only loopback addresses are used. Imports aiohttp: never import this from handler code.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import logging
import typing
from collections.abc import AsyncIterator, Sequence

from aiohttp import web

from discovery.handlers import onvif, wsdiscovery

logger = logging.getLogger(__name__)

HOST = "127.0.0.1"


@dataclasses.dataclass
class Camera:
    uuid: str
    ip: str
    mac: str
    scopes: tuple[str, ...] = ("onvif://www.onvif.org/name/NVT",)
    username: str | None = None
    password: str | None = None
    alive: bool = True
    address_prefix: str = "urn:uuid:"
    """How the EndpointReference spells the uuid (devices vary: ``urn:uuid:``, ``uuid:``)."""


def probe_matches(camera: Camera, xaddrs: Sequence[str], relates_to: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<s:Envelope xmlns:s="{wsdiscovery.SOAP_ENV}" xmlns:a="{wsdiscovery.ADDRESSING}" '
        f'xmlns:d="{wsdiscovery.DISCOVERY}">'
        f"<s:Header><a:RelatesTo>{relates_to}</a:RelatesTo></s:Header>"
        "<s:Body><d:ProbeMatches><d:ProbeMatch>"
        f"<a:EndpointReference><a:Address>{camera.address_prefix}{camera.uuid}</a:Address>"
        "</a:EndpointReference>"
        "<d:Types>dn:NetworkVideoTransmitter tds:Device</d:Types>"
        f"<d:Scopes>{' '.join(camera.scopes)}</d:Scopes>"
        f"<d:XAddrs>{' '.join(xaddrs)}</d:XAddrs>"
        "<d:MetadataVersion>1</d:MetadataVersion>"
        "</d:ProbeMatch></d:ProbeMatches></s:Body></s:Envelope>"
    ).encode()


def network_interfaces_reply(camera: Camera) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<s:Envelope xmlns:s="{wsdiscovery.SOAP_ENV}" xmlns:tds="{onvif.DEVICE_WSDL}" '
        'xmlns:tt="http://www.onvif.org/ver10/schema"><s:Body>'
        '<tds:GetNetworkInterfacesResponse><tds:NetworkInterfaces token="eth0">'
        "<tt:Enabled>true</tt:Enabled>"
        f"<tt:Info><tt:Name>eth0</tt:Name><tt:HwAddress>{camera.mac}</tt:HwAddress>"
        "<tt:MTU>1500</tt:MTU></tt:Info>"
        "<tt:IPv4><tt:Enabled>true</tt:Enabled><tt:Config><tt:Manual>"
        f"<tt:Address>{camera.ip}</tt:Address><tt:PrefixLength>24</tt:PrefixLength>"
        "</tt:Manual><tt:DHCP>false</tt:DHCP></tt:Config></tt:IPv4>"
        "</tds:NetworkInterfaces></tds:GetNetworkInterfacesResponse></s:Body></s:Envelope>"
    ).encode()


def _fault(reason: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><s:Envelope xmlns:s="{wsdiscovery.SOAP_ENV}">'
        f"<s:Body><s:Fault><s:Reason><s:Text>{reason}</s:Text></s:Reason></s:Fault>"
        "</s:Body></s:Envelope>"
    ).encode()


def authorised(camera: Camera, request: bytes) -> bool:
    """Whether ``request`` carries a UsernameToken digest valid for ``camera``."""
    if camera.username is None:
        return True
    try:
        root = wsdiscovery.parse_xml(request)
    except wsdiscovery.XmlError:
        return False
    tokens = wsdiscovery.descendants(root, "UsernameToken")
    if not tokens:
        return False
    token = tokens[0]

    def field(name: str) -> str:
        found = wsdiscovery.children(token, name)
        return wsdiscovery.text(found[0]) if found else ""

    try:
        nonce = base64.b64decode(field("Nonce"), validate=True)
    except ValueError:
        return False
    expected = onvif.password_digest(nonce, field("Created"), camera.password or "")
    return field("Username") == camera.username and field("Password") == expected


class _Responder(asyncio.DatagramProtocol):
    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.transport: asyncio.DatagramTransport | None = None
        self.probes = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # The selector datagram transport does not subclass DatagramTransport in 3.11.
        self.transport = typing.cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        try:
            root = wsdiscovery.parse_xml(data)
        except wsdiscovery.XmlError:
            return
        if not wsdiscovery.descendants(root, "Probe"):
            return
        self.probes += 1
        ids = wsdiscovery.descendants(root, "MessageID")
        relates_to = wsdiscovery.text(ids[0]) if ids else ""
        assert self.transport is not None
        for camera in self.sim.cameras:
            reply = probe_matches(camera, [self.sim.service_url(camera)], relates_to)
            self.transport.sendto(reply, addr)
        for extra in self.sim.extra_replies:
            self.transport.sendto(extra, addr)


class Simulator:
    def __init__(self, cameras: Sequence[Camera], extra_replies: Sequence[bytes] = ()) -> None:
        self.cameras = list(cameras)
        self.extra_replies = list(extra_replies)
        self.http_port = 0
        self.udp_port = 0
        self._runner: web.AppRunner | None = None
        self._responder: _Responder | None = None
        self.requests: list[tuple[str, str]] = []
        """(camera uuid, operation) of every SOAP request received."""

    @property
    def probe_target(self) -> tuple[str, int]:
        return HOST, self.udp_port

    @property
    def probe_target_text(self) -> str:
        return f"{HOST}:{self.udp_port}"

    @property
    def probes(self) -> int:
        return self._responder.probes if self._responder else 0

    def service_url(self, camera: Camera) -> str:
        return f"http://{HOST}:{self.http_port}/onvif/{camera.uuid}/device_service"

    async def _soap(self, request: web.Request) -> web.Response:
        camera = next((c for c in self.cameras if c.uuid == request.match_info["uuid"]), None)
        if camera is None:
            return web.Response(status=404)
        body = await request.content.read(onvif.MAX_SOAP_BYTES)
        try:
            root = wsdiscovery.parse_xml(body)
        except wsdiscovery.XmlError:
            return web.Response(status=400, body=_fault("malformed request"))
        bodies = wsdiscovery.descendants(root, "Body")
        operation = wsdiscovery.local(bodies[0][0].tag) if bodies and len(bodies[0]) else ""
        self.requests.append((camera.uuid, operation))
        content_type = "application/soap+xml; charset=utf-8"
        if operation == "GetSystemDateAndTime":
            if not camera.alive:
                return web.Response(status=500, body=_fault("offline"))
            reply = (
                f'<s:Envelope xmlns:s="{wsdiscovery.SOAP_ENV}"><s:Body>'
                f'<tds:GetSystemDateAndTimeResponse xmlns:tds="{onvif.DEVICE_WSDL}"/>'
                "</s:Body></s:Envelope>"
            ).encode()
            return web.Response(body=reply, content_type=content_type.split(";")[0])
        if operation == "GetNetworkInterfaces":
            if not authorised(camera, body):
                return web.Response(status=400, body=_fault("Sender not Authorized"))
            return web.Response(
                body=network_interfaces_reply(camera), content_type="application/soap+xml"
            )
        return web.Response(status=400, body=_fault(f"unsupported operation {operation}"))

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/onvif/{uuid}/device_service", self._soap)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, HOST, 0)
        await site.start()
        self.http_port = self._runner.addresses[0][1]
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.create_datagram_endpoint(
            lambda: _Responder(self), local_addr=(HOST, 0)
        )
        self._responder = protocol
        self.udp_port = transport.get_extra_info("sockname")[1]

    async def stop(self) -> None:
        if self._responder is not None and self._responder.transport is not None:
            self._responder.transport.close()
        if self._runner is not None:
            await self._runner.cleanup()


@contextlib.asynccontextmanager
async def running(
    cameras: Sequence[Camera], extra_replies: Sequence[bytes] = ()
) -> AsyncIterator[Simulator]:
    sim = Simulator(cameras, extra_replies)
    await sim.start()
    try:
        yield sim
    finally:
        await sim.stop()


async def _main() -> None:  # pragma: no cover - manual use
    logging.basicConfig(level=logging.INFO)
    cameras = [Camera("1e6b6c4b-0000-4000-8000-000000000001", "10.0.0.7", "00:11:22:33:44:55")]
    async with running(cameras) as sim:
        print(f"ONVIF_PROBE_TARGET={sim.probe_target_text}", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":  # pragma: no cover
    asyncio.run(_main())
