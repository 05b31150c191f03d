"""What a pool-scoped feeder (``yurthub.pool.feeding``) makes of an upstream's answer: its
failures (a refusal, busy or not, with the cloud's ``Retry-After``; a leader behind this hub;
410; a switch of source), a list collected within the store's memory budget, a watch's object
kind, and a body's ``Content-Encoding`` undone."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import aiohttp
import orjson

from yurthub import pacing, statuses
from yurthub.filters import responding
from yurthub.kubeproto import converting
from yurthub.pool import feedsources, gvrs, watchcache


class SourceFailed(Exception):
    def __init__(
        self,
        why: str,
        status: statuses.Status | None = None,
        *,
        busy: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(why)
        self.status = status
        self.busy = busy
        """A leader that is starting (429 not synced, 503 not ready), or behind this hub: a soft
        failure (``retrying``), tried again soon. From the cloud: the apiserver's pushback
        (429, APF), honoured for ``retry_after`` seconds (``pacing``)."""
        self.retry_after = retry_after


class TooLarge(SourceFailed):
    """The source has not reached the version asked for (this hub read a newer state
    elsewhere): resume from the store's version there instead of listing."""

    def __init__(self, why: str) -> None:
        super().__init__(why, busy=True)


class Gone(Exception):
    pass


class Switch(Exception):
    pass


class NoStreaming(Exception):
    """The upstream refuses ``sendInitialEvents`` (an apiserver without WatchList)."""


class OverBudget(Exception):
    pass


class Collected:
    """The entries of a list being read, bounded by the store's memory budget: a list that
    does not fit marks the store over budget (its owner gives up on the resource) instead of
    growing without end."""

    def __init__(self, store: watchcache.Store) -> None:
        self.entries: list[watchcache.Entry] = []
        self._store = store
        self._bytes = 0

    def extend(self, entries: list[watchcache.Entry]) -> None:
        for entry in entries:
            self._bytes += entry.size
            self.entries.append(entry)
        if self._bytes > self._store.limits.max_bytes:
            self.entries = []
            raise OverBudget(f"a list of more than {self._store.limits.max_bytes} bytes")


class Stream:
    """One upstream watch: the initial state while it is collected, the objects' kind."""

    def __init__(self, initial: bool, store: watchcache.Store) -> None:
        self.collecting: Collected | None = Collected(store) if initial else None
        self._kind = ""
        self._api_version = ""

    def kinds(
        self, obj: Mapping[str, Any], store: watchcache.Store, gvr: gvrs.Gvr
    ) -> tuple[str, str]:
        if not self._kind:
            kind, api_version = obj.get("kind"), obj.get("apiVersion")
            if isinstance(kind, str) and kind and isinstance(api_version, str) and api_version:
                self._kind, self._api_version = kind, api_version
            elif store.kind:
                self._kind, self._api_version = store.kind, store.api_version
            else:
                raise SourceFailed(f"{gvr}: an event whose object has no kind")
        return self._kind, self._api_version


def inflater(source: feedsources.Source, resp: aiohttp.ClientResponse) -> responding.Inflate | None:
    encoding_ = responding.encoding_of(resp.headers)
    if encoding_ is None:
        raise SourceFailed(
            f"{source.name} answered with Content-Encoding {resp.headers.get('Content-Encoding')}"
        )
    return responding.Inflate(encoding_) if encoding_ else None


def plain(
    source: feedsources.Source, inflate: responding.Inflate | None, chunk: bytes | None
) -> Iterator[bytes]:
    """``chunk`` decoded (None: the end of the body)."""
    if inflate is None:
        if chunk:
            yield chunk
        return
    try:
        yield from (inflate.feed(chunk) if chunk is not None else inflate.finish())
    except responding.BrokenBody as e:
        raise SourceFailed(f"from {source.name}: {e}") from e


def kind_of(source: feedsources.Source) -> str:
    return "cloud" if source.leader is None else "leader"


def is_protobuf(resp: aiohttp.ClientResponse) -> bool:
    return resp.content_type == converting.CONTENT_TYPE


async def refusal(what: str, resp: aiohttp.ClientResponse) -> SourceFailed:
    """A non-200 answer: busy for 429 and 503 (a leader starting; the apiserver's pushback,
    with its ``Retry-After``), else a failure."""
    return SourceFailed(
        f"{what}: HTTP {resp.status}",
        await status_of(resp),
        busy=resp.status in (429, 503),
        retry_after=pacing.retry_after(resp.headers.get("Retry-After")),
    )


async def status_of(resp: aiohttp.ClientResponse) -> statuses.Status:
    """The answer's ``Status`` (bounded read), or one made from the HTTP code."""
    body = bytearray()
    try:
        async for chunk in resp.content.iter_any():
            body += chunk
            if len(body) > 64 << 10:
                break
        decoded = orjson.loads(body)
    except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError):
        decoded = None
    if statuses.is_status(decoded):
        assert isinstance(decoded, dict)
        return decoded  # type: ignore[return-value]
    return statuses.failure(resp.status, f"HTTP {resp.status} from the hub's proxy")
