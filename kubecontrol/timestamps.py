"""Kubernetes times (``metav1.Time``, RFC 3339 as the apiserver writes it:
``2026-01-01T00:00:00Z``) read back from JSON.

PURE: values in, times out; a time without a zone is read as UTC, anything that is not a
time is None.
"""

from __future__ import annotations

import datetime


def parse(value: object) -> datetime.datetime | None:
    """``value`` as an aware time; None when it is not an RFC 3339 time string."""
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.UTC)


def epoch(value: object) -> float | None:
    """``value`` as epoch seconds; None when it is not an RFC 3339 time string."""
    when = parse(value)
    return None if when is None else when.timestamp()
