"""Per-apiserver context the HTTP handlers share: the state, timing knobs, live streams.

One ``ServerContext`` per ``SimApiserver`` (several may share one ``State``). It
tracks long-lived streams so that ``stop()`` ends them at once instead of waiting
for clients to hang up: open watches are closed (the client sees the stream end,
as on an apiserver's graceful shutdown), ``logs -f`` and exec handlers are cancelled.
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref

from aiohttp import web

from yurthub.kubeproto import converting
from yurthub.testing.sim import auditing, auth, storage, throttling


@dataclasses.dataclass(slots=True)
class ServerContext:
    state: storage.State
    # Seconds between BOOKMARK events on idle watches that asked for them.
    bookmark_interval: float = 60.0
    # Watch duration when the client sends no timeoutSeconds (real: 30-60 min).
    default_watch_timeout: float = 1800.0
    # Largest request body accepted; over it the answer is 413.
    max_body_bytes: int = 3 * 1024 * 1024
    # host:port reported in /api serverAddressByClientCIDRs.
    server_address: str = "127.0.0.1:6443"
    # Log-follow and exec handler tasks: cancelled on stop().
    streams: set[asyncio.Task[object]] = dataclasses.field(default_factory=set)
    # Open watches: closed on stop(), so their streams end cleanly (final chunk written).
    watchers: set[storage.Watcher] = dataclasses.field(default_factory=set)
    audit: auditing.AuditLog = dataclasses.field(default_factory=auditing.AuditLog)
    # 429s a test asked for (``SimApiserver.throttle``), checked in order.
    throttles: list[throttling.Throttle] = dataclasses.field(default_factory=list)
    # Protobuf request bodies (kubectl's typed clients, kubelet) -> JSON-shaped dicts.
    converter: converting.Converter = dataclasses.field(default_factory=converting.Converter)
    # Every connection seen, so stop() can drop the ones a graceful TLS close would leave
    # waiting for an idle client's close_notify.
    transports: weakref.WeakSet[asyncio.BaseTransport] = dataclasses.field(
        default_factory=weakref.WeakSet
    )

    def track_stream(self) -> asyncio.Task[object] | None:
        task = asyncio.current_task()
        if task is not None:
            self.streams.add(task)
        return task

    def untrack_stream(self, task: asyncio.Task[object] | None) -> None:
        if task is not None:
            self.streams.discard(task)

    def close_watchers(self, reason: str) -> None:
        for watcher in list(self.watchers):
            watcher.close(reason)

    def cancel_streams(self) -> None:
        for task in list(self.streams):
            task.cancel()

    def abort_connections(self) -> None:
        for transport in list(self.transports):
            if isinstance(transport, asyncio.Transport):
                transport.abort()
        self.transports.clear()


CONTEXT = web.AppKey("simapiserver_context", ServerContext)
# The authenticated caller, set by the authentication middleware.
USER = web.RequestKey("simapiserver_user", auth.User)
