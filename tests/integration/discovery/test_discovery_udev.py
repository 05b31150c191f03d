"""The udev handler against this machine's real /sys (pyudev), in-process and as a process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import pyudev
from discovery_support import HandlerProcesses

from discovery import details, devices, registry, sdk
from discovery.handlers import udev


def _pyudev_ids(subsystem: str) -> set[str]:
    return {d.device_path for d in pyudev.Context().list_devices(subsystem=subsystem)}


async def _discover(rule_yaml: str) -> list[devices.Device]:
    handler = udev.create(sdk.HandlerOptions(interval=60))
    async with asyncio.timeout(10):
        return await sdk.discover_once(handler, rule_yaml, {})


@pytest.mark.parametrize("subsystem", ["tty", "net"])
async def test_finds_the_same_devices_as_pyudev(subsystem: str) -> None:
    expected = _pyudev_ids(subsystem)
    assert expected, f"this machine has {subsystem} devices"
    found = await _discover(f"udevRules: ['SUBSYSTEM==\"{subsystem}\"']")
    assert {d.id for d in found} == expected
    for device in found:
        assert device.properties["UDEV_DEVPATH"] == device.id


async def test_tty_devices_carry_their_device_nodes() -> None:
    nodes = {
        d.device_path: d.device_node
        for d in pyudev.Context().list_devices(subsystem="tty", sys_name="tty1")
    }
    (device,) = await _discover('udevRules: [\'KERNEL=="tty1", SUBSYSTEM=="tty"\']')
    assert nodes == {device.id: "/dev/tty1"}
    assert device.properties["UDEV_DEVNODE"] == "/dev/tty1"
    assert [(s.host_path, s.container_path, s.permissions) for s in device.device_specs] == [
        ("/dev/tty1", "/dev/tty1", "rwm")
    ]


async def test_attribute_and_negative_filters() -> None:
    loopback = {
        d.device_path for d in pyudev.Context().list_devices(subsystem="net") if d.sys_name == "lo"
    }
    found = await _discover('udevRules: [\'SUBSYSTEM=="net", ATTR{address}=="00:00:00:00:00:00"\']')
    assert {d.id for d in found} == loopback
    found = await _discover('udevRules: [\'SUBSYSTEM=="net", KERNEL!="lo|eth.*"\']')
    assert {d.id for d in found} == _pyudev_ids("net") - loopback - {
        d.device_path
        for d in pyudev.Context().list_devices(subsystem="net")
        if d.sys_name.startswith("eth")
    }


async def test_multiple_rules_are_a_union_and_grouping_is_stable() -> None:
    found = await _discover(
        "udevRules: ['SUBSYSTEM==\"net\"', 'SUBSYSTEM==\"tty\"']\ngroupRecursive: true"
    )
    assert {d.id for d in found} == _pyudev_ids("net") | _pyudev_ids("tty")
    again = await _discover(
        "udevRules: ['SUBSYSTEM==\"tty\"', 'SUBSYSTEM==\"net\"']\ngroupRecursive: true"
    )
    assert again == found


async def test_bad_rule_is_rejected_before_scanning() -> None:
    with pytest.raises(details.DetailsError) as caught:
        await _discover('udevRules: [\'SUBSYSTEM=="tty", KERNEL!="tty["\']')
    assert caught.value.field == "udevRules[0]"
    assert "invalid regular expression" in str(caught.value)


async def test_udev_handler_process_through_the_registry(
    handler_processes: HandlerProcesses, sock_dir: Path
) -> None:
    settings = registry.RegistrySettings(directory=sock_dir)
    async with registry.running(settings) as reg:
        request = reg.request("ns/serial", "udev", "udevRules: ['SUBSYSTEM==\"tty\"']")
        handler_processes.start("udev", "--discovery-handlers-directory", str(sock_dir))
        async with asyncio.timeout(15):
            async for snapshot in request.snapshots():
                if snapshot.devices:
                    break
        assert {d.device.id for d in snapshot.devices} == _pyudev_ids("tty")
        assert {d.shared for d in snapshot.devices} == {False}
