"""Posts the offline Event journal to the cloud once it is back.

A hub task (``server.Hub`` runs it in its TaskGroup as ``offline-events``): whenever a server is
healthy and the journal holds entries (or drops not yet told), it posts them oldest first with
the hub's own identity (a node identity may create and patch Events in any namespace: the Node
authorizer's node rules), each as recorded (``eventfolding.for_create``: the original
``firstTimestamp``, ``lastTimestamp``, ``count``, ``eventTime``), then the one summary Event
saying how many the journal dropped.

Paced: a fleet healing at once must not flood the apiserver. Each drain starts after a random
delay within ``spread`` seconds, and posts one Event per ``1/qps`` seconds on average (each gap
jittered between half and one and a half of it).

Per answer (``eventfolding.outcome``): 2xx removes the entry; a 409 to the create means the
cloud has that Event (created online before the cut) and its count and times are patched onto
it; a refusal (422 invalid, 403, 404 namespace gone, ...) is logged once per distinct cause and
the entry dropped; a transport error, 429, 401 or 5xx keeps the entry and backs off (capped).
The drain stops as soon as no server is healthy (the link dropped again): what is left stays
journaled for the next heal.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import orjson

from yurthub.cache import eventfolding, eventjournal
from yurthub.proxy import upstream

log = logging.getLogger(__name__)

USER_AGENT = "edgehub-offline-events"
PATCH_TYPE = "application/strategic-merge-patch+json"
BATCH = 50
BACKOFF_CAP = 30.0
TOLD_LIMIT = 64
_MAX_ANSWER = 1 << 20

HealthyServer = Callable[[], str | None]
"""A server the health checker thinks healthy now, or None (offline)."""


def collection(api: str, namespace: str) -> str:
    if api == eventfolding.EVENTS:
        return f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
    return f"/api/v1/namespaces/{namespace}/events"


class Poster:
    def __init__(
        self,
        journal: eventjournal.Journal,
        client: upstream.Upstream,
        healthy_server: HealthyServer,
        *,
        node_name: str,
        qps: float,
        spread: float,
        timeout: float,
        poll: float,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``poll``: how often to look at health while entries wait (the heartbeat interval)."""
        self._journal = journal
        self._client = client
        self._healthy_server = healthy_server
        self._node = node_name
        self._gap = 1.0 / qps if qps > 0 else 0.0
        self._spread = spread
        self._timeout = timeout
        self._poll = poll
        self._rand = rand
        self._clock = clock
        self._told: set[str] = set()
        self.posted = 0
        """Entries the cloud took since start (tests, status)."""
        self.refused = 0

    async def run(self) -> None:
        """Until cancelled: drain whenever there is something to post and a server to take it."""
        backoff = 1.0
        while True:
            self._journal.appended.clear()
            work = self._journal.pending > 0 or self._journal.dropped > 0
            if work and self._healthy_server() is not None:
                try:
                    done = await self._drain()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("posting the offline Events failed")
                    done = False
                if done:
                    backoff = 1.0
                    continue
                await asyncio.sleep(backoff * (0.5 + self._rand()))
                backoff = min(backoff * 2, BACKOFF_CAP)
                continue
            try:
                async with asyncio.timeout(self._poll):
                    await self._journal.appended.wait()
            except TimeoutError:
                pass

    async def _drain(self) -> bool:
        """Post what is journaled; True when done (or the link dropped), False to back off."""
        if self._journal.pending > 0 and self._spread > 0:
            await asyncio.sleep(self._spread * self._rand())
        posted = refused = 0
        try:
            while True:
                batch = await self._journal.head(BATCH)
                if not batch:
                    break
                for entry in batch:
                    server = self._healthy_server()
                    if server is None:
                        return True  # offline again: the rest waits for the next heal
                    result = await self._post(server, entry)
                    if result is eventfolding.Outcome.RETRY:
                        return False
                    if result is eventfolding.Outcome.POSTED:
                        posted += 1
                    else:
                        refused += 1
                    if self._gap:
                        await asyncio.sleep(self._gap * (0.5 + self._rand()))
            server = self._healthy_server()
            if server is None:
                return True
            return await self._tell_drops(server)
        finally:
            self.posted += posted
            self.refused += refused
            if posted or refused:
                log.info(
                    "posted %d Events recorded offline (%d refused by the cloud, %d left)",
                    posted,
                    refused,
                    self._journal.pending,
                )

    async def _post(self, server: str, entry: eventjournal.Entry) -> eventfolding.Outcome:
        path = collection(entry.api, entry.namespace)
        status, answer = await self._call(
            server, "POST", path, eventfolding.for_create(entry.body), "application/json"
        )
        result = eventfolding.outcome(status, create=True)
        if result is eventfolding.Outcome.EXISTS:
            name = eventfolding.name(entry.body)
            patch = eventfolding.for_patch(entry.api, entry.body)
            status, answer = await self._call(server, "PATCH", f"{path}/{name}", patch, PATCH_TYPE)
            result = eventfolding.outcome(status, create=False)
        if result is eventfolding.Outcome.RETRY:
            if status:  # an answer (throttled, failing, not authorized yet): say so once
                self._tell(f"offline Events for now: HTTP {status} {_reason(answer)}")
            else:
                log.debug("posting an offline Event to %s failed; later", server)
            return result
        if result is eventfolding.Outcome.REFUSED:
            self._refused(entry, status, answer)
            await self._journal.remove(entry, unless_changed=False)
            return result
        # Changed by a fold meanwhile (offline again): kept, and the next round's 409 patches.
        await self._journal.remove(entry)
        return eventfolding.Outcome.POSTED

    async def _tell_drops(self, server: str) -> bool:
        drops = await self._journal.drops()
        if drops is None:
            return True
        event = eventfolding.summary(
            self._node,
            drops.count,
            drops.first,
            drops.last,
            self._journal.bounds,
            unique=f"{int(self._clock() * 1e9):x}",
        )
        status, answer = await self._call(
            server, "POST", collection(eventfolding.CORE, "default"), event, "application/json"
        )
        result = eventfolding.outcome(status, create=True)
        if result is eventfolding.Outcome.RETRY:
            return False
        if result is eventfolding.Outcome.POSTED:
            log.warning(
                "%d Events recorded offline were dropped (over the journal's bounds); "
                "a %s Event on node %s says so",
                drops.count,
                eventfolding.SUMMARY_REASON,
                self._node,
            )
        else:
            self._tell(f"the summary of dropped offline Events: HTTP {status} {_reason(answer)}")
        await self._journal.told(drops.count)
        return True

    def _refused(self, entry: eventjournal.Entry, status: int, answer: bytes) -> None:
        body = entry.body
        what = body.get("reason") or "?"
        self._tell(
            f"an offline Event ({what}) in {entry.namespace}: HTTP {status} {_reason(answer)}"
        )

    def _tell(self, text: str) -> None:
        """One warning per distinct refusal (bounded), then debug."""
        told = text in self._told or len(self._told) >= TOLD_LIMIT
        if not told:
            self._told.add(text)
        log.log(logging.DEBUG if told else logging.WARNING, "the cloud refused %s", text)

    async def _call(
        self, server: str, method: str, path: str, body: Any, content_type: str
    ) -> tuple[int, bytes]:
        headers = {
            "Accept": "application/json",
            "Content-Type": content_type,
            "User-Agent": USER_AGENT,
        }
        status, answer = await self._client.call_as_hub(
            server,
            method,
            path,
            data=orjson.dumps(body),
            headers=headers,
            within=self._timeout,
            limit=_MAX_ANSWER,
        )
        return status, answer or b""  # too large: the status alone


def _reason(answer: bytes) -> str:
    try:
        status = orjson.loads(answer)
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(status, dict):
        return ""
    message = str(status.get("message") or status.get("reason") or "")
    return message[:200]
