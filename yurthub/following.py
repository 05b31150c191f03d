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

Resume, don't relist (``pacing``): the loop lists once, then watches from the resourceVersion it
holds (the list's, advanced by every event and BOOKMARK). A watch that ends, normally or not (the
link dropped, the hub went offline and its held watch ended at the heal, a 429, a 5xx, a body
cut short), is opened again from that version, after ``pacing``'s delay: an apiserver that still
has it sends only what changed. Only a 410 Gone (the version was compacted away, an apiserver
restarted) lists again, at a random moment within ``relist_spread`` (a fleet's hubs do not all
list in the same second; the target keeps what it holds meanwhile), and asks for a state not
older than the one held (``resourceVersionMatch=NotOlderThan``: the apiserver's watch cache
answers it, where a list without a version is a quorum read, from etcd on older apiservers);
if the apiserver does not have that version yet (504 ``ResourceVersionTooLarge``: its watch
cache lags the one that said 410, or etcd was restored and the versions went back) the loop
lists the current state at once, as client-go's reflector does. A 429 (or a 503 with
``Retry-After``) waits what ``Retry-After`` says, bounded. A list or an event whose body cannot
be read lists again after the backoff (resuming would meet the same bytes).

Dangers: the loop runs for the hub's lifetime and must never spin or die: every failure (a
transport error, a 5xx, a body of the wrong shape, an event over the bound) waits with a capped
backoff; only cancellation ends it. Nor may it wait forever: a watch has no idle bound (a quiet
collection sends nothing for minutes), but one still open ``WATCH_OVERRUN`` seconds after the
``timeoutSeconds`` it asked for lost its end on the way and is ended and resumed
(``pacing.watch_bound``; the pool's feeders do the same).
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

from yurthub import jsonlists, pacing
from yurthub.cache import framing

logger = logging.getLogger(__name__)

USER_AGENT = "yurthub/edgehub"
"""The hub's own component is ``yurthub``: a default cache agent, never filtered."""
SHORT_WATCH = 1.0
"""Seconds: a watch that ends sooner without an event counts as a failure (backoff, relist)."""
MAX_ITEM_BYTES = 16 << 20
"""Largest single object (list item or watch event) read; objects in etcd are at most ~1.5 MB."""
READ_SIZE = 1 << 16
WATCH_TIMEOUT = (300, 600)
"""Bounds of a watch's random ``timeoutSeconds`` (YurtHub's)."""


def _always() -> bool:
    return True


@dataclasses.dataclass(frozen=True, slots=True)
class ProxyRoute:
    """How one of the hub's own clients reaches its proxy: requests go to ``url`` + path over
    ``socket_path`` (the hub's own Unix socket; its ``url`` only names the Host), or, without
    one, over TCP to ``url`` (a test pointing a follower at an apiserver: ordinary requests).

    ``cloud_healthy``: whether the proxy has a healthy apiserver behind it (the hub's health
    checker). While it has none, what its clients meet (the empty cache's 404, a held watch) is
    a consequence of the one cause the health checker has logged: they say it at debug.
    ``pace``: the relist spread and Retry-After bound of the loops on it."""

    url: str
    socket_path: str | None = None
    cloud_healthy: Callable[[], bool] = _always
    pace: pacing.Settings = dataclasses.field(default_factory=pacing.Settings)
    """How the loops on this route pace themselves after a failure (``--relist-spread-seconds``,
    ``--max-retry-after-seconds``)."""

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


class _Busy(Exception):
    """429 (or 503 with ``Retry-After``): come back after ``retry_after`` seconds."""

    def __init__(self, what: str, retry_after: float | None) -> None:
        super().__init__(what)
        self.retry_after = retry_after


class _Unreadable(ValueError):
    """A body the loop cannot read (a list, an event): resuming would meet the same bytes, so
    the loop lists again (after the backoff)."""


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


class _TooLarge(Exception):
    """A list not older than a version the apiserver does not have (yet): 504 with the cause
    ``ResourceVersionTooLarge`` (kube-apiserver's answer after waiting 3 s for its watch cache
    to reach it)."""


TOO_LARGE_CAUSE = "ResourceVersionTooLarge"


async def _too_large(resp: aiohttp.ClientResponse) -> bool:
    """Whether a 504 is kube-apiserver's "Too large resource version" (its Status names the
    cause; an old apiserver's only says so in the message)."""
    try:
        status = orjson.loads(await resp.content.read(READ_SIZE))
    except (aiohttp.ClientError, orjson.JSONDecodeError, ValueError):
        return False
    if not isinstance(status, dict):
        return False
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    for cause in causes if isinstance(causes, list) else ():
        if isinstance(cause, dict) and cause.get("reason") == TOO_LARGE_CAUSE:
            return True
    message = status.get("message")
    return isinstance(message, str) and message.startswith("Too large resource version")


def _refused(resp: aiohttp.ClientResponse, what: str) -> Exception:
    """What a non-200 answer is for the loop: busy (429, 503 with Retry-After) or a failure."""
    after = pacing.retry_after(resp.headers.get("Retry-After"))
    if resp.status == 429 or (resp.status == 503 and after is not None):
        return _Busy(f"{what}: HTTP {resp.status}", after)
    return ValueError(f"{what}: HTTP {resp.status}")


@dataclasses.dataclass(frozen=True, slots=True)
class _Watching:
    """How the loop watches: for the log (``what``), the bounds of ``timeoutSeconds``, how long
    a watch may outlive it, the largest event read."""

    what: str
    timeout: tuple[int, int]
    overrun: float
    max_item: int


class _Position:
    """Where the loop is: the resourceVersion of the last list, event or BOOKMARK applied ("":
    list first), kept as events apply so a watch that breaks resumes exactly after them."""

    __slots__ = ("rv",)

    def __init__(self) -> None:
        self.rv = ""


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
    pace: pacing.Settings | None = None,
    rand: Callable[[], float] = random.random,
    watch_timeout: tuple[int, int] = WATCH_TIMEOUT,
    watch_overrun: float = pacing.WATCH_OVERRUN,
) -> None:
    """List+watch ``path`` (e.g. ``/api/v1/services``) through the hub until cancelled.

    ``cloud_healthy`` (``ProxyRoute.cloud_healthy``): while False, a 404/403 is the offline
    cache's (the cloud's absence, already logged by the health checker) and logged at debug;
    the first one met with the cloud there (a CRD not installed, RBAC) is logged at INFO.
    ``pace``: the relist spread and Retry-After bound (``pacing.Settings``; its backoff cap is
    ``max_backoff``); ``rand``: the jitter's randomness. ``watch_timeout``: the bounds of each
    watch's random ``timeoutSeconds``; a watch still open ``watch_overrun`` seconds after it is
    ended by the loop (``pacing.watch_bound``) and resumed."""
    url = f"{proxy_url.rstrip('/')}{path}"
    params = {}
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    base = pace or pacing.Settings()
    settings = dataclasses.replace(
        base, first_backoff=min(base.first_backoff, max_backoff), max_backoff=max_backoff
    )
    pacer = pacing.Pacer(settings)
    absent_logged = False
    watching = _Watching(what, watch_timeout, watch_overrun, max_item)
    at = _Position()
    not_older_than = ""
    """After a 410: the version held, which the relist's state must not be older than."""
    while True:
        retry_after: float | None = None
        try:
            if not at.rv:
                at.rv = await _list(target, session, url, params, headers, max_item, not_older_than)
                not_older_than = ""
                pacer.succeeded()
                absent_logged = False
            if await _watch(target, session, url, params, headers, at, watching):
                pacer.succeeded()
                continue  # ended normally after some progress: resume at once
            cause = pacing.Cause.FAILURE
        except asyncio.CancelledError:
            raise
        except _Gone:
            logger.debug("following %s: the version held is too old; listing again", what)
            not_older_than = at.rv or not_older_than
            at.rv = ""
            cause = pacing.Cause.GONE
        except _TooLarge:
            logger.debug(
                "following %s: the apiserver has no state at %s yet; listing its current one",
                what,
                not_older_than,
            )
            not_older_than = ""
            continue
        except _Busy as e:
            logger.debug("following %s: %s (Retry-After %s)", what, e, e.retry_after)
            cause = pacing.Cause.BUSY
            retry_after = e.retry_after
        except _Absent as e:
            # Not installed, not allowed, or (through the hub, offline) not cached: known to
            # be empty for now, and asked again with the usual backoff, so a CRD installed
            # later or the cloud coming back is noticed within max_backoff.
            at.rv = not_older_than = ""
            target.mark_absent()
            said = absent_logged or not cloud_healthy()
            log = logger.debug if said else logger.info
            log("%s cannot be read (%s); treated as empty until it can", what, e)
            absent_logged = absent_logged or not said
            cause = pacing.Cause.FAILURE
        except _Unreadable as e:
            logger.debug("following %s: %s; listing again", what, e)
            at.rv = ""
            cause = pacing.Cause.FAILURE
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            # The link, the hub's proxy, a 5xx: resume from the version held (a list that
            # failed left none: it is asked again).
            logger.debug("following %s: %s", what, e)
            cause = pacing.Cause.FAILURE
        await asyncio.sleep(pacer.next_delay(cause, rand(), retry_after))


