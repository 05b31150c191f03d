"""What the agent admits from handlers (issue 14 item 13): pure table tests."""

from __future__ import annotations

import pytest

from discovery import admission, devices

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


@pytest.mark.parametrize(
    ("found", "field", "message"),
    [
        (
            _device(devices.Mount(container_path="/", host_path="/", read_only=True)),
            "mounts[0].hostPath",
            "'/' (the whole",
        ),
        (
            _device(devices.Mount(container_path="/", host_path="/x", read_only=True)),
            "mounts[0].containerPath",
            "'/' (the whole",
        ),
        (
            _device(devices.Mount(container_path="/h", host_path="/.", read_only=True)),
            "mounts[0].hostPath",
            "normalized",
        ),
        (
            _device(devices.Mount(container_path="/h", host_path="//", read_only=True)),
            "mounts[0].hostPath",
            "normalized",
        ),
        (
            _device(devices.Mount(container_path="/h", host_path="/a/../..", read_only=True)),
            "mounts[0].hostPath",
            "normalized",
        ),
        (
            _device(devices.Mount(container_path="/h", host_path="etc", read_only=True)),
            "mounts[0].hostPath",
            "normalized",
        ),
        (
            _device(devices.Mount(container_path="/h", host_path="/var", read_only=True)),
            "mounts[0].hostPath",
            "exposes /var/lib/akri",
        ),
        (
            _device(
                devices.Mount(container_path="/h", host_path="/var/run/cdi/x.json", read_only=True)
            ),
            "mounts[0].hostPath",
            "exposes /var/run/cdi",
        ),
        (
            _device(
                devices.Mount(container_path="/h", host_path="/ok", read_only=True),
                devices.Mount(container_path="/k", host_path="/var/lib/kubelet", read_only=False),
            ),
            "mounts[1].hostPath",
            "exposes /var/lib/kubelet/device-plugins",
        ),
        (
            _device(
                specs=(
                    devices.DeviceSpec(
                        container_path="/etc/shadow/../x", host_path="/dev/x", permissions="r"
                    ),
                )
            ),
            "deviceSpecs[0].containerPath",
            "absolute",
        ),
        (
            _device(
                specs=(
                    devices.DeviceSpec(
                        container_path="/dev/x", host_path="/etc/shadow", permissions="r"
                    ),
                )
            ),
            "deviceSpecs[0].hostPath",
            "not a node under /dev/",
        ),
        (
            _device(
                specs=(
                    devices.DeviceSpec(
                        container_path="/x", host_path="/dev/../etc/shadow", permissions="r"
                    ),
                )
            ),
            "deviceSpecs[0].hostPath",
            "not a node under /dev/",
        ),
        (
            _device(
                specs=(
                    devices.DeviceSpec(container_path="/x", host_path="/dev/x", permissions="rwx"),
                )
            ),
            "deviceSpecs[0].permissions",
            "combination of r, w, m",
        ),
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
