"""Pure pieces of the SDK, registry, wire conversions, details parsing and debugEcho."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import AsyncGenerator, Mapping
from pathlib import Path
from typing import Any

import pytest
from edgehub import discover as discover_command

from discovery import admission, details, devices, registry, sdk, wire
from discovery.handlers import debug_echo, opcua
from discovery.proto import discovery_pb2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", debug_echo.Details(())),
        ("descriptions: []", debug_echo.Details(())),
        ("descriptions: [foo1]", debug_echo.Details(("foo1",))),
        ('{"descriptions": ["a", "b"]}', debug_echo.Details(("a", "b"))),
    ],
)
def test_debug_echo_details(text: str, expected: debug_echo.Details) -> None:
    if text == "":
        with pytest.raises(details.DetailsError, match="descriptions: required"):
            debug_echo.parse_details(text)
        return
    assert debug_echo.parse_details(text) == expected


def test_debug_echo_devices_and_factory(tmp_path: Path) -> None:
    parsed = debug_echo.parse_details("descriptions: [foo1]")
    assert debug_echo.devices_for(parsed, available=True) == [
        devices.Device("foo1", {"DEBUG_ECHO_DESCRIPTION": "foo1"})
    ]
    assert debug_echo.devices_for(parsed, available=False) == []
    handler = debug_echo.create(
        sdk.HandlerOptions(
            {"DEBUG_ECHO_INSTANCES_SHARED": "False", "DEBUG_ECHO_AVAILABILITY_FILE": str(tmp_path)}
        )
    )
    assert (handler.shared, handler.availability_file, handler.poll_seconds) == (
        False,
        tmp_path,
        1.0,
    )
    with pytest.raises(ValueError, match="DEBUG_ECHO_INSTANCES_SHARED must be true or false"):
        debug_echo.create(sdk.HandlerOptions({"DEBUG_ECHO_INSTANCES_SHARED": "yes"}))
    with pytest.raises(ValueError, match="DEBUG_ECHO_POLL_SECONDS"):
        debug_echo.create(sdk.HandlerOptions({"DEBUG_ECHO_POLL_SECONDS": "soon"}))


def test_debug_echo_defaults_sharing_where_akri_requires_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="discovery.handlers.debug_echo")
    assert debug_echo.create(sdk.HandlerOptions({})).shared is True
    (line,) = [r.getMessage() for r in caplog.records]
    assert "DEBUG_ECHO_INSTANCES_SHARED is unset" in line
    assert "Akri's debugEcho requires it" in line
    caplog.clear()
    explicit = debug_echo.create(sdk.HandlerOptions({"DEBUG_ECHO_INSTANCES_SHARED": "false"}))
    assert explicit.shared is False
    assert caplog.records == []


POLL_VARIABLES = {
    "debugEcho": ("DEBUG_ECHO_POLL_SECONDS", 1.0),
    "udev": ("UDEV_DISCOVERY_INTERVAL_SECONDS", 10.0),
    "opcua": ("OPCUA_DISCOVERY_INTERVAL_SECONDS", 10.0),
    "onvif": ("ONVIF_DISCOVERY_INTERVAL_SECONDS", 10.0),
}


@pytest.mark.parametrize("name", sorted(POLL_VARIABLES))
@pytest.mark.parametrize(
    ("environ_value", "interval", "expected"),
    [
        (None, None, None),  # the handler's default
        ("2.5", None, 2.5),
        ("2.5", 0.5, 0.5),  # the handler option (--interval) wins over the environment
        ("soon", None, "must be a number of seconds, got 'soon'"),
        ("0", None, "must be a positive number of seconds, got 0"),
        ("-1", None, "must be a positive number of seconds, got -1"),
        ("nan", None, "must be a positive number of seconds, got nan"),
        ("inf", None, "must be a positive number of seconds, got inf"),
        (None, 0.0, "the poll interval must be a positive number of seconds, got 0"),
    ],
)
def test_poll_interval_of_every_builtin_handler(
    name: str, environ_value: str | None, interval: float | None, expected: float | str | None
) -> None:
    variable, default = POLL_VARIABLES[name]
    environ = {} if environ_value is None else {variable: environ_value}
    options = sdk.HandlerOptions(environ, interval=interval)
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=expected) as info:
            sdk.load(name, options)
        if interval is None:
            assert str(info.value).startswith(variable)
        return
    handler: Any = sdk.load(name, options)
    polled = handler.poll_seconds if name == "debugEcho" else handler.interval
    assert polled == (default if expected is None else expected)


def test_opcua_connect_timeout_comes_from_the_environment() -> None:
    assert opcua.create(sdk.HandlerOptions()).connect_timeout == 3.0
    options = sdk.HandlerOptions({"OPCUA_CONNECT_TIMEOUT_SECONDS": "0.5"})
    assert opcua.create(options).connect_timeout == 0.5
    with pytest.raises(ValueError, match=r"^OPCUA_CONNECT_TIMEOUT_SECONDS must be a positive"):
        opcua.create(sdk.HandlerOptions({"OPCUA_CONNECT_TIMEOUT_SECONDS": "-3"}))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", "must be a mapping, not a list"),
        ("just text", "must be a mapping, not a string"),
        ("a: [1\n", "not valid YAML at line 2, column 1"),
        ("x" * (details.MAX_DETAILS_BYTES + 1), "larger than"),
        # Issue 27 item 6: PyYAML's composer recursed (RecursionError) on deep nesting.
        ("[" * 5_000 + "]" * 5_000, "at line 1, column 201: nested deeper than 200 levels"),
        ("a: " + "{b: " * 300 + "1" + "}" * 300, "nested deeper than 200 levels"),
        ("".join(" " * i + "k:\n" for i in range(300)), "nested deeper than 200 levels"),
    ],
)
def test_details_load_errors(text: str, message: str) -> None:
    with pytest.raises(details.DetailsError, match=message):
        details.load(text)


def test_details_checkers_name_the_field() -> None:
    with pytest.raises(details.DetailsError) as caught:
        details.string_list(["a", 3], "outer.items")
    assert caught.value.field == "outer.items[1]"
    with pytest.raises(details.DetailsError, match="x: expected true or false"):
        details.boolean(details.Scalar("true"), "x")  # quoted: a string, as in serde_yaml
    with pytest.raises(details.DetailsError, match="n: expected a number"):
        details.number(True, "n", minimum=0, maximum=1)
    assert details.mapping(None, "m", ("a",)) == {}
    with pytest.raises(details.DetailsError, match=r"m.b: unknown key \(expected a\)"):
        details.mapping({"b": 1}, "m", ("a",), variants=True)


def test_wire_round_trip_and_property_presence() -> None:
    device = devices.Device(
        "d1",
        {"K": "V"},
        (devices.Mount("/c", "/h", True),),
        (devices.DeviceSpec("/dev/c", "/dev/h", "rw"),),
    )
    response = discovery_pb2.DiscoverResponse.FromString(
        wire.response([device]).SerializeToString()
    )
    assert wire.devices_from_response(response) == [device]
    request = wire.discover_request("d", {"set": b"v", "empty": b"", "unset": None})
    assert request.discovery_properties["set"].vec == b"v"
    assert request.discovery_properties["empty"].HasField("vec")
    assert not request.discovery_properties["unset"].HasField("vec")
    assert wire.properties_from_request(request) == {"set": b"v", "empty": b"", "unset": b""}
    assert devices.to_json(device) == {
        "id": "d1",
        "properties": {"K": "V"},
        "mounts": [{"containerPath": "/c", "hostPath": "/h", "readOnly": True}],
        "deviceSpecs": [{"containerPath": "/dev/c", "hostPath": "/dev/h", "permissions": "rw"}],
    }


def _dev(id_: str, value: str = "") -> devices.Device:
    return devices.Device(id_, {"V": value})


def test_merge_dedupes_by_id_and_sharedness() -> None:
    merged = registry.merge(
        {
            "h@/b.sock": (True, [_dev("x", "from-b"), _dev("y")]),
            "h@/a.sock": (True, [_dev("x", "from-a")]),
            "h@/c.sock": (False, [_dev("x", "local")]),
        }
    )
    assert [(d.device.id, d.shared, d.endpoint, d.device.properties["V"]) for d in merged] == [
        ("x", False, "h@/c.sock", "local"),
        ("x", True, "h@/a.sock", "from-a"),
        ("y", True, "h@/b.sock", ""),
    ]
    assert registry.merge({}) == ()


@pytest.mark.parametrize(
    ("endpoint", "network", "target"),
    [
        ("/var/lib/akri/udev.sock", False, "unix:/var/lib/akri/udev.sock"),
        ("http://10.0.0.5:10000", True, "10.0.0.5:10000"),
        ("10.0.0.5:10000", True, "10.0.0.5:10000"),
        ("http://[fd00::5]:10000", True, "[fd00::5]:10000"),
    ],
)
def test_endpoint_from_registration(endpoint: str, network: bool, target: str) -> None:
    policy = registry.RegistrySettings(
        directory=Path("/var/lib/akri"),
        handler_networks=admission.parse_networks(["10.0.0.0/8", "fd00::/8"]),
    ).policy()
    message = wire.register_request("udev", endpoint, network, False)
    parsed = registry.endpoint_from_request(message, policy)
    assert parsed.uid == f"udev@{endpoint}"
    assert parsed.target == target
    assert parsed.kind is (registry.EndpointKind.NETWORK if network else registry.EndpointKind.UDS)


def test_render_table() -> None:
    table = discover_command.render_table(
        [
            devices.Device(
                "/devices/virtual/tty/tty0",
                {"UDEV_DEVPATH": "/devices/virtual/tty/tty0", "UDEV_DEVNODE": "/dev/tty0"},
                device_specs=(devices.DeviceSpec("/dev/tty0", "/dev/tty0", "rwm"),),
            ),
            devices.Device("x"),
        ]
    )
    header, tty, bare = table.splitlines()
    assert header.split("  ")[0].strip() == "ID"
    # Columns line up: each starts at the same offset on every row.
    rows = (header, tty, bare)
    props = {row.index(v, 1) for row, v in zip(rows, ("PROP", "UDEV", "-"), strict=True)}
    nodes = {row.rindex(v) for row, v in zip(rows, ("DEVICE", "/dev/tty0", "-"), strict=True)}
    assert len(props) == 1 and len(nodes) == 1, (props, nodes)
    assert tty.startswith("/devices/virtual/tty/tty0  UDEV_DEVNODE=/dev/tty0,UDEV_DEVPATH=")
    assert tty.endswith("  /dev/tty0")
    assert discover_command.render_table([]) == "No devices found.\n"


def test_handler_loading() -> None:
    assert {"debugEcho", "udev", "opcua", "onvif"} <= set(sdk.available())
    handler = sdk.load("debugEcho", sdk.HandlerOptions())
    assert handler.name == "debugEcho" and handler.shared is True
    with pytest.raises(sdk.HandlerNotFoundError, match="available: debugEcho"):
        sdk.load("noSuchHandler", sdk.HandlerOptions())


def test_available_works_in_a_fresh_interpreter() -> None:
    # Nothing else may have imported importlib.metadata first (it did in this test session).
    code = "from discovery import sdk; print(','.join(sdk.available()))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert {"debugEcho", "udev", "opcua", "onvif"} <= set(done.stdout.strip().split(","))


class Flapping:
    """Yields the same list twice, then a different one, then the first again."""

    name = "flap"
    shared = False

    def parse_details(self, text: str) -> str:
        return text

    async def discover(
        self, details: str, properties: Mapping[str, bytes]
    ) -> AsyncGenerator[list[devices.Device], None]:
        for found in ([_dev("b"), _dev("a")], [_dev("a"), _dev("b")], [_dev("a")], [_dev("a")]):
            yield found


async def test_device_lists_sorts_and_skips_repeats() -> None:
    seen = [[d.id for d in found] async for found in sdk.device_lists(Flapping(), "", {})]
    assert seen == [["a", "b"], ["a"]]
    async with asyncio.timeout(1):
        assert [d.id for d in await sdk.discover_once(Flapping(), "", {})] == ["a", "b"]


async def test_mailbox_keeps_only_the_newest_unsent_list() -> None:
    box = sdk._Latest()
    box.put([_dev("1")])
    box.put([_dev("2")])
    assert await box.take() == [_dev("2")]
    box.put([_dev("3")])
    box.finish(RuntimeError("boom"))
    assert await box.take() == [_dev("3")]
    assert await box.take() is None
    assert isinstance(box.error, RuntimeError)


def test_edgehub_discover_reads_deeply_nested_files_as_details_text() -> None:
    """Issue 27 item 6: ``edgehub discover`` parsed its input with ``yaml.safe_load`` first (a
    ``RecursionError`` on 5,000 nested ``[``); now it is not a Configuration, so it goes to
    the handler's parser as details text, which reports it."""
    text = "[" * 5_000 + "]" * 5_000
    assert discover_command.configuration_details(text, "udev") == (text, {})
    with pytest.raises(details.DetailsError, match="nested deeper than 200 levels"):
        details.load(text)