async def _list(
    target: Target,
    session: aiohttp.ClientSession,
    url: str,
    params: Mapping[str, str],
    headers: Mapping[str, str],
    max_item: int,
    not_older_than: str = "",
) -> str:
    """The list, into ``target``; its resourceVersion. ``not_older_than``: a version the state
    listed must not be older than (a relist after 410)."""
    query = dict(params)
    if not_older_than:
        query |= {"resourceVersion": not_older_than, "resourceVersionMatch": "NotOlderThan"}
    async with session.get(url, params=query, headers=headers) as resp:
        if resp.status in (403, 404):
            raise _Absent(f"HTTP {resp.status}{await _status_message(resp)}")
        if resp.status == 504 and not_older_than and await _too_large(resp):
            raise _TooLarge
        if resp.status != 200:
            raise _refused(resp, "list")
        reader = jsonlists.ListReader(max_item)
        target.begin()
        async for chunk in resp.content.iter_chunked(READ_SIZE):
            _take(target, reader.feed(chunk))
        _take(target, reader.finish())
    if reader.broken:
        raise _Unreadable(f"the list body: {reader.broken}")
    items = reader.head.get("items", [])
    if items is not None and items != []:
        raise _Unreadable("the list's items are not a list")
    target.commit()
    meta = reader.head.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""


