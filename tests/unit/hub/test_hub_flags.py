"""``edgehub hub`` flags that cannot make a working hub are refused before anything starts."""

from __future__ import annotations

import pytest
from click import testing
from edgehub import cli, hub

# A missing kubeconfig also ends the command before it serves: a flag that slipped through
# fails the message check at once instead of running a hub.
BASE = ["--node-name", "n1", "--server-addr", "http://127.0.0.1:1", "--kubeconfig", "/nonexistent"]


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--kubelet-health-grace-period", "-40s"),
        ("--kubelet-health-grace-period", "0s"),
        ("--min-request-timeout", "-1m"),
        ("--min-request-timeout", "0"),
        ("--min-request-timeout", "soon"),
    ],
)
def test_durations_must_be_positive(flag: str, value: str) -> None:
    result = testing.CliRunner().invoke(hub.command, [*BASE, f"{flag}={value}"])
    assert result.exit_code == cli.EXIT_STARTUP_FAILURE, result.output
    assert repr(value) in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(("value", "seconds"), [("40", 40.0), ("40s", 40.0), ("1m30s", 90.0)])
def test_durations(value: str, seconds: float) -> None:
    assert hub._duration(value) == seconds
