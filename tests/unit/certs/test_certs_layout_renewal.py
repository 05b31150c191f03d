"""Pure decisions of ``yurthub.certs``: file layout, renewal deadline, back-off, mode choice."""

from __future__ import annotations

import datetime
import pathlib

import pytest

from yurthub.certs import layout, modes, renewal

T0 = datetime.datetime(2025, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)


def test_layout_is_yurthubs() -> None:
    paths = layout.Layout(pathlib.Path("/var/lib/yurthub"))
    assert str(paths.hub_kubeconfig) == "/var/lib/yurthub/yurthub.conf"
    assert str(paths.bootstrap_kubeconfig) == "/var/lib/yurthub/bootstrap-hub.conf"
    assert str(paths.ca_cert) == "/var/lib/yurthub/pki/ca.crt"
    assert str(paths.client_pair) == "/var/lib/yurthub/pki/yurthub-current.pem"
    assert str(paths.serving_pair) == "/var/lib/yurthub/pki/yurthub-server-current.pem"


@pytest.mark.parametrize(
    ("taken", "expected"),
    [
        (frozenset(), "yurthub-2025-01-01-12-00-00.pem"),
        (frozenset({"yurthub-2025-01-01-12-00-00.pem"}), "yurthub-2025-01-01-12-00-00.1.pem"),
        (
            frozenset({"yurthub-2025-01-01-12-00-00.pem", "yurthub-2025-01-01-12-00-00.1.pem"}),
            "yurthub-2025-01-01-12-00-00.2.pem",
        ),
    ],
)
def test_stamped_names_never_collide(taken: frozenset[str], expected: str) -> None:
    assert layout.stamped_name("yurthub", T0, taken) == expected


def test_stamped_name_is_utc() -> None:
    plus2 = T0.astimezone(datetime.timezone(datetime.timedelta(hours=2)))
    assert layout.stamped_name("yurthub", plus2) == "yurthub-2025-01-01-12-00-00.pem"


NAMES = [
    "yurthub-current.pem",
    "yurthub-updated.pem",
    "yurthub-2025-01-01-10-00-00.pem",
    "yurthub-2025-01-01-11-00-00.pem",
    "yurthub-2025-01-01-11-00-00.1.pem",
    "yurthub-2025-01-01-12-00-00.pem",
    "yurthub-server-2025-01-01-09-00-00.pem",
    "yurthub-server-current.pem",
    "ca.crt",
]


def test_stamped_of_tells_client_from_server_files() -> None:
    assert layout.stamped_of("yurthub", NAMES) == [
        "yurthub-2025-01-01-10-00-00.pem",
        "yurthub-2025-01-01-11-00-00.pem",
        "yurthub-2025-01-01-11-00-00.1.pem",
        "yurthub-2025-01-01-12-00-00.pem",
    ]
    assert layout.stamped_of("yurthub-server", NAMES) == ["yurthub-server-2025-01-01-09-00-00.pem"]


@pytest.mark.parametrize(
    ("in_use", "keep", "stale"),
    [
        (
            "yurthub-2025-01-01-12-00-00.pem",
            2,
            ["yurthub-2025-01-01-10-00-00.pem"],
        ),
        # The file in use is never removed, even when it is the oldest (clock set back).
        (
            "yurthub-2025-01-01-10-00-00.pem",
            1,
            ["yurthub-2025-01-01-11-00-00.pem", "yurthub-2025-01-01-11-00-00.1.pem"],
        ),
        ("yurthub-2025-01-01-12-00-00.pem", 5, []),
    ],
)
def test_stale(in_use: str, keep: int, stale: list[str]) -> None:
    assert layout.stale("yurthub", NAMES, in_use=in_use, keep=keep) == stale


HOUR = datetime.timedelta(hours=1)
VALID = renewal.Validity(T0, T0 + 100 * HOUR)


@pytest.mark.parametrize(
    ("draw", "renew_before", "expected_hours"),
    [
        (0.0, 0.0, 70.0),
        (0.5, 0.0, 80.0),
        (0.999, 0.0, 89.98),
        # The test knob pulls the deadline to at most N seconds before expiry...
        (0.5, 50 * 3600.0, 50.0),
        # ...and never pushes it later.
        (0.0, 3600.0, 70.0),
    ],
)
def test_deadline(draw: float, renew_before: float, expected_hours: float) -> None:
    when = renewal.deadline(VALID, draw, renew_before=renew_before)
    assert abs((when - T0).total_seconds() / 3600 - expected_hours) < 0.01


@pytest.mark.parametrize(("low", "high"), [(0.0, 0.9), (0.8, 0.7), (0.7, 1.0)])
def test_deadline_refuses_bad_fractions(low: float, high: float) -> None:
    with pytest.raises(ValueError):
        renewal.deadline(VALID, 0.5, low=low, high=high)


def test_deadline_refuses_bad_draw() -> None:
    with pytest.raises(ValueError):
        renewal.deadline(VALID, 1.0)


@pytest.mark.parametrize(
    ("now", "standing"),
    [
        (T0 - HOUR, renewal.Standing.NOT_YET_VALID),
        (T0 + HOUR, renewal.Standing.VALID),
        (T0 + 80 * HOUR, renewal.Standing.RENEW),
        (T0 + 100 * HOUR, renewal.Standing.EXPIRED),
        (T0 + 200 * HOUR, renewal.Standing.EXPIRED),
    ],
)
def test_standing(now: datetime.datetime, standing: renewal.Standing) -> None:
    assert renewal.standing(VALID, T0 + 75 * HOUR, now) is standing


@pytest.mark.parametrize(
    ("attempt", "draw", "expected"),
    [
        (1, 0.5, 2.0),
        (2, 0.5, 4.0),
        (3, 0.0, 6.4),
        (4, 1.0, 19.2),
        (10, 0.5, 120.0),
        (10_000, 0.5, 120.0),  # no overflow in a long outage
        (10, 1.0, 120.0),  # jitter never exceeds the cap
    ],
)
def test_backoff(attempt: int, draw: float, expected: float) -> None:
    assert renewal.backoff(attempt, draw, base=2.0, cap=120.0) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("facts", "source"),
    [
        ({"kubeconfig": True}, modes.Source.KUBECONFIG),
        ({"kubelet_mode": True, "join_token": True}, modes.Source.KUBELET),
        ({"bootstrap_file": True, "join_token": True}, modes.Source.BOOTSTRAP_FILE),
        ({"join_token": True, "hub_kubeconfig_exists": True}, modes.Source.JOIN_TOKEN),
        ({"hub_kubeconfig_exists": True}, modes.Source.EXISTING),
        ({}, modes.Source.NONE),
    ],
)
def test_modes(facts: dict[str, bool], source: modes.Source) -> None:
    base = dict.fromkeys(
        ("kubeconfig", "kubelet_mode", "bootstrap_file", "join_token", "hub_kubeconfig_exists"),
        False,
    )
    assert modes.resolve(**{**base, **facts}) is source


@pytest.mark.parametrize("other", ["kubelet_mode", "bootstrap_file", "join_token"])
def test_kubeconfig_and_bootstrap_contradict(other: str) -> None:
    base = dict.fromkeys(
        ("kubeconfig", "kubelet_mode", "bootstrap_file", "join_token", "hub_kubeconfig_exists"),
        False,
    )
    with pytest.raises(modes.ModeError, match="--kubeconfig"):
        modes.resolve(**{**base, "kubeconfig": True, other: True})
