"""Where a pool-scoped feeder reads from now (a usable leader hub, round robin, else the cloud
through the hub's own proxy), and a way to wait for that to change (``yurthub.pool.feeding``
explains the switching)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Container

from yurthub import following
from yurthub.pool import leaderconfigs, leaders


@dataclasses.dataclass(frozen=True, slots=True)
class Source:
    name: str
    """``cloud`` or the leader's node name (logs, metrics)."""
    base: str
    leader: leaderconfigs.Leader | None = None


class Sources:
    """Which source a feeder should read from now, and a way to wait for that to change."""

    def __init__(
        self,
        route: Callable[[], following.ProxyRoute],
        pool_leaders: leaders.Leaders,
        *,
        leader_tls: bool = True,
    ) -> None:
        """``route``: how to reach the hub's own proxy (``hub.own_route``, known once the hub
        listens)."""
        self.route = route
        self.leaders = pool_leaders
        self.leader_tls = leader_tls
        self.mode = leaderconfigs.Source.API
        self.leading = False
        """This hub is one of its pool's leaders (set with the pool's configuration): its
        feeders read the cloud for the pool, and relist after a 410 over the leader spread."""
        self.generation = 0
        self._wake = asyncio.Event()
        self.configured = asyncio.Event()
        """Set once the pool's configuration was read (or there is none to read)."""
        pool_leaders.on_change = self.bump

    def bump(self) -> None:
        self.generation += 1
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()

    def set_mode(self, mode: leaderconfigs.Source) -> None:
        if mode is not self.mode:
            self.mode = mode
            self.bump()

    async def wait_configured(self, seconds: float) -> None:
        """Until the pool's configuration is known, at most ``seconds``: a follower's first
        list should go to its leader, not to the cloud because the ConfigMap came late."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.configured.wait()

    async def wait_change(self, since: int) -> None:
        while self.generation == since:
            await self._wake.wait()

    def cloud(self) -> Source:
        return Source("cloud", self.route().url.rstrip("/"))

    def leader_source(self, leader: leaderconfigs.Leader) -> Source:
        base = leader.url(self.leaders.port)
        if not self.leader_tls:
            base = base.replace("https://", "http://", 1)
        return Source(leader.node, base, leader)

    def choose(self, skip: Container[str] = ()) -> Source:
        """A usable leader (round robin) but those in ``skip`` (node names: leaders one
        feeder leaves for a while), else the cloud."""
        if self.mode is leaderconfigs.Source.POOL:
            leader = self.leaders.pick(skip)
            if leader is not None:
                return self.leader_source(leader)
        return self.cloud()

    def still_good(self, source: Source, skip: Container[str] = ()) -> bool:
        """Whether ``choose`` could keep ``source`` (without moving the round robin)."""
        if source.leader is None:
            return self.mode is not leaderconfigs.Source.POOL or not any(
                self.leaders.usable(leader) and leader.node not in skip
                for leader in self.leaders.leaders
            )
        return (
            self.mode is leaderconfigs.Source.POOL
            and self.leaders.usable(source.leader)
            and source.leader.node not in skip
        )
