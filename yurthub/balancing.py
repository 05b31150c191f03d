"""Load balancing over apiserver backends: round robin or priority (reference §5.2, §10.6).

Pure-ish: no I/O and no clock; health is asked through the ``is_usable`` callable so the
balancer never holds health state of its own. Not thread-safe (one event loop).

- ``rr``: from ``next``, the first usable backend; ``next`` moves past it. A backend that is
  skipped is not "owed" a turn, so after a failover the order simply continues.
- ``priority``: always the first usable backend in ``--server-addr`` order.
- No usable backend: ``None`` (the router then tries the cache, else answers 502).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from yurthub import settings


class Balancer:
    def __init__(self, backends: Sequence[str], mode: settings.LbMode) -> None:
        if not backends:
            raise ValueError("a balancer needs at least one backend")
        self._backends = tuple(backends)
        self._mode = mode
        self._next = 0

    @property
    def backends(self) -> tuple[str, ...]:
        return self._backends

    def pick(
        self, is_usable: Callable[[str], bool], *, exclude: frozenset[str] = frozenset()
    ) -> str | None:
        """The backend for the next request; ``exclude`` skips ones that just failed."""
        count = len(self._backends)
        start = self._next if self._mode is settings.LbMode.RR else 0
        for offset in range(count):
            index = (start + offset) % count
            backend = self._backends[index]
            if backend in exclude or not is_usable(backend):
                continue
            if self._mode is settings.LbMode.RR:
                self._next = (index + 1) % count
            return backend
        return None
