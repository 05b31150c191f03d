"""The leader hubs of this hub's pool: are they usable, and which one to read from.

A leader is usable when its last TCP check succeeded (reference §8.3: a connect to
``<address>:<--multiplexer-port>`` with a 2 s timeout, at once when the set changes and then
every 20 s) and no answer of it failed recently. The TCP check alone would keep sending
followers to a leader that accepts connections but hangs or answers garbage; a failed answer
(``penalize``) makes the leader unusable for ``penalty`` seconds whatever the check says, so
followers move on at once and come back only once it has behaved for a while.

An empty set from the ConfigMap while the pool should have leaders does not drop the current
ones at once: they are read from while their checks pass, for ``linger`` seconds at most
(``update``).

``pick`` goes round robin over the usable leaders (YurtHub's leader load balancer). Every
change of what ``pick`` could answer (new leaders, a check flipping, a penalty starting or
ending) calls ``on_change``: the feeders' sources wake up and switch their upstream at once.

Dangers: a check must never block the loop (``asyncio.open_connection`` under a timeout); the
set may be replaced while a round of checks runs (results for leaders no longer in the set are
dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Container

from yurthub.pool import leaderconfigs

log = logging.getLogger(__name__)

LINGER = 60.0
"""Seconds at most followers keep reading from leaders the ConfigMap no longer names."""
LINGER_CHECK = 2.0
"""Seconds between the TCP checks of such leaders."""


class Leaders:
    def __init__(
        self,
        port: int,
        *,
        interval: float = 20.0,
        timeout: float = 2.0,
        penalty: float = 30.0,
        linger: float = LINGER,
        on_change: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.port = port
        self.interval = interval
        self.timeout = timeout
        self.penalty = penalty
        self._clock = clock
        self._leaders: tuple[leaderconfigs.Leader, ...] = ()
        self._healthy: dict[leaderconfigs.Leader, bool] = {}
        self._penalized: dict[leaderconfigs.Leader, float] = {}
        self._checked = asyncio.Event()
        self._recheck = asyncio.Event()
        self._next = 0
        self.on_change = on_change
        self._timers: list[asyncio.TimerHandle] = []
        self.linger = linger
        self._linger: asyncio.TimerHandle | None = None

    @property
    def leaders(self) -> tuple[leaderconfigs.Leader, ...]:
        return self._leaders

    @property
    def lingering(self) -> bool:
        """Whether the set is one the ConfigMap no longer names (see ``update``)."""
        return self._linger is not None

    def update(
        self, leaders: tuple[leaderconfigs.Leader, ...], *, keep_while_reachable: bool = False
    ) -> None:
        """Replace the set (from the ConfigMap); new leaders are checked at once.

        ``keep_while_reachable``: an empty set while the pool should have leaders (the
        manager has none to name for a moment) keeps the current leaders that are usable,
        checked every ``LINGER_CHECK`` seconds, until they fail or for ``linger`` seconds at
        most: every follower of the pool going to the cloud at once is what pool scope is
        there to avoid."""
        if not leaders and keep_while_reachable and self._leaders:
            if self._linger is not None:
                return
            if any(self.usable(leader) for leader in self._leaders):
                log.info(
                    "the pool names no leaders now; reading from %s while they answer "
                    "(%.0fs at most)",
                    ", ".join(leader.node for leader in self._leaders),
                    self.linger,
                )
                loop = asyncio.get_running_loop()
                self._linger = loop.call_later(self.linger, self._end_linger)
                self._recheck.set()
                return
        self._stop_linger()
        self._replace(leaders)

    def _stop_linger(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None

    def _end_linger(self) -> None:
        if self._linger is None:
            return
        self._linger = None
        log.info("the pool's former leaders are no longer read from")
        self._replace(())

    def _replace(self, leaders: tuple[leaderconfigs.Leader, ...]) -> None:
        if leaders == self._leaders:
            return
        self._leaders = leaders
        self._healthy = {leader: self._healthy.get(leader, False) for leader in leaders}
        self._penalized = {k: v for k, v in self._penalized.items() if k in leaders}
        self._checked.clear()
        self._recheck.set()
        self.on_change()

    def usable(self, leader: leaderconfigs.Leader) -> bool:
        if not self._healthy.get(leader, False):
            return False
        until = self._penalized.get(leader)
        return until is None or self._clock() >= until

    def healthy(self) -> dict[leaderconfigs.Leader, bool]:
        """Whether each leader is usable now (metrics)."""
        return {leader: self.usable(leader) for leader in self._leaders}

    def pick(self, skip: Container[str] = ()) -> leaderconfigs.Leader | None:
        """The next usable leader whose node is not in ``skip`` (round robin)."""
        count = len(self._leaders)
        for offset in range(count):
            index = (self._next + offset) % count
            leader = self._leaders[index]
            if self.usable(leader) and leader.node not in skip:
                self._next = (index + 1) % count
                return leader
        return None

    def penalize(
        self, leader: leaderconfigs.Leader, why: str, seconds: float | None = None
    ) -> None:
        """An answer of ``leader`` failed: do not use it for ``seconds`` (``penalty``)."""
        if leader not in self._healthy:
            return
        already = not self.usable(leader)
        seconds = self.penalty if seconds is None else seconds
        self._penalized[leader] = max(self._penalized.get(leader, 0.0), self._clock() + seconds)
        if not already:
            log.warning(
                "leader hub %s (%s) failed: %s; reading from elsewhere for %.0fs",
                leader.node,
                leader.address,
                why,
                seconds,
            )
        self._recheck.set()
        self.on_change()
        loop = asyncio.get_running_loop()
        self._timers = [t for t in self._timers if not t.cancelled()]
        self._timers.append(loop.call_later(seconds + 0.01, self.on_change))

    def recheck(self) -> None:
        """Check the leaders now (an answer failed: a leader that has gone is left at once)."""
        self._recheck.set()

    async def settled(self) -> None:
        """Until the current set has been checked once (bounded by the check timeout)."""
        if not self._leaders:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.timeout + 0.5):
                await self._checked.wait()

    async def run(self) -> None:
        """Check the leaders until cancelled."""
        try:
            while True:
                self._recheck.clear()
                leaders = self._leaders
                if leaders:
                    results = await asyncio.gather(*(self._check(leader) for leader in leaders))
                    self._record(leaders, results)
                interval = self.interval if self._linger is None else LINGER_CHECK
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(interval):
                        await self._recheck.wait()
        finally:
            self._stop_linger()
            for timer in self._timers:
                timer.cancel()

    def _record(self, leaders: tuple[leaderconfigs.Leader, ...], results: list[bool]) -> None:
        flipped = False
        for leader, ok in zip(leaders, results, strict=True):
            if leader not in self._healthy:
                continue  # the set changed meanwhile
            if self._healthy[leader] != ok:
                flipped = True
                log.info(
                    "leader hub %s (%s:%d) is %s",
                    leader.node,
                    leader.address,
                    self.port,
                    "reachable" if ok else "unreachable",
                )
            self._healthy[leader] = ok
        if leaders == self._leaders:
            self._checked.set()
        if self._linger is not None and not any(self.usable(x) for x in self._leaders):
            self._end_linger()  # calls on_change
            return
        if flipped:
            self.on_change()

    async def _check(self, leader: leaderconfigs.Leader) -> bool:
        try:
            async with asyncio.timeout(self.timeout):
                _, writer = await asyncio.open_connection(leader.address, self.port)
        except (OSError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True