def _take(target: Target, pieces: list[jsonlists.Piece]) -> None:
    for piece in pieces:
        if isinstance(piece, jsonlists.Item):
            if not isinstance(piece.value, dict):
                raise _Unreadable("a list item is not a JSON object")
            try:
                target.add(piece.value)
            except ValueError as e:
                raise _Unreadable(str(e)) from e


async def _watch(
    target: Target,
    session: aiohttp.ClientSession,
    url: str,
    params: Mapping[str, str],
    headers: Mapping[str, str],
    at: _Position,
    watching: _Watching,
) -> bool:
    """One watch from ``at.rv``, advancing it; True when it ended normally after delivering
    something (or after ``SHORT_WATCH``), False for a watch that ended at once."""
    timeout_seconds = random.randint(*watching.timeout)
    query = {
        **params,
        "watch": "true",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": str(timeout_seconds),
    }
    if at.rv:
        query["resourceVersion"] = at.rv
    started = time.monotonic()
    splitter = framing.LineSplitter(watching.max_item)
    try:
        async with asyncio.timeout(pacing.watch_bound(timeout_seconds, watching.overrun)) as bound:
            events = await _read_watch(target, session, url, query, headers, at, splitter)
    except TimeoutError:
        if not bound.expired():
            raise
        logger.info(
            "following %s: the watch asked to end after %ds was still open %.0fs later; "
            "ending it and resuming from %s",
            watching.what,
            timeout_seconds,
            watching.overrun,
            at.rv or "the start",
        )
        return True
    # client-go's "very short watch": a server that ends every watch at once is asked again
    # after the backoff, not in a tight loop (from the same version: nothing was missed).
    return bool(events) or time.monotonic() - started >= SHORT_WATCH


async def _read_watch(
    target: Target,
    session: aiohttp.ClientSession,
    url: str,
    query: Mapping[str, str],
    headers: Mapping[str, str],
    at: _Position,
    splitter: framing.LineSplitter,
) -> int:
    """The watch's events into ``target``, advancing ``at``; how many there were."""
    events = 0
    async with session.get(url, params=query, headers=headers, timeout=None) as resp:
        if resp.status == 410:
            raise _Gone
        if resp.status in (403, 404):
            # The collection went (a CRD deleted, a right revoked): the list says which.
            raise _Unreadable(f"watch: HTTP {resp.status}")
        if resp.status != 200:
            raise _refused(resp, "watch")
        async for chunk in resp.content.iter_chunked(READ_SIZE):
            try:
                lines = splitter.feed(chunk)
            except framing.FrameTooLarge as e:
                raise _Unreadable(str(e)) from e
            for line in lines:
                events += 1
                at.rv = _event(target, line, at.rv)
        rest = splitter.rest()
        if rest:
            events += 1
            at.rv = _event(target, rest, at.rv)
    return events


def _event(target: Target, line: bytes, rv: str) -> str:
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise _Unreadable(f"a watch event is not JSON: {e}") from e
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise _Unreadable("a watch event is not an object with an object")
    obj = event["object"]
    kind = event.get("type")
    if kind == "ERROR":
        code = obj.get("code")
        if code == 410:
            raise _Gone
        if code == 429:
            raise _Busy(f"watch error: {obj.get('message', '')}", None)
        # Any other error the apiserver ends a watch with (a 500 while its cache is
        # re-initialising, a timeout): resume from the version held.
        raise ValueError(f"watch error: {obj.get('message', '')}")
    meta = obj.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise _Unreadable("a watch event's object has metadata that is not an object")
    new_rv = str((meta or {}).get("resourceVersion") or rv)
    if kind in ("ADDED", "MODIFIED", "DELETED"):
        try:
            target.apply(kind, obj)
        except ValueError as e:
            raise _Unreadable(str(e)) from e
    return new_rv
