"""One response's filtering: the body shape chosen from the request and the response headers.

PURE: ``open`` decides from a ``RequestInfo``, the status and the response headers; the
returned ``Transform`` turns upstream chunks into the chunks to send (see ``proxy/seams.py``).

Choice (reference §6 "where they apply"):

- only 2xx answers to resource requests on the object itself or its ``status`` subresource;
- JSON objects (not Tables or PartialObjectMetadata, which are views for humans and
  garbage collectors): watch -> ``jsonbodies.WatchStream``, list -> ``ListBody`` (or
  ``GatedList`` when every filter of the chain names its needles), anything else (get, patch)
  -> ``ObjectBody``;
- ``application/vnd.kubernetes.protobuf``: watch (``;stream=watch``) -> ``protobodies.WatchStream``,
  else ``ObjectBody`` (lists included);
- any other type (YAML, CBOR) passes unfiltered.

``Content-Encoding: gzip`` or ``deflate`` (the apiserver compresses large answers for clients
that accept it) is decoded here, at most ``INFLATE_STEP`` bytes of output at a time, and the
client gets the body uncompressed (it is on loopback): ``Content-Encoding`` and
``Content-Length`` are removed from the answer. A compressed stream that turns out corrupt
raises ``BrokenBody``: the proxy ends that answer as if the upstream had broken off. Other
encodings pass unfiltered (counted).
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from yurthub import requestinfo
from yurthub.cache import cacheability
from yurthub.filters import chaining, jsonbodies, protobodies, registry

logger = logging.getLogger(__name__)

INFLATE_STEP = 1 << 20
GATED_LIST_BYTES = 32 << 20
"""The most a list without needles is held (``jsonbodies.GatedList``; a 10,000-pod list is
~20 MB); a longer one is filtered item by item as it streams, in the memory of one item."""
FILTERED_SUBRESOURCES = frozenset({"", "status"})
_DROPPED_HEADERS = frozenset({"content-length", "content-encoding", "content-md5", "etag"})

Header = tuple[str, str]


class BrokenBody(Exception):
    """The body cannot be decoded any further (a corrupt compressed stream)."""


class BodyFilter(Protocol):
    @property
    def counts(self) -> jsonbodies.Counts: ...

    def feed(self, chunk: bytes) -> Iterator[bytes]: ...

    def finish(self) -> Iterator[bytes]: ...


class Transform:
    """One response: headers adjusted, chunks in, filtered chunks out.

    ``on_undecodable(format, count)`` hears of what passed unfiltered as it happens (metrics);
    at the end of the body one debug line says what the filters did (``label`` names it).
    """

    def __init__(
        self,
        body: BodyFilter,
        *,
        fmt: str,
        encoding: str = "",
        label: str = "",
        on_undecodable: Callable[[str, int], None] | None = None,
    ) -> None:
        self.body = body
        self.format = fmt
        """``json`` or ``protobuf`` (metrics label)."""
        self._inflate = Inflate(encoding) if encoding else None
        self._label = label
        self._on_undecodable = on_undecodable
        self._reported = 0

    @property
    def counts(self) -> jsonbodies.Counts:
        return self.body.counts

    def response_headers(self, headers: list[Header]) -> list[Header]:
        """The upstream's headers minus what no longer holds for the filtered body."""
        drop = _DROPPED_HEADERS if self._inflate else _DROPPED_HEADERS - {"content-encoding"}
        return [(name, value) for name, value in headers if name.lower() not in drop]

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        if self._inflate is None:
            yield from self.body.feed(chunk)
        else:
            for plain in self._inflate.feed(chunk):
                yield from self.body.feed(plain)
        self._report()

    def finish(self) -> Iterator[bytes]:
        if self._inflate is not None:
            for plain in self._inflate.finish():
                yield from self.body.feed(plain)
        yield from self.body.finish()
        self._report()
        c = self.counts
        logger.debug(
            "filtered %s: %d objects, %d changed, %d dropped, %d undecodable",
            self._label,
            c.objects,
            c.changed,
            c.dropped,
            c.undecodable,
        )

    def _report(self) -> None:
        count = self.counts.undecodable
        if count != self._reported and self._on_undecodable is not None:
            self._on_undecodable(self.format, count - self._reported)
        self._reported = count


class Inflate:
    """gzip/deflate decoding in bounded steps (a small chunk may inflate a thousandfold); a gzip
    body may be several members back to back (kube-apiserver compresses each flush of a
    streaming list as one). Also used by the pool multiplexer's upstream reads."""

    def __init__(self, encoding: str) -> None:
        self._wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
        self._z = zlib.decompressobj(self._wbits)

    def feed(self, data: bytes) -> Iterator[bytes]:
        try:
            while True:
                plain = self._z.decompress(data, INFLATE_STEP)
                if plain:
                    yield plain
                if self._z.eof:
                    data = self._z.unused_data  # another gzip member may follow
                    if not data.strip(b"\x00"):
                        return
                    self._z = zlib.decompressobj(self._wbits)
                    continue
                data = self._z.unconsumed_tail
                if not data and len(plain) < INFLATE_STEP:
                    return
        except zlib.error as e:
            raise BrokenBody(f"the compressed body is corrupt: {e}") from e

    def finish(self) -> Iterator[bytes]:
        try:
            rest = self._z.flush()
        except zlib.error as e:
            raise BrokenBody(f"the compressed body is corrupt: {e}") from e
        if rest:
            yield rest


def encoding_of(headers: Mapping[str, str]) -> str | None:
    """``""`` identity, ``gzip``/``deflate``, or None for an encoding we cannot decode."""
    value = headers.get("Content-Encoding", "").strip().lower()
    if value in ("", "identity"):
        return ""
    if value in ("gzip", "x-gzip"):
        return "gzip"
    if value == "deflate":
        return "deflate"
    return None


def applies(info: requestinfo.RequestInfo, status: int) -> bool:
    return (
        200 <= status < 300
        and info.method != "HEAD"
        and info.is_resource_request
        and info.subresource in FILTERED_SUBRESOURCES
    )


def open_body(
    chain: chaining.Chain,
    info: requestinfo.RequestInfo,
    content_type: str,
    *,
    max_event: int,
    max_body: int,
) -> tuple[BodyFilter, str] | None:
    """The body filter for this answer and its format, or None (a type we do not filter)."""
    kind = registry.RESOURCE_KINDS.get(info.resource, "")
    ranges = requestinfo.media_ranges(content_type)
    media = ranges[0][0] if ranges else ""
    if media == protobodies.CONTENT_TYPE:
        if info.is_watch:
            return protobodies.WatchStream(chain, max_event=max_event), "protobuf"
        return protobodies.ObjectBody(chain, max_bytes=max_body), "protobuf"
    representation = cacheability.classify_media(content_type).representation
    if representation is not cacheability.Representation.OBJECT:
        return None
    if info.is_watch:
        return jsonbodies.WatchStream(chain, kind, max_event=max_event), "json"
    if info.verb == "list":
        if chain.gated:
            held = min(max_body, GATED_LIST_BYTES)
            body = jsonbodies.GatedList(chain, kind, max_item=max_event, max_bytes=held)
            return body, "json"
        return jsonbodies.ListBody(chain, kind, max_item=max_event), "json"
    return jsonbodies.ObjectBody(chain, kind, max_bytes=max_event), "json"
