"""Protobuf response bodies the tee kept, turned into the JSON the cache stores (writer thread).

The hub passes protobuf from the apiserver to clients that asked for it (kubelet, kube-proxy:
fewer bytes on the edge link, less apiserver CPU); the cache still stores and works on JSON
(selectors, patches, Tables, filters, offline answers). So each protobuf body, list or watch
frame the tee collected is converted here, in the cache writer's thread where JSON bodies are
parsed too (a 10,000-pod list never costs the event loop), into exactly what the apiserver's
JSON answer would have been (``yurthub.kubeproto.converting``, table-tested against it).

Invariants: a body that does not convert (a kind outside the built-in API such as a CRD, a
corrupt message) stores nothing: the client has its bytes anyway; a streaming list's initial
events are converted all or nothing (never half a list); in a plain watch a frame that does
not convert is skipped (the object it carried stays as cached until it changes again). Each
kind that fails is logged once (WARNING), later failures at DEBUG.
"""

from __future__ import annotations

import logging

import orjson

from yurthub.kubeproto import converting

logger = logging.getLogger(__name__)


class Transcoder:
    """Protobuf -> JSON bytes for the cache writer; ``failures`` counts what did not convert."""

    def __init__(self) -> None:
        self._converter = converting.Converter()
        self._logged: set[str] = set()
        self.failures = 0

    @property
    def converter(self) -> converting.Converter:
        """The hub's one converter (local answers read protobuf request bodies with it)."""
        return self._converter

    def body(self, body: bytes) -> bytes | None:
        """An object or list body as JSON, None when it does not convert. Lists are converted
        item by item (bounded memory), everything else whole."""
        try:
            listed = self._converter.list_json(body)
            if listed is not None:
                return listed
            return orjson.dumps(self._converter.object(body))
        except converting.Undecodable as e:
            self._failed(e)
            return None

    def events(self, frames: tuple[bytes, ...], *, whole: bool) -> tuple[bytes, ...] | None:
        """Watch frames as JSON event lines; ``whole``: all or None."""
        lines: list[bytes] = []
        for frame in frames:
            try:
                lines.append(orjson.dumps(self._converter.event(frame)))
            except converting.Undecodable as e:
                self._failed(e)
                if whole:
                    return None
        return tuple(lines)

    def is_initial_events_end(self, frame: bytes) -> bool:
        """Is this frame the BOOKMARK annotated ``k8s.io/initial-events-end: "true"`` (the tee
        asks on the event loop: a bookmark is a few hundred bytes; every other frame is turned
        away by the byte test)."""
        if b"BOOKMARK" not in frame or b"k8s.io/initial-events-end" not in frame:
            return False
        try:
            event = self._converter.event(frame)
        except converting.Undecodable:
            return False
        meta = event["object"].get("metadata") or {}
        notes = meta.get("annotations") or {}
        return event["type"] == "BOOKMARK" and notes.get("k8s.io/initial-events-end") == "true"

    def _failed(self, error: converting.Undecodable) -> None:
        self.failures += 1
        if error.kind in self._logged:
            logger.debug("cache: protobuf body not cached: %s", error)
            return
        self._logged.add(error.kind)
        logger.warning(
            "cache: a protobuf %s does not convert to JSON, not cached (the client got it "
            "unchanged): %s; further ones are only counted",
            error.kind or "body",
            error,
        )
