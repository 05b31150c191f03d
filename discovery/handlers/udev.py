"""``udev``: local devices found by udev rules, evaluated with pyudev against ``/sys``.

Details (Akri §8.2): ``udevRules: [<rule>, ...]`` (required), ``groupRecursive: bool``
(default false), ``permissions`` ∈ r, w, m, rw, rm, rwm, wm (default ``rwm``). Every rule is
parsed up front (``udev_rules``), so a bad rule is ``INVALID_ARGUMENT`` naming the rule and
column instead of a crash later. Properties read: ``devicePluginResourceName`` (adds
``USB_RESOURCE_*``/``PCI_RESOURCE_*``) and ``vfioPassthrough`` (``true``: adds the IOMMU
group's ``/dev/vfio`` nodes).

A matched device without a device node is represented by its nearest ancestor that has one
(so a USB interface maps to its ``/dev/bus/usb`` node); if none has, by itself without a
node. Device ``id`` is the (top-level) sysfs devpath, e.g. ``/devices/virtual/tty/tty0``.

With ``groupRecursive``, devices below another matched device (by sysfs path components,
not string prefix) join the top-most one's group; members are ordered by devpath so
``UDEV_DEVNODE_<i>`` is stable (Akri: hash-set order [quirk]).

Scanning is blocking (sysfs reads) and runs in a thread of its own per scan (named
``SCAN_THREAD``), not in the default executor: a long scan (a big ``/sys``, many rules) must
not starve the executor the rest of the process relies on. The scan checks a cancellation
flag before every device, so when its stream ends (its Configuration was deleted or changed,
the agent went away) the thread stops within one device, not one pass later. Rule values
are compiled by ``discovery.patterns`` (RE2, linear time): no rule makes a device take long.
At most ``MAX_RULES`` rules per Configuration.

This machine has no ``/run/udev``: ENV/TAG matching then only sees what the kernel puts in
``uevent``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
import threading
from collections.abc import AsyncGenerator, Iterable, Mapping
from typing import Any

from discovery import details, devices, sdk
from discovery.handlers import udev_rules

logger = logging.getLogger(__name__)

NAME = "udev"
DEVNODE_PROPERTY = "UDEV_DEVNODE"
DEVPATH_PROPERTY = "UDEV_DEVPATH"
USB_RESOURCE_PREFIX = "USB_RESOURCE"
PCI_RESOURCE_PREFIX = "PCI_RESOURCE"
PERMISSIONS = ("r", "w", "m", "rw", "rm", "rwm", "wm")
DEFAULT_INTERVAL = 10.0
SYS = "/sys"
MAX_RULES = 64
"""Rules per Configuration: each is one enumeration of /sys per scan."""
SCAN_THREAD = "udev scan"

Member = tuple[str, str | None]
"""(devpath, devnode) of one matched device."""


@dataclasses.dataclass(frozen=True, slots=True)
class Details:
    rules: tuple[tuple[udev_rules.Term, ...], ...]
    group_recursive: bool = False
    permissions: str = "rwm"
    warnings: tuple[str, ...] = ()


def parse_details(text: str) -> Details:
    values = details.mapping(details.load(text), "", ("udevRules", "groupRecursive", "permissions"))
    texts = details.string_list(details.required(values, "udevRules"), "udevRules")
    if len(texts) > MAX_RULES:
        raise details.DetailsError("udevRules", f"{len(texts)} rules; at most {MAX_RULES}")
    rules = []
    for i, rule in enumerate(texts):
        try:
            rules.append(udev_rules.parse(rule))
        except udev_rules.RuleError as e:
            raise details.DetailsError(f"udevRules[{i}]", str(e)) from e
    group = details.boolean(values.get("groupRecursive", False), "groupRecursive")
    permissions = values.get("permissions", "rwm")
    if not isinstance(permissions, str) or permissions not in PERMISSIONS:
        raise details.DetailsError(
            "permissions",
            f"{permissions!r} is not a valid permission combination "
            f"(one of {', '.join(PERMISSIONS)})",
        )
    return Details(tuple(rules), group, str(permissions), details.warnings_of(values))


# --------------------------------------------------------------------------- pure helpers


def _transform(resource_name: str) -> str:
    return "".join("_" if c in "./" else c.upper() for c in resource_name)


def usb_resource_env(resource_name: str) -> str:
    return f"{USB_RESOURCE_PREFIX}_{_transform(resource_name)}"


def pci_resource_env(resource_name: str) -> str:
    return f"{PCI_RESOURCE_PREFIX}_{_transform(resource_name)}"


def extract_usb_address(devnode: str) -> tuple[str, str] | None:
    """``/dev/bus/usb/001/010`` -> ``("1", "10")``."""
    if not devnode.startswith("/dev/bus/usb/"):
        return None
    parts = devnode.split("/")
    bus, dev = parts[-2], parts[-1]
    # ASCII digits only: int() would also take other scripts' digits.
    if _ascii_number(bus) and _ascii_number(dev):
        return str(int(bus)), str(int(dev))
    return None


def _ascii_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


# domain:bus:slot.function. Akri accepts any hex groups, so PNP ids such as ``00:00:0.0``
# were taken for PCI addresses [quirk]; only the real format is accepted here.
_PCI = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")


def extract_pci_address(path: str) -> str | None:
    """The last path segment that is a PCI address (``0000:01:00.0``)."""
    found = [segment for segment in path.split("/") if _PCI.fullmatch(segment)]
    return found[-1] if found else None


def _is_below(path: str, ancestor: str) -> bool:
    return path.startswith(ancestor.rstrip("/") + "/")


def group_members(found: Iterable[Member], recursive: bool) -> dict[str, list[Member]]:
    """Map device id -> its members (sorted), grouping descendants when ``recursive``."""
    unique = sorted(set(found), key=lambda m: (m[0], m[1] or ""))
    groups: dict[str, list[Member]] = {}
    if not recursive:
        for devpath, devnode in unique:
            # Two matches that resolved to one ancestor are one device.
            groups.setdefault(devpath, [(devpath, devnode)])
        return groups
    paths = {devpath for devpath, _ in unique}
    for member in unique:
        devpath = member[0]
        ancestors = [p for p in paths if p != devpath and _is_below(devpath, p)]
        top = min(ancestors, key=len) if ancestors else devpath
        groups.setdefault(top, []).append(member)
    return {key: sorted(members) for key, members in sorted(groups.items())}


def build_devices(
    groups: Mapping[str, list[Member]],
    parsed: Details,
    resource_name: str = "",
    iommu_groups: Mapping[str, str] | None = None,
) -> list[devices.Device]:
    result = []
    for device_id, members in sorted(groups.items()):
        properties: dict[str, str] = {}
        specs: list[devices.DeviceSpec] = []
        for i, (_, devnode) in enumerate(members):
            suffix = f"_{i}" if parsed.group_recursive else ""
            if devnode is None:
                continue
            properties[DEVNODE_PROPERTY + suffix] = devnode
            specs.append(devices.DeviceSpec(devnode, devnode, parsed.permissions))
            usb = extract_usb_address(devnode) if resource_name else None
            if usb is not None:
                properties[usb_resource_env(resource_name) + suffix] = f"{usb[0]}:{usb[1]}"
        properties[DEVPATH_PROPERTY] = device_id
        is_usb = any(segment.startswith("usb") for segment in device_id.split("/"))
        if resource_name and not is_usb:
            pci = extract_pci_address(device_id)
            if pci is not None:
                properties[pci_resource_env(resource_name)] = pci
        group = (iommu_groups or {}).get(device_id)
        if group is not None:
            for node in (f"/dev/vfio/{group}", "/dev/vfio/vfio"):
                specs.append(devices.DeviceSpec(node, node, "rwm"))
        result.append(devices.Device(device_id, properties, (), tuple(specs)))
    return result


# --------------------------------------------------------------------------- pyudev


class PyudevView:
    """Adapts a ``pyudev.Device`` to ``udev_rules.DeviceView``; unreadable values are absent."""

    __slots__ = ("_device", "_parent", "_parent_loaded")

    def __init__(self, device: Any) -> None:
        self._device = device
        self._parent: PyudevView | None = None
        self._parent_loaded = False

    @property
    def devpath(self) -> str:
        return str(self._device.device_path)

    @property
    def sys_name(self) -> str:
        return str(self._device.sys_name)

    @property
    def subsystem(self) -> str | None:
        value = self._device.subsystem
        return None if value is None else str(value)

    @property
    def driver(self) -> str | None:
        value = self._device.driver
        return None if value is None else str(value)

    @property
    def tags(self) -> tuple[str, ...]:
        raw = self.property("TAGS") or ""
        found = {tag for tag in raw.split(":") if tag}
        try:
            found.update(str(tag) for tag in self._device.tags)
        except (OSError, ValueError):
            pass
        return tuple(sorted(found))

    @property
    def parent(self) -> PyudevView | None:
        if not self._parent_loaded:
            parent = self._device.parent
            self._parent = None if parent is None else PyudevView(parent)
            self._parent_loaded = True
        return self._parent

    @property
    def devnode(self) -> str | None:
        value = self._device.device_node
        return None if value is None else str(value)

    # Named like the DeviceView protocol; defined last because it shadows ``property``.
    def property(self, key: str) -> str | None:
        value = self._device.properties.get(key)
        return None if value is None else str(value)

    def attribute(self, key: str) -> str | None:
        try:
            value = self._device.attributes.get(key)
        except (OSError, ValueError, UnicodeError):
            return None
        if value is None:
            return None
        return bytes(value).decode("utf-8", "replace")


def _member_for(view: PyudevView) -> Member:
    current: PyudevView | None = view
    while current is not None:
        node = current.devnode
        if node is not None:
            return (current.devpath, node)
        current = current.parent
    return (view.devpath, None)


class ScanCancelled(Exception):
    """The scan's cancellation flag was set (its stream ended)."""


