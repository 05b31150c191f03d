"""Following one collection through the hub's own proxy: list, then watch, forever.

The hub's informers (``yurt-hub-cfg`` for the cache agents and the filters, the filters'
inputs: services, the node, NodePools, NodeBuckets) all run this loop. They talk to the hub's
OWN proxy with a ``yurthub/...`` User-Agent, so their answers are cached under component
``yurthub`` and are there again after a restart while the cloud is away (YurtHub does the same,
reference §1.1), and they are never filtered. They reach it by a ``ProxyRoute``: the hub's own
socket (``server.Hub.own_route``), which only this process can use, so they pass the readiness
gate and the in-flight limits and hold none of the proxy port's connections. The User-Agent
says whose cache entries they are, never that they are the hub's: any process can send it.

A ``Target`` receives the collection: a list as ``begin`` / ``add`` per item / ``commit`` (so a
list of 10,000 services is never held as Python objects: items are read one at a time with
``jsonlists.ListReader`` and the target keeps what it needs), watch events with ``apply``, and
``mark_absent`` when the collection cannot be read at all (404: the CRD is not installed, or
offline the cache does not hold it; 403: RBAC does not allow it): the target then counts as
synced and empty, and the list is retried with the usual backoff (a CRD installed later, or the
cloud coming back, is picked up within ``max_backoff``).

Dangers: the loop runs for the hub's lifetime and must never spin or die: every failure (a
transport error, a 5xx, a body of the wrong shape, an event over the bound) waits with a capped
backoff and lists again; a 410 Gone lists again at once; only cancellation ends it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import aiohttp
import orjson

from yurthub import jsonlists
from yurthub.cache import framing

logger = logging.getLogger(__name__)

USER_AGENT = "yurthub/edgehub"
"""The hub's own component is ``yurthub``: a default cache agent, never filtered."""
SHORT_WATCH = 1.0
"""Seconds: a watch that ends sooner without an event counts as a failure (backoff, relist)."""
MAX_ITEM_BYTES = 16 << 20
"""Largest single object (list item or watch event) read; objects in etcd are at most ~1.5 MB."""
READ_SIZE = 1 << 16


def _always() -> bool:
    return True


@dataclasses.dataclass(frozen=True, slots=True)
class ProxyRoute:
    """How one of the hub's own clients reaches its proxy: requests go to ``url`` + path over
    ``socket_path`` (the hub's own Unix socket; its ``url`` only names the Host), or, without
    one, over TCP to ``url`` (a test pointing a follower at an apiserver: ordinary requests).

    ``cloud_healthy``: whether the proxy has a healthy apiserver behind it (the hub's health
    checker). While it has none, what its clients meet (the empty cache's 404, a held watch) is
    a consequence of the one cause the health checker has logged: they say it at debug."""

    url: str
    socket_path: str | None = None
    cloud_healthy: Callable[[], bool] = _always

    def session(self, **kwargs: Any) -> aiohttp.ClientSession:
        """A client session that takes this route (the caller closes it)."""
        if self.socket_path is None:
            return aiohttp.ClientSession(**kwargs)
        return aiohttp.ClientSession(connector=aiohttp.UnixConnector(self.socket_path), **kwargs)


