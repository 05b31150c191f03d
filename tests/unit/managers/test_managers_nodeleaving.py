"""When a node has left its Instances: Akri's node watcher state machine (node_watcher.rs
fixtures) and the two additions (Unknown on first sight, deleted nodes always)."""

from __future__ import annotations

from typing import Any

import pytest

from managers import nodeleaving
from managers.nodeleaving import State


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
        # additions
        (None, UNKNOWN, State.CLEANED, True, False),  # lost before we (re)started
        (State.KNOWN, UNKNOWN, State.KNOWN, False, False),
        (None, None, None, True, True),  # deleted, whatever we knew
        (State.RUNNING, None, None, True, True),
        (State.KNOWN, None, None, True, True),
        (State.CLEANED, None, None, True, True),
    ],
)
def test_observe(
    previous: State | None,
    obj: dict[str, Any] | None,
    state: State | None,
    clean: bool,
    gone: bool,
) -> None:
    decision = nodeleaving.observe(previous, obj)
    assert (decision.state, decision.clean, decision.gone) == (state, clean, gone)
    if clean:
        assert decision.why


def test_listing_and_finalizers() -> None:
    instances = [
        {"metadata": {"namespace": "b", "name": "i2"}, "spec": {"nodes": ["node-a", "node-b"]}},
        {"metadata": {"namespace": "a", "name": "i1"}, "spec": {"nodes": ["node-a"]}},
        {"metadata": {"namespace": "a", "name": "i3"}, "spec": {"nodes": ["node-b"]}},
        {"metadata": {"namespace": "a", "name": "i4"}, "spec": {"nodes": "node-a"}},
        {"metadata": {"namespace": "a", "name": "i5"}},
    ]
    assert nodeleaving.listing("node-a", instances) == [("a", "i1"), ("b", "i2")]
    configurations = [
        {"metadata": {"namespace": "a", "name": "c1", "finalizers": ["node-b", "node-a"]}},
        {"metadata": {"namespace": "a", "name": "c2", "finalizers": ["node-b"]}},
        {"metadata": {"namespace": "a", "name": "c3"}},
        {"metadata": "junk"},
    ]
    assert nodeleaving.holding_finalizer("node-a", configurations) == [("a", "c1")]
