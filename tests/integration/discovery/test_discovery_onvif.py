"""The ONVIF handler against the simulated ONVIF network (UDP responder + SOAP server)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path

import pytest
from discovery_support import HandlerProcesses

from discovery import devices, registry, sdk
from discovery.handlers import onvif, onvif_sim

CAM_A = "aaaa-0001"
CAM_B = "BBBB-0002"


def _cameras() -> list[onvif_sim.Camera]:
    return [
        onvif_sim.Camera(CAM_A, "10.0.0.7", "00:11:22:33:44:55"),
        onvif_sim.Camera(
            CAM_B,
            "10.0.0.8",
            "00:AA:BB:CC:DD:EE",
            scopes=("onvif://www.onvif.org/name/Other",),
            username="admin",
            password="s3cret",
            address_prefix="uuid:",
        ),
    ]


async def _discover(
    sim: onvif_sim.Simulator, text: str, properties: Mapping[str, bytes] | None = None
) -> list[devices.Device]:
    handler = onvif.Onvif(probe_target=sim.probe_target, interval=60)
    async with asyncio.timeout(10):
        return await sdk.discover_once(
            handler, "discoveryTimeoutSeconds: 0.2\n" + text, properties or {}
        )


def _uuids(found: list[devices.Device]) -> list[str]:
    return [d.properties[onvif.UUID_PROPERTY] for d in found]


def _sorted_uuids(found: list[devices.Device]) -> list[str]:
    return sorted(_uuids(found))


async def test_discovers_cameras_with_credentials() -> None:
    async with onvif_sim.running(_cameras()) as sim:
        found = await _discover(
            sim, "", {"username_bbbb_0002": b"admin", "password_bbbb_0002": b"s3cret"}
        )
    # Sorted by id, and ids start with the service URL (".../BBBB-0002/..." sorts first).
    assert _uuids(found) == ["bbbb-0002", "aaaa-0001"]
    b, a = found
    url_a = sim.service_url(sim.cameras[0])
    assert a.id == f"{url_a}-aaaa-0001"
    assert a.properties == {
        "ONVIF_DEVICE_SERVICE_URL": url_a,
        "ONVIF_DEVICE_UUID": "aaaa-0001",
        "ONVIF_DEVICE_IP_ADDRESS": "10.0.0.7",
        "ONVIF_DEVICE_MAC_ADDRESS": "00:11:22:33:44:55",
    }
    assert b.properties["ONVIF_DEVICE_IP_ADDRESS"] == "10.0.0.8"


async def test_wrong_or_missing_credentials_leave_ip_and_mac_unknown() -> None:
    async with onvif_sim.running(_cameras()) as sim:
        wrong = json.dumps({CAM_B.lower(): {"username": "admin", "password": "nope"}})
        found = await _discover(
            sim, "", {"device_credential_list": b'["creds"]', "creds": wrong.encode()}
        )
        (b,) = (d for d in found if d.properties[onvif.UUID_PROPERTY] == "bbbb-0002")
        assert onvif.IP_PROPERTY not in b.properties
        # An active ip filter drops a camera whose address is unknown.
        found = await _discover(sim, "ipAddresses: {items: ['10.0.0.8', '10.0.0.7']}")
        assert _uuids(found) == ["aaaa-0001"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("uuids: {items: ['AAAA-0001']}", ["aaaa-0001"]),
        ("uuids: {items: ['aaaa-0001'], action: Exclude}", ["bbbb-0002"]),
        ("macAddresses: {items: ['00:11:22:33:44:55']}", ["aaaa-0001"]),
        ("ipAddresses: {items: ['10.0.0.7'], action: Exclude}", ["bbbb-0002"]),
        ("scopes: {items: ['onvif://www.onvif.org/name/NVT']}", ["aaaa-0001"]),
        ("scopes: {items: ['onvif://www.onvif.org/name']}", []),
    ],
)
async def test_filters(text: str, expected: list[str]) -> None:
    async with onvif_sim.running(_cameras()) as sim:
        creds = {"username_default": b"admin", "password_default": b"s3cret"}
        assert _sorted_uuids(await _discover(sim, text, creds)) == expected


async def test_a_camera_the_uuid_filter_drops_gets_no_soap_request() -> None:
    async with onvif_sim.running(_cameras()) as sim:
        found = await _discover(sim, "uuids: {items: ['aaaa-0001'], action: Exclude}")
        assert _uuids(found) == ["bbbb-0002"]
        assert [uuid for uuid, _ in sim.requests if uuid == CAM_A] == []


async def test_malformed_replies_and_dead_cameras_are_skipped() -> None:
    cameras = _cameras()
    cameras[1].alive = False
    hostile = [
        b"<not xml",
        b'<!DOCTYPE x [<!ENTITY a "a">]><x>&a;</x>',
        b"\x00" * 100,
        onvif_sim.probe_matches(cameras[0], ["ftp://127.0.0.1/x"], "uuid:x"),
    ]
    async with onvif_sim.running(cameras, hostile) as sim:
        found = await _discover(sim, "")
        assert _uuids(found) == ["aaaa-0001"]
        assert ("BBBB-0002", "GetNetworkInterfaces") not in sim.requests


async def test_no_responder_gives_an_empty_list() -> None:
    async with onvif_sim.running([]) as sim:
        assert await _discover(sim, "") == []


async def test_onvif_handler_process_with_probe_target(
    handler_processes: HandlerProcesses, sock_dir: Path
) -> None:
    async with onvif_sim.running(_cameras()[:1]) as sim:
        settings = registry.RegistrySettings(directory=sock_dir)
        async with registry.running(settings) as reg:
            request = reg.request("ns/cams", "onvif", "discoveryTimeoutSeconds: 0.2")
            handler_processes.start(
                "onvif",
                "--discovery-handlers-directory",
                str(sock_dir),
                env={"ONVIF_PROBE_TARGET": sim.probe_target_text},
            )
            async with asyncio.timeout(15):
                async for snapshot in request.snapshots():
                    if snapshot.devices:
                        break
    (device,) = snapshot.devices
    assert device.shared is True
    assert device.device.properties["ONVIF_DEVICE_UUID"] == "aaaa-0001"
