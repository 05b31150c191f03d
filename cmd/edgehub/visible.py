"""Text from elsewhere made safe to print on a terminal.

PURE: strings in, strings out. What ``edgehub status`` shows comes from the hub and the
discovery agent, and much of it from further away: an apiserver's error message, the reason
the cloud gave for refusing an Event, names of components, pods and ServiceAccounts any local
process can choose. Printed as they are, an escape sequence in one of them clears the screen,
rewrites earlier lines, sets the window title or, on some terminals, answers back as typed
input; a newline forges a line; a right-to-left override reorders what follows.

``text`` replaces each such character with its escape, visibly: ESC is ``\\x1b`` (so
``ESC[2J`` shows as ``\\x1b[2J``), a newline ``\\n``, U+202E ``\\u202e``. Replaced: the C0
controls (tab and newline too: a screen lays out its own lines and columns), DEL, the C1
controls, Unicode's format characters (bidirectional overrides and isolates, zero-width
characters), line and paragraph separators, and lone surrogates (JSON may carry one; printing
it fails). Everything else, other scripts and emoji included, is left as it is. The result
holds no replaced character, so ``text`` applied twice changes nothing more.

``tree`` does it to every string of a JSON document, its keys too (bounded in depth: deeper
than ``MAX_DEPTH`` is cut, as the hub's documents are never that deep).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

MAX_DEPTH = 32
_REPLACED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_ASCII_SAFE = frozenset(chr(c) for c in range(0x20, 0x7F))


def _escape(char: str) -> str:
    code = ord(char)
    if char == "\n":
        return "\\n"
    if char == "\r":
        return "\\r"
    if char == "\t":
        return "\\t"
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _replaced(char: str) -> bool:
    if char in _ASCII_SAFE:
        return False
    return ord(char) < 0x20 or unicodedata.category(char) in _REPLACED_CATEGORIES


def text(value: object) -> str:
    """``value`` as a string a terminal shows as it is: control characters and the like
    replaced by their escapes."""
    found = value if isinstance(value, str) else str(value)
    if found.isascii() and found.isprintable():
        return found  # the usual case: nothing to look at
    return "".join(_escape(c) if _replaced(c) else c for c in found)


def tree(value: Any, depth: int = 0) -> Any:
    """A JSON document with ``text`` applied to every string in it (keys too)."""
    if isinstance(value, str):
        return text(value)
    if depth >= MAX_DEPTH:
        return None
    if isinstance(value, Mapping):
        return {text(k): tree(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [tree(v, depth + 1) for v in value]
    return value
