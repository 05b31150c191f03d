"""Posts one Event on the Node for each ended outage, once the cloud takes it.

A hub task (``server.Hub`` runs it in its TaskGroup as ``outage-events``): whenever an ended
outage's Event is not in the cloud yet (``recording.Recorder.unposted``: in memory or in the
history, so one that ended before a restart is posted too) and a server is healthy, it POSTs
``records.event`` to ``/api/v1/namespaces/default/events`` with the hub's own identity (the
same door as the offline Events, ``upstream.Upstream.call_as_hub``).

- At most once per outage: the Event's name comes from the outage (``records.event_name``), so
  a post retried after a lost answer, or by a hub restarted before it saved "posted", meets a
  409, which means the cloud has it.
- Only once the outage is final (``Recorder.due``, ``flapping``): the link has stayed up for
  the flap window (``--outage-flap-window-seconds``, 30 s) since it ended, so a link that
  drops again meanwhile goes on with the same outage and its one Event. A hub stopped within
  the window finds the outage unposted in the history and posts it once the window has passed
  (measured on the monotonic clock of that boot; after a reboot, at once).
- Then it waits for the requests begun during the outage to end (an offline watch ends when
  the cloud returns; at most ``recording.SETTLE`` seconds), so the counts are whole, then a
  random delay within ``spread`` (``--offline-event-spread``): a fleet healing at once does
  not post at once.
- Per answer (``eventfolding.outcome``): 2xx or 409: posted; a refusal (403, 422, ...): logged
  once and not retried (the history says why); no answer, 429, 401 or 5xx: tried again with a
  capped back-off (1 s doubling to ``BACKOFF_CAP``, jittered) while a server is healthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable

import orjson

from yurthub.cache import eventfolding
from yurthub.outages import recording, records
from yurthub.proxy import seams, upstream

log = logging.getLogger(__name__)

USER_AGENT = "edgehub-outages"
PATH = "/api/v1/namespaces/default/events"
BACKOFF_CAP = 60.0
_MAX_ANSWER = 1 << 20


class Poster:
    def __init__(
        self,
        recorder: recording.Recorder,
        client: upstream.Upstream,
        healthy_server: seams.HealthyServer,
        *,
        node_name: str,
        spread: float,
        timeout: float,
        poll: float,
        rand: Callable[[], float] = random.random,
    ) -> None:
        """``poll``: how often to look at health while an Event waits (the heartbeat interval)."""
        self._recorder = recorder
        self._client = client
        self._healthy_server = healthy_server
        self._node = node_name
        self._spread = spread
        self._timeout = timeout
        self._poll = poll
        self._rand = rand
        self.posted = 0
        """Events the cloud took since start (tests)."""
        self.rounds = 0
        """Looks at what is due since start (tests: wait for a look, never a time)."""

    async def run(self) -> None:
        backoff = 1.0
        while True:
            self._recorder.ended.clear()
            pending, wait = await self._recorder.due()
            self.rounds += 1
            if pending and self._healthy_server() is not None:
                try:
                    done = await self._post_all(pending)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("posting the outage Event failed")
                    done = False
                if done:
                    backoff = 1.0
                    continue
                await asyncio.sleep(backoff * (0.5 + self._rand()))
                backoff = min(backoff * 2, BACKOFF_CAP)
                continue
            # The next look: when health may have changed, an outage ended, or the next one's
            # flap window closes (a little after, not to wake a moment early).
            look = self._poll if wait is None else min(self._poll, wait + 0.01)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(look):
                    await self._recorder.ended.wait()

    async def _post_all(self, pending: list[records.Outage]) -> bool:
        """True when every one is done (or the link dropped again), False to back off."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(recording.SETTLE):
                await self._recorder.settled.wait()
        if self._spread > 0:
            await asyncio.sleep(self._spread * self._rand())
        for outage in pending:
            server = self._healthy_server()
            if server is None:
                return True  # offline again: the next heal posts it
            if not await self._post(server, outage):
                return False
        return True

    async def _post(self, server: str, outage: records.Outage) -> bool:
        body = records.event(outage, self._node, self._recorder.flap_window)
        status, answer = await self._client.call_as_hub(
            server,
            "POST",
            PATH,
            data=orjson.dumps(body),
            headers={
                "Accept": "application/json",
                "Content-Type": "application/json",
                "User-Agent": USER_AGENT,
            },
            within=self._timeout,
            limit=_MAX_ANSWER,
        )
        result = eventfolding.outcome(status, create=True)
        if result is eventfolding.Outcome.RETRY:
            log.log(
                logging.INFO if status else logging.DEBUG,
                "the outage Event %s: HTTP %s, trying again later",
                body["metadata"]["name"],
                status or "no answer",
            )
            return False
        if result is eventfolding.Outcome.REFUSED:
            why = f"refused: HTTP {status} {_reason(answer)}".strip()
            log.warning("the cloud %s the outage Event %s", why, body["metadata"]["name"])
            await self._recorder.event_done(outage, why)
            return True
        await self._recorder.event_done(outage, records.POSTED)
        self.posted += 1
        log.info(
            "posted the outage Event %s on node %s: %s",
            body["metadata"]["name"],
            self._node,
            body["message"],
        )
        return True


def _reason(answer: bytes | None) -> str:
    try:
        status = orjson.loads(answer or b"")
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(status, dict):
        return ""
    return str(status.get("message") or status.get("reason") or "")[:200]
