"""The udev handler against this machine's real /sys (pyudev), in-process and as a process."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import pytest
import pyudev
from discovery_support import HandlerProcesses

from discovery import details, devices, registry, sdk
from discovery.handlers import udev

T = TypeVar("T")


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


def _scan_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == udev.SCAN_THREAD]


async def test_a_scan_stops_when_its_configuration_goes() -> None:
    # 64 rules that every device passes to its regex terms: one pass over /sys per rule, so a
    # scan takes seconds here; it must not run on once nobody wants its result.
    rules = ", ".join(['\'KERNEL!="x.*", DRIVER!="(.|.)*!"\''] * udev.MAX_RULES)
    settings = registry.RegistrySettings(directory=None)
    async with registry.running(settings) as reg:
        reg.register_embedded(udev.create(sdk.HandlerOptions(interval=60)))
        reg.request("ns/all", "udev", f"udevRules: [{rules}]")
        async with asyncio.timeout(5):
            while not _scan_threads():
                await asyncio.sleep(0.01)
        await reg.stop_request("ns/all")
        async with asyncio.timeout(2):
            while _scan_threads():
                await asyncio.sleep(0.01)


async def _with_longest_loop_gap(work: Awaitable[T]) -> tuple[T, float]:
    """``work``'s result and the longest the loop went without running a probe callback while
    it ran. The gaps run from ``work``'s start to its end, so there is one even when ``work``
    ends before the probe's first tick (a fast /sys)."""
    loop = asyncio.get_running_loop()
    last = loop.time()
    longest = 0.0

    async def probe() -> None:
        nonlocal last, longest
        while True:
            await asyncio.sleep(0.01)
            now = loop.time()
            longest, last = max(longest, now - last), now

    async with asyncio.TaskGroup() as tg:
        prober = tg.create_task(probe(), name="loop lag probe")
        result = await work
        prober.cancel()
    return result, max(longest, loop.time() - last)


async def test_a_pathological_rule_neither_slows_discovery_nor_stalls_the_loop() -> None:
    # Issue 14: DEVPATH!="(.|.)*!" took seconds per device on Python's backtracking re, with
    # the GIL held, so an agent embedded in the hub froze the hub's event loop. The bound is a
    # stall detector (that stall was seconds a device), not a speed claim: 2 s leaves room for
    # a loaded machine's scheduling.
    found, gap = await _with_longest_loop_gap(
        _discover('udevRules: [\'SUBSYSTEM=="tty", DEVPATH!="(.|.)*!", KERNEL!="(a|aa)*b"\']')
    )
    assert {d.id for d in found} == _pyudev_ids("tty")
    assert gap < 2.0, gap
