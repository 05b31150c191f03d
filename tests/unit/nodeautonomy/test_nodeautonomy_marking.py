"""A Node's autonomy annotations and labels -> the one Marking the hub and the manager share."""

from __future__ import annotations

import pytest

from nodeautonomy import marking as m

DURATION = m.DURATION_ANNOTATION
LEGACY = m.LEGACY_ANNOTATION
FOREVER_NEW = m.Autonomous(None, DURATION)
FOREVER_OLD = m.Autonomous(None, LEGACY)


@pytest.mark.parametrize(
    ("annotations", "labels", "expected"),
    [
        ({}, {}, m.UNMARKED),
        (None, None, m.UNMARKED),
        ({"other": "x"}, {}, m.UNMARKED),
        ({DURATION: "0"}, {}, FOREVER_NEW),
        ({DURATION: "0s"}, {}, FOREVER_NEW),
        ({DURATION: "-0"}, {}, FOREVER_NEW),
        ({DURATION: "1h"}, {}, m.Autonomous(3600, DURATION)),
        ({DURATION: "90s"}, {}, m.Autonomous(90, DURATION)),
        ({DURATION: "1h30m"}, {}, m.Autonomous(5400, DURATION)),
        ({DURATION: "720h"}, {}, m.Autonomous(720 * 3600, DURATION)),
        # Rounded up: a positive duration never becomes "evict at once".
        ({DURATION: "500ms"}, {}, m.Autonomous(1, DURATION)),
        ({DURATION: "1ns"}, {}, m.Autonomous(1, DURATION)),
        ({DURATION: "1.5s"}, {}, m.Autonomous(2, DURATION)),
        ({DURATION: "2562047h47m16.854775807s"}, {}, m.Autonomous(9223372037, DURATION)),
        ({LEGACY: "true"}, {}, FOREVER_OLD),
        ({LEGACY: "false"}, {}, m.UNMARKED),
        ({LEGACY: "True"}, {}, m.UNMARKED),
        ({LEGACY: ""}, {}, m.UNMARKED),
        # The duration annotation wins over the older one, both ways.
        ({DURATION: "10m", LEGACY: "true"}, {}, m.Autonomous(600, DURATION)),
        ({DURATION: "10m", LEGACY: "false"}, {}, m.Autonomous(600, DURATION)),
        ({DURATION: "0", LEGACY: "false"}, {}, FOREVER_NEW),
        # A cloud node is never autonomous.
        ({DURATION: "0"}, {m.EDGE_WORKER_LABEL: "false"}, m.CLOUD_NODE),
        ({LEGACY: "true"}, {m.EDGE_WORKER_LABEL: "false"}, m.CLOUD_NODE),
        ({DURATION: "1d"}, {m.EDGE_WORKER_LABEL: "false"}, m.CLOUD_NODE),
        ({DURATION: "1h"}, {m.EDGE_WORKER_LABEL: "true"}, m.Autonomous(3600, DURATION)),
        ({DURATION: "1h"}, {m.EDGE_WORKER_LABEL: "False"}, m.Autonomous(3600, DURATION)),
    ],
)
def test_read(
    annotations: dict[str, str] | None, labels: dict[str, str] | None, expected: m.Marking
) -> None:
    assert m.read(annotations, labels) == expected


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("1d", 'time: unknown unit "d" in duration "1d"'),
        ("", 'time: invalid duration ""'),
        ("true", 'time: invalid duration "true"'),
        (" 1h", 'time: invalid duration " 1h"'),
        ("-1h", "a duration must not be negative"),
        ("-1ns", "a duration must not be negative"),
        ("3000000h", 'time: invalid duration "3000000h"'),
    ],
)
def test_an_unparseable_or_negative_duration_is_invalid_and_wins_over_the_legacy_mark(
    value: str, error: str
) -> None:
    expected = m.Invalid(value, error)
    assert m.read({DURATION: value}, {}) == expected
    assert m.read({DURATION: value, LEGACY: "true"}, {}) == expected


def test_invalid_names_the_value_and_how_to_write_one() -> None:
    text = m.Invalid("1d", 'time: unknown unit "d" in duration "1d"').describe()
    assert "node.openyurt.io/autonomy-duration='1d'" in text
    assert "not autonomous" in text
    long = m.Invalid("x" * 500, "time: invalid duration").describe()
    assert len(long) < 400  # a hostile value does not make a huge Event/condition message


@pytest.mark.parametrize(
    ("marking", "text"),
    [
        (FOREVER_NEW, "for as long as it takes"),
        (m.Autonomous(5400, DURATION), "for 1h30m0s"),
        (m.Autonomous(30, DURATION), "for 30s"),
    ],
)
def test_autonomous_describe(marking: m.Autonomous, text: str) -> None:
    assert marking.describe() == text


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ({"metadata": {"annotations": {DURATION: "1m"}}}, m.Autonomous(60, DURATION)),
        ({"metadata": {"annotations": {LEGACY: "true"}, "labels": None}}, FOREVER_OLD),
        ({"metadata": {}}, m.UNMARKED),
        ({}, m.UNMARKED),
        ({"metadata": "x"}, m.UNMARKED),
        ({"metadata": {"annotations": ["x"]}}, m.UNMARKED),
    ],
)
def test_of_node(node: dict[str, object], expected: m.Marking) -> None:
    assert m.of_node(node) == expected
