"""When a watch held open offline ends after the heal (``localwatches.heal_end``)."""

from __future__ import annotations

import pytest

from yurthub.proxy import localwatches


@pytest.mark.parametrize(
    ("ends", "now", "healthy", "spread", "rand", "expected"),
    [
        (None, 100.0, False, 5.0, 0.5, None),  # offline: held on
        (None, 100.0, True, 5.0, 0.5, 102.5),  # healed: a random moment within the spread
        (None, 100.0, True, 5.0, 0.0, 100.0),
        (None, 100.0, True, 0.0, 0.9, 100.0),  # no spread: at once
        (102.5, 101.0, True, 5.0, 0.1, 102.5),  # decided: kept while healthy
        (102.5, 101.0, False, 5.0, 0.1, None),  # gone again before it: held on, undecided
        (None, 100.0, True, 5.0, 7.0, 105.0),  # randomness out of range is clamped
        (None, 100.0, True, -1.0, 0.5, 100.0),
    ],
)
def test_a_held_watch_ends_within_the_spread_after_the_heal(
    ends: float | None,
    now: float,
    healthy: bool,
    spread: float,
    rand: float,
    expected: float | None,
) -> None:
    assert localwatches.heal_end(ends, now, healthy, spread, lambda: rand) == expected


def test_a_fleet_of_held_watches_ends_spread_over_the_window() -> None:
    """Many watches healed at the same instant end at as many moments, all within it."""
    import random

    source = random.Random(7)
    moments = [localwatches.heal_end(None, 0.0, True, 5.0, source.random) for _ in range(200)]
    assert all(m is not None and 0.0 <= m <= 5.0 for m in moments)
    firsts = [m for m in moments if m is not None and m < 1.0]
    assert len(firsts) < 100  # not all in the first second


def test_a_watch_every_apiserver_failed_ends_no_sooner_than_the_hubs_back_off() -> None:
    # Healthy with a 5 s spread, the end would be 2.5 s from now; the back-off says 8.
    assert localwatches.heal_end(None, 0.0, True, 5.0, lambda: 0.5, not_before=8.0) == 8.0
    # A back-off already over leaves the spread's moment; offline, nothing is decided yet.
    assert localwatches.heal_end(None, 10.0, True, 5.0, lambda: 0.5, not_before=8.0) == 12.5
    assert localwatches.heal_end(None, 0.0, False, 5.0, lambda: 0.5, not_before=8.0) is None
