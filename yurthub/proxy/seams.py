"""The seams between the proxy and the cache and filters: small Protocols, no implementation.

The routing code (``proxy/routing.py``) calls these; the cache package and the response filters
(``yurthub.filters``) implement them. ``None`` for the tee or local answerer means "no cache":
the hub still proxies, it just cannot answer offline; ``None`` for the filter means unfiltered.

Invariants the proxy keeps for implementers:

- ``Tee.open`` is called for EVERY upstream 2xx response (resource and non-resource, including
  ``/version`` and discovery documents) before the first body byte is sent to the client; the
  implementation decides what it keeps and returns ``None`` for the rest.
- ``TeeSink.feed`` gets each chunk exactly as it was sent to the client, in order: the bytes of
  the body as the apiserver encoded them, so possibly gzip-compressed when the client asked for
  it (``Content-Encoding`` is in the headers given to ``open``). It is called
  on the event loop and must not block or await: copy/enqueue and return. If the sink cannot
  keep up it must drop (and later ``abort`` itself), never slow the client path.
- Exactly one of ``finish`` (upstream EOF, client got the whole body) or ``abort`` (client gone,
  upstream broke mid-body, hub shutting down) is called per opened sink.
- ``LocalAnswerer.answer`` returns a prepared-or-unprepared ``web.StreamResponse`` it has written
  to, or ``None`` when it cannot answer; the router then falls through (502 / remote proxy).
- ``LocalAnswerer.close`` is called once, in the hub's shutdown phase that ends upstream
  watches: watches held open offline must end cleanly then too, or they hold the whole grace
  period and are cut.
- ``ResponseFilter.open`` is called for every upstream 2xx response, after ``Tee.open`` and
  before any body byte is sent. With a ``BodyTransform`` the client gets the headers it
  returns from ``response_headers`` and, instead of each chunk, what ``feed`` yields for it
  (possibly nothing yet), then what ``finish`` yields at upstream EOF. The tee still gets the
  chunks as they came from upstream: the cache stores what the cloud sent, and offline answers
  are filtered again (``StoredObjects``). A transform that raises ends that answer as an
  upstream breaking off mid-body would.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from yurthub import requestinfo

if TYPE_CHECKING:
    from yurthub.proxy import upstream

HealthyServer = Callable[[], str | None]
"""A server the health checker thinks healthy now (in ``--server-addr`` order), or None."""

HEAL_AT_ONCE = web.RequestKey("heal_at_once", bool)
"""Set by the router on a request whose watch, held open offline, ends as soon as the cloud is
healthy again instead of at a random moment within the heal spread (``routing.heals_at_once``:
a pool feeder's own, and kubelet's watch of its own Node)."""

HOLD_AT_LEAST = web.RequestKey("hold_at_least", float)
"""Set by the router on a client's watch that every apiserver failed and the cache answers
instead: the seconds it is held at least, whatever the heal spread (``pacing.FailedWatches``:
the hub backs off for its clients)."""

FetchCurrent = Callable[[], Awaitable[bytes | None]]
"""The one object a held watch selects, as the cloud has it now (its JSON), or None when no
healthy apiserver gave it in time."""

HEAL_CURRENT: web.RequestKey[FetchCurrent] = web.RequestKey("heal_current")
"""Set by the router on kubelet's watch of its own Node (``routing.heals_with_current``): held
open offline, it gets the Node as the cloud has it now (fetched with this) as one MODIFIED
event before it ends at the heal, so kubelet's node informer is current before its watch is
back upstream."""


class LocalReason(enum.StrEnum):
    """Why the router asks the cache to answer (passed as ``reason=``)."""

    OFFLINE = "offline"
    """No healthy backend."""
    UPSTREAM_ERROR = "upstream-error"
    """A transport error on a get/list sent to a backend thought healthy."""
    KUBELET_LEASE = "kubelet-lease"
    """Kubelet's own node lease: the hub renews it in the cloud itself (reference §2.5 step 3)."""
    KUBELET_NODE = "kubelet-node"
    """Kubelet ``get nodes``: local first (reference §2.5 step 4)."""