def find(
    context: Any, terms: tuple[udev_rules.Term, ...], cancelled: threading.Event
) -> list[Member]:
    """Devices matching one rule (blocking: call from a thread)."""
    enumerator = context.list_devices()
    for match in udev_rules.enumerator_matches(terms):
        method = getattr(enumerator, match.method)
        if match.method in ("match_subsystem", "match_attribute"):
            enumerator = method(*match.args, nomatch=match.nomatch)
        else:
            enumerator = method(*match.args)
    found = []
    for device in enumerator:
        if cancelled.is_set():
            raise ScanCancelled
        view = PyudevView(device)
        if udev_rules.matches(terms, view):
            found.append(_member_for(view))
    return found


def read_iommu_group(devpath: str) -> str | None:
    try:
        return os.path.basename(os.readlink(f"{SYS}{devpath}/iommu_group"))
    except OSError:
        return None


def scan(
    parsed: Details, resource_name: str, vfio: bool, cancelled: threading.Event | None = None
) -> list[devices.Device]:
    """One full discovery pass (blocking); ``ScanCancelled`` once ``cancelled`` is set."""
    import pyudev  # loaded only by processes that run the udev handler

    context = pyudev.Context()
    found: list[Member] = []
    for terms in parsed.rules:
        found.extend(find(context, terms, cancelled or threading.Event()))
    groups = group_members(found, parsed.group_recursive)
    iommu = {}
    if vfio:
        iommu = {i: g for i in groups if (g := read_iommu_group(i)) is not None}
    return build_devices(groups, parsed, resource_name, iommu)


