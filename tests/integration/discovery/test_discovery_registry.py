"""The agent-side registry against real handlers over Unix sockets (processes and in-process)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import socket
import stat
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from discovery_support import HandlerProcesses, wait_until

from discovery import admission, details, devices, registry, sdk, wire
from discovery.handlers import debug_echo

FAST = registry.RegistrySettings(
    directory=None, connect_timeout=0.5, initial_backoff=0.05, max_backoff=0.5
)


@pytest.fixture
async def reg(sock_dir: Path) -> AsyncIterator[registry.Registry]:
    async with registry.running(dataclasses.replace(FAST, directory=sock_dir)) as r:
        yield r


async def _until(
    request: registry.DiscoveryRequest,
    predicate: Callable[[registry.Snapshot], bool],
    seconds: float = 10.0,
) -> registry.Snapshot:
    async with asyncio.timeout(seconds):
        async for snapshot in request.snapshots():
            if predicate(snapshot):
                return snapshot
    raise AssertionError("unreachable")


def _socket_file(path: Path) -> str:
    """A Unix socket file nobody listens on (a connection is refused)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
    return str(path)


def _ids(snapshot: registry.Snapshot) -> list[tuple[str, bool, str]]:
    return [(d.device.id, d.shared, d.endpoint) for d in snapshot.devices]


def _echo(
    procs: HandlerProcesses, sock_dir: Path, tag: str, *extra: str, shared: str = "true"
) -> Any:
    return procs.start(
        "debugEcho",
        "--discovery-handlers-directory",
        str(sock_dir),
        "--registration-retry",
        "10",
        *extra,
        env={
            "DEBUG_ECHO_AVAILABILITY_FILE": str(sock_dir / f"avail-{tag}"),
            "DEBUG_ECHO_POLL_SECONDS": "0.05",
            "DEBUG_ECHO_INSTANCES_SHARED": shared,
        },
    )


async def test_merges_two_endpoints_of_one_handler_name(
    reg: registry.Registry, handler_processes: HandlerProcesses, sock_dir: Path
) -> None:
    request = reg.request("ns/cfg", "debugEcho", "descriptions: [cam1, cam2]")
    (sock_dir / "avail-b").write_text("OFFLINE")
    _echo(handler_processes, sock_dir, "a")
    _echo(handler_processes, sock_dir, "b", "--socket-path", str(sock_dir / "z.sock"))
    a = f"debugEcho@{sock_dir / 'debugEcho.sock'}"
    b = f"debugEcho@{sock_dir / 'z.sock'}"
    snapshot = await _until(request, lambda s: len(s.endpoints) == 2 and bool(s.devices))
    assert _ids(snapshot) == [("cam1", True, a), ("cam2", True, a)]

    # The same shared devices from both endpoints are one device each.
    (sock_dir / "avail-b").write_text("ONLINE")
    (sock_dir / "avail-a").write_text("OFFLINE")
    snapshot = await _until(request, lambda s: [e for _, _, e in _ids(s)] == [b, b])
    assert [i for i, _, _ in _ids(snapshot)] == ["cam1", "cam2"]
    (sock_dir / "avail-a").write_text("ONLINE")
    snapshot = await _until(request, lambda s: [e for _, _, e in _ids(s)] == [a, a])
    assert {e.uid for e in reg.endpoints("debugEcho")} == {a, b}


async def test_shared_and_local_devices_with_one_id_are_distinct(
    reg: registry.Registry, handler_processes: HandlerProcesses, sock_dir: Path
) -> None:
    request = reg.request("ns/cfg", "debugEcho", "descriptions: [dev]")
    _echo(handler_processes, sock_dir, "a", shared="true")
    _echo(
        handler_processes, sock_dir, "b", "--socket-path", str(sock_dir / "b.sock"), shared="false"
    )
    snapshot = await _until(request, lambda s: len(s.devices) == 2)
    assert [(i, shared) for i, shared, _ in _ids(snapshot)] == [("dev", False), ("dev", True)]


async def test_killed_handler_drops_devices_and_recovers_on_restart(
    reg: registry.Registry, handler_processes: HandlerProcesses, sock_dir: Path
) -> None:
    request = reg.request("ns/cfg", "debugEcho", "descriptions: [a]")
    proc = _echo(handler_processes, sock_dir, "a")
    await _until(request, lambda s: bool(s.devices))
    proc.send_signal(signal.SIGKILL)
    await asyncio.to_thread(proc.wait, 10)
    # Stream error -> devices dropped; the retry cannot connect -> endpoint removed.
    snapshot = await _until(request, lambda s: not s.devices and not s.endpoints)
    assert snapshot.invalid_details is None
    assert reg.endpoints("debugEcho") == ()

    _echo(handler_processes, sock_dir, "a")
    snapshot = await _until(request, lambda s: bool(s.devices))
    assert [i for i, _, _ in _ids(snapshot)] == ["a"]


