"""The tee: a copy of each cacheable 2xx response, turned into store jobs while it streams.

Implements ``yurthub.proxy.seams.Tee``/``TeeSink``. The proxy calls ``open`` for every upstream
2xx response and ``feed`` with each chunk it sends to the client; this module decides what to
keep (``cacheability``) and hands complete units to ``store.Store.submit``:

- get/create/update/patch: the body, once complete (a status subresource answer is the parent
  object and lands on the parent's key);
- list: the body, once complete; a list cut short is never applied (no half lists);
- watch: each complete event line as it arrives, so the cache follows the stream; except the
  initial events of a streaming list (``sendInitialEvents=true``, client-go's WatchListClient,
  which kubelet and kube-proxy use since 1.35): those are held until the BOOKMARK annotated
  ``k8s.io/initial-events-end`` and applied as one whole list (authoritative, answerable
  offline), as the list response they replace would be. Held bytes count against the same
  bounds as a list body; past them, or if the stream ends before the end bookmark, the held
  events are applied one by one, as any watch's;
- ``/version`` and discovery documents (``/api``, ``/apis``, ``/api/<v>``, ``/apis/<g>/<v>``),
  keyed by path and representation (aggregated discovery differs from the legacy document).

Invariants: ``feed`` never blocks and never awaits: it appends or splits lines and returns. Memory
is bounded per response (``max_body_bytes`` for a collected body, ``max_event_bytes`` for one
watch event) and globally: bodies being collected and jobs queued for the writer share the
store's submission bound (many large lists at once would otherwise each hold up to
``max_body_bytes``). Past a bound the sink stops caching that response (counted in
``Stats.dropped_responses``, logged once per reason); the client stream is never touched.
JSON and protobuf answers are kept: the client receives the apiserver's bytes as they came
(protobuf for kubelet and kube-proxy: fewer bytes on the edge link); a protobuf body, list or
watch frame (4-byte length + ``WatchEvent``) is queued as it is and converted to the JSON the
cache stores in the writer's thread (``transcoding``); only the end bookmark of a streaming
list is looked into here (a few hundred bytes). Protobuf views (``as=Table``, partial
metadata) are not kept. A gzip body (the apiserver
compresses lists and, since 1.3x, watch streams for clients that send ``Accept-Encoding: gzip``,
as every Go client does) is inflated for the cache only, in bounded steps that stop as soon as
the sink stops collecting: the client still gets the compressed bytes, so the edge link keeps
its compression. Other encodings are not interpreted.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import zlib
from collections.abc import Mapping

from yurthub import requestinfo
from yurthub.cache import agents, cacheability, framing, keys, selectors, store

logger = logging.getLogger(__name__)

# Non-resource documents kubectl and client-go need offline (discovery and the version).
_DOCUMENT_PATH = re.compile(r"^/(version|api|apis|api/[^/]+|apis/[^/]+/[^/]+)/?$")
_PROFILE_PARAMS = ("as", "g", "v")


class _Once:
    """Log each reason once at WARNING, later repeats at DEBUG (a stuck disk must not flood)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def warn(self, reason: str, detail: str) -> None:
        if reason in self._seen:
            logger.debug("cache: %s (%s)", reason, detail)
            return
        self._seen.add(reason)
        logger.warning("cache: %s (%s); further occurrences are only counted", reason, detail)


