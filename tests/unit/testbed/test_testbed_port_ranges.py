"""Where the test beds' ports come from when test processes run side by side
(``ports.RANGE_ENV``, set per pytest worker by ``tests/conftest.py``)."""

from __future__ import annotations

import itertools

import pytest

from yurthub.testing import ports


def test_parts_of_a_range_are_disjoint_and_cover_it_but_a_remainder() -> None:
    parts = [ports.split_range(i, 3, 20000, 32767) for i in range(3)]
    assert parts == [(20000, 24255), (24256, 28511), (28512, 32767)]
    for (_, a_high), (b_low, _) in itertools.pairwise(parts):
        assert a_high + 1 == b_low
    assert ports.split_range(0, 1, 20000, 32767) == (20000, 32767)
    with pytest.raises(ValueError, match="part 2 of 2"):
        ports.split_range(2, 2, 20000, 32767)


def test_ports_pick_from_the_range_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    low, high = ports.split_range(1, 2, 20000, ports.ephemeral_low() - 1)
    monkeypatch.setenv(ports.RANGE_ENV, f"{low}-{high}")
    picker = ports.Ports()
    assert (picker.low, picker.high) == (low, high)
    taken = picker.take(5, ("127.0.0.1",))
    assert len(set(taken)) == 5 and all(low <= p <= high for p in taken)
    assert low <= ports.free_port() <= high


@pytest.mark.parametrize("given", ["20000", "a-b", "30000-20000", "20-3000", "20000-70000"])
def test_a_bad_range_in_the_environment_says_what_is_wrong(
    monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    monkeypatch.setenv(ports.RANGE_ENV, given)
    with pytest.raises(ValueError, match=ports.RANGE_ENV):
        ports.Ports()
