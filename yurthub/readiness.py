"""Readiness: a list of named conditions; the hub is ready when all hold.

Later issues add their own (certificates, filter informers synced, ...). ``/v1/readyz`` and the
proxy's readiness gate (reference §2.5 step 1) both read ``not_ready()``, so the 503 a client
gets names the same missing pieces as the probe.

Two kinds of condition: those that gate the proxy (the default: nothing can be answered right
without them), and ``gates_proxy=False`` ones that only ``/v1/readyz`` reports (the disk cache
cannot be opened: the hub still proxies online, but the node is not autonomous and the operator
must know). ``warn`` adds a note ``/v1/readyz`` shows while still answering 200 (the cache was
damaged and started anew).
"""

from __future__ import annotations

from collections.abc import Callable


class Readiness:
    def __init__(self) -> None:
        self._conditions: dict[str, tuple[Callable[[], bool], bool]] = {}
        self._warnings: dict[str, str] = {}

    def add(self, name: str, check: Callable[[], bool], *, gates_proxy: bool = True) -> None:
        """Register a condition; ``check`` must be cheap and non-blocking (called per request)."""
        self._conditions[name] = (check, gates_proxy)

    def warn(self, name: str, text: str) -> None:
        """A note for ``/v1/readyz`` that does not make the hub unready."""
        self._warnings[name] = text

    def not_ready(self) -> list[str]:
        """Conditions that fail and gate the proxy."""
        return [name for name, (check, gates) in self._conditions.items() if gates and not check()]

    def report(self) -> tuple[list[str], list[str]]:
        """(every failing condition, warnings as ``name: text``) for ``/v1/readyz``."""
        failing = [name for name, (check, _) in self._conditions.items() if not check()]
        return failing, [f"{name}: {text}" for name, text in self._warnings.items()]