class TeeSink(Protocol):
    """Receives a copy of one 2xx upstream body as it streams to the client."""

    def feed(self, chunk: bytes) -> None:
        """A chunk as sent to the client. Non-blocking; must never slow the client path."""

    async def finish(self) -> None:
        """The body is complete (upstream EOF)."""

    def abort(self, reason: str) -> None:
        """The body will not complete: client gone, upstream broke mid-body, or shutdown."""


class Tee(Protocol):
    def open(
        self, info: requestinfo.RequestInfo, status: int, headers: Mapping[str, str]
    ) -> TeeSink | None:
        """A sink for this response, or None to keep nothing. ``headers`` are the response's."""


class LocalAnswerer(Protocol):
    """Answers from the cache."""

    async def answer(
        self, request: web.Request, info: requestinfo.RequestInfo, *, reason: str
    ) -> web.StreamResponse | None:
        """The answer written to ``request``, or None when the cache cannot answer.

        ``reason`` is a ``LocalReason`` value.
        """

    def close(self) -> None:
        """Hub shutdown: end every watch held open offline (cleanly, as the upstream ones)."""


class OfflineWrites(Protocol):
    """What the node wrote while the cloud was away, to be carried to it after the heal (the
    offline Event journal, ``cache.eventposting``)."""

    async def replay(self, client: upstream.Upstream, healthy_server: HealthyServer) -> None:
        """Run until cancelled (a hub task): post whenever ``healthy_server`` names a server,
        with ``client``'s (the hub's own) identity."""

    def dropped(self) -> int:
        """Writes dropped over the bounds and not told to the cloud yet (the outage record
        says how many an outage cost)."""


class BodyTransform(Protocol):
    """Rewrites one upstream body on its way to the client (response filters)."""

    def response_headers(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The headers to send instead of the upstream's (e.g. without Content-Length)."""

    def feed(self, chunk: bytes) -> Iterable[bytes]:
        """What to send for this upstream chunk (may be nothing yet). Never blocks."""

    def finish(self) -> Iterable[bytes]:
        """Upstream EOF: what is left to send."""


class StoredObjects(Protocol):
    """Filters objects an offline answer is built from (one request's filters)."""

    def object(self, body: bytes) -> bytes:
        """A whole answer (get, update, patch): the body to send."""

    def item(self, body: bytes) -> bytes | None:
        """One object of a list or of a watch's initial events; None: leave it out."""

    def protobuf_object(self, body: bytes) -> bytes:
        """``object`` for an enveloped protobuf object (``k8s\\x00``...)."""

    def protobuf_item(self, raw: bytes) -> bytes | None:
        """``item`` for one protobuf list item's message (no envelope)."""


class ResponseFilter(Protocol):
    def open(
        self, info: requestinfo.RequestInfo, status: int, headers: Mapping[str, str]
    ) -> BodyTransform | None:
        """A transform for this upstream response, or None to pass it as it comes."""

    def stored(self, info: requestinfo.RequestInfo) -> StoredObjects | None:
        """The filters for an answer from the cache, or None when none apply."""

    def ready(self) -> bool:
        """The filters' inputs are there (readiness gate; cheap, called per request)."""

    def not_read(self) -> str:
        """Empty when ``ready``, else which inputs are not read yet (the readiness reason)."""


class PoolServer(Protocol):
    """The pool multiplexer (``yurthub.pool.runtime``): list/watch of pool-scoped resources."""

    async def answer(
        self, request: web.Request, info: requestinfo.RequestInfo
    ) -> web.StreamResponse | None:
        """The answer from memory, or None for the ordinary path (not pool-scoped, the hub's
        own upstream requests, views the multiplexer does not hold)."""

    def close(self) -> None:
        """Hub shutdown: end every watch it serves (cleanly)."""


class LeaseCallback(Protocol):
    """Receives the Lease the heartbeat prober got back (reference §5.1: stored as kubelet's)."""

    async def __call__(self, server: str, lease: Mapping[str, object], raw: bytes) -> None: ...
