"""Container log lines of simulated pods, and followers waiting for new ones (``logs -f``).

Each (namespace, pod, container) keeps a bounded tail of (timestamp, line)
pairs; appending wakes every follower. Deleting the pod closes its logs, which
ends ``follow`` streams as a real kubelet does when the container goes away.

Lives in the shared ``State``: a follower attached through one apiserver sees
lines appended through another.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import AsyncIterator, Callable

DEFAULT_MAX_LINES = 10_000


@dataclasses.dataclass(slots=True)
class _Log:
    lines: collections.deque[tuple[float, str]]
    total: int = 0
    closed: bool = False
    changed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


class LogBook:
    def __init__(self, clock: Callable[[], float], *, max_lines: int = DEFAULT_MAX_LINES) -> None:
        self._clock = clock
        self._max_lines = max_lines
        self._logs: dict[tuple[str, str, str], _Log] = {}

    def _log(self, namespace: str, pod: str, container: str) -> _Log:
        key = (namespace, pod, container)
        log = self._logs.get(key)
        if log is None:
            log = _Log(collections.deque(maxlen=self._max_lines))
            self._logs[key] = log
        return log

    def append(self, namespace: str, pod: str, container: str, line: str) -> None:
        log = self._log(namespace, pod, container)
        for part in line.splitlines() or [""]:
            log.lines.append((self._clock(), part))
            log.total += 1
        self._wake(log)

    @staticmethod
    def _wake(log: _Log) -> None:
        log.changed.set()
        log.changed = asyncio.Event()

    def lines(
        self, namespace: str, pod: str, container: str, *, tail: int | None = None
    ) -> list[tuple[float, str]]:
        log = self._logs.get((namespace, pod, container))
        if log is None:
            return []
        found = list(log.lines)
        if tail is not None:
            found = found[-tail:] if tail > 0 else []
        return found

    def close_pod(self, namespace: str, pod: str) -> None:
        """The pod is gone: end its followers and forget its lines."""
        for key in [k for k in self._logs if k[0] == namespace and k[1] == pod]:
            log = self._logs.pop(key)
            log.closed = True
            self._wake(log)

    async def follow(
        self, namespace: str, pod: str, container: str, *, tail: int | None = None
    ) -> AsyncIterator[tuple[float, str]]:
        """Existing lines (or the last ``tail``), then new ones until the pod is deleted."""
        log = self._log(namespace, pod, container)
        kept = len(log.lines)
        start = log.total - (min(tail, kept) if tail is not None else kept)
        position = start
        while True:
            while position < log.total:
                # Lines that fell out of the bounded tail while the consumer was busy with the
                # last one are skipped (computed per line: the deque shifts under each yield).
                first_kept = log.total - len(log.lines)
                position = max(position, first_kept)
                yield log.lines[position - first_kept]
                position += 1
            if log.closed:
                return
            await log.changed.wait()
