"""What the tee and the runtime ask the cache writer to do: one frozen job per response part.

Role: the vocabulary of ``store.Store.submit`` (named there too: callers write
``store.PutList(...)``). A job carries the bytes as received and what the request said about
them; what it changes in the cache is the writer's to decide (``batching``, ``applying``).

Invariants: jobs are immutable and hold no reference to the response they came from beyond
its bytes; ``size`` is what the submission bound counts.
"""

from __future__ import annotations

import dataclasses

from yurthub.cache import keys
from yurthub.kubeproto import wire


@dataclasses.dataclass(frozen=True, slots=True)
class PutObject:
    """A single-object response body (get/create/update/patch); owner ``entries.DIRECT``."""

    scope: keys.Scope
    body: wire.Buffer
    namespace: str = ""
    """Request namespace, used when the object does not name its own; an object naming another
    one is not stored."""
    name: str = ""
    """The name in the request's URL (get/update/patch), "" for a create: an object naming
    another one is not stored."""
    local: bool = False
    """Made by the hub offline (kubelet's lease renewal): may differ at the same version."""
    protobuf: bool = False
    """``body`` is the apiserver's protobuf: stored as received (``transcoding``)."""

    @property
    def size(self) -> int:
        return len(self.body)


@dataclasses.dataclass(frozen=True, slots=True)
class PutList:
    """A complete list response body (or one page of a chunked list)."""

    list_key: keys.ListKey
    body: wire.Buffer
    continued: bool | None = None
    """The request carried ``continue=`` (a later page); None when unknown."""
    protobuf: bool = False
    """``body`` is the apiserver's protobuf: stored as received (``transcoding``)."""

    @property
    def size(self) -> int:
        return len(self.body)


@dataclasses.dataclass(frozen=True, slots=True)
class WatchLines:
    """Complete watch event documents, in stream order, of the watch continuing ``list_key``."""

    list_key: keys.ListKey
    lines: tuple[bytes, ...]
    protobuf: bool = False
    """``lines`` are protobuf frames (``WatchEvent`` messages): their objects are stored as
    received (``transcoding``)."""
    snapshot: bool = False
    """``lines`` are the initial events of a streaming list cut short before its end bookmark:
    each object is stored as a watch event's would be, but the list's version is not moved.
    Initial events come in key order, not in resourceVersion order: the last one's version
    says nothing of the objects after the cut, whose newer states this hub has not seen (a
    list version moved past them would be handed to a client as a state it may resume from,
    and the client would skip those changes for good)."""

    @property
    def size(self) -> int:
        return sum(len(line) for line in self.lines)


@dataclasses.dataclass(frozen=True, slots=True)
class InitialEvents:
    """A streaming list's initial events, up to and including the BOOKMARK annotated
    ``k8s.io/initial-events-end``: the whole state of ``list_key`` at the bookmark's
    resourceVersion, applied exactly as a whole list response would be."""

    list_key: keys.ListKey
    lines: tuple[bytes, ...]
    protobuf: bool = False
    """``lines`` are protobuf frames: converted to JSON first, all or nothing."""

    @property
    def size(self) -> int:
        return sum(len(line) for line in self.lines)


@dataclasses.dataclass(frozen=True, slots=True)
class PutDocument:
    """A non-resource document (``/version``, discovery) as received."""

    key: str
    content_type: str
    body: wire.Buffer

    @property
    def size(self) -> int:
        return len(self.body)


@dataclasses.dataclass(frozen=True, slots=True)
class DropCorrupt:
    """Rows that failed their check when read: remove them, and every list record that counted
    one of them as a member (that list is no longer whole)."""

    names: tuple[str, ...]

    @property
    def size(self) -> int:
        return 0


Job = PutObject | PutList | WatchLines | InitialEvents | PutDocument | DropCorrupt
