"""resourceVersion rules of multiplexed list/watch (k8s ValidateListOptions, the watch cache)."""

from __future__ import annotations

import pytest

from yurthub.pool import rvrules
from yurthub.pool.rvrules import Bypass, ListPlan, Options, Refuse, WatchPlan


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (Options(watch=False), ListPlan()),
        (Options(watch=False, resource_version="0"), ListPlan()),
        (Options(watch=False, resource_version="42"), ListPlan(min_rv=42)),
        (
            Options(watch=False, resource_version="42", resource_version_match="NotOlderThan"),
            ListPlan(min_rv=42),
        ),
        (
            Options(watch=False, resource_version="42", resource_version_match="Exact"),
            ListPlan(exact=42),
        ),
        (
            Options(watch=False, continue_token="abc"),
            Bypass("a continue token (the multiplexer does not page)"),
        ),
        # watches, legacy
        (Options(watch=True), WatchPlan(initial=True)),
        (Options(watch=True, resource_version="0"), WatchPlan(initial=True)),
        (Options(watch=True, resource_version="7"), WatchPlan(initial=False, since=7)),
        # streaming lists (client-go WatchListClient)
        (
            Options(
                watch=True,
                send_initial_events=True,
                resource_version_match="NotOlderThan",
                allow_watch_bookmarks=True,
            ),
            WatchPlan(initial=True, initial_end_bookmark=True),
        ),
        (
            Options(
                watch=True,
                send_initial_events=True,
                resource_version="9",
                resource_version_match="NotOlderThan",
            ),
            WatchPlan(initial=True, min_rv=9),
        ),
        (
            Options(watch=True, send_initial_events=False, resource_version_match="NotOlderThan"),
            WatchPlan(initial=False),
        ),
        (
            Options(
                watch=True,
                send_initial_events=False,
                resource_version="5",
                resource_version_match="NotOlderThan",
            ),
            WatchPlan(initial=False, since=5),
        ),
    ],
)
def test_plans(options: Options, expected: rvrules.Plan) -> None:
    assert rvrules.plan(options) == expected


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            Options(watch=False, resource_version_match="Exact"),
            "forbidden unless resourceVersion is provided",
        ),
        (
            Options(watch=False, resource_version="0", resource_version_match="Exact"),
            'resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
        ),
        (
            Options(watch=False, resource_version="1", resource_version_match="Newest"),
            'Unsupported value: "Newest"',
        ),
        (
            Options(
                watch=False,
                resource_version="1",
                resource_version_match="Exact",
                continue_token="x",
            ),
            "forbidden when continue is provided",
        ),
        (Options(watch=False, send_initial_events=True), "sendInitialEvents is forbidden for list"),
        (
            Options(watch=True, send_initial_events=True),
            "requires setting resourceVersionMatch to NotOlderThan",
        ),
        (
            Options(watch=True, resource_version_match="NotOlderThan"),
            "forbidden for watch unless sendInitialEvents is provided",
        ),
        (
            Options(watch=True, send_initial_events=True, resource_version_match="Exact"),
            'Unsupported value: "Exact": supported values: "NotOlderThan"',
        ),
    ],
)
def test_invalid_options_are_422(options: Options, message: str) -> None:
    decided = rvrules.plan(options)
    assert isinstance(decided, Refuse)
    assert decided.status["code"] == 422 and decided.status["reason"] == "Invalid"
    assert decided.status["message"].startswith('ListOptions.meta.k8s.io "" is invalid: ')
    assert message in decided.status["message"]


def test_several_problems_are_listed_together() -> None:
    decided = rvrules.plan(Options(watch=False, resource_version_match="Bad", continue_token="x"))
    assert isinstance(decided, Refuse)
    assert decided.status["message"].count("resourceVersionMatch:") == 3
    assert ": [" in decided.status["message"]


@pytest.mark.parametrize("rv", ["abc", "-1", "1.5", "\uff11\uff12", "99999999999999999999999"])
def test_bad_resource_versions_are_400(rv: str) -> None:
    decided = rvrules.plan(Options(watch=True, resource_version=rv))
    assert isinstance(decided, Refuse) and decided.status["code"] == 400


def test_error_statuses() -> None:
    large = rvrules.too_large(10, 4)
    assert large["code"] == 504 and large["reason"] == "Timeout"
    assert large["message"] == "Too large resource version: 10, current: 4"
    assert large["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
    old = rvrules.too_old(3, 8)
    assert old["code"] == 410 and old["reason"] == "Expired"
    assert old["message"] == "too old resource version: 3 (8)"