class Target(Protocol):
    def begin(self) -> None:
        """A list starts: collect what follows, apart from the current state."""

    def add(self, obj: Mapping[str, Any]) -> None:
        """One item of the list (raise ``ValueError`` for one of the wrong shape)."""

    def commit(self) -> None:
        """The list is complete: it replaces the current state."""

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED)."""

    def mark_absent(self) -> None:
        """The collection cannot be read (404, 403): empty, but known."""


class _Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


async def _status_message(resp: aiohttp.ClientResponse) -> str:
    """``: <the Status message>`` of a refusal (through the hub offline it says the cache does
    not hold the collection, which is not the same as the CRD being absent), else ""."""
    try:
        body = await resp.content.read(READ_SIZE)
        status = orjson.loads(body)
    except (aiohttp.ClientError, orjson.JSONDecodeError, ValueError):
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    return f": {message[:300]}" if isinstance(message, str) and message else ""


class _Absent(Exception):
    """404/403 on the list."""


async def follow(
    target: Target,
    session: aiohttp.ClientSession,
    proxy_url: str,
    path: str,
    *,
    what: str,
    label_selector: str = "",
    field_selector: str = "",
    max_backoff: float = 30.0,
    max_item: int = MAX_ITEM_BYTES,
    cloud_healthy: Callable[[], bool] = _always,
) -> None:
    """List+watch ``path`` (e.g. ``/api/v1/services``) through the hub until cancelled.

    ``cloud_healthy`` (``ProxyRoute.cloud_healthy``): while False, a 404/403 is the offline
    cache's (the cloud's absence, already logged by the health checker) and logged at debug;
    the first one met with the cloud there (a CRD not installed, RBAC) is logged at INFO."""
    url = f"{proxy_url.rstrip('/')}{path}"
    params = {}
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    first_backoff = min(0.5, max_backoff)
    backoff = first_backoff
    absent_logged = False
    while True:
        try:
            rv = await _list(target, session, url, params, headers, max_item)
            backoff = first_backoff
            absent_logged = False
            while True:
                rv = await _watch(target, session, url, params, headers, rv, max_item)
        except asyncio.CancelledError:
            raise
        except _Gone:
            continue
        except _Absent as e:
            # Not installed, not allowed, or (through the hub, offline) not cached: known to
            # be empty for now, and asked again with the usual backoff, so a CRD installed
            # later or the cloud coming back is noticed within max_backoff.
            target.mark_absent()
            said = absent_logged or not cloud_healthy()
            log = logger.debug if said else logger.info
            log("%s cannot be read (%s); treated as empty until it can", what, e)
            absent_logged = absent_logged or not said
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            logger.debug("following %s: %s", what, e)
        await asyncio.sleep(backoff * (1 + random.random() / 2))
        backoff = min(backoff * 2, max_backoff)


async def _list(
    target: Target,
    session: aiohttp.ClientSession,
    url: str,
    params: Mapping[str, str],
    headers: Mapping[str, str],
    max_item: int,
) -> str:
    async with session.get(url, params=params, headers=headers) as resp:
        if resp.status in (403, 404):
            raise _Absent(f"HTTP {resp.status}{await _status_message(resp)}")
        if resp.status != 200:
            raise ValueError(f"list: HTTP {resp.status}")
        reader = jsonlists.ListReader(max_item)
        target.begin()
        async for chunk in resp.content.iter_chunked(READ_SIZE):
            _take(target, reader.feed(chunk))
        _take(target, reader.finish())
    if reader.broken:
        raise ValueError(f"the list body: {reader.broken}")
    items = reader.head.get("items", [])
    if items is not None and items != []:
        raise ValueError("the list's items are not a list")
    target.commit()
    meta = reader.head.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""


def _take(target: Target, pieces: list[jsonlists.Piece]) -> None:
    for piece in pieces:
        if isinstance(piece, jsonlists.Item):
            if not isinstance(piece.value, dict):
                raise ValueError("a list item is not a JSON object")
            target.add(piece.value)


async def _watch(
    target: Target,
    session: aiohttp.ClientSession,
    url: str,
    params: Mapping[str, str],
    headers: Mapping[str, str],
    rv: str,
    max_item: int,
) -> str:
    query = {
        **params,
        "watch": "true",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": str(random.randint(300, 600)),
    }
    if rv:
        query["resourceVersion"] = rv
    started = time.monotonic()
    events = 0
    splitter = framing.LineSplitter(max_item)
    async with session.get(url, params=query, headers=headers, timeout=None) as resp:
        if resp.status == 410:
            raise _Gone
        if resp.status != 200:
            raise ValueError(f"watch: HTTP {resp.status}")
        async for chunk in resp.content.iter_chunked(READ_SIZE):
            try:
                lines = splitter.feed(chunk)
            except framing.FrameTooLarge as e:
                raise ValueError(str(e)) from e
            for line in lines:
                events += 1
                rv = _event(target, line, rv)
        rest = splitter.rest()
        if rest:
            events += 1
            rv = _event(target, rest, rv)
    if not events and time.monotonic() - started < SHORT_WATCH:
        # client-go's "very short watch": a server that ends every watch at once is asked again
        # after the backoff, not in a tight loop.
        raise ValueError("the watch ended at once without an event")
    return rv


def _event(target: Target, line: bytes, rv: str) -> str:
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"a watch event is not JSON: {e}") from e
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise ValueError("a watch event is not an object with an object")
    obj = event["object"]
    kind = event.get("type")
    if kind == "ERROR":
        if obj.get("code") == 410:
            raise _Gone
        raise ValueError(f"watch error: {obj.get('message', '')}")
    meta = obj.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise ValueError("a watch event's object has metadata that is not an object")
    rv = str((meta or {}).get("resourceVersion") or rv)
    if kind in ("ADDED", "MODIFIED", "DELETED"):
        target.apply(kind, obj)
    return rv