class Tee:
    def __init__(
        self,
        cache: store.Store,
        agent_set: agents.AgentSet,
        *,
        max_body_bytes: int,
        max_event_bytes: int,
    ) -> None:
        self._store = cache
        self._agents = agent_set
        self._max_body = max_body_bytes
        self._max_event = max_event_bytes
        self._collected = 0
        self.once = _Once()

    def open(
        self, info: requestinfo.RequestInfo, status: int, headers: Mapping[str, str]
    ) -> _BodySink | _WatchSink | _Gunzip | None:
        if not 200 <= status < 300:
            return None
        encoding = headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity", "gzip"):
            return None
        sink = self._open(info, headers)
        if sink is not None and encoding == "gzip":
            return _Gunzip(self, sink)
        return sink

    def _open(
        self, info: requestinfo.RequestInfo, headers: Mapping[str, str]
    ) -> _BodySink | _WatchSink | None:
        content_type = headers.get("Content-Type", "")
        if not info.is_resource_request:
            return self._document(info, content_type)
        if not cacheability.is_cacheable_request(info, self._agents.allows):
            return None
        protobuf = _is_plain_protobuf(content_type)
        media = (
            cacheability.MediaType(cacheability.Representation.OBJECT)
            if protobuf
            else cacheability.classify_media(content_type)
        )
        if media.representation is cacheability.Representation.OTHER:
            return None
        # A Table is never stored; the objects its rows carry are (kubectl reads Tables). The
        # writer tells views from objects by the body's kind, whatever the Content-Type says.
        scope = cacheability.scope_of(info, media)
        if info.verb in ("get", "create", "update", "patch"):
            # A create is POSTed to the collection: only its namespace is the URL's.
            name = "" if info.verb == "create" else info.name
            job = store.PutObject(scope, b"", info.namespace, name=name, protobuf=protobuf)
            return _BodySink(self, job, info.verb)
        if info.verb not in ("list", "watch"):
            return None
        try:
            list_key = keys.list_key(
                scope,
                info.namespace,
                selectors.parse_labels(info.label_selector).canonical(),
                selectors.parse_fields(info.field_selector).canonical(),
            )
        except selectors.SelectorError:
            return None
        if info.verb == "watch":
            return _WatchSink(
                self, list_key, streaming_list=info.send_initial_events, protobuf=protobuf
            )
        # A request with a continue token is a later page; without one it is a first page or a
        # whole list (the store tells them apart by the response's own continue token).
        whole = store.PutList(list_key, b"", bool(info.list_continue), protobuf=protobuf)
        return _BodySink(self, whole, "list")

    def _document(self, info: requestinfo.RequestInfo, content_type: str) -> _BodySink | None:
        if info.verb != "get" or not _DOCUMENT_PATH.match(info.path):
            return None
        ranges = requestinfo.media_ranges(content_type)
        if not ranges or ranges[0][0] != cacheability.JSON:
            return None
        params = ranges[0][1]
        profile = ";".join(f"{p}={params[p]}" for p in _PROFILE_PARAMS if p in params)
        key = keys.nonresource_key(info.path.rstrip("/") or "/", profile)
        return _BodySink(self, store.PutDocument(key, content_type, b""), "document")

    def submit(self, job: store.Job, what: str) -> bool:
        if self._store.submit(job):
            return True
        self._store.stats.dropped_responses += 1
        self.once.warn("write queue full, dropping a response's caching", what)
        return False

    def reserve(self, size: int) -> bool:
        """Room for ``size`` more collected bytes beside what the store has queued."""
        if self._collected + size + self._store.pending_bytes > self._store.max_pending_bytes:
            return False
        self._collected += size
        return True

    def release(self, size: int) -> None:
        self._collected -= size

    def drop(self, reason: str, what: str) -> None:
        self._store.stats.dropped_responses += 1
        self.once.warn(reason, what)


def _is_plain_protobuf(content_type: str) -> bool:
    """``application/vnd.kubernetes.protobuf`` (``;stream=watch`` included), not a view."""
    ranges = requestinfo.media_ranges(content_type)
    if not ranges or ranges[0][0] != requestinfo.PROTOBUF_MEDIA_TYPE:
        return False
    return not ranges[0][1].get("as")


