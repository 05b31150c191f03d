"""Per-key back-off: doubling from the first delay, capped, per key, reset by success."""

from __future__ import annotations

import pytest

from kubecontrol import backoff


def test_doubles_from_the_first_delay_and_is_capped() -> None:
    per_key: backoff.PerKey[str] = backoff.PerKey(1.0, 300.0)
    delays = [per_key.failed("k") for _ in range(12)]
    # The agent's schedule (Akri's 1 s, 2 s, 4 s, ...), capped at 5 minutes.
    assert delays[:4] == [1.0, 2.0, 4.0, 8.0]
    assert delays[-1] == 300.0 and max(delays) == 300.0


@pytest.mark.parametrize(
    ("initial", "cap", "failures", "expected"),
    [
        (0.5, 10.0, 0, 0.0),
        (0.5, 10.0, 1, 0.5),
        (0.5, 10.0, 5, 8.0),
        (0.5, 10.0, 6, 10.0),
        (2.0, 2.0, 1, 2.0),
        (2.0, 2.0, 50, 2.0),
        (0.001, 60.0, 10_000, 60.0),  # no overflow, however long it fails
    ],
)
def test_delay_table(initial: float, cap: float, failures: int, expected: float) -> None:
    assert backoff.PerKey[str](initial, cap).delay(failures) == expected


def test_keys_are_independent_and_success_resets() -> None:
    per_key: backoff.PerKey[str] = backoff.PerKey(1.0, 60.0)
    per_key.failed("a")
    per_key.failed("a")
    assert per_key.failed("b") == 1.0
    assert per_key.failed("a") == 4.0
    per_key.succeeded("a")
    assert per_key.failures("a") == 0 and per_key.failed("a") == 1.0
    per_key.forget("a")
    per_key.forget("b")
    assert len(per_key) == 0  # bounded by the keys failing now


def test_a_long_failing_key_keeps_a_bounded_count() -> None:
    per_key: backoff.PerKey[str] = backoff.PerKey(1.0, 8.0)
    for _ in range(5000):
        per_key.failed("k")
    assert per_key.failures("k") <= 1024 and per_key.failed("k") == 8.0


@pytest.mark.parametrize(("initial", "cap"), [(0.0, 1.0), (-1.0, 1.0), (2.0, 1.0)])
def test_nonsense_is_refused(initial: float, cap: float) -> None:
    with pytest.raises(ValueError, match="back-off"):
        backoff.PerKey[str](initial, cap)
