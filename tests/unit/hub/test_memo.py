"""The bounded memo behind the per-request decisions that repeat (hosts, classification)."""

from __future__ import annotations

import pytest

from yurthub import memo
from yurthub.proxy import hosts


def test_the_oldest_entry_goes_when_full() -> None:
    m: memo.BoundedMemo[str, int] = memo.BoundedMemo(2)
    m.put("a", 1)
    m.put("b", 2)
    m.put("a", 10)  # known key: replaced in place, nothing evicted
    assert (m.get("a"), m.get("b"), len(m)) == (10, 2, 2)
    m.put("c", 3)
    assert m.get("a") is None and m.get("b") == 2 and m.get("c") == 3
    assert len(m) == 2


def test_a_memo_holds_something() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        memo.BoundedMemo(0)


def test_hosts_are_decided_the_same_from_the_memo_and_ever_new_hosts_stay_bounded() -> None:
    accepted = hosts.AcceptedHosts(["127.0.0.1"])
    for _ in range(2):  # the second round answers from the memo
        assert accepted.allows("localhost:10261")
        assert not accepted.allows("evil.example")
        assert accepted.allows("[::1]:10261")
    for i in range(5000):  # a hostile client naming a new host each time
        assert not accepted.allows(f"h{i}.evil.example")
    assert len(accepted._decided) <= 64
    long = "x" * 5000 + ".example"
    assert not accepted.allows(long)
    assert accepted._decided.get(long) is None  # too long to keep
    assert accepted.allows("localhost")
