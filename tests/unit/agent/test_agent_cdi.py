"""CDI specs (reference §6, §9 case 3) and Allocate content, checked against the CDI spec shape."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from discovery import devices
from discovery.agent import cdi, discovered

SHARED = devices.Device(
    id="my_shared_device",
    properties={"ENV_KEY": "env_value"},
    mounts=(devices.Mount("container", "host", False),),
    device_specs=(devices.DeviceSpec("container", "host", "perms"),),
)


def assert_cdi_shape(spec: Any) -> None:
    """The CDI 0.6.0 JSON schema (schema.json + defs.json), as far as we emit it."""
    assert isinstance(spec, dict)
    assert set(spec) <= {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}
    assert {"cdiVersion", "kind", "devices"} <= set(spec)
    assert spec["cdiVersion"] == "0.6.0"
    assert re.fullmatch(r"[a-z0-9.-]+/[A-Za-z][A-Za-z0-9_-]*", spec["kind"])
    assert isinstance(spec["devices"], list) and spec["devices"]
    for device in spec["devices"]:
        assert set(device) <= {"name", "annotations", "containerEdits"}
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]*", device["name"])
        assert_edits(device["containerEdits"])
    if "containerEdits" in spec:
        assert_edits(spec["containerEdits"])


def assert_edits(edits: Any) -> None:
    assert isinstance(edits, dict), "containerEdits is an object in CDI, not a list"
    assert set(edits) <= {"env", "deviceNodes", "mounts", "hooks", "intelRdt", "additionalGIDs"}
    for env in edits.get("env", []):
        assert isinstance(env, str) and "=" in env
    for node in edits.get("deviceNodes", []):
        assert isinstance(node["path"], str)
        assert set(node) <= {"path", "hostPath", "permissions", "type", "major", "minor"}
    for mount in edits.get("mounts", []):
        assert isinstance(mount["hostPath"], str) and isinstance(mount["containerPath"], str)
        assert all(isinstance(o, str) for o in mount.get("options", []))


def test_shared_device_spec_matches_akri_and_cdi() -> None:
    named = discovered.name_devices("my-config", [(SHARED, True)], "node-a")
    spec = cdi.build_spec("my-config", named.values(), {"BROKER": "b"})
    assert spec == {
        "cdiVersion": "0.6.0",
        "kind": "akri.sh/my-config",
        "devices": [
            {
                "name": "4294ea",
                "containerEdits": {
                    "env": ["ENV_KEY=env_value"],
                    "deviceNodes": [
                        {"path": "container", "hostPath": "host", "permissions": "perms"}
                    ],
                    "mounts": [{"hostPath": "host", "containerPath": "container", "options": []}],
                },
            }
        ],
        "containerEdits": {"env": ["BROKER=b"]},
    }
    assert_cdi_shape(spec)
    assert_cdi_shape(json.loads(cdi.encode(spec)))


def test_read_only_mount_and_no_broker_properties() -> None:
    device = devices.Device("d", {}, mounts=(devices.Mount("/c", "/h", True),))
    spec = cdi.build_spec("cfg", discovered.name_devices("cfg", [(device, True)], "n").values(), {})
    assert spec is not None
    assert "containerEdits" not in spec
    assert spec["devices"][0]["containerEdits"] == {
        "mounts": [{"hostPath": "/h", "containerPath": "/c", "options": ["ro"]}]
    }
    assert_cdi_shape(spec)


@pytest.mark.parametrize("configuration", ["with.dot", "1starts-with-digit", "ends-"])
def test_configuration_names_cdi_cannot_express_get_no_spec(configuration: str) -> None:
    named = discovered.name_devices(configuration, [(SHARED, True)], "n")
    assert cdi.build_spec(configuration, named.values(), {}) is None


def test_no_devices_no_spec() -> None:
    assert cdi.build_spec("cfg", [], {"A": "b"}) is None


def test_allocation_env_has_plain_and_suffixed_keys_config_wins() -> None:
    device = devices.Device(
        "my_local_device",
        {"MY_DEVICE_KEY": "device_value", "CLASH": "device"},
        device_specs=(devices.DeviceSpec("/dev/x", "", "rw"),),
    )
    named = discovered.name_devices("my_config", [(device, False)], "my_node")["my_config-e77db4"]
    result = cdi.allocation(named, {"MY_EXTRA_KEY": "value", "CLASH": "config"})
    assert result.envs == {
        "MY_DEVICE_KEY": "device_value",
        "MY_DEVICE_KEY_E77DB4": "device_value",
        "CLASH": "config",
        "CLASH_E77DB4": "config",
        "MY_EXTRA_KEY": "value",
        "MY_EXTRA_KEY_E77DB4": "value",
    }
    assert result.device_specs == (devices.DeviceSpec("/dev/x", "/dev/x", "rw"),)
    assert result.cdi_name == "akri.sh/my_config=e77db4"


async def test_write_is_atomic_idempotent_and_removable(tmp_path: Path) -> None:
    path = cdi.spec_path(tmp_path / "cdi", "cfg")
    spec = cdi.build_spec("cfg", discovered.name_devices("cfg", [(SHARED, True)], "n").values(), {})
    assert spec is not None
    assert await cdi.write_spec(path, spec)
    assert not await cdi.write_spec(path, spec)
    assert path.name == "akri.sh-cfg.json"
    assert json.loads(path.read_text()) == spec
    assert sorted(p.name for p in path.parent.iterdir()) == ["akri.sh-cfg.json"]
    await cdi.remove_spec(path)
    await cdi.remove_spec(path)
    assert not path.exists()


def test_values_carrying_a_secret_stay_out_of_the_spec_file() -> None:
    device = devices.Device(
        "cam",
        {"URL": "rtsp://admin:pw123@cam/", "B64": "cHcxMjM=", "MODEL": "x"},
    )
    named = discovered.name_devices("cfg", [(device, True)], "n")
    withheld = cdi.secret_texts([b"pw123", b""])
    spec = cdi.build_spec("cfg", named.values(), {"TOKEN": "pw123", "SITE": "a"}, withheld)
    assert spec is not None
    assert spec["devices"][0]["containerEdits"]["env"] == ["MODEL=x"]
    assert spec["containerEdits"] == {"env": ["SITE=a"]}
    assert "pw123" not in json.dumps(spec) and "cHcxMjM=" not in json.dumps(spec)
    # Everything withheld: no empty env lists (CDI shape).
    spec = cdi.build_spec("cfg", named.values(), {"TOKEN": "pw123"}, withheld)
    assert spec is not None and "containerEdits" not in spec
    assert_cdi_shape(spec)
