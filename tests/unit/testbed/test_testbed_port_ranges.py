"""Where the test beds' ports come from when test processes run side by side
(``ports.RANGE_ENV``, set per pytest worker by ``tests/conftest.py``)."""

from __future__ import annotations

import itertools
import pathlib
import time

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


def test_two_pickers_never_hand_out_a_port_the_other_gave_and_nobody_bound_yet(
    tmp_path: pathlib.Path,
) -> None:
    """The CI failure this guards: two edge nodes' ports picked, the first node's processes
    started (its hollow kubelet picking a port of its own with a new picker), and the second
    node's partition finding its port taken. Nothing here binds the ports it is given."""
    ledger = ports.Ledger(tmp_path / "ledger")
    first = ports.Ports(20000, 21000, ledger)
    given = set(first.take(400, ("127.0.0.1",)))
    for _ in range(20):
        again = ports.Ports(20000, 21000, ports.Ledger(tmp_path / "ledger"))
        taken = again.take(10, ("127.0.0.1",))
        assert not given & set(taken)
        given |= set(taken)
    assert len(given) == 600


def test_a_port_is_handed_out_again_once_its_hold_is_over(tmp_path: pathlib.Path) -> None:
    short = ports.Ledger(tmp_path, hold=0.0)
    picker = ports.Ports(20000, 21000, short)
    first = picker.take(1, ("127.0.0.1",))[0]
    assert not short.held(first, time.time())
    assert ports.Ledger(tmp_path).held(first, time.time())
    assert ports.still_held(100.0, 100.0, 600.0)
    assert ports.still_held(100.0, 699.0, 600.0)
    assert not ports.still_held(100.0, 700.0, 600.0)
    assert not ports.still_held(100.0, 99.0, 600.0)  # a clock set back does not hold it forever


def test_the_ledger_is_the_one_in_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.setenv(ports.LEDGER_ENV, str(tmp_path / "mine"))
    port = ports.free_port()
    assert (tmp_path / "mine" / str(port)).is_file()


def test_a_ledger_that_is_not_a_directory_of_ours_is_refused(tmp_path: pathlib.Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        ports.Ports(20000, 21000, ports.Ledger(tmp_path / "file")).take(1)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(ports.NoPortError, match="not a directory of this user"):
        ports.Ports(20000, 21000, ports.Ledger(link)).take(1)


def test_a_pair_is_two_ports_side_by_side_both_handed_out(tmp_path: pathlib.Path) -> None:
    ledger = ports.Ledger(tmp_path)
    first = ports.Ports(20000, 21000, ledger).pair(("127.0.0.1",))
    assert ledger.held(first, time.time()) and ledger.held(first + 1, time.time())
    again = ports.Ports(20000, 21000, ledger).take(900, ("127.0.0.1",))
    assert first not in again and first + 1 not in again
