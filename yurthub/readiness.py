"""Readiness: a list of named conditions; the hub is ready when all hold.

Later issues add their own (certificates, filter informers synced, ...). ``/v1/readyz`` and the
proxy's readiness gate (reference §2.5 step 1) both read ``not_ready()``, so the 503 a client
gets names the same missing pieces as the probe.
"""

from __future__ import annotations

from collections.abc import Callable


class Readiness:
    def __init__(self) -> None:
        self._conditions: dict[str, Callable[[], bool]] = {}

    def add(self, name: str, check: Callable[[], bool]) -> None:
        """Register a condition; ``check`` must be cheap and non-blocking (called per request)."""
        self._conditions[name] = check

    def not_ready(self) -> list[str]:
        return [name for name, check in self._conditions.items() if not check()]