async def test_handler_reregisters_when_the_registry_restarts(
    handler_processes: HandlerProcesses, sock_dir: Path
) -> None:
    settings = dataclasses.replace(FAST, directory=sock_dir)
    _echo(handler_processes, sock_dir, "a")  # registration retry is 10 s
    async with registry.running(settings) as first:
        request = first.request("ns/cfg", "debugEcho", "descriptions: [a]")
        await _until(request, lambda s: bool(s.devices))
    assert not (sock_dir / "agent-registration.sock").exists()
    await asyncio.sleep(0.2)
    started = time.monotonic()
    async with registry.running(settings) as second:
        request = second.request("ns/cfg", "debugEcho", "descriptions: [a]")
        await _until(request, lambda s: bool(s.devices), seconds=5)
    # Half the 10 s retry interval: only noticing the new socket gets there in time.
    assert time.monotonic() - started < 5.0


async def test_invalid_details_are_reported_not_retried(
    reg: registry.Registry, handler_processes: HandlerProcesses, sock_dir: Path
) -> None:
    request = reg.request("ns/cfg", "debugEcho", "descriptions: nope")
    _echo(handler_processes, sock_dir, "a")
    snapshot = await _until(request, lambda s: s.invalid_details is not None)
    assert "descriptions: expected a list" in (snapshot.invalid_details or "")
    assert snapshot.devices == () and snapshot.endpoints == ()
    # Replacing the request with valid details recovers.
    request = reg.request("ns/cfg", "debugEcho", "descriptions: [ok]")
    snapshot = await _until(request, lambda s: bool(s.devices))
    assert snapshot.invalid_details is None


async def test_unreachable_endpoint_is_removed(reg: registry.Registry, sock_dir: Path) -> None:
    request = reg.request("ns/cfg", "ghost", "")
    async with grpc.aio.insecure_channel(f"unix:{sock_dir / 'agent-registration.sock'}") as ch:
        await wire.register_call(ch)(
            wire.register_request("ghost", _socket_file(sock_dir / "nothing.sock"), False, True)
        )
    assert [e.name for e in reg.endpoints()] == ["ghost"]
    await wait_until(lambda: reg.endpoints() == (), seconds=5)
    assert request.snapshot().endpoints == ()


