"""When a node has left its Instances: Akri's node watcher state machine (node_watcher.rs
fixtures), the addition (Unknown on first sight), and only nodes the watcher saw: a node it
never saw is left alone, a deleted one is cleaned again only after a growing back-off."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from managers import nodeleaving
from managers.nodeleaving import Memory, State

T0 = 1_796_032_800.0  # 2026-11-30T10:00:00Z


def node(*conditions: tuple[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "node-a"},
        "status": {"conditions": [{"type": t, "status": s} for t, s in conditions]},
    }


READY = node(("MemoryPressure", "False"), ("Ready", "True"))
NOT_READY = node(("Ready", "False"))
UNKNOWN = node(("Ready", "Unknown"))
NO_CONDITIONS: dict[str, Any] = {"metadata": {"name": "node-a"}, "status": {}}
NO_READY = node(("MemoryPressure", "False"))
READY_THEN_NOT = node(("Ready", "True"), ("Ready", "False"))  # the last one counts


@pytest.mark.parametrize(
    ("obj", "is_ready"),
    [
        (READY, True),
        (NOT_READY, False),
        (UNKNOWN, False),
        (NO_CONDITIONS, False),
        (NO_READY, False),
        (READY_THEN_NOT, False),
        ({"status": {"conditions": "junk"}}, False),
    ],
)
def test_ready(obj: dict[str, Any], is_ready: bool) -> None:
    assert nodeleaving.ready(obj) is is_ready


@pytest.mark.parametrize(
    ("previous", "obj", "state", "clean", "gone"),
    [
        # Akri's table
        (None, READY, State.RUNNING, False, False),
        (State.KNOWN, READY, State.RUNNING, False, False),
        (State.CLEANED, READY, State.RUNNING, False, False),
        (None, NOT_READY, State.KNOWN, False, False),  # never Ready: may be starting
        (State.KNOWN, NOT_READY, State.KNOWN, False, False),
        (State.RUNNING, NOT_READY, State.CLEANED, True, False),
        (State.RUNNING, NO_CONDITIONS, State.CLEANED, True, False),
        (State.RUNNING, UNKNOWN, State.CLEANED, True, False),
        (State.CLEANED, NOT_READY, State.CLEANED, False, False),  # cleaned once per outage
        (State.CLEANED, UNKNOWN, State.CLEANED, False, False),
        # addition
        (None, UNKNOWN, State.CLEANED, True, False),  # lost before we (re)started
        (State.KNOWN, UNKNOWN, State.KNOWN, False, False),
        # deleted, whatever we knew of it: Akri counts an unseen node's deletion as Running's
        (State.RUNNING, None, State.DELETED, True, True),
        (State.KNOWN, None, State.DELETED, True, True),
        (State.CLEANED, None, State.DELETED, True, True),
        # a deleted node that comes back is a new node
        (State.DELETED, READY, State.RUNNING, False, False),
        (State.DELETED, NOT_READY, State.KNOWN, False, False),
    ],
)
def test_observe(
    previous: State | None,
    obj: dict[str, Any] | None,
    state: State | None,
    clean: bool,
    gone: bool,
) -> None:
    memory = None if previous is None else Memory(previous)
    decision = nodeleaving.observe(memory, obj, T0, seen=True)
    assert (decision.state, decision.clean, decision.gone) == (state, clean, gone)
    if clean:
        assert decision.why


@pytest.mark.parametrize("seen", [True, False])
def test_only_a_node_the_watcher_saw_is_cleaned_when_it_is_gone(seen: bool) -> None:
    """Instances naming a node that does not exist: a mistyped --node-name, an agent whose
    node was deleted before this watcher started, a simulator with no nodes. Its agent is
    alive and writes them back; cleaning them would fight it for ever."""
    decision = nodeleaving.observe(None, None, T0, seen=seen)
    assert decision.clean is seen
    assert decision.gone is seen
    assert decision.state is (State.DELETED if seen else None)
    if not seen:
        assert decision.recheck_after is None and "never seen" in decision.why


def test_a_deleted_node_is_cleaned_again_only_after_a_growing_back_off() -> None:
    """An agent still running on a deleted node writes its Instances back: each cleaning
    waits twice as long as the previous one, up to the cap."""
    again = nodeleaving.Recleaning(initial=5.0, cap=30.0)
    first = nodeleaving.observe(Memory(State.RUNNING), None, T0, seen=True, again=again)
    assert first.clean and first.memory == Memory(State.DELETED, 1, T0 + 5.0)
    assert first.recheck_after == 5.0  # then forgotten if nothing names it any more
    memory = first.memory
    cleanings = [T0]
    now = T0
    while len(cleanings) < 6:
        now += 1.0
        assert memory is not None
        decision = nodeleaving.observe(memory, None, now, seen=True, again=again)
        if decision.clean:
            cleanings.append(now)
            assert decision.recheck_after is not None
        else:
            assert decision.memory == memory
            assert decision.recheck_after == pytest.approx(memory.next_cleaning - now)
        memory = decision.memory
    gaps = [later - earlier for earlier, later in itertools.pairwise(cleanings)]
    assert gaps == [5.0, 10.0, 20.0, 30.0, 30.0]


@pytest.mark.parametrize(("initial", "cap"), [(0.0, 1.0), (2.0, 1.0)])
def test_recleaning_bounds(initial: float, cap: float) -> None:
    with pytest.raises(ValueError):
        nodeleaving.Recleaning(initial=initial, cap=cap)


def test_listing_and_finalizers() -> None:
    instances = [
        {"metadata": {"namespace": "b", "name": "i2"}, "spec": {"nodes": ["node-a", "node-b"]}},
        {"metadata": {"namespace": "a", "name": "i1"}, "spec": {"nodes": ["node-a"]}},
        {"metadata": {"namespace": "a", "name": "i3"}, "spec": {"nodes": ["node-b"]}},
        {"metadata": {"namespace": "a", "name": "i4"}, "spec": {"nodes": "node-a"}},
        {"metadata": {"namespace": "a", "name": "i5"}},
    ]
    assert nodeleaving.listing("node-a", instances) == [("a", "i1"), ("b", "i2")]
    # Holding the node agent's finalizer (Terminating, or no longer listing it) counts too;
    # the garbage collector's own finalizers never do.
    held = [
        {"metadata": {"namespace": "a", "name": "t1", "finalizers": ["node-a"]}, "spec": {}},
        {"metadata": {"namespace": "a", "name": "t2", "finalizers": ["orphan"]}, "spec": {}},
    ]
    assert nodeleaving.listing("node-a", instances + held) == [
        ("a", "i1"),
        ("a", "t1"),
        ("b", "i2"),
    ]
    assert nodeleaving.listing("orphan", held) == []
    configurations = [
        {"metadata": {"namespace": "a", "name": "c1", "finalizers": ["node-b", "node-a"]}},
        {"metadata": {"namespace": "a", "name": "c2", "finalizers": ["node-b"]}},
        {"metadata": {"namespace": "a", "name": "c3"}},
        {"metadata": "junk"},
    ]
    assert nodeleaving.holding_finalizer("node-a", configurations) == [("a", "c1")]


def offline(annotations: dict[str, str], since: str = "2026-11-30T10:00:00Z") -> dict[str, Any]:
    return {
        "metadata": {"name": "node-a", "annotations": annotations},
        "status": {
            "conditions": [{"type": "Ready", "status": "Unknown", "lastTransitionTime": since}]
        },
    }


@pytest.mark.parametrize(
    ("previous", "obj", "now", "clean", "recheck"),
    [
        # autonomous for ever: an offline node keeps its devices however long it is away
        (
            State.RUNNING,
            offline({"node.openyurt.io/autonomy-duration": "0"}),
            T0 + 1e6,
            False,
            None,
        ),
        (State.RUNNING, offline({"node.beta.openyurt.io/autonomy": "true"}), T0 + 1e6, False, None),
        (None, offline({"node.openyurt.io/autonomy-duration": "0"}), T0 + 5, False, None),
        # autonomous for an hour: kept for the hour, looked at again when it runs out
        (
            State.RUNNING,
            offline({"node.openyurt.io/autonomy-duration": "1h"}),
            T0 + 600,
            False,
            3000.0,
        ),
        (
            State.RUNNING,
            offline({"node.openyurt.io/autonomy-duration": "1h"}),
            T0 + 3601,
            True,
            None,
        ),
        # no transition time: cannot count the grace, cleaned as Akri would
        (
            State.RUNNING,
            offline({"node.openyurt.io/autonomy-duration": "1h"}, since=""),
            T0,
            True,
            None,
        ),
        # not autonomous (invalid or absent): Akri's rule
        (
            State.RUNNING,
            offline({"node.openyurt.io/autonomy-duration": "soon"}),
            T0 + 5,
            True,
            None,
        ),
        (State.RUNNING, offline({}), T0 + 5, True, None),
    ],
)
def test_autonomous_nodes_keep_their_devices_while_offline(
    previous: State | None, obj: dict[str, Any], now: float, clean: bool, recheck: float | None
) -> None:
    memory = None if previous is None else Memory(previous)
    decision = nodeleaving.observe(memory, obj, now, seen=True)
    assert decision.clean is clean
    assert decision.recheck_after == recheck
    if not clean:
        assert decision.state is State.RUNNING  # so the grace running out cleans it
    # deleted is deleted, autonomous or not
    assert nodeleaving.observe(memory, None, now, seen=True).clean
