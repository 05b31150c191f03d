"""``edgehub discover`` and ``edgehub handler`` as an operator runs them (the installed binary)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import pyudev

from discovery.handlers import onvif_sim


def _edgehub(
    *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgehub", "--log-level", "error", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def echo_env(tmp_path: Path) -> dict[str, str]:
    return {"DEBUG_ECHO_AVAILABILITY_FILE": str(tmp_path / "availability")}


def test_table_output_from_stdin(echo_env: dict[str, str]) -> None:
    result = _edgehub(
        "discover",
        "debugEcho",
        "--details",
        "-",
        stdin="descriptions: [cam-b, cam-a]",
        env=echo_env,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ID", "PROPERTIES", "DEVICE", "NODES"]
    assert [line.split()[0] for line in lines[1:]] == ["cam-a", "cam-b"]
    assert "DEBUG_ECHO_DESCRIPTION=cam-a" in lines[1]


def test_json_output_from_a_file(tmp_path: Path, echo_env: dict[str, str]) -> None:
    details = tmp_path / "details.json"
    details.write_text('{"descriptions": ["foo1"]}')
    result = _edgehub(
        "discover", "debugEcho", "--details", str(details), "-o", "json", env=echo_env
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        {
            "id": "foo1",
            "properties": {"DEBUG_ECHO_DESCRIPTION": "foo1"},
            "mounts": [],
            "deviceSpecs": [],
        }
    ]


SAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "discovery" / "samples"


def test_a_whole_configuration_is_accepted_as_details(echo_env: dict[str, str]) -> None:
    # The sample as users apply it: its spec.discoveryHandler gives the details.
    result = _edgehub(
        "discover", "debugEcho", "--details", str(SAMPLES / "debug-echo.yaml"), env=echo_env
    )
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()[1:]] == ["foo0", "foo1"]
    udev = _edgehub("discover", "udev", "--details", str(SAMPLES / "udev.yaml"), "--timeout", "5")
    assert udev.returncode == 0, udev.stderr
    wrong = _edgehub("discover", "onvif", "--details", str(SAMPLES / "udev.yaml"))
    assert wrong.returncode == 2
    assert "spec.discoveryHandler.name is 'udev', not 'onvif'" in wrong.stderr


def test_configuration_properties_from_secrets_must_be_given(tmp_path: Path) -> None:
    config = tmp_path / "onvif.yaml"
    config.write_text(
        "apiVersion: akri.sh/v0\nkind: Configuration\nmetadata: {name: cams}\nspec:\n"
        "  discoveryHandler:\n    name: onvif\n    discoveryDetails: ''\n"
        "    discoveryProperties:\n      - name: username\n        valueFrom:\n"
        "          secretKeyRef: {name: creds, key: user}\n"
    )
    result = _edgehub("discover", "onvif", "--details", str(config))
    assert result.returncode == 2
    assert "--property username=..." in result.stderr


def test_offline_availability_gives_no_devices(tmp_path: Path, echo_env: dict[str, str]) -> None:
    Path(echo_env["DEBUG_ECHO_AVAILABILITY_FILE"]).write_text("OFFLINE")
    result = _edgehub(
        "discover", "debugEcho", "--details", "-", stdin="descriptions: [a]", env=echo_env
    )
    assert (result.returncode, result.stdout) == (0, "No devices found.\n")


@pytest.mark.parametrize(
    ("handler", "details", "message"),
    [
        ("debugEcho", "", "invalid discoveryDetails for debugEcho: descriptions: required"),
        ("debugEcho", "descriptions: [a", "not valid YAML at line 1"),
        ("debugEcho", "descriptions: [[a]]", "descriptions[0]: expected a string"),
        ("udev", "udevRules: ['KERNEL=\"tty0\"']", "udevRules[0]: column 7: assignment operator"),
        ("udev", "udevRules: ['NAME==\"x\"']", "udevRules[0]: column 1: unsupported field NAME"),
        ("udev", "udevRules: ['DRIVER==\"[\"']", "invalid regular expression"),
        ("opcua", "opcuaDiscoveryMethod: {lds: {}}", "opcuaDiscoveryMethod.lds: unknown key"),
        ("onvif", "discoveryTimeoutSeconds: -1", "discoveryTimeoutSeconds: must be between"),
    ],
)
def test_bad_details_are_one_clear_line(
    handler: str, details: str, message: str, echo_env: dict[str, str]
) -> None:
    result = _edgehub("discover", handler, "--details", "-", stdin=details, env=echo_env)
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("error: ")
    assert message in result.stderr


def test_unknown_keys_are_a_warning_and_scalars_are_text(echo_env: dict[str, str]) -> None:
    # As Akri's debugEcho (serde_yaml): the unknown key is ignored, each scalar is its text.
    result = _edgehub(
        "discover",
        "debugEcho",
        "--details",
        "-",
        "-o",
        "json",
        stdin="descriptions: [1, yes, ~]\nextra: 1",
        env=echo_env,
    )
    assert result.returncode == 0, result.stderr
    assert [d["id"] for d in json.loads(result.stdout)] == ["1", "yes", "~"]
    assert result.stderr == ("warning: extra: unknown key, ignored (expected descriptions)\n")


def test_details_that_are_not_utf8_are_one_clear_line(tmp_path: Path) -> None:
    details_file = tmp_path / "details.yaml"
    details_file.write_bytes(b"descriptions: [\xff]")
    result = _edgehub("discover", "debugEcho", "--details", str(details_file))
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --details is not UTF-8 text (invalid start byte)"


def test_unknown_handler_and_bad_property() -> None:
    result = _edgehub("discover", "nope", "--details", "-", stdin="")
    assert result.returncode == 3
    assert "unknown discovery handler 'nope'" in result.stderr
    assert "debugEcho" in result.stderr
    result = _edgehub("discover", "debugEcho", "--details", "-", "--property", "novalue")
    assert result.returncode == 2
    assert "KEY=VALUE" in result.stderr


def test_handler_with_an_unusable_directory_is_a_one_line_startup_failure(
    tmp_path: Path,
) -> None:
    (tmp_path / "file").write_text("not a directory")
    directory = tmp_path / "file" / "akri"
    result = _edgehub("handler", "debugEcho", "--discovery-handlers-directory", str(directory))
    assert result.returncode == 3
    assert result.stderr.strip() == (
        f"error: cannot listen on {directory}/debugEcho.sock: Not a directory"
    )


def test_udev_finds_this_machines_network_devices() -> None:
    expected = sorted(d.device_path for d in pyudev.Context().list_devices(subsystem="net"))
    result = _edgehub(
        "discover",
        "udev",
        "--details",
        "-",
        "-o",
        "json",
        stdin="udevRules: ['SUBSYSTEM==\"net\"']",
    )
    assert result.returncode == 0, result.stderr
    assert [d["id"] for d in json.loads(result.stdout)] == expected


def test_opcua_unreachable_url_finds_nothing_quickly() -> None:
    result = _edgehub(
        "discover",
        "opcua",
        "--details",
        "-",
        stdin="opcuaDiscoveryMethod: {standard: {discoveryUrls: ['opc.tcp://127.0.0.1:1/']}}",
        env={"OPCUA_CONNECT_TIMEOUT_SECONDS": "0.5"},
    )
    assert (result.returncode, result.stdout) == (0, "No devices found.\n")


async def test_onvif_against_the_simulator() -> None:
    camera = onvif_sim.Camera("cafe-0001", "10.1.2.3", "00:00:5e:00:53:01")
    async with onvif_sim.running([camera]) as sim:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "edgehub", "--log-level", "error",
            "discover", "onvif", "--details", "-", "-o", "json",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "ONVIF_PROBE_TARGET": sim.probe_target_text},
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(b"discoveryTimeoutSeconds: 0.3"), 30)
    assert proc.returncode == 0, err
    (device,) = json.loads(out)
    assert device["properties"]["ONVIF_DEVICE_IP_ADDRESS"] == "10.1.2.3"
    assert device["id"] == f"{sim.service_url(camera)}-cafe-0001"
