"""Keeps the record of the outage going on, and of the last one: the hub's side of ``records``.

An outage, as the hub sees it, lasts from the moment its health checks declare the last usable
apiserver unhealthy (``health.HealthChecker.on_cloud``: every server's probe state unhealthy,
so everything is answered locally) until one is healthy again. A suspect server (one transport
error, probed at once) does not begin one: a blip the probe clears is no outage. Nor does a
hub that has no identity yet (joining: its probes are not sent, ``causes.Cause.NO_IDENTITY``):
it has not reached the cloud yet, so it has not lost it; should a probe then fail for a reason
of the link, the outage begins with that probe. At start the
first probe round decides: a hub that starts offline begins an outage then, or goes on with the
one it was recording when it stopped (restarted during it: ``restarts`` counts it); a hub that
starts online ends the one it was recording (the end is when it saw the cloud again).

A flapping link is one outage (``flapping``): an ended outage stays open for ``flap_window``
seconds (``--outage-flap-window-seconds``, ``records.FLAP_WINDOW``) while its Event is not
posted, and a drop within it reopens it (``records.Outage.reopen``: ``flaps`` counted, its
length running on from its first beginning, the brief up-time counted in it) instead of
beginning a new one; that works across a restart within the boot (the ended record is picked
up as ``last``; reopened, it counts the restart). Only once the link has stayed up for the
window is the outage final: ``due`` offers its Event to the poster, the histogram observes it,
and ``last_outage`` names it to the Autonomy condition, which meanwhile keeps naming the one it
named before (so a flapping link rewrites the condition once, not at every flap). While a
reopened outage goes on, ``last`` is None and ``/v1/status`` shows the one before it as the last.

Fed by (all on the loop, none blocks, none raises):

- ``cloud(up)``: health's transitions;
- ``failure(server, cause, reason)``: every failed probe (the cause of the one that begins an
  outage is its ``cause``);
- ``begin_request()`` / ``answered(...)``: the router, around every request. A request is
  counted in the outage it began in, even if it ends after the heal (an offline watch ends when
  the cloud returns): the Event waits for those (``settled``, at most ``SETTLE`` seconds);
- ``token(minted)``: the offline token issuer (``authn.offlinetokens``).

Saved (``history``) at once when an outage begins or ends or a restarted hub picks it up, at
shutdown (``close``), and otherwise only when the record changed and at most every
``save_interval`` seconds (``--outage-save-interval-seconds``, ``SAVE_INTERVAL``): flash wears
with every write, and a busy outage changes its counts all the time. A kill -9 (or a power cut)
loses at most that much of the counts, never the outage. ``node_yurthub_outage_seconds``
observes each outage once final; ``node_yurthub_outage_flaps_total`` counts the reopens.

Clocks (``records.Instant``, from ``clock``: ``SystemClock`` on a hub): an outage's length is
monotonic (``CLOCK_BOOTTIME`` within one boot id), its start and end wall-clock readings are
for display; a restarted hub picks up the ongoing outage by its stored state (the newest row
not ended), never by comparing times; a new outage's id is random (``new_id``).
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import secrets
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from yurthub import metrics
from yurthub.authn import offlinetokens
from yurthub.autonomy import conditions
from yurthub.outages import causes, flapping, history, records

log = logging.getLogger(__name__)

SAVE_INTERVAL = 30.0
"""Seconds between two saves of a changing record at most (the default of
``--outage-save-interval-seconds``)."""
SETTLE = 10.0
"""Seconds the Event waits, after the heal, for requests begun during the outage to end."""
BOOT_ID = pathlib.Path("/proc/sys/kernel/random/boot_id")


def boot_id(path: pathlib.Path = BOOT_ID) -> str:
    """This boot's id (Linux); elsewhere a random one for this process (so a restart counts as
    a reboot: its gap is not measured)."""
    try:
        found = path.read_text().strip()
    except OSError:
        found = ""
    return found[:64] or f"process-{secrets.token_hex(8)}"


class SystemClock:
    """The hub's clocks: wall (display), and ``CLOCK_BOOTTIME`` under this boot's id."""

    def __init__(self, boot: str | None = None) -> None:
        self.boot = boot_id() if boot is None else boot

    def __call__(self) -> records.Instant:
        return records.Instant(time.time(), self.boot, time.clock_gettime(time.CLOCK_BOOTTIME))


def new_id() -> str:
    """An outage's id: 64 random bits in hex (a DNS label, so part of the Event's name)."""
    return secrets.token_hex(8)


class Recorder:
    def __init__(
        self,
        store: history.History | None,
        collectors: metrics.Metrics,
        *,
        clock: Callable[[], records.Instant] | None = None,
        make_id: Callable[[], str] = new_id,
        save_interval: float = SAVE_INTERVAL,
        flap_window: float = records.FLAP_WINDOW,
    ) -> None:
        """``store``: the history on disk (None: ``open`` makes one in memory); ``clock``:
        ``SystemClock()`` unless given; ``save_interval``: seconds between two saves of a
        changing record at most; ``flap_window``: seconds the link must stay up before an
        ended outage is final (``flapping``; 0: every drop a new outage)."""
        self._given = store
        self._store = store
        self._metrics = collectors
        self._clock: Callable[[], records.Instant] = clock if clock is not None else SystemClock()
        self._make_id = make_id
        self.save_interval = save_interval
        self.flap_window = flap_window
        self.current: records.Outage | None = None
        self.last: records.Outage | None = None
        """The last ended outage (its Event may still be pending; None while it goes on
        again after a flap: it is ``current`` then)."""
        self._unobserved: records.Outage | None = None
        """The last ended outage, not final yet: the histogram observes it once it is."""
        self._shown: conditions.LastOutage | None = None
        """What ``last_outage`` names: the last final outage's words."""
        self._picked_up = ""
        """The id of ``last`` when it was read from the history at ``open``: reopened, it
        counts a restart."""
        self._latest: tuple[str, str, str] | None = None
        """(server, cause, reason) of the last failed probe."""
        self._down = False
        """What health said last: no apiserver usable."""
        self._dirty: dict[str, records.Outage] = {}
        self._save_now = asyncio.Event()
        self.ended = asyncio.Event()
        """Set when an outage ends (the Event poster waits on it; it clears it)."""
        self.settled = asyncio.Event()
        """Set while no request begun during the last outage is still in flight."""
        self.settled.set()
        self.journal_dropped: Callable[[], int] = lambda: 0
        """Offline Events dropped over the journal's bounds and not told yet (the cache's)."""

    @property
    def history(self) -> history.History:
        assert self._store is not None, "Recorder.open first"
        return self._store

    async def open(self) -> None:
        """Open the history (in memory unless given one) and pick up, by its stored state, the
        outage that was going on when the hub stopped (the newest record not ended, unless an
        ended one was inserted after it), and the last ended one."""
        if self._store is None:
            self._store = await history.open_history(None)
        try:
            ongoing = await self._store.ongoing()
            self.last = await self._store.last_ended()
        except sqlite3.Error as e:
            # Damaged since it opened: the hub starts all the same (its saves log their errors).
            log.error("the outage history cannot be read: no outage is picked up: %s", e)
            ongoing, self.last = [], None
        now = self._clock()
        if self.last is not None:
            self._picked_up = self.last.id
            self._shown = self._words(self.last, now)
            if flapping.left(self.last, now, self.flap_window) > 0:
                self._unobserved = self.last  # stopped before it was final: observed once it is
        newest_end = self.last.seq if self.last is not None else 0
        for outage in ongoing:
            if self.current is None and outage.seq > newest_end:
                outage.resume(now)
                self.current = outage
                self._save_now.set()  # the restart (and a reboot's new segment) at once
                log.info(
                    "an outage began %s and the hub restarted during it: recording goes on",
                    records.timestamp(outage.began),
                )
            else:  # left behind a newer one (its end was never saved): ended as far as it got
                outage.abandon()
            self._dirty[outage.id] = outage

    # --- fed by health, the router and the token issuer ---------------------------------

    def failure(self, server: str, cause: causes.Cause, reason: str) -> None:
        self._latest = (server, cause.value, reason)
        if self.current is not None:
            self.current.failed(server, cause.value, reason)
            self._dirty[self.current.id] = self.current
        elif self._down and cause is not causes.Cause.NO_IDENTITY:
            # Down since the hub had no identity yet: this probe is the first that met the link.
            self._begin()

    def cloud(self, up: bool) -> None:
        self._down = not up
        now = self._clock()
        self._settle(now)
        if up:
            outage, self.current = self.current, None
            if outage is None:
                return
            outage.end(now, self.journal_dropped())
            self.last = self._unobserved = outage
            log.info(
                "the cloud is back after %s (outage began %s: %s)",
                records.length(outage, now),
                records.timestamp(outage.began),
                records.cause_words(outage),
            )
            if outage.in_flight > 0:
                self.settled.clear()
            else:
                self.settled.set()
            self._dirty[outage.id] = outage
            self._save_now.set()
            self.ended.set()
            return
        if self.current is not None:
            return  # a restarted hub going on with the outage it recorded
        if self._latest is not None and self._latest[1] == causes.Cause.NO_IDENTITY.value:
            # A hub still joining has not reached the cloud yet: no outage (nor its Event, nor
            # the condition's words) until a probe fails for a reason of the link.
            return
        self._begin()

    def _begin(self) -> None:
        now = self._clock()
        last = self.last
        if flapping.on_drop(last, now, self.flap_window) is flapping.Drop.REOPEN:
            assert last is not None
            self._reopen(last, now)
            return
        self._settle(now)
        server, cause, reason = self._latest or ("", causes.Cause.OTHER.value, "")
        outage = records.begin(
            now,
            self._make_id(),
            cause,
            f"{server}: {reason}" if server else reason,
            self.journal_dropped(),
        )
        if self._latest is not None:
            outage.failed(*self._latest)
        self.current = outage
        log.warning(
            "outage: no apiserver is usable (%s); the hub answers locally and records what it "
            "does (edgehub status --history)",
            outage.reason or causes.words(cause),
        )
        self._dirty[outage.id] = outage
        self._save_now.set()

    def _reopen(self, outage: records.Outage, now: records.Instant) -> None:
        """The link dropped again within the flap window: the last outage goes on."""
        up = now.mono - outage.until if outage.until is not None else 0.0
        outage.reopen(now)
        if outage.id == self._picked_up:  # the hub stopped and started since it ended
            outage.restarts += 1
            self._picked_up = ""
        if self._latest is not None:
            outage.failed(*self._latest)
        self.current, self.last = outage, None
        self._metrics.outage_flaps.inc()
        log.info(
            "the link dropped again %s after the cloud came back: the outage that began %s "
            "goes on (the link came back %s for less than %s)",
            records.lasted(up),
            records.timestamp(outage.began),
            "once" if outage.flaps == 1 else f"{outage.flaps} times",
            records.lasted(self.flap_window),
        )
        self._dirty[outage.id] = outage
        self._save_now.set()

    def _settle(self, now: records.Instant) -> None:
        """Observe the last ended outage in the histogram once it is final (the link stayed up
        for the flap window, or a new outage begins): once per outage, however it flapped."""
        outage = self._unobserved
        if outage is not None and flapping.left(outage, now, self.flap_window) <= 0:
            self._unobserved = None  # ended (one going on is never final)
            self._metrics.outage_seconds.observe(outage.seconds(now))

    def begin_request(self) -> records.Outage | None:
        """The outage a request begins in (None: online). Hot path."""
        outage = self.current
        if outage is not None:
            outage.in_flight += 1
        return outage

    def answered(self, outage: records.Outage, key: records.Key, source: str, code: int) -> None:
        """A request begun in ``outage`` was answered (``begin_request``'s outage)."""
        outage.in_flight -= 1
        outage.answered(key, source, code)
        if outage is self.current or outage is self.last:
            self._dirty[outage.id] = outage
        if outage is self.last and outage.in_flight <= 0:
            self.settled.set()

    def token(self, minted: offlinetokens.Minted) -> None:
        outage = self.current
        if outage is None:
            return
        outage.issued(
            records.Token(
                minted.namespace,
                minted.service_account,
                minted.pod,
                tuple(minted.audiences),
                minted.issued,
                minted.expires,
            )
        )
        self._dirty[outage.id] = outage

    # --- read ---------------------------------------------------------------------------------

    def ongoing_seconds(self) -> float:
        """How long the current outage has lasted (0: none). Read from the scrape thread."""
        outage = self.current
        return outage.seconds(self._clock()) if outage is not None else 0.0

    def last_outage(self) -> conditions.LastOutage | None:
        """The last final outage for the node's ``Autonomy`` condition. While the last one
        may still flap (within its flap window, or going on again) the condition keeps
        naming the one it named before (none, the first time), so it is rewritten once per
        outage, not once per flap; a hub restarted within the window names the last one as
        it ended first, then as it ended for good."""
        outage = self.last
        now = self._clock()
        if outage is not None and flapping.left(outage, now, self.flap_window) <= 0:
            self._shown = self._words(outage, now)
        return self._shown

    @staticmethod
    def _words(outage: records.Outage, now: records.Instant) -> conditions.LastOutage | None:
        if outage.ended is None:
            return None
        return conditions.LastOutage(
            records.timestamp(outage.began),
            records.length(outage, now),
            causes.words(outage.cause),
        )

    async def outages(self) -> list[records.Outage]:
        """The history, newest (last inserted) first, with what is in memory (fresher than its
        last save; one not saved yet is newer than every stored one)."""
        stored = await self.history.newest()
        fresh = {o.id: o for o in (self.current, self.last) if o is not None}
        out = [fresh.pop(o.id, o) for o in stored]
        return [*fresh.values(), *out][: self.history.limit]

    async def document(self) -> dict[str, Any]:
        """``GET /v1/outages``."""
        now = self._clock()
        found = await self.outages()
        return {
            "ongoing": records.view(self.current, now) if self.current is not None else None,
            "outages": [records.view(o, now) for o in found],
            "limit": self.history.limit,
            "bounds": {
                "keys": records.MAX_KEYS,
                "tokens": records.MAX_TOKENS,
                "saveIntervalSeconds": self.save_interval,
                "flapWindowSeconds": self.flap_window,
            },
        }

    async def status(self) -> dict[str, Any]:
        """The ``outages`` section of ``/v1/status``: the ongoing one and the last ended (the
        one before it, when the ongoing one went on again after a flap)."""
        now = self._clock()
        last = self.last
        if last is None and self.current is not None and self.current.flaps:
            found = await self.outages()
            last = next((o for o in found if o.ended is not None), None)

        def brief(outage: records.Outage | None) -> dict[str, Any] | None:
            if outage is None:
                return None
            return {
                "began": records.timestamp(outage.began),
                "ended": records.timestamp(outage.ended) if outage.ended is not None else None,
                "seconds": round(outage.seconds(now)),
                "atLeast": outage.at_least,
                "cause": outage.cause,
                "causeWords": records.cause_words(outage),
                "answered": outage.answered_total,
                "refused": outage.refused_total,
                "flaps": outage.flaps,
                "event": outage.event or ("pending" if outage.ended is not None else ""),
            }

        return {"ongoing": brief(self.current), "last": brief(last)}

    # --- Event state --------------------------------------------------------------------------

    async def unposted(self) -> list[records.Outage]:
        """Ended outages whose Event is not in the cloud yet, oldest first (in-memory ones as
        they are now; not the one going on again after a flap, whose row may still say it
        ended)."""
        stored = await self.history.unposted()
        last, current = self.last, self.current
        out = [
            last if last is not None and o.id == last.id else o
            for o in stored
            if current is None or o.id != current.id
        ]
        if (
            last is not None
            and last.ended is not None
            and not last.event
            and all(o.id != last.id for o in out)
        ):
            out.append(last)  # ended a moment ago, not saved yet
        return out

    async def due(self) -> tuple[list[records.Outage], float | None]:
        """The unposted outages whose Event may be posted now (final: the link stayed up for
        the flap window since they ended), oldest first, and the seconds until the next of the
        others is final (None: none waits)."""
        pending = await self.unposted()
        now = self._clock()
        self._settle(now)
        ready: list[records.Outage] = []
        wait: float | None = None
        for outage in pending:
            left = flapping.left(outage, now, self.flap_window)
            if left > 0:
                wait = left if wait is None else min(wait, left)
            else:
                ready.append(outage)
        return ready, wait

    async def event_done(self, outage: records.Outage, state: str) -> None:
        outage.event = state
        if self.last is not None and self.last.id == outage.id:
            self.last.event = state
        await self.history.save(outage)  # the row exists before its Event state is set
        await self.history.set_event(outage.id, state)

    # --- saving -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Save what changed: at once for a beginning or an end, else at most every
        ``save_interval`` seconds (nothing is written while nothing changed)."""
        while True:
            try:
                async with asyncio.timeout(self.save_interval):
                    await self._save_now.wait()
            except TimeoutError:
                pass
            self._save_now.clear()
            await self.save()

    async def save(self) -> None:
        dirty, self._dirty = self._dirty, {}
        now = self._clock()
        # An ended outage is older than the ongoing one: inserted first, it keeps its place.
        for outage in sorted(dirty.values(), key=lambda o: o.ended is None):
            outage.touch(now)
            try:
                await self.history.save(outage)
            except asyncio.CancelledError:
                self._dirty.setdefault(outage.id, outage)
                raise
            except Exception as e:
                # A full disk: the record stays in memory and is saved with the next change.
                log.warning("the outage record could not be saved: %s", e)
                self._dirty.setdefault(outage.id, outage)

    async def close(self) -> None:
        """Save what is left; close the history if it was made here (in memory)."""
        if self._store is None:
            return
        await self.save()
        if self._given is None:
            await self._store.close()
