"""What the agent admits from handlers (issue 14 item 13): pure table tests."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from discovery import admission, devices, registry
from discovery.agent import settings

POLICY = admission.Policy(
    handlers_directory="/var/lib/akri",
    registration_socket="/var/lib/akri/agent-registration.sock",
    networks=admission.parse_networks(["10.244.0.0/16", "fd00::/64"]),
    writable_mounts=frozenset({"trusted"}),
    protected=("/var/lib/akri", "/var/lib/kubelet/device-plugins", "/var/run/cdi"),
)


@pytest.mark.parametrize(
    ("name", "endpoint", "network"),
    [
        ("udev", "/var/lib/akri/udev.sock", False),
        ("my-handler.v2", "/var/lib/akri/x.sock", False),
        ("onvif", "http://10.244.3.7:10000", True),
        ("onvif", "10.244.3.7:10000", True),
        ("onvif", "http://[fd00::7]:10000", True),
        ("n" * 253, "/var/lib/akri/n.sock", False),
    ],
)
def test_accepted_registrations(name: str, endpoint: str, network: bool) -> None:
    assert admission.endpoint(name, endpoint, network, POLICY) == admission.Registration(
        name, endpoint, network
    )


@pytest.mark.parametrize(
    ("name", "endpoint", "network", "field", "message"),
    [
        ("", "/var/lib/akri/a.sock", False, "name", "must not be empty"),
        ("a/b", "/var/lib/akri/a.sock", False, "name", "contains '/'"),
        ("a\x00b", "/var/lib/akri/a.sock", False, "name", "control character"),
        ("a\nb", "/var/lib/akri/a.sock", False, "name", "control character"),
        ("n" * 254, "/var/lib/akri/a.sock", False, "name", "254 characters long; at most 253"),
        ("h", "", False, "endpoint", "must not be empty"),
        ("h", "relative.sock", False, "endpoint", "not an absolute, normalized path"),
        ("h", "/var/lib/akri/../akri/h.sock", False, "endpoint", "not an absolute, normalized"),
        ("h", "/var/lib/akri//h.sock", False, "endpoint", "not an absolute, normalized"),
        ("h", "/tmp/h.sock", False, "endpoint", "is not a socket in /var/lib/akri"),
        ("h", "/var/lib/akri/sub/h.sock", False, "endpoint", "is not a socket in /var/lib/akri"),
        ("h", "/var/lib/akri/h\x00.sock", False, "endpoint", "control character"),
        ("h", "/var/lib/akri/" + "x" * 100, False, "endpoint", "longer than 107 bytes"),
        ("h", "/var/lib/akri/agent-registration.sock", False, "endpoint", "registration socket"),
        ("h", "http://169.254.169.254:80", True, "endpoint", "not in an allowed handler network"),
        ("h", "http://127.0.0.1:10000", True, "endpoint", "not in an allowed handler network"),
        ("h", "http://camera.local:10000", True, "endpoint", "names a host"),
        ("h", "https://10.244.0.1:10000", True, "endpoint", "http://<ip>:<port>"),
        ("h", "http://10.244.0.1:10000/x", True, "endpoint", "http://<ip>:<port>"),
        ("h", "http://10.244.0.1", True, "endpoint", "http://<ip>:<port>"),
        ("h", "http://10.244.0.1:99999", True, "endpoint", "out of range"),
    ],
)
def test_refused_registrations_name_the_field(
    name: str, endpoint: str, network: bool, field: str, message: str
) -> None:
    with pytest.raises(admission.Refused) as caught:
        admission.endpoint(name, endpoint, network, POLICY)
    assert caught.value.field == field
    assert message in caught.value.message
    assert str(caught.value).startswith(f"{field}: ")


def test_no_network_endpoint_without_the_flag() -> None:
    policy = admission.Policy(handlers_directory="/var/lib/akri")
    with pytest.raises(admission.Refused, match="none \\(see --handler-networks\\)"):
        admission.endpoint("onvif", "http://10.244.3.7:10000", True, policy)


def _device(*mounts: devices.Mount, specs: tuple[devices.DeviceSpec, ...] = ()) -> devices.Device:
    return devices.Device("dev", {"K": "v"}, tuple(mounts), specs)


def test_a_plain_device_is_admitted_unchanged() -> None:
    found = _device(
        devices.Mount(container_path="/usr/lib/vendor", host_path="/opt/lib", read_only=True),
        specs=(
            devices.DeviceSpec(
                container_path="/dev/video0", host_path="/dev/video0", permissions="rw"
            ),
        ),
    )
    assert admission.device(found, "udev", POLICY) == (found, False)


def test_writable_mounts_become_read_only_unless_allowed() -> None:
    found = _device(devices.Mount(container_path="/mnt/data", host_path="/data", read_only=False))
    admitted, downgraded = admission.device(found, "udev", POLICY)
    assert downgraded and admitted.mounts == (
        devices.Mount(container_path="/mnt/data", host_path="/data", read_only=True),
    )
    assert admission.device(found, "trusted", POLICY) == (found, False)


def _at(container: str, host: str, read_only: bool = True) -> devices.Mount:
    return devices.Mount(container_path=container, host_path=host, read_only=read_only)


def _node(container: str, host: str, permissions: str = "r") -> devices.Device:
    """A device with one device node (a ``DeviceSpec``)."""
    spec = devices.DeviceSpec(container_path=container, host_path=host, permissions=permissions)
    return _device(specs=(spec,))


@pytest.mark.parametrize(
    ("found", "field", "message"),
    [
        (_device(_at("/", "/")), "mounts[0].hostPath", "'/' (the whole"),
        (_device(_at("/", "/x")), "mounts[0].containerPath", "'/' (the whole"),
        (_device(_at("/h", "/.")), "mounts[0].hostPath", "normalized"),
        (_device(_at("/h", "//")), "mounts[0].hostPath", "normalized"),
        (_device(_at("/h", "/a/../..")), "mounts[0].hostPath", "normalized"),
        (_device(_at("/h", "etc")), "mounts[0].hostPath", "normalized"),
        (_device(_at("/h", "/var")), "mounts[0].hostPath", "exposes /var/lib/akri"),
        (_device(_at("/h", "/var/run/cdi/x.json")), "mounts[0].hostPath", "exposes /var/run/cdi"),
        (
            _device(_at("/h", "/ok"), _at("/k", "/var/lib/kubelet", read_only=False)),
            "mounts[1].hostPath",
            "exposes /var/lib/kubelet/device-plugins",
        ),
        (_node("/etc/shadow/../x", "/dev/x"), "deviceSpecs[0].containerPath", "absolute"),
        (_node("/dev/x", "/etc/shadow"), "deviceSpecs[0].hostPath", "not a node under /dev/"),
        (_node("/x", "/dev/../etc/shadow"), "deviceSpecs[0].hostPath", "not a node under /dev/"),
        (_node("/x", "/dev/x", "rwx"), "deviceSpecs[0].permissions", "combination of r, w, m"),
        (devices.Device("dev", {"A=B": "v"}), "properties['A=B']", "without =/NUL"),
        (devices.Device("dev", {"K": "v\x00"}), "properties['K']", "NUL"),
        (devices.Device(""), "id", "empty"),
    ],
)
def test_refused_devices_name_the_device_and_field(
    found: devices.Device, field: str, message: str
) -> None:
    with pytest.raises(admission.Refused) as caught:
        admission.device(found, "trusted", POLICY)
    if found.id:
        assert caught.value.field == f"device {found.id!r} {field}"
    else:
        assert caught.value.field == field
    assert message in caught.value.message


# --- issue 27 item 5: what a mount exposes is decided on real paths, the host protected ----------

# As the registry builds it: the handlers directory protected, the built-in trees.
DEFAULTS = admission.Policy(handlers_directory="/var/lib/akri", protected=("/var/lib/akri",))


def _mount(host: str, read_only: bool = True) -> devices.Device:
    return _device(devices.Mount(container_path="/mnt/x", host_path=host, read_only=read_only))


@pytest.mark.parametrize(
    ("host", "exposed"),
    [
        # The system's trees: everything inside and above them.
        ("/etc", "/etc (the system's configuration)"),
        ("/etc/shadow", "/etc (the system's configuration)"),
        ("/proc/1/root", "/proc (the kernel's process and sysctl files)"),
        ("/root/.ssh", "/root"),
        ("/boot", "/boot"),
        ("/usr/bin", "/usr"),
        ("/lib/modules", "/lib"),
        ("/lib64", "/lib64"),
        ("/sbin", "/sbin"),
        # ... or as a whole: the tree and what is above it, not single devices or files in it.
        ("/dev", "/dev (device nodes)"),
        ("/sys", "/sys"),
        ("/run", "/run"),
        ("/var/run", "/var/run"),
        ("/sys/fs/cgroup", "/sys/fs"),
        ("/sys/kernel/uevent_helper", "/sys/kernel"),
        # kubelet's, the container runtime's and the hub's, by their default paths.
        ("/var/lib/kubelet/pods", "/var/lib/kubelet (kubelet's"),
        ("/etc/kubernetes/kubelet.conf", "/etc/kubernetes (kubelet's"),
        ("/etc/kubernetes", "/etc/kubernetes (kubelet's"),
        ("/var/lib/yurthub/pki", "/var/lib/yurthub (the hub's --root-dir"),
        ("/etc/kubernetes/cache/kubelet", "/etc/kubernetes/cache (the hub's --disk-cache-path"),
        ("/run/containerd/containerd.sock", "/run/containerd (the container runtime's"),
        ("/var/run/containerd", "/var/run/containerd (the container runtime's"),
        ("/run/crio/crio.sock", "/run/crio (the container runtime's"),
        ("/var/run/docker.sock", "/var/run/docker.sock (the container runtime's"),
        ("/run/docker.sock", "/run/docker.sock (the container runtime's"),
        ("/var/lib/containerd", "/var/lib/containerd (the container runtime's"),
        ("/var/lib/docker/volumes", "/var/lib/docker (the container runtime's"),
        ("/run/cdi", "/run/cdi (the container runtime's"),
        ("/var/run/cdi/akri.json", "/var/run/cdi (the container runtime's"),
        ("/etc/cdi", "/etc/cdi (the container runtime's"),
        ("/run/systemd/private", "/run/systemd"),
        ("/run/dbus/system_bus_socket", "/run/dbus"),
        # A directory above a protected one exposes it too.
        ("/var", "exposes /var/lib/akri"),
        ("/var/lib", "exposes /var/lib/akri"),
    ],
)
def test_the_host_s_own_trees_are_refused_by_default(host: str, exposed: str) -> None:
    with pytest.raises(admission.Refused) as caught:
        admission.device(_mount(host), "udev", DEFAULTS)
    assert caught.value.field == "device 'dev' mounts[0].hostPath"
    assert caught.value.message.startswith(f"{host!r} exposes ")
    assert exposed in caught.value.message


@pytest.mark.parametrize(
    "host",
    [
        "/dev/video0",
        "/dev/bus/usb/001/004",
        "/dev/snd",
        "/sys/class/video4linux/video0",
        "/sys/bus/usb/devices/1-1",
        "/sys/devices/platform",
        "/run/udev",
        "/var/run/udev/data",
        "/srv/data",
        "/opt/vendor/lib",
        "/mnt/usb",
        "/var/log/camera",
        "/home/pi/models",
        "/etcetera",  # a prefix of a protected name is not inside it
        "/runner",
    ],
)
def test_what_a_device_handler_needs_is_admitted(host: str) -> None:
    found = _mount(host)
    assert admission.device(found, "udev", DEFAULTS) == (found, False)


def test_the_operator_and_the_hub_add_trees() -> None:
    extra = admission.Tree("/data/hub", "the hub's --root-dir")
    policy = dataclasses.replace(DEFAULTS, trees=(*admission.TREES, extra))
    with pytest.raises(admission.Refused, match=r"'/data' exposes /data/hub \(the hub's"):
        admission.device(_mount("/data"), "udev", policy)
    with pytest.raises(admission.Refused, match=r"'/data/hub/pki' exposes /data/hub \(the"):
        admission.device(_mount("/data/hub/pki"), "udev", policy)
    admission.device(_mount("/data/other"), "udev", policy)


def test_mounts_are_judged_by_where_their_links_lead() -> None:
    real = {"/srv/innocent": "/run/containerd", "/srv/up": "/"}
    with pytest.raises(admission.Refused) as caught:
        admission.device(_mount("/srv/innocent"), "udev", DEFAULTS, real)
    assert caught.value.message == (
        "'/srv/innocent' (really '/run/containerd') exposes /run/containerd "
        "(the container runtime's sockets and state)"
    )
    with pytest.raises(admission.Refused, match=r"'/srv/up' \(really '/'\) .*whole file system"):
        admission.device(_mount("/srv/up"), "udev", DEFAULTS, real)


def test_protected_paths_are_compared_where_their_links_lead() -> None:
    # /var/run is a link to /run on most hosts: /run/x is the agent's /var/run/x.
    policy = dataclasses.replace(DEFAULTS, protected=("/var/run/akri-cdi",), trees=())
    real = {"/var/run/akri-cdi": "/run/akri-cdi"}
    with pytest.raises(admission.Refused) as caught:
        admission.device(_mount("/run/akri-cdi/x.json"), "udev", policy, real)
    assert caught.value.message == (
        "'/run/akri-cdi/x.json' exposes /var/run/akri-cdi (= /run/akri-cdi)"
    )
    admission.device(_mount("/run/akri-cdi/x.json"), "udev", policy)  # unresolved: not seen


def test_an_admitted_mount_keeps_the_path_it_was_given() -> None:
    # The agent's view of links may not be the host's (it runs in a Pod): resolving checks.
    found = _mount("/srv/camera-data", read_only=False)
    real = {"/srv/camera-data": "/mnt/disk1/camera"}
    admitted, downgraded = admission.device(found, "udev", DEFAULTS, real)
    assert downgraded and admitted.mounts == (
        devices.Mount(container_path="/mnt/x", host_path="/srv/camera-data", read_only=True),
    )
    found = _mount("/srv/camera-data")
    assert admission.device(found, "udev", DEFAULTS, real) == (found, False)


def test_device_nodes_must_really_be_under_dev() -> None:
    spec = devices.DeviceSpec(container_path="/dev/x", host_path="/dev/x", permissions="r")
    found = _device(specs=(spec,))
    with pytest.raises(admission.Refused) as caught:
        admission.device(found, "udev", DEFAULTS, {"/dev/x": "/etc/shadow"})
    assert caught.value.field == "device 'dev' deviceSpecs[0].hostPath"
    assert caught.value.message == "'/dev/x' (really '/etc/shadow') is not a node under /dev/"
    # by-id links stay as given: the runtime follows them to the node.
    assert admission.device(found, "udev", DEFAULTS, {"/dev/x": "/dev/ttyUSB0"}) == (found, False)


def test_paths_to_resolve_are_the_devices_and_the_policy_s() -> None:
    found = [
        _device(
            devices.Mount(container_path="/c", host_path="/srv/a"),
            devices.Mount(container_path="/c", host_path="rel/ative"),
            devices.Mount(container_path="/c", host_path="/srv/\x00"),
            specs=(devices.DeviceSpec("/dev/x", "/dev/serial/by-id/usb-1", "rw"),),
        )
    ]
    policy = dataclasses.replace(DEFAULTS, protected=("/var/lib/akri",))
    wanted = admission.paths_to_resolve(found, policy)
    assert {"/srv/a", "/dev/serial/by-id/usb-1", "/var/lib/akri", "/run/containerd"} <= wanted
    assert "rel/ative" not in wanted and "/srv/\x00" not in wanted  # never handed to realpath


def test_the_agent_s_settings_protect_the_hub_s_and_the_operator_s_paths(tmp_path: Path) -> None:
    assert settings.parse_protected_paths(" /data/keys, /srv/x/../y ,,") == (
        Path("/data/keys"),
        Path("/srv/y"),
    )
    with pytest.raises(ValueError, match="'data' is not an absolute path"):
        settings.parse_protected_paths("/ok,data")
    agent = settings.AgentSettings(
        node_name="n",
        discovery_handlers_dir=tmp_path,
        hub_paths=(Path("/data/yurthub"),),
        protected_mount_paths=(Path("/data/keys"),),
    )
    policy = registry.RegistrySettings(
        directory=tmp_path,
        protected_paths=settings.protected_paths(agent),
        protected_trees=settings.protected_trees(agent),
    ).policy()
    assert policy.trees[: len(admission.TREES)] == admission.TREES
    for host, message in [
        ("/data/yurthub/pki", "'/data/yurthub/pki' exposes /data/yurthub (the hub's --root-dir"),
        ("/data", "'/data' exposes /data/yurthub (the hub's"),
        ("/data/keys/a", "'/data/keys/a' exposes /data/keys (--protected-mount-paths)"),
        (str(tmp_path), f"'{tmp_path}' exposes {tmp_path}"),
        ("/var/lib/kubelet", "'/var/lib/kubelet' exposes /var/lib/kubelet"),
    ]:
        with pytest.raises(admission.Refused) as caught:
            admission.device(_mount(host), "udev", policy)
        assert caught.value.message.startswith(message)
    admission.device(_mount("/data/other"), "udev", policy)
