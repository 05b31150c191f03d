"""The hub's Autonomy condition as a table: marking x cache health -> condition, when it is
rewritten (only when its meaning changes) and the patch that writes it."""

from __future__ import annotations

from typing import Any

import pytest

from nodeautonomy import marking as m
from yurthub.autonomy import conditions as c

HEALTHY = c.CacheHealth(available=True)
FAILING = c.CacheHealth(available=True, failed_keys=3)
NO_CACHE = c.CacheHealth(available=False)
HOUR = m.Autonomous(3600, m.DURATION_ANNOTATION)
FOREVER = m.Autonomous(None, m.LEGACY_ANNOTATION)


@pytest.mark.parametrize(
    ("marking", "cache", "status", "reason", "in_message"),
    [
        (HOUR, HEALTHY, "True", "AutonomyEnabled", "autonomous for 1h0m0s"),
        (FOREVER, HEALTHY, "True", "AutonomyEnabled", "for as long as it takes"),
        (HOUR, FAILING, "False", "CacheWriteFailures", "stale"),
        (FOREVER, NO_CACHE, "False", "CacheUnavailable", "without its disk cache"),
        (m.UNMARKED, HEALTHY, "False", "AutonomyDisabled", m.DURATION_ANNOTATION),
        # Not autonomous: the cache does not matter.
        (m.UNMARKED, FAILING, "False", "AutonomyDisabled", "not marked"),
        (m.UNMARKED, NO_CACHE, "False", "AutonomyDisabled", "not marked"),
        (m.Invalid("1d", "time: x"), HEALTHY, "False", "InvalidAutonomyDuration", "'1d'"),
        (m.CLOUD_NODE, HEALTHY, "False", "CloudNode", "is-edge-worker=false"),
    ],
)
def test_desired(
    marking: m.Marking, cache: c.CacheHealth, status: str, reason: str, in_message: str
) -> None:
    got = c.desired(marking, cache)
    assert (got.status, got.reason) == (status, reason)
    assert in_message in got.message


def test_the_message_carries_no_counter_so_more_failures_are_no_change() -> None:
    assert c.desired(HOUR, FAILING) == c.desired(HOUR, c.CacheHealth(True, 9999))


def node(*conds: dict[str, Any]) -> dict[str, Any]:
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}
    return {"metadata": {"name": "n"}, "status": {"conditions": [ready, *conds]}}


def autonomy(status: str, reason: str, message: str, **times: str) -> dict[str, Any]:
    return {"type": "Autonomy", "status": status, "reason": reason, "message": message, **times}


ENABLED = c.desired(HOUR, HEALTHY)


@pytest.mark.parametrize(
    ("have", "update"),
    [
        (node(), True),
        ({"metadata": {}}, True),
        ({"status": {"conditions": None}}, True),
        (node(autonomy("True", ENABLED.reason, ENABLED.message)), False),
        (
            node(
                autonomy(
                    "True",
                    ENABLED.reason,
                    ENABLED.message,
                    lastHeartbeatTime="2020-01-01T00:00:00Z",
                    lastTransitionTime="2020-01-01T00:00:00Z",
                )
            ),
            False,
        ),
        (node(autonomy("False", ENABLED.reason, ENABLED.message)), True),
        (node(autonomy("True", "Other", ENABLED.message)), True),
        (node(autonomy("True", ENABLED.reason, "other")), True),
    ],
)
def test_needs_update_ignores_times(have: dict[str, Any], update: bool) -> None:
    assert c.needs_update(have, ENABLED) is update


def test_status_patch_sets_only_this_condition_and_keeps_the_transition_time() -> None:
    now = "2024-05-01T10:00:00Z"
    first = c.status_patch(node(), ENABLED, now)
    assert first == {
        "status": {
            "conditions": [
                {
                    "type": "Autonomy",
                    "status": "True",
                    "reason": "AutonomyEnabled",
                    "message": ENABLED.message,
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ]
        }
    }
    earlier = node(autonomy("True", "Old", "old", lastTransitionTime="2024-01-01T00:00:00Z"))
    same_status = c.status_patch(earlier, ENABLED, now)["status"]["conditions"][0]
    assert same_status["lastTransitionTime"] == "2024-01-01T00:00:00Z"
    flipped = c.status_patch(earlier, c.desired(m.UNMARKED, HEALTHY), now)
    assert flipped["status"]["conditions"][0]["lastTransitionTime"] == now


LAST = c.LastOutage("2026-01-01T00:00:00Z", "5m12s", "connection refused")


@pytest.mark.parametrize(
    ("marking", "cache"),
    [(HOUR, HEALTHY), (HOUR, FAILING), (FOREVER, NO_CACHE), (m.UNMARKED, HEALTHY)],
)
def test_the_last_outage_is_named_whatever_the_status(
    marking: m.Marking, cache: c.CacheHealth
) -> None:
    without = c.desired(marking, cache)
    got = c.desired(marking, cache, LAST)
    assert (got.status, got.reason) == (without.status, without.reason)
    assert got.message == (
        f"{without.message}; last outage: 2026-01-01T00:00:00Z for 5m12s (connection refused)"
    )


def test_a_new_outage_rewrites_the_message_and_keeps_the_transition_time() -> None:
    before = c.desired(HOUR, HEALTHY, LAST)
    have = node(
        autonomy("True", before.reason, before.message, lastTransitionTime="2024-01-01T00:00:00Z")
    )
    assert not c.needs_update(have, c.desired(HOUR, HEALTHY, LAST))
    after = c.desired(HOUR, HEALTHY, c.LastOutage("2026-02-01T00:00:00Z", "3h02m", "TLS"))
    assert c.needs_update(have, after)
    patch = c.status_patch(have, after, "2026-02-01T03:02:00Z")["status"]["conditions"][0]
    assert patch["lastTransitionTime"] == "2024-01-01T00:00:00Z"
    assert patch["message"].endswith("last outage: 2026-02-01T00:00:00Z for 3h02m (TLS)")