class _BodySink:
    """Collects one body (bounded) and submits it once complete.

    The body grows in one ``bytearray`` that the job then holds as it is: a big list exists
    once, never as chunks and their join side by side."""

    __slots__ = ("_body", "_dropped", "_job", "_tee", "_what")

    def __init__(
        self, tee: Tee, job: store.PutObject | store.PutList | store.PutDocument, what: str
    ) -> None:
        self._tee = tee
        self._job = job
        self._what = what
        self._body = bytearray()
        self._dropped = False

    @property
    def collecting(self) -> bool:
        return not self._dropped

    def feed(self, chunk: bytes) -> None:
        if self._dropped:
            return
        if len(self._body) + len(chunk) > self._tee._max_body:
            self._stop()
            self._tee.drop("response larger than the cache's body bound", self._what)
            return
        if not self._tee.reserve(len(chunk)):
            self._stop()
            self._tee.drop("too many bytes on their way to the cache", self._what)
            return
        self._body += chunk

    async def finish(self) -> None:
        if self._dropped:
            return
        body = self._body
        self._stop()
        if body:
            self._tee.submit(dataclasses.replace(self._job, body=body), self._what)

    def abort(self, reason: str) -> None:
        # An incomplete body is never applied: a cut list would release objects it still has.
        self._stop()

    def _stop(self) -> None:
        """Collect no more and give the collected bytes back to the tee's bound."""
        self._dropped = True
        self._tee.release(len(self._body))
        self._body = bytearray()  # let go, never cleared: a submitted job holds it


_END_MARK = b"k8s.io/initial-events-end"


def is_initial_events_end(line: bytes) -> bool:
    """The BOOKMARK that ends a streaming list's initial events (a cheap test first: every
    other line of the stream is decoded by the writer anyway, this one only here)."""
    if _END_MARK not in line or b"BOOKMARK" not in line:
        return False
    try:
        event = framing.parse_event(line)
    except framing.BadBody:
        return False
    meta = event.object.get("metadata")
    notes = meta.get("annotations") if isinstance(meta, dict) else None
    return (
        event.type == "BOOKMARK"
        and isinstance(notes, dict)
        and notes.get(_END_MARK.decode()) == "true"
    )


class _WatchSink:
    """Cuts a watch stream into events and submits them as they complete (a streaming list's
    initial events as one ``InitialEvents`` job). JSON streams are cut at newlines, protobuf
    ones at their length prefixes (the frames go to the writer as they are)."""

    __slots__ = (
        "_dropped",
        "_held",
        "_held_bytes",
        "_initial",
        "_list_key",
        "_protobuf",
        "_splitter",
        "_tee",
    )

    def __init__(
        self,
        tee: Tee,
        list_key: keys.ListKey,
        *,
        streaming_list: bool = False,
        protobuf: bool = False,
    ) -> None:
        self._tee = tee
        self._list_key = list_key
        self._protobuf = protobuf
        self._splitter: framing.LineSplitter | framing.FrameSplitter = (
            framing.FrameSplitter(tee._max_event)
            if protobuf
            else framing.LineSplitter(tee._max_event)
        )
        self._dropped = False
        self._held: list[bytes] | None = [] if streaming_list else None
        self._held_bytes = 0
        self._initial = streaming_list
        """Before a streaming list's end bookmark: its events are a snapshot in key order, and
        applied apart from it (one too large to hold, one cut short) they never move the list's
        version (``jobs.WatchLines.snapshot``)."""

    @property
    def collecting(self) -> bool:
        return not self._dropped

    def feed(self, chunk: bytes) -> None:
        if self._dropped:
            return
        try:
            lines = self._splitter.feed(bytes(chunk))
        except framing.FrameTooLarge:
            self._stop()
            self._tee.drop("watch event larger than the cache's event bound", "watch")
            return
        if self._held is not None and lines:
            lines = self._hold(lines)
        self._submit(lines)

    def _submit(self, lines: list[bytes]) -> None:
        if lines and self._initial:
            end = next((i for i, line in enumerate(lines) if self._ends_initial_events(line)), -1)
            if end < 0:
                self._submit_job(self._events(lines, snapshot=True))
                return
            self._initial = False
            self._submit_job(self._events(lines[: end + 1], snapshot=True))
            lines = lines[end + 1 :]
        if lines:
            self._submit_job(self._events(lines))

    def _submit_job(self, job: store.WatchLines) -> None:
        if not self._dropped and not self._tee.submit(job, "watch"):
            # Later events without these would leave gaps: stop caching this stream. Objects it
            # missed stay stale until they change again or the client lists again.
            self._stop()

    def _hold(self, lines: list[bytes]) -> list[bytes]:
        """Hold initial events until the end bookmark; the lines to apply as plain events."""
        held = self._held
        assert held is not None
        for i, line in enumerate(lines):
            if self._held_bytes + len(line) > self._tee._max_body or not self._tee.reserve(
                len(line)
            ):
                self._tee.once.warn(
                    "streaming list larger than the cache's body bound: its events are cached "
                    "one by one and make no offline list",
                    "watch",
                )
                return self._release() + lines[i:]
            held.append(line)
            self._held_bytes += len(line)
            if self._ends_initial_events(line):
                self._initial = False
                whole = self._release()
                job = store.InitialEvents(self._list_key, tuple(whole), protobuf=self._protobuf)
                if not self._tee.submit(job, "streaming list"):
                    self._stop()
                    return []
                return lines[i + 1 :]
        return []

    def _ends_initial_events(self, line: bytes) -> bool:
        if self._protobuf:
            return self._tee._store.transcoder.is_initial_events_end(line)
        return is_initial_events_end(line)

    def _events(self, lines: list[bytes], *, snapshot: bool = False) -> store.WatchLines:
        return store.WatchLines(
            self._list_key, tuple(lines), protobuf=self._protobuf, snapshot=snapshot
        )

    def _release(self) -> list[bytes]:
        """Stop holding: the held lines, their bytes given back to the tee's bound."""
        held = self._held or []
        self._held = None
        self._tee.release(self._held_bytes)
        self._held_bytes = 0
        return held

    def _stop(self) -> None:
        self._dropped = True
        self._release()

    async def finish(self) -> None:
        if self._dropped:
            return
        # A stream that ended before its end bookmark proved no list: its events are events,
        # and initial events a snapshot cut short (they do not move the list's version).
        snapshot = self._initial
        lines = self._release()
        rest = self._splitter.rest()
        if rest and not self._protobuf:  # a protobuf frame cut short is no event
            lines.append(rest)
        self._dropped = True
        if lines:
            self._tee.submit(self._events(lines, snapshot=snapshot), "watch")

    def abort(self, reason: str) -> None:
        # Complete events are applied (held ones now, as a snapshot cut short); an unfinished
        # one is dropped.
        snapshot = self._initial
        lines = self._release()
        self._dropped = True
        if lines:
            self._tee.submit(self._events(lines, snapshot=snapshot), "watch")