@dataclasses.dataclass(frozen=True, slots=True)
class Udev:
    interval: float = DEFAULT_INTERVAL
    name: str = NAME
    shared: bool = False

    def parse_details(self, text: str) -> Details:
        return parse_details(text)

    async def discover(
        self, details: Details, properties: Mapping[str, bytes]
    ) -> AsyncGenerator[list[devices.Device], None]:
        resource_name = properties.get("devicePluginResourceName", b"").decode("utf-8", "replace")
        resource_name = resource_name.strip()
        vfio = properties.get("vfioPassthrough", b"").decode("utf-8", "replace")
        vfio_enabled = vfio.strip().lower() == "true"
        while True:
            yield await scan_in_thread(details, resource_name, vfio_enabled)
            await asyncio.sleep(self.interval)


async def scan_in_thread(parsed: Details, resource_name: str, vfio: bool) -> list[devices.Device]:
    """:func:`scan` in a thread of its own; cancelling the caller stops the scan too."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[list[devices.Device]] = loop.create_future()
    cancelled = threading.Event()

    def settle(result: list[devices.Device] | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result or [])

    def run() -> None:
        result, error = None, None
        try:
            result = scan(parsed, resource_name, vfio, cancelled)
        except ScanCancelled:
            return
        except Exception as e:
            error = e
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:
            pass  # the loop closed meanwhile: nobody waits for this scan any more

    # Daemon: a scan never holds the process up at exit; it is told to stop on cancel.
    threading.Thread(target=run, name=SCAN_THREAD, daemon=True).start()
    try:
        return await future
    except asyncio.CancelledError:
        cancelled.set()
        raise


def create(options: sdk.HandlerOptions) -> Udev:
    return Udev(interval=options.poll_interval("UDEV_DISCOVERY_INTERVAL_SECONDS", DEFAULT_INTERVAL))
