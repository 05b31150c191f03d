"""kubecontrol.timestamps: a Kubernetes time (RFC 3339) read back, or None."""

from __future__ import annotations

import datetime

import pytest

from kubecontrol import timestamps

EPOCH_2026 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC).timestamp()

TIMES = [
    ("as the apiserver writes it", "2026-01-01T00:00:00Z", EPOCH_2026),
    ("micro", "2026-01-01T00:00:00.500000Z", EPOCH_2026 + 0.5),
    ("an offset", "2026-01-01T01:00:00+01:00", EPOCH_2026),
    ("no zone: UTC", "2026-01-01T00:00:00", EPOCH_2026),
    ("empty", "", None),
    ("not a time", "yesterday", None),
    ("not a string", 1767225600, None),
    ("absent", None, None),
]


@pytest.mark.parametrize(("value", "seconds"), [t[1:] for t in TIMES], ids=[t[0] for t in TIMES])
def test_epoch(value: object, seconds: float | None) -> None:
    assert timestamps.epoch(value) == seconds


@pytest.mark.parametrize(("value", "seconds"), [t[1:] for t in TIMES], ids=[t[0] for t in TIMES])
def test_parse_is_aware_and_agrees_with_epoch(value: object, seconds: float | None) -> None:
    parsed = timestamps.parse(value)
    if seconds is None:
        assert parsed is None
    else:
        assert parsed is not None and parsed.tzinfo is not None
        assert parsed.timestamp() == seconds
