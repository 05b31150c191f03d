"""The Lease leader-election loop: acquire, lead while renewing, stop at once when lost.

``Elector.run(lead)`` tries to acquire the Lease every retry period (jittered as client-go
does). Once it holds it, it runs ``lead()`` in a task next to the renewal loop; the moment the
lease is lost (no successful renewal within the renew deadline, or someone else is seen
holding it) ``lead()`` is cancelled and the elector goes back to trying. ``lead()`` therefore
never runs while this replica might not hold the lease (see ``leases`` for why the deadline
is shorter than the lease). A ``lead()`` that returns ends ``run``; one that raises ends it
with that error.

When ``run`` ends (cancelled by SIGTERM, or ``lead()`` returned or failed) the elector waits
for ``lead()`` to finish and then releases the Lease (bounded by ``release_timeout``), so a
standby takes over within a retry period instead of waiting for the lease to expire.

Every request is bounded: a try never outlives the renew deadline. Failures are logged once
per change of cause, not on every retry, so an apiserver that is away does not flood the log.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import socket
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from kubecontrol import events, kubeapi, leases

logger = logging.getLogger(__name__)

Clock = Callable[[], float]
WallClock = Callable[[], datetime.datetime]


def default_identity() -> str:
    """``hostname_uuid``, as kube-controller-manager names its candidates: the Pod's name
    tells operators which replica leads, the uuid keeps a restarted one a new candidate."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Elector:
    def __init__(
        self,
        api: kubeapi.KubeApi,
        config: leases.Config,
        *,
        recorder: events.Recorder | None = None,
        on_change: Callable[[bool], None] | None = None,
        release_timeout: float = 5.0,
        rng: random.Random | None = None,
        clock: Clock = time.monotonic,
        wall: WallClock = _utcnow,
    ) -> None:
        self.api = api
        self.config = config
        self.recorder = recorder
        self.on_change = on_change
        self.release_timeout = release_timeout
        self._rng = rng or random.Random()
        self._clock = clock
        self._wall = wall
        self.leading = False
        self.holder: str | None = None
        """The holder last seen (None: never read the Lease yet, or there is none)."""
        self.last_contact: float | None = None
        """Monotonic time of the last successful read or write of the Lease."""
        self.elected = 0
        """How often this process became leader."""
        self._observed: leases.Observed | None = None
        self._lease: dict[str, Any] | None = None  # the Lease as last read or written
        self._renewed_at = 0.0
        self._last_problem: str | None = None

    # -- state

    def in_contact(self) -> bool:
        """Leading, or a standby that read the Lease within the lease duration."""
        if self.leading:
            return True
        contact = self.last_contact
        return contact is not None and self._clock() - contact < self.config.lease_duration

    # -- running

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        try:
            while True:
                await self._acquire()
                if not await self._lead(lead):
                    return
        finally:
            await self._release()

    async def _acquire(self) -> None:
        logger.info(
            "trying to acquire lease %s/%s as %s",
            self.config.namespace,
            self.config.name,
            self.config.identity,
        )
        while True:
            if await self._try_bounded(self.config.renew_deadline):
                return
            period = self.config.retry_period
            await asyncio.sleep(period + self._rng.random() * leases.JITTER_FACTOR * period)

    async def _lead(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> bool:
        """Lead until the lease is lost (True) or ``lead()`` returns (False)."""
        self._set_leading(True)
        try:
            async with asyncio.TaskGroup() as tg:
                leading = tg.create_task(lead(), name="leading")
                renewing = tg.create_task(self._keep_renewing(), name="lease renewal")
                announcing = tg.create_task(self._announce(), name="announce leadership")
                await asyncio.wait({leading, renewing}, return_when=asyncio.FIRST_COMPLETED)
                lost = renewing.done()
                # Stop acting at once: cancelled controllers stop at their next await.
                for task in (leading, renewing, announcing):
                    task.cancel()
        finally:
            self._set_leading(False)
        return lost

    async def _keep_renewing(self) -> None:
        """Returns when the lease is lost."""
        config = self.config
        while True:
            await asyncio.sleep(config.retry_period)
            while True:
                remaining = self._renewed_at + config.renew_deadline - self._clock()
                if remaining <= 0:
                    logger.warning(
                        "lost lease %s/%s: not renewed within %.1fs",
                        config.namespace,
                        config.name,
                        config.renew_deadline,
                    )
                    return
                if await self._try_bounded(remaining):
                    break
                if self.holder != config.identity:
                    logger.warning(
                        "lost lease %s/%s: now held by %s",
                        config.namespace,
                        config.name,
                        self.holder or "nobody",
                    )
                    return
                remaining = self._renewed_at + config.renew_deadline - self._clock()
                await asyncio.sleep(max(0.0, min(config.retry_period, remaining)))

    async def _try_bounded(self, limit: float) -> bool:
        try:
            async with asyncio.timeout(limit):
                return await self._try()
        except TimeoutError:
            self._problem(f"no answer within {limit:.1f}s")
            return False

    async def _try(self) -> bool:
        """One tryAcquireOrRenew; True when this replica holds the lease now."""
        config = self.config
        now = self._clock()  # before the request: others saw the change no earlier
        if self.leading and self._lease is not None and self._observed is not None:
            # The leader renews from its own last write without reading first.
            decision = leases.decide(config, self._observed, now, self._wall())
            if isinstance(decision, leases.Write) and await self._write(decision.record, now):
                return True
        try:
            lease = await self.api.get_or_none(kubeapi.LEASES, config.namespace, config.name)
        except kubeapi.KubeError as e:
            self._problem(f"cannot read the lease: {e}")
            return False
        self.last_contact = self._clock()
        self._lease = lease
        if lease is None:
            self._observed = None
            self.holder = None
        else:
            self._observed = leases.observe(self._observed, leases.record_of(lease), now)
            self.holder = self._observed.record.holder or None
        decision = leases.decide(config, self._observed, now, self._wall())
        if isinstance(decision, leases.Standby):
            self._problem(None)
            return False
        return await self._write(decision.record, now)

    async def _write(self, record: leases.Record, now: float) -> bool:
        config = self.config
        body = leases.body(config, self._lease, record)
        try:
            if self._lease is None:
                written = await self.api.create(kubeapi.LEASES, config.namespace, body)
            else:
                written = await self.api.replace(
                    kubeapi.LEASES, config.namespace, config.name, body
                )
        except kubeapi.Conflict:
            # Someone else wrote (or created) it first: the next read shows who.
            logger.debug("lease %s/%s changed under us", config.namespace, config.name)
            return False
        except kubeapi.KubeError as e:
            self._problem(f"cannot write the lease: {e}")
            return False
        self._problem(None)
        self.last_contact = self._clock()
        self._lease = written
        self._observed = leases.Observed(record, now)
        self.holder = record.holder
        self._renewed_at = now
        return True

    def _set_leading(self, leading: bool) -> None:
        if leading == self.leading:
            return
        self.leading = leading
        config = self.config
        if leading:
            self.elected += 1
            logger.info(
                "became leader of lease %s/%s as %s",
                config.namespace,
                config.name,
                config.identity,
            )
        else:
            logger.info("stopped leading lease %s/%s", config.namespace, config.name)
        if self.on_change is not None:
            self.on_change(leading)

    def _problem(self, problem: str | None) -> None:
        """Log a failure once per cause; a success clears it."""
        if problem is not None and problem != self._last_problem:
            logger.warning(
                "leader election on %s/%s: %s", self.config.namespace, self.config.name, problem
            )
        self._last_problem = problem

    async def _announce(self) -> None:
        """Post the LeaderElection Event on the Lease (best effort), as client-go does."""
        if self.recorder is None or self._lease is None:
            return
        message = f"{self.config.identity} became leader"
        self.recorder.clear(self._lease, "LeaderElection")
        await self.recorder.post(self._lease, "Normal", "LeaderElection", message)

    async def _release(self) -> None:
        lease, observed = self._lease, self._observed
        if lease is None or observed is None or observed.record.holder != self.config.identity:
            return
        config = self.config
        try:
            async with asyncio.timeout(self.release_timeout):
                for _ in range(3):
                    record = leases.released(observed.record, self._wall())
                    body = leases.body(config, lease, record)
                    try:
                        await self.api.replace(kubeapi.LEASES, config.namespace, config.name, body)
                        break
                    except kubeapi.Conflict:
                        # A renewal cancelled in flight may have landed after all: release
                        # from what is stored now, if it is still ours.
                        fresh = await self.api.get_or_none(
                            kubeapi.LEASES, config.namespace, config.name
                        )
                        if fresh is None or leases.record_of(fresh).holder != config.identity:
                            return
                        lease = fresh
                        observed = leases.Observed(leases.record_of(fresh), self._clock())
                else:
                    raise kubeapi.Conflict("the lease kept changing under the release")
        except (kubeapi.KubeError, TimeoutError) as e:
            logger.warning(
                "could not release lease %s/%s (%s): others take over once it expires",
                config.namespace,
                config.name,
                e or "timeout",
            )
            return
        self._observed = None
        self._lease = None
        logger.info("released lease %s/%s", config.namespace, config.name)
