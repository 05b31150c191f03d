"""Several filters over one object, in order, with every failure contained.

PURE (no I/O; a clock is passed in for the once-a-minute error log).

- A filter returning ``None`` drops the object: the chain stops there.
- A filter returning a new object hands that on; returning its input means "unchanged", so a
  body nobody changed is passed on as the bytes that came (no re-encode).
- A filter that raises changed nothing (filters never mutate their input, see ``objects``):
  the chain goes on with the object as it was before that filter, so one broken filter costs
  its own rewrite, never the object nor the other filters' work. The error is logged with its
  traceback at most once a minute per filter (a stream of bad objects must not flood the log)
  and counted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from yurthub.filters import (
    discardcloudservice,
    forwardkubesvctraffic,
    inclusterconfig,
    inputs,
    masterservice,
    nodeportisolation,
    objects,
    registry,
    serviceenvupdater,
    servicetopology,
)

logger = logging.getLogger(__name__)

FilterFunction = Callable[[objects.Obj, str, inputs.Inputs], objects.Obj | None]

FUNCTIONS: dict[str, FilterFunction] = {
    registry.MASTERSERVICE: masterservice.apply,
    registry.DISCARDCLOUDSERVICE: discardcloudservice.apply,
    registry.NODEPORTISOLATION: nodeportisolation.apply,
    registry.SERVICETOPOLOGY: servicetopology.apply,
    registry.FORWARDKUBESVCTRAFFIC: forwardkubesvctraffic.apply,
    registry.INCLUSTERCONFIG: inclusterconfig.apply,
    registry.SERVICEENVUPDATER: serviceenvupdater.apply,
}
NEEDLE_MAX = 64
"""No needle is longer (a stream checked chunk by chunk keeps this many bytes of overlap)."""
NEEDLES: dict[str, tuple[bytes, ...]] = {
    # One scan for both variables' common prefix.
    registry.SERVICEENVUPDATER: (serviceenvupdater.VARIABLE_PREFIX.encode(),),
}
"""Per filter, byte strings at least one of which an object's encoded body (JSON or protobuf)
holds whenever the filter could change it. Bodies come from the apiserver, whose encoders never
escape ASCII letters, so a body without any needle is passed without being decoded (most pods
set no KUBERNETES_SERVICE_* variable: kubelet's pod GETs and offline pod lists then cost no
decode). A filter without needles is always run."""
ERROR_LOG_INTERVAL = 60.0


class Observer(Protocol):
    """Counts what the filters did (the runtime backs it with Prometheus counters)."""

    def changed(self, name: str) -> None: ...

    def dropped(self, name: str) -> None: ...

    def failed(self, name: str) -> None: ...


class NullObserver:
    def changed(self, name: str) -> None:
        pass

    def dropped(self, name: str) -> None:
        pass

    def failed(self, name: str) -> None:
        pass


class ErrorLog:
    """Logs a filter's failure at most once per ``interval`` seconds, with what was skipped."""

    def __init__(
        self,
        *,
        interval: float = ERROR_LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._interval = interval
        self._clock = clock
        self._next: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def report(self, name: str, error: BaseException, what: str) -> bool:
        """True when this one was logged."""
        now = self._clock()
        if now < self._next.get(name, float("-inf")):
            self._suppressed[name] = self._suppressed.get(name, 0) + 1
            return False
        self._next[name] = now + self._interval
        skipped = self._suppressed.pop(name, 0)
        logger.error(
            "filter %s failed on %s; the object goes on as it was%s",
            name,
            what,
            f" ({skipped} more failures in the last minute were not logged)" if skipped else "",
            exc_info=error,
        )
        return True


class Chain:
    """The filters of one request."""

    __slots__ = ("_errors", "_filters", "_needles", "_observer", "_world", "names")

    def __init__(
        self,
        names: Sequence[str],
        world: inputs.Inputs,
        *,
        errors: ErrorLog,
        observer: Observer | None = None,
    ) -> None:
        self.names = tuple(names)
        self._filters = [(name, FUNCTIONS[name]) for name in self.names]
        needles = [NEEDLES.get(name) for name in self.names]
        self._needles: tuple[bytes, ...] | None = (
            None if None in needles else tuple(n for own in needles if own for n in own)
        )
        self._world = world
        self._errors = errors
        self._observer = observer or NullObserver()

    @property
    def gated(self) -> bool:
        """Every filter of the chain names its needles (``may_change`` can say no)."""
        return self._needles is not None

    def may_change(self, body: bytes) -> bool:
        """False when no filter of the chain can change the object(s) ``body`` encodes
        (``NEEDLES``): the body is passed as it is, undecoded."""
        needles = self._needles
        return needles is None or any(needle in body for needle in needles)

    def apply(self, obj: objects.Obj, kind: str) -> objects.Obj | None:
        """``obj`` itself when no filter changed it, a new object, or None (dropped)."""
        current = obj
        for name, function in self._filters:
            try:
                out = function(current, kind, self._world)
            except Exception as e:
                self._observer.failed(name)
                ns, n = objects.namespace_name(current)
                self._errors.report(name, e, f"{kind} {ns}/{n}" if ns else f"{kind} {n}")
                continue
            if out is None:
                self._observer.dropped(name)
                return None
            if out is not current:
                self._observer.changed(name)
                current = out
        return current
