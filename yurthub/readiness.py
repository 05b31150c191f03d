"""Readiness: a list of named conditions; the hub is ready when all hold.

Later issues add their own (certificates, filter informers synced, ...). ``/v1/readyz`` and the
proxy's readiness gate (reference §2.5 step 1) both read these, so the 503 a client gets names
the same missing pieces as the probe.

Two kinds of condition: those that gate the proxy (the default: nothing can be answered right
without them), and ``gates_proxy=False`` ones that only ``/v1/readyz`` reports (the disk cache
cannot be opened: the hub still proxies online, but the node is not autonomous and the operator
must know; the serving certificate: only port 10268 needs it). ``warn`` adds a note
``/v1/readyz`` shows while still answering 200 (the cache was damaged and started anew), and
``add_warning`` one that shows while its check says so (the cache's writes fail: a hub that
cannot write its cache still proxies online, but what it reads is not kept for offline use).

A check returns a string: "" when it holds, else what is missing, shown after the name
(``client-certificate (waiting for CSR csr-x7k2p: ...)``) by ``/v1/readyz``, ``/v1/status``,
``edgehub status`` and the proxy's 503. There is no bare "false": a condition that fails always
says why (the operator must not have to find the reason in the log).
"""

from __future__ import annotations

from collections.abc import Callable

Check = Callable[[], str]


def _failing(name: str, check: Check) -> str | None:
    why = check()
    return f"{name} ({why})" if why else None


class Readiness:
    def __init__(self) -> None:
        self._conditions: dict[str, tuple[Check, bool]] = {}
        self._warnings: dict[str, str] = {}
        self._warning_checks: dict[str, Callable[[], str]] = {}

    def add(self, name: str, check: Check, *, gates_proxy: bool = True) -> None:
        """Register a condition; ``check`` must be cheap and non-blocking (called per request)
        and return "" when it holds, else why not."""
        self._conditions[name] = (check, gates_proxy)

    def warn(self, name: str, text: str) -> None:
        """A note for ``/v1/readyz`` that does not make the hub unready."""
        self._warnings[name] = text

    def add_warning(self, name: str, check: Callable[[], str]) -> None:
        """A note for ``/v1/readyz`` while ``check`` returns one ("" when all is well); cheap and
        non-blocking, as a condition's check. It never makes the hub unready."""
        self._warning_checks[name] = check

    def not_ready(self) -> list[str]:
        """Conditions that fail and gate the proxy (asked per request: a plain loop)."""
        failing: list[str] = []
        for name, (check, gates) in self._conditions.items():
            if gates and (failed := _failing(name, check)) is not None:
                failing.append(failed)
        return failing

    def report(self) -> tuple[list[str], list[str]]:
        """(every failing condition, warnings as ``name: text``) for ``/v1/readyz``."""
        failing = (_failing(n, c) for n, (c, _) in self._conditions.items())
        warnings = [f"{name}: {text}" for name, text in self._warnings.items()]
        for name, check in self._warning_checks.items():
            if text := check():
                warnings.append(f"{name}: {text}")
        return [f for f in failing if f is not None], warnings

    def ready(self) -> bool:
        """Whether ``/v1/readyz`` answers 200 now (every condition holds, gating or not)."""
        return not self.report()[0]
