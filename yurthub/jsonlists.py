"""An incremental reader of JSON list bodies: items come out one at a time as bytes arrive.

PURE: bytes in, pieces out; no I/O.

Why: a list (every EndpointSlice of a cluster, 10,000 services) can be tens of megabytes of
JSON. Decoding it whole costs several times that in Python objects; this reader holds at most
one unfinished item (``max_item`` characters) plus what is not yet parsed of the current
chunk, and hands out each item as soon as it is complete. The response filters use it to send
a filtered list on as it streams, the hub's informers to read big lists in bounded memory.

Pieces, in order: ``Text`` (structure to copy: ``{``, a head member ``"kind":"ServiceList"``
as received, ``,``, ``"items":[``, ``]``, ``}``), ``Item`` (one decoded item and its exact
text), and after a failure ``Raw`` (bytes the reader could not follow, passed on unchanged).
Separators between items are not pieces: a reader that drops items places its own commas.

Parsing uses the stdlib's C scanner (``json.JSONDecoder.raw_decode``) on the decoded text. A
value counts as complete only when something follows it or the body ended (a number cut at a
chunk boundary would otherwise decode early). An attempt that fails for want of data is
retried only once the buffer has doubled (or the body ended), so a large item costs about two
decodes, not one per chunk.

Failure: bytes that are not UTF-8, a shape that is not a JSON object, trailing data, an item
longer than ``max_item``, a body that ends mid-way: ``broken`` says why, and everything not
yet handed out comes back as ``Raw`` bytes, exactly as received, as does every later chunk.
"""

from __future__ import annotations

import codecs
import dataclasses
import enum
import json
import re
from typing import Any

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


@dataclasses.dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class Item:
    value: Any
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class Raw:
    data: bytes


Piece = Text | Item | Raw


class _State(enum.Enum):
    START = enum.auto()
    KEY_OR_END = enum.auto()
    KEY = enum.auto()
    AFTER_MEMBER = enum.auto()
    ITEM_OR_END = enum.auto()
    ITEM = enum.auto()
    AFTER_ITEM = enum.auto()
    TAIL = enum.auto()


class _Incomplete(Exception):
    """More text is needed before the element at hand can be read."""


class _Broken(Exception):
    """The body is not a JSON object this reader can follow."""


class ListReader:
    """Feed a list body chunk by chunk; take its pieces."""

    def __init__(self, max_item: int) -> None:
        self._max_item = max_item
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._text = ""
        self._state = _State.START
        self._need = 0
        self.head: dict[str, Any] = {}
        """Members before (and after) ``items``, decoded: ``kind``, ``apiVersion``, ``metadata``."""
        self.items = 0
        self.broken = ""
        """Why the reader gave up (empty while it follows the body)."""

    @property
    def done(self) -> bool:
        """The whole object was read (only whitespace may follow)."""
        return self._state is _State.TAIL

    def feed(self, chunk: bytes) -> list[Piece]:
        if self.broken:
            return [Raw(chunk)] if chunk else []
        try:
            self._text += self._utf8.decode(chunk)
        except UnicodeDecodeError as e:
            return self._give_up(f"not UTF-8: {e}", chunk)
        if len(self._text) < self._need:
            return self._check_size([])
        return self._check_size(self._parse(ended=False))

    def finish(self) -> list[Piece]:
        """The body ended: the rest, and ``broken`` set when the object was not complete."""
        if self.broken:
            return []
        try:
            self._text += self._utf8.decode(b"", final=True)
        except UnicodeDecodeError as e:
            return self._give_up(f"not UTF-8: {e}", b"")
        pieces = self._parse(ended=True)
        if self.broken:
            return pieces
        if self._state is not _State.TAIL or self._text.strip():
            pieces.extend(self._give_up("the body ended before the list did", b""))
        return pieces

    def _check_size(self, pieces: list[Piece]) -> list[Piece]:
        if not self.broken and len(self._text) > self._max_item:
            pieces.extend(self._give_up(f"an element longer than {self._max_item} bytes", b""))
        return pieces

    def _give_up(self, why: str, chunk: bytes) -> list[Piece]:
        self.broken = why
        pending, _ = self._utf8.getstate()
        rest = self._text.encode("utf-8", "surrogatepass") + pending + chunk
        self._text = ""
        return [Raw(rest)] if rest else []

    def _parse(self, *, ended: bool) -> list[Piece]:
        out: list[Piece] = []
        text = self._text
        pos = 0
        try:
            while True:
                pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
                if pos >= len(text):
                    break
                pos = self._step(text, pos, out, ended)
        except _Incomplete:
            # Retry once there is twice as much (a big item costs ~2 decodes, not one per
            # chunk); ``pos`` is the start of the element that could not be read yet.
            self._need = 2 * (len(text) - pos) + 1
        except _Broken as e:
            self._text = text[pos:]
            out.extend(self._give_up(str(e), b""))
            return out
        else:
            self._need = 0
        self._text = text[pos:]
        return out

    def _value(self, text: str, pos: int, ended: bool) -> tuple[Any, int]:
        try:
            value, end = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            if ended:
                raise _Broken(f"not JSON: {e}") from e
            raise _Incomplete from e
        if end >= len(text) and not ended:
            raise _Incomplete  # "12" of "123", "tru" never decodes: wait for what follows
        return value, end

    def _step(self, text: str, pos: int, out: list[Piece], ended: bool) -> int:
        """Read one element at ``pos`` (not whitespace); the position after it."""
        char = text[pos]
        state = self._state
        if state is _State.START:
            if char != "{":
                raise _Broken("the body is not a JSON object")
            out.append(Text("{"))
            self._state = _State.KEY_OR_END
            return pos + 1
        if state in (_State.KEY_OR_END, _State.KEY):
            if char == "}" and state is _State.KEY_OR_END:
                out.append(Text("}"))
                self._state = _State.TAIL
                return pos + 1
            if char != '"':
                raise _Broken("a member name was expected")
            key, end = self._value(text, pos, ended)
            colon = _WS.match(text, end).end()  # type: ignore[union-attr]
            if colon >= len(text):
                raise _Incomplete
            if text[colon] != ":":
                raise _Broken("a ':' was expected")
            start = _WS.match(text, colon + 1).end()  # type: ignore[union-attr]
            if start >= len(text):
                raise _Incomplete
            if key == "items" and text[start] == "[":
                out.append(Text(text[pos : start + 1]))
                self._state = _State.ITEM_OR_END
                return start + 1
            value, end = self._value(text, start, ended)
            self.head[key] = value
            out.append(Text(text[pos:end]))
            self._state = _State.AFTER_MEMBER
            return end
        if state is _State.AFTER_MEMBER:
            if char == ",":
                out.append(Text(","))
                self._state = _State.KEY
            elif char == "}":
                out.append(Text("}"))
                self._state = _State.TAIL
            else:
                raise _Broken("',' or '}' was expected after a member")
            return pos + 1
        if state in (_State.ITEM_OR_END, _State.ITEM):
            if char == "]" and state is _State.ITEM_OR_END:
                out.append(Text("]"))
                self._state = _State.AFTER_MEMBER
                return pos + 1
            value, end = self._value(text, pos, ended)
            out.append(Item(value, text[pos:end]))
            self.items += 1
            self._state = _State.AFTER_ITEM
            return end
        if state is _State.AFTER_ITEM:
            if char == ",":
                self._state = _State.ITEM
            elif char == "]":
                out.append(Text("]"))
                self._state = _State.AFTER_MEMBER
            else:
                raise _Broken("',' or ']' was expected after an item")
            return pos + 1
        raise _Broken("data after the end of the list")