class _Gunzip:
    """Inflates a gzip body for the sink behind it, never more than ``STEP`` bytes at a time
    and nothing once that sink stops collecting (a decompression bomb costs one step).

    A body may be several gzip members back to back: the apiserver compresses each flush of a
    watch stream as a member of its own (Go's readers take that as one stream; so do we).
    """

    STEP = 256 << 10

    __slots__ = ("_broken", "_fresh", "_inner", "_tee", "_z")

    def __init__(self, tee: Tee, inner: _BodySink | _WatchSink) -> None:
        self._tee = tee
        self._inner = inner
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._fresh = True
        """The current member has not started: the body may end here."""
        self._broken = False

    def feed(self, chunk: bytes) -> None:
        if self._broken:
            return
        data = bytes(chunk)
        try:
            while data and self._inner.collecting:
                self._fresh = False
                out = self._z.decompress(data, self.STEP)
                if out:
                    self._inner.feed(out)
                if self._z.eof:
                    data = self._z.unused_data
                    self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    self._fresh = True
                else:
                    data = self._z.unconsumed_tail
        except zlib.error as e:
            self._fail(f"gzip body does not inflate: {e}")
            return
        if not self._inner.collecting:
            self._broken = True

    async def finish(self) -> None:
        if self._broken:
            return
        self._broken = True
        if not (self._fresh or self._z.eof):
            self._inner.abort("gzip body ended early")
            self._tee.drop("gzip body ended before its end", "gzip")
            return
        await self._inner.finish()

    def abort(self, reason: str) -> None:
        self._broken = True
        self._inner.abort(reason)

    def _fail(self, reason: str) -> None:
        self._broken = True
        self._inner.abort(reason)
        self._tee.drop(reason, "gzip")
