"""A follower whose leader failed: retried (soft failures) or left (hard ones), with back-off."""

from __future__ import annotations

import pytest

from yurthub.pool import retrying
from yurthub.pool.retrying import Leave, Retry


@pytest.mark.parametrize(
    ("strikes", "soft", "expected"),
    [
        (1, True, Retry(0.5)),
        (2, True, Retry(1.0)),
        (3, True, Retry(2.0)),
        (4, True, Leave(4.0)),
        (5, True, Leave(8.0)),
        (6, True, Leave(16.0)),
        (7, True, Leave(30.0)),
        (1000, True, Leave(30.0)),
        (1, False, Leave(30.0)),
        (9, False, Leave(30.0)),
    ],
)
def test_soft_failures_are_retried_then_left_for_longer_each_time(
    strikes: int, soft: bool, expected: Retry | Leave
) -> None:
    assert retrying.after_failure(strikes, soft=soft, penalty=30.0) == expected


def test_a_short_penalty_caps_the_leave() -> None:
    assert retrying.after_failure(5, soft=True, penalty=3.0) == Leave(3.0)
    assert retrying.after_failure(1, soft=True, penalty=3.0, tolerated=0) == Leave(0.5)