@pytest.mark.parametrize(
    ("name", "endpoint", "network", "message"),
    [
        ("", "{dir}/x.sock", False, "name: must not be empty"),
        ("a/b", "{dir}/x.sock", False, "name: 'a/b' contains '/'"),
        ("a\x00b", "{dir}/x.sock", False, "name: 'a\\x00b' contains a control character"),
        ("n" * 254, "{dir}/x.sock", False, "name: is 254 characters long; at most 253"),
        ("h", "", False, "endpoint: must not be empty"),
        ("h", "relative.sock", False, "endpoint: 'relative.sock' is not an absolute"),
        ("h", "/tmp/elsewhere.sock", False, "endpoint: '/tmp/elsewhere.sock' is not a socket in"),
        ("h", "{dir}/../x.sock", False, "is not an absolute, normalized path"),
        ("h", "{dir}/regular-file", False, "is not a Unix socket"),
        ("h", "{dir}/agent-registration.sock", False, "is the agent's registration socket"),
        ("h", "https://127.0.0.1:1", True, "endpoint: NETWORK endpoint must be http://<ip>"),
        ("h", "http://127.0.0.1", True, "http://<ip>:<port>"),
        ("h", "http://10.0.0.1:80", True, "10.0.0.1 is not in an allowed handler network"),
        ("h", "http://localhost:80", True, "names a host"),
    ],
)
async def test_malformed_registrations_are_rejected(
    sock_dir: Path,
    caplog: pytest.LogCaptureFixture,
    name: str,
    endpoint: str,
    network: bool,
    message: str,
) -> None:
    (sock_dir / "regular-file").write_text("")
    settings = dataclasses.replace(
        FAST, directory=sock_dir, handler_networks=admission.parse_networks(["127.0.0.0/8"])
    )
    endpoint = endpoint.format(dir=sock_dir)
    async with (
        registry.running(settings) as reg,
        grpc.aio.insecure_channel(f"unix:{sock_dir / 'agent-registration.sock'}") as ch,
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await wire.register_call(ch)(wire.register_request(name, endpoint, network, False))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in (caught.value.details() or "")
        assert reg.endpoints() == ()
    refusals = [r for r in caplog.records if "refused a discovery handler" in r.getMessage()]
    assert len(refusals) == 1 and message in refusals[0].getMessage()


async def test_allowed_network_endpoints_register(sock_dir: Path) -> None:
    settings = dataclasses.replace(
        FAST, directory=sock_dir, handler_networks=admission.parse_networks(["127.0.0.0/8"])
    )
    async with (
        registry.running(settings) as reg,
        grpc.aio.insecure_channel(f"unix:{sock_dir / 'agent-registration.sock'}") as ch,
    ):
        await wire.register_call(ch)(wire.register_request("h", "http://127.0.0.9:1", True, True))
        assert [e.uid for e in reg.endpoints()] == ["h@http://127.0.0.9:1"]


async def test_the_registration_socket_is_0660_whatever_the_umask(sock_dir: Path) -> None:
    previous = os.umask(0)
    try:
        async with registry.running(dataclasses.replace(FAST, directory=sock_dir)):
            mode = (sock_dir / "agent-registration.sock").lstat().st_mode
            assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o660, oct(mode)
            # Nothing of the private staging directory is left behind.
            assert sorted(p.name for p in sock_dir.iterdir()) == ["agent-registration.sock"]
    finally:
        os.umask(previous)


async def test_registrations_are_bounded_but_known_endpoints_may_re_register(
    sock_dir: Path,
) -> None:
    settings = dataclasses.replace(
        FAST, directory=sock_dir, max_endpoints=3, max_endpoints_per_name=2
    )
    paths = [_socket_file(sock_dir / f"h{n}.sock") for n in range(5)]
    async with (
        registry.running(settings) as reg,
        grpc.aio.insecure_channel(f"unix:{sock_dir / 'agent-registration.sock'}") as ch,
    ):
        register = wire.register_call(ch)
        for path in paths[:2]:
            await register(wire.register_request("h", path, False, False))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await register(wire.register_request("h", paths[2], False, False))
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "name: 2 endpoints of 'h' are registered already; at most 2" in (
            caught.value.details() or ""
        )
        await register(wire.register_request("other", paths[3], False, False))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await register(wire.register_request("third", paths[4], False, False))
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "3 discovery handler endpoints" in (caught.value.details() or "")
        await register(wire.register_request("h", paths[1], False, False))
        assert [e.endpoint for e in reg.endpoints()] == [paths[0], paths[1], paths[3]]


@dataclasses.dataclass
class Fixed:
    """A third-party-style handler: fixed devices, then holds the stream open."""

    ids: list[str]
    shared: bool = True
    name: str = "fixed"
    seen_properties: list[Mapping[str, bytes]] = dataclasses.field(default_factory=list)

    def parse_details(self, text: str) -> dict[str, Any]:
        return details.mapping(details.load(text), "", ("fail",))

    async def discover(
        self, parsed: dict[str, Any], properties: Mapping[str, bytes]
    ) -> AsyncGenerator[list[devices.Device], None]:
        self.seen_properties.append(dict(properties))
        props = {k: v.decode() for k, v in properties.items()}
        yield [devices.Device(i, props) for i in self.ids]
        if parsed.get("fail"):
            raise RuntimeError("boom")
        await asyncio.Event().wait()
        yield []


async def test_served_handlers_merge_and_properties_are_resolved_per_query(
    reg: registry.Registry, sock_dir: Path
) -> None:
    first, second = Fixed(["a", "b"]), Fixed(["b", "c"])
    calls = 0

    async def properties() -> Mapping[str, bytes | None]:
        nonlocal calls
        calls += 1
        return {"key": f"v{calls}".encode()}

    async with asyncio.TaskGroup() as tg:
        servers = [
            tg.create_task(
                sdk.serve(h, sdk.ServeSettings(sock_dir, socket_path=sock_dir / f"f{n}.sock")),
                name=f"serve fixed{n}",
            )
            for n, h in enumerate((first, second))
        ]
        request = reg.request("ns/cfg", "fixed", "", properties)
        snapshot = await _until(request, lambda s: len(s.devices) == 3)
        assert [d.device.id for d in snapshot.devices] == ["a", "b", "c"]
        assert calls == 2  # once per endpoint query
        assert sorted(h.seen_properties[0]["key"] for h in (first, second)) == [b"v1", b"v2"]

        # A handler failing mid-stream is retried with back-off; properties are re-resolved.
        request = reg.request("ns/cfg", "fixed", "fail: true", properties)
        await wait_until(lambda: len(first.seen_properties) >= 3, seconds=5)
        assert first.seen_properties[-1]["key"] != first.seen_properties[1]["key"]
        snapshot = request.snapshot()
        assert snapshot.invalid_details is None
        await reg.stop_request("ns/cfg")
        for server in servers:
            server.cancel()
    assert not (sock_dir / "f0.sock").exists()


async def test_embedded_handler_and_registration_notifications(sock_dir: Path) -> None:
    async with registry.running(FAST) as reg:  # no socket: embedded only
        names: list[str] = []

        async def collect() -> None:
            async for name in reg.registrations():
                names.append(name)

        async with asyncio.TaskGroup() as tg:
            collector = tg.create_task(collect(), name="collect registrations")
            await asyncio.sleep(0)
            request = reg.request("ns/cfg", "debugEcho", "descriptions: [e1]")
            assert request.snapshot().endpoints == ()
            avail = sock_dir / "avail"
            reg.register_embedded(
                debug_echo.DebugEcho(shared=False, availability_file=avail, poll_seconds=0.05)
            )
            snapshot = await _until(request, lambda s: bool(s.devices))
            assert _ids(snapshot) == [("e1", False, "debugEcho@embedded")]
            await wait_until(lambda: names == ["debugEcho"])
            avail.write_text("OFFLINE")
            await _until(request, lambda s: not s.devices)

            bad = reg.request("ns/bad", "debugEcho", "descriptions: [[1]]")
            snapshot = await _until(bad, lambda s: s.invalid_details is not None)
            assert "descriptions[0]" in (snapshot.invalid_details or "")
            collector.cancel()


async def test_the_same_request_is_idempotent(reg: registry.Registry) -> None:
    one = reg.request("k", "debugEcho", "descriptions: [a]")
    assert reg.request("k", "debugEcho", "descriptions: [a]") is one
    two = reg.request("k", "debugEcho", "descriptions: [b]")
    assert two is not one and reg.get_request("k") is two
    await reg.stop_request("k")
    assert reg.get_request("k") is None


@dataclasses.dataclass
class Silent:
    """An Akri-style handler that sends nothing while it finds nothing."""

    shared: bool = True
    name: str = "fixed"

    def parse_details(self, text: str) -> dict[str, Any]:
        return {}

    async def discover(
        self, parsed: dict[str, Any], properties: Mapping[str, bytes]
    ) -> AsyncGenerator[list[devices.Device], None]:
        await asyncio.Event().wait()
        yield []


async def test_reported_tells_an_empty_list_from_no_list_yet(
    reg: registry.Registry, sock_dir: Path
) -> None:
    empty, silent = sock_dir / "empty.sock", sock_dir / "silent.sock"
    empty_uid, silent_uid = f"fixed@{empty}", f"fixed@{silent}"
    async with asyncio.TaskGroup() as tg:
        servers = [
            tg.create_task(
                sdk.serve(h, sdk.ServeSettings(sock_dir, socket_path=path)), name=f"serve {path}"
            )
            for h, path in ((Fixed([]), empty), (Silent(), silent))
        ]
        request = reg.request("ns/cfg", "fixed", "")
        # An empty first list is a change worth publishing: the agent may now trust it.
        snapshot = await _until(
            request, lambda s: len(s.endpoints) == 2 and empty_uid in s.reported
        )
        assert snapshot.reported == {empty_uid}
        assert silent_uid in snapshot.endpoints and snapshot.devices == ()

        # A failed stream is no longer "reported" until its next stream delivers a list.
        request = reg.request("ns/cfg", "fixed", "fail: true")
        snapshot = await _until(request, lambda s: empty_uid in s.errors)
        assert empty_uid not in snapshot.reported
        snapshot = await _until(request, lambda s: empty_uid in s.reported)
        assert empty_uid not in snapshot.errors
        await reg.stop_request("ns/cfg")
        for server in servers:
            server.cancel()


@dataclasses.dataclass
class Mounting:
    """An in-process handler reporting the devices it is given (mounts and device nodes)."""

    found: list[devices.Device]
    name: str = "mounting"
    shared: bool = False

    def parse_details(self, text: str) -> str:
        return text

    async def discover(
        self, parsed: str, properties: Mapping[str, bytes]
    ) -> AsyncGenerator[list[devices.Device], None]:
        yield self.found
        await asyncio.Event().wait()
        yield []


async def test_devices_exposing_the_host_are_left_out_and_mounts_made_read_only(
    sock_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plugins_dir = Path("/var/lib/kubelet/device-plugins")
    settings = dataclasses.replace(FAST, directory=sock_dir, protected_paths=(plugins_dir,))
    good = devices.Device(
        "good",
        mounts=(devices.Mount(container_path="/data", host_path="/srv/data", read_only=False),),
        device_specs=(devices.DeviceSpec("/dev/ttyS0", "/dev/ttyS0", "rw"),),
    )
    root = devices.Device(
        "root", mounts=(devices.Mount(container_path="/host", host_path="/", read_only=True),)
    )
    plugins = devices.Device(
        "plugins", mounts=(devices.Mount(container_path="/p", host_path=str(plugins_dir)),)
    )
    disk = devices.Device("disk", device_specs=(devices.DeviceSpec("/d", "/etc/shadow", "r"),))
    async with registry.running(settings) as reg:
        reg.register_embedded(Mounting([good, root, plugins, disk]))
        request = reg.request("ns/cfg", "mounting", "")
        snapshot = await _until(request, lambda s: bool(s.devices))
    assert [d.device.id for d in snapshot.devices] == ["good"]
    (admitted,) = snapshot.devices
    assert admitted.device.mounts[0].read_only is True
    assert snapshot.rejected == (
        "mounting@embedded: device 'disk' deviceSpecs[0].hostPath: "
        "'/etc/shadow' is not a node under /dev/",
        f"mounting@embedded: device 'plugins' mounts[0].hostPath: "
        f"'{plugins_dir}' exposes {plugins_dir}",
        "mounting@embedded: device 'root' mounts[0].hostPath: "
        "'/' (the whole file system) is refused",
    )
    assert len([r for r in caplog.records if "left out a device" in r.getMessage()]) == 3


async def test_mounts_are_judged_where_their_links_lead(
    sock_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 27 item 5: a link into a protected directory, a protected directory that is
    itself a link (``/var/run/cdi`` -> ``/run/cdi``) and a link to a system tree are seen
    through; a link elsewhere is admitted as given."""
    root = tmp_path.resolve()
    kubelet, cdi, data = root / "kubelet", root / "run-cdi", root / "data"
    for directory in (kubelet, cdi, data):
        directory.mkdir()
    (root / "var-run-cdi").symlink_to(cdi)
    (root / "innocent").symlink_to(kubelet)
    (root / "etc-link").symlink_to("/etc")
    (root / "data-link").symlink_to(data)
    settings = dataclasses.replace(
        FAST, directory=sock_dir, protected_paths=(kubelet, root / "var-run-cdi")
    )

    def mounting(device_id: str, host: Path) -> devices.Device:
        return devices.Device(device_id, mounts=(devices.Mount("/mnt", str(host), True),))

    found = [
        mounting("into-kubelet", root / "innocent" / "pods"),
        mounting("cdi", cdi / "akri.json"),
        mounting("etc", root / "etc-link"),
        mounting("data", root / "data-link"),
    ]
    async with registry.running(settings) as reg:
        reg.register_embedded(Mounting(found))
        request = reg.request("ns/cfg", "mounting", "")
        snapshot = await _until(request, lambda s: bool(s.devices))
    (admitted,) = snapshot.devices
    assert admitted.device.id == "data"
    assert admitted.device.mounts == (devices.Mount("/mnt", str(root / "data-link"), True),)
    field = "mounts[0].hostPath"
    assert snapshot.rejected == (
        f"mounting@embedded: device 'cdi' {field}: '{cdi}/akri.json' exposes "
        f"{root}/var-run-cdi (= {cdi})",
        f"mounting@embedded: device 'etc' {field}: '{root}/etc-link' (really '/etc') exposes "
        "/etc (the system's configuration)",
        f"mounting@embedded: device 'into-kubelet' {field}: '{root}/innocent/pods' "
        f"(really '{kubelet}/pods') exposes {kubelet}",
    )
    assert len([r for r in caplog.records if "left out a device" in r.getMessage()]) == 3
