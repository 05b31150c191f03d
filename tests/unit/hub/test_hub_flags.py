"""``edgehub hub`` flags that cannot make a working hub are refused before anything starts."""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from collections.abc import Coroutine
from typing import Any

import click
import pytest
from click import testing
from edgehub import cli, hub, hubsettings

from yurthub import settings
from yurthub.outages import records

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
    assert hubsettings.duration(value) == seconds


def test_hardening_flags_reach_the_settings() -> None:
    ctx = hub.command.make_context(
        "hub",
        [
            "--node-name", "n1", "--server-addr", "http://127.0.0.1:1",
            "--proxy-accept-hosts", " Hub.Example ,other.example",
            "--proxy-read-header-timeout-seconds", "3",
            "--proxy-idle-timeout-seconds", "4",
            "--proxy-max-connections", "100",
            "--max-requests-in-flight", "50",
            "--max-long-running-requests", "70",
            "--max-requests-in-flight-per-client", "5",
            "--max-long-running-requests-per-client", "7",
            "--upstream-header-deadline-seconds", "0.5",
            "--upstream-idle-timeout-seconds", "20",
            "--no-upstream-http2-watches",
            "--allow-system-trust-store",
        ],
    )  # fmt: skip
    built = hubsettings.build_settings(ctx.params)
    assert built.listen.accept_hosts == ("hub.example", "other.example")
    proxy = built.proxy
    assert (proxy.read_header_timeout, proxy.max_connections) == (3.0, 100)
    assert proxy.idle_timeout == 4.0
    assert (proxy.max_in_flight, proxy.max_long_running) == (50, 70)
    assert (proxy.max_in_flight_per_client, proxy.max_long_running_per_client) == (5, 7)
    upstream = built.upstream
    assert (upstream.header_deadline, upstream.idle_timeout) == (0.5, 20.0)
    assert not upstream.http2_watches
    assert upstream.allow_system_trust_store and not upstream.allow_insecure_tls


def test_default_flags_are_the_settings_defaults() -> None:
    ctx = hub.command.make_context(
        "hub", ["--node-name", "n1", "--server-addr", "http://127.0.0.1:1"]
    )
    built = hubsettings.build_settings(ctx.params)
    assert built.proxy == dataclasses.replace(
        settings.ProxySettings(), min_request_timeout=built.proxy.min_request_timeout
    )
    assert built.upstream.header_deadline == settings.UpstreamSettings().header_deadline
    assert built.upstream.idle_timeout == settings.UpstreamSettings().idle_timeout
    assert built.outage_save_interval == 30.0
    assert built.outage_flap_window == records.FLAP_WINDOW == 30.0


def test_the_outage_save_interval_reaches_the_settings_and_must_be_positive() -> None:
    args = ["--node-name", "n1", "--server-addr", "http://127.0.0.1:1"]
    ctx = hub.command.make_context("hub", [*args, "--outage-save-interval-seconds=5"])
    assert hubsettings.build_settings(ctx.params).outage_save_interval == 5.0
    with pytest.raises(click.BadParameter):
        hub.command.make_context("hub", [*args, "--outage-save-interval-seconds=0"])
    with pytest.raises(settings.ConfigError):
        settings.HubSettings(
            node_name="n1", upstream=settings.UpstreamSettings(servers=("https://a:6443",)),
            outage_save_interval=0,
        )  # fmt: skip


def test_the_outage_flap_window_reaches_the_settings_and_may_be_zero() -> None:
    args = ["--node-name", "n1", "--server-addr", "http://127.0.0.1:1"]
    for given, want in (("5", 5.0), ("0", 0.0)):
        ctx = hub.command.make_context("hub", [*args, f"--outage-flap-window-seconds={given}"])
        assert hubsettings.build_settings(ctx.params).outage_flap_window == want
    for bad in ("-1", "3601"):
        with pytest.raises(click.BadParameter):
            hub.command.make_context("hub", [*args, f"--outage-flap-window-seconds={bad}"])
    with pytest.raises(settings.ConfigError):
        settings.HubSettings(
            node_name="n1", upstream=settings.UpstreamSettings(servers=("https://a:6443",)),
            outage_flap_window=-1,
        )  # fmt: skip


@pytest.mark.parametrize(
    ("value", "address"),
    [
        ("", ("127.0.0.1", 10268)),  # unset: --bind-proxy-address, --proxy-secure-port
        ("169.254.2.1", ("169.254.2.1", 10268)),
        ("169.254.2.1:443", ("169.254.2.1", 443)),
        ("[fd00::1]:443", ("fd00::1", 443)),
        ("[fd00::1]", ("fd00::1", 10268)),
        ("fd00::1", ("fd00::1", 10268)),  # bare IPv6: no port
    ],
)
def test_the_hidden_master_service_address(value: str, address: tuple[str, int]) -> None:
    args = ["--node-name", "n1", "--server-addr", "http://127.0.0.1:1"]
    ctx = hub.command.make_context("hub", [*args, f"--master-service-address={value}"])
    assert hubsettings.build_settings(ctx.params).hub_address == address


@pytest.mark.parametrize("value", ["h:x", "[fd00::1", "[fd00::1]x", "h:", "h:99999", ":1"])
def test_a_bad_master_service_address_is_refused(value: str) -> None:
    result = testing.CliRunner().invoke(hub.command, [*BASE, f"--master-service-address={value}"])
    assert result.exit_code == cli.EXIT_STARTUP_FAILURE, result.output
    assert "HOST[:PORT]" in result.output and "Traceback" not in result.output


def test_the_hub_runs_with_a_short_gil_switch_interval(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    # The cache writer converts protobuf in a thread: the event loop must not wait 5 ms (the
    # interpreter's default) for the GIL at each socket call meanwhile.
    seen: list[float] = []

    def run(main: Coroutine[Any, Any, Any]) -> None:
        seen.append(sys.getswitchinterval())
        main.close()

    monkeypatch.setattr(cli, "run", run)
    before = sys.getswitchinterval()
    result = testing.CliRunner().invoke(
        hub.command,
        ["--node-name", "n1", "--server-addr", "http://127.0.0.1:1",
         "--root-dir", str(tmp_path), "--disk-cache-path", str(tmp_path / "cache")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert seen == [hub.GIL_SWITCH_INTERVAL]
    assert hub.GIL_SWITCH_INTERVAL < 0.005  # CPython's default
    assert sys.getswitchinterval() == before  # put back when the hub returns
