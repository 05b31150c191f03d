"""Offline Event creates and patches go to the journal (``cache.eventjournal``) as well as
being answered, so the cloud gets them after the heal (``cache.eventposting``).

Which: core/v1 ``events`` and events.k8s.io/v1 ``events``, created (POST to the collection) or
patched by name (strategic merge or merge patch: what client-go's recorders send for a repeated
Event), from a caller with the node's identity (no Bearer token: kubelet, kube-proxy, the hub's
own components). A pod's ServiceAccount token proves another identity, and the hub posts with
the node's: its Events are answered as before (an echo) but not journaled.

The answers stay what kubelet needs not to block: a create is a 201 echo of its body; a patch
of a journaled Event is a 200 with the journaled Event patched (count, lastTimestamp, ...); a
patch of an Event the journal does not hold but the cache does (created online before the cut)
journals the cached copy patched, and answers it; one neither holds is answered as any offline
patch (a 404: client-go then creates the Event with its count, and that create is journaled).
Either way, posting it after the heal meets a 409 and patches the count onto the cloud's copy.
A journal that cannot be written (a full disk) costs the Event, logged once, never the answer.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from yurthub import requestinfo
from yurthub.cache import eventfolding, eventjournal, framing, patching, store
from yurthub.proxy import headers, localreplies

log = logging.getLogger(__name__)

PATCH_TYPES = (patching.MERGE_PATCH, "application/strategic-merge-patch+json")


def api_of(info: requestinfo.RequestInfo) -> str | None:
    """``eventfolding.CORE`` or ``EVENTS`` for an Event request, else None."""
    if info.resource != "events" or info.subresource or info.version != "v1":
        return None
    if info.group == "":
        return eventfolding.CORE
    if info.group == "events.k8s.io":
        return eventfolding.EVENTS
    return None


class Events:
    """Journals what the node records offline (``journal`` None: nothing is journaled)."""

    def __init__(self, journal: eventjournal.Journal | None) -> None:
        self.journal = journal
        self._failing = False

    def journals(self, request: web.Request, info: requestinfo.RequestInfo) -> str | None:
        """The Event API of a request to journal, or None."""
        if self.journal is None or not info.namespace:
            return None
        if headers.bearer_token(request.headers.get("Authorization", "")):
            return None
        return api_of(info)

    async def created(self, api: str, info: requestinfo.RequestInfo, event: Any) -> None:
        assert self.journal is not None
        if not isinstance(event, dict):
            return
        try:
            await self.journal.create(api, info.namespace, event)
        except (sqlite3.Error, OSError) as e:
            self._lost(info, e)
        else:
            self._failing = False

    async def patch(
        self,
        request: web.Request,
        info: requestinfo.RequestInfo,
        api: str,
        cached: Callable[[], Awaitable[bytes | None]],
    ) -> tuple[web.Response | None, Any]:
        """(the answer, or None for the ordinary one; the patch read, for that one).
        ``cached``: the Event as the cache holds it (created online)."""
        assert self.journal is not None
        if info.body_content_type not in PATCH_TYPES or not info.name:
            return None, None
        patch = await localreplies.read_json(request)
        try:
            body = await self.journal.patch(api, info.namespace, info.name, patch)
        except patching.PatchError as e:
            log.info("refused an offline patch of %s: %s", info.describe(), e)
            return localreplies.status(400, str(e)), patch
        except (sqlite3.Error, OSError) as e:
            self._lost(info, e)
            return None, patch
        if body is None:
            body = await self._over_cached(api, info, patch, cached)
        if body is None:
            return None, patch
        return localreplies.json(200, orjson.dumps(body)), patch

    async def _over_cached(
        self,
        api: str,
        info: requestinfo.RequestInfo,
        patch: Any,
        cached: Callable[[], Awaitable[bytes | None]],
    ) -> dict[str, Any] | None:
        """An Event created online and counted offline: the cached copy patched is journaled
        (its create after the heal meets a 409, and the count is patched onto the cloud's)."""
        try:
            raw = await cached()
            if raw is None:
                return None
            body = eventfolding.patched(framing.parse_object(raw), patch)
        except (store.CorruptRead, framing.BadBody, patching.PatchError):
            return None
        await self.created(api, info, body)
        return body

    def _lost(self, info: requestinfo.RequestInfo, error: BaseException) -> None:
        log.log(
            logging.DEBUG if self._failing else logging.ERROR,
            "an offline Event (%s) could not be journaled, the cloud will not get it: %s",
            info.describe(),
            error,
        )
        self._failing = True
