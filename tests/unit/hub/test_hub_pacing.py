"""``yurthub.pacing``: how long the hub's own loops wait before going back to an apiserver."""

from __future__ import annotations

import pytest

from yurthub import pacing, requestinfo

S = pacing.Settings()  # 10 s spread, Retry-After up to 60 s, 0.5 s doubling to 30 s


@pytest.mark.parametrize(
    ("cause", "attempt", "rand", "retry_after", "expected"),
    [
        # 410: spread uniformly over the window, whatever the attempt
        (pacing.Cause.GONE, 0, 0.0, None, 0.0),
        (pacing.Cause.GONE, 0, 0.5, None, 5.0),
        (pacing.Cause.GONE, 7, 0.999, None, 9.99),
        # 429 with Retry-After: what it asked, stretched by up to a quarter
        (pacing.Cause.BUSY, 0, 0.0, 1.0, 1.0),
        (pacing.Cause.BUSY, 5, 1.0, 1.0, 1.25),
        (pacing.Cause.BUSY, 0, 0.0, 7.0, 7.0),
        # bounded: never less than 1 s (no spin), never more than max_retry_after
        (pacing.Cause.BUSY, 0, 0.0, 0.0, 1.0),
        (pacing.Cause.BUSY, 0, 0.0, -3.0, 1.0),
        (pacing.Cause.BUSY, 0, 0.0, 86400.0, 60.0),
        (pacing.Cause.BUSY, 0, 1.0, 86400.0, 75.0),
        # 429 without Retry-After: the failure backoff
        (pacing.Cause.BUSY, 0, 0.0, None, 0.5),
        (pacing.Cause.BUSY, 2, 0.0, None, 2.0),
        # failures: 0.5 s doubling, capped at 30 s, stretched by up to a half
        (pacing.Cause.FAILURE, 0, 0.0, None, 0.5),
        (pacing.Cause.FAILURE, 1, 0.0, None, 1.0),
        (pacing.Cause.FAILURE, 3, 1.0, None, 6.0),
        (pacing.Cause.FAILURE, 6, 0.0, None, 30.0),
        (pacing.Cause.FAILURE, 1000, 0.5, None, 37.5),
        (pacing.Cause.FAILURE, -1, 0.0, None, 0.5),
    ],
)
def test_delay(
    cause: pacing.Cause, attempt: int, rand: float, retry_after: float | None, expected: float
) -> None:
    got = pacing.delay(
        cause, attempt=attempt, rand=rand, settings=S, retry_after_seconds=retry_after
    )
    assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("settings", "cause", "rand", "retry_after", "expected"),
    [
        (pacing.Settings(relist_spread=0.0), pacing.Cause.GONE, 0.9, None, 0.0),
        (pacing.Settings(relist_spread=120.0), pacing.Cause.GONE, 0.25, None, 30.0),
        (pacing.Settings(max_retry_after=5.0), pacing.Cause.BUSY, 0.0, 30.0, 5.0),
        (pacing.Settings(first_backoff=2.0, max_backoff=3.0), pacing.Cause.FAILURE, 0, None, 2.0),
    ],
)
def test_delay_follows_the_settings(
    settings: pacing.Settings,
    cause: pacing.Cause,
    rand: float,
    retry_after: float | None,
    expected: float,
) -> None:
    got = pacing.delay(
        cause, attempt=0, rand=rand, settings=settings, retry_after_seconds=retry_after
    )
    assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("cause", "leading", "expected"),
    [
        (pacing.Cause.GONE, True, 2.0),  # a pool leader's relist: the leader spread
        (pacing.Cause.GONE, False, 30.0),
        (pacing.Cause.FAILURE, True, 0.5 * 1.125),  # only the relist spread differs
    ],
)
def test_a_leaders_relist_is_spread_over_the_leader_spread(
    cause: pacing.Cause, leading: bool, expected: float
) -> None:
    settings = pacing.Settings(relist_spread=120.0, leader_relist_spread=8.0)
    got = pacing.delay(cause, attempt=0, rand=0.25, settings=settings, leading=leading)
    assert got == pytest.approx(expected)
    pacer = pacing.Pacer(settings)
    assert pacer.next_delay(cause, 0.25, leading=leading) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("", None),
        ("1", 1.0),
        (" 3 ", 3.0),
        ("0", 0.0),
        ("2.5", 2.5),
        ("-1", -1.0),
        ("soon", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", None),
        ("nan", None),
        ("inf", None),
        ("1" * 40, None),
    ],
)
def test_retry_after(header: str | None, expected: float | None) -> None:
    assert pacing.retry_after(header) == expected


def test_pacer_counts_failures_and_starts_over_after_a_success() -> None:
    pacer = pacing.Pacer(S)
    waits = [pacer.next_delay(pacing.Cause.FAILURE, 0.0) for _ in range(4)]
    assert waits == [0.5, 1.0, 2.0, 4.0]
    # a 410 is no failure: the next failure backs off as the fifth
    assert pacer.next_delay(pacing.Cause.GONE, 0.5) == 5.0
    assert pacer.next_delay(pacing.Cause.FAILURE, 0.0) == 8.0
    pacer.succeeded()
    assert pacer.next_delay(pacing.Cause.FAILURE, 0.0) == 0.5
    # a 429 with Retry-After waits what it said, and counts as a failure for what follows
    assert pacer.next_delay(pacing.Cause.BUSY, 0.0, 3.0) == 3.0
    assert pacer.next_delay(pacing.Cause.FAILURE, 0.0) == 2.0


def test_a_watch_is_bounded_by_its_own_timeout_and_the_overrun() -> None:
    # Later than the hub's proxy ends a watch (WATCH_DEADLINE_GRACE after timeoutSeconds): a
    # loop never cuts a watch its proxy would still end cleanly.
    assert pacing.watch_bound(300) == 300 + pacing.WATCH_OVERRUN
    assert pacing.watch_bound(1, 0.5) == 1.5
    assert pacing.WATCH_OVERRUN > requestinfo.WATCH_DEADLINE_GRACE


def test_failed_client_watches_are_held_longer_the_more_fail_in_a_row() -> None:
    failed = pacing.FailedWatches(S)
    # 0.5 s doubling to 30 s (rand 0: no stretch), as a loop's failures back off
    holds = [failed.failed(now=float(t), rand=0.0) for t in range(9)]
    assert holds == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    # stretched by up to a half, so a fleet's hubs do not send their clients back in step
    assert failed.failed(now=9.0, rand=1.0) == 45.0


def test_failed_client_watches_start_over_after_a_quiet_minute() -> None:
    failed = pacing.FailedWatches(S)
    for t in range(5):
        failed.failed(now=float(t), rand=0.0)
    # a failure within the quiet period still counts the ones before it
    assert failed.failed(now=4.0 + pacing.HOLD_RESET_AFTER - 1, rand=0.0) == 16.0
    # a minute without any: back to the first step
    later = 4.0 + 2 * pacing.HOLD_RESET_AFTER
    assert failed.failed(now=later, rand=0.0) == 0.5
    assert failed.failed(now=later + 1, rand=0.0) == 1.0
