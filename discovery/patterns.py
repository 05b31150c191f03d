"""Patterns written by users (udev rule values): regular expressions and globs on RE2.

Pure: compiles and matches, no I/O. Every pattern a Configuration can carry is compiled
here, once, when its details are parsed, into one linear-time engine (Google RE2 through
``google-re2``): matching a value costs O(len(pattern) * len(value)) whatever the pattern,
and RE2 drops the GIL while it runs, so a hostile ``DEVPATH!="(.|.)*!"`` can neither take
seconds per device (Python's backtracking ``re`` does) nor freeze an event loop sharing the
process. A pattern is at most ``MAX_PATTERN_BYTES`` long and its compiled program at most
``MAX_PROGRAM_BYTES``; larger ones are a :class:`PatternError`, never a slow match.

Regular expressions (:func:`regex`) keep the meaning they have in Akri, whose udev handler
uses the Rust ``regex`` crate. RE2 and that crate share their syntax and semantics except
for a few constructs; the ones RE2 would accept with *another* meaning are refused here with
a message naming them, so an accepted pattern matches the same values in both:

  * nested character classes (``[a[bc]]``) and class set operations (``&&``, ``--``, ``~~``
    inside ``[...]``): RE2 reads them as literal characters;
  * ``\\C`` (any byte: RE2 only) and ``\\u``/``\\U`` escapes (Rust only: write ``\\x{...}``).

Other differences (documented in docs/discovery.md): ``\\d \\s \\w \\b`` are ASCII-only here and
Unicode-aware in Rust; ``\\p{...}`` knows general categories and scripts only; a counted
repetition is at most ``{1000}``; the ``x`` (verbose) flag does not exist. Such patterns fail
to compile, with RE2's message; none changes meaning. Python-only syntax that the previous
``re``-based matcher accepted (back-references, look-around, ``\\Z``) fails the same way.

Globs (:func:`glob`) have glibc ``fnmatch(3)`` semantics with no flags, as libudev uses for
its enumerator matches: ``*``, ``?``, ``[...]`` with ``!``/``^`` negation, ranges and
``[:class:]``, backslash quoting; plus udev's ``|`` alternatives. They are translated to RE2,
so they too are compiled once and matched in linear time.

Danger: ``google-re2`` caches the last 128 compiled patterns per process (its ``compile``
LRU); with the size bounds above that cache stays below a few MiB.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import re2

MAX_PATTERN_BYTES = 1024
"""Longest pattern (UTF-8 bytes). udev values are short; this only stops abuse."""
MAX_PROGRAM_BYTES = 1 << 20
"""RE2's memory budget per compiled pattern (its ``max_mem``): ``(a{100}){100}`` fits in
1 KiB of text but not in this."""

_POSIX_CLASSES = frozenset(
    {
        "alnum", "alpha", "blank", "cntrl", "digit", "graph", "lower", "print", "punct",
        "space", "upper", "xdigit",
    }
)  # fmt: skip


class PatternError(ValueError):
    """A pattern that is refused; ``offset`` is the 0-based character offset it concerns."""

    def __init__(self, offset: int, message: str) -> None:
        self.offset = offset
        self.message = message
        super().__init__(message)


@dataclasses.dataclass(frozen=True, slots=True)
class Pattern:
    """A compiled pattern; equal when kind and source are."""

    kind: Literal["regex", "glob"]
    source: str
    _compiled: Any = dataclasses.field(compare=False, repr=False)

    def fullmatch(self, value: str) -> bool:
        """Whether the whole of ``value`` matches."""
        # Bytes, encoded here: pyudev decodes sysfs with surrogateescape, which the binding's
        # own strict encoding would turn into an exception in the middle of a scan.
        return self._compiled.fullmatch(value.encode("utf-8", "surrogatepass")) is not None


def _options(dot_nl: bool) -> Any:
    options = re2.Options()
    options.max_mem = MAX_PROGRAM_BYTES
    options.log_errors = False  # RE2 would print every refused pattern on stderr
    options.never_capture = True  # only "does it match" is asked
    options.dot_nl = dot_nl
    return options


def _check_size(source: str) -> None:
    try:
        size = len(source.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise PatternError(e.start, "pattern is not valid Unicode (lone surrogate)") from None
    if size > MAX_PATTERN_BYTES:
        raise PatternError(0, f"pattern is {size} bytes long; at most {MAX_PATTERN_BYTES}")


def _compile(source: str, translated: str, dot_nl: bool) -> Any:
    try:
        return re2.compile(translated, _options(dot_nl))
    except re2.error as e:
        raw = e.args[0] if e.args else ""
        message = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)) or (
            "invalid pattern"
        )
        if "too large" in message:
            message = f"pattern is too large once compiled (over {MAX_PROGRAM_BYTES} bytes)"
        raise PatternError(0, message) from None


def regex(source: str) -> Pattern:
    """Compile a regular expression in Akri's (Rust ``regex``) dialect; see the module doc."""
    _check_size(source)
    _refuse_ambiguous(source)
    return Pattern("regex", source, _compile(source, source, dot_nl=False))


def _refuse_ambiguous(source: str) -> None:
    """Refuse what RE2 accepts with a meaning other than the Rust crate's."""
    i = 0
    in_class = False
    class_start = 0
    while i < len(source):
        ch = source[i]
        if ch == "\\":
            escaped = source[i + 1 : i + 2]
            if escaped == "C":
                raise PatternError(i, r"\C (any byte) is not supported")
            if escaped in ("u", "U"):
                raise PatternError(i, rf"\{escaped} escapes are not supported; write \x{{...}}")
            i += 2
            continue
        if not in_class:
            if ch == "[":
                in_class, class_start = True, i
                i += 1
                # A leading '^' and then a leading ']' are part of the class, not its end.
                if source[i : i + 1] == "^":
                    i += 1
                if source[i : i + 1] == "]":
                    i += 1
                continue
            i += 1
            continue
        if ch == "]":
            in_class = False
        elif ch == "[":
            if source[i + 1 : i + 2] == ":":
                end = source.find(":]", i + 2)
                if end != -1:
                    i = end + 2
                    continue
            raise PatternError(
                i, f"nested character class in the class at offset {class_start} is not supported"
            )
        elif source[i : i + 2] in ("&&", "--", "~~"):
            raise PatternError(
                i, f"character class set operation {source[i : i + 2]!r} is not supported"
            )
        i += 1


def glob(source: str) -> Pattern:
    """Compile a udev glob (fnmatch(3) without flags, plus ``|`` alternatives)."""
    _check_size(source)
    translated = "|".join(_translate_glob(alternative) for alternative in source.split("|"))
    return Pattern("glob", source, _compile(source, f"(?:{translated})", dot_nl=True))


def _literal(ch: str) -> str:
    return ch if ch.isascii() and ch.isalnum() else f"\\x{{{ord(ch):x}}}"


def _translate_glob(source: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(source):
        ch = source[i]
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[":
            translated, end = _translate_bracket(source, i)
            if translated is None:
                out.append(_literal("["))  # unterminated: a literal '[' (fnmatch(3))
            else:
                out.append(translated)
                i = end
                continue
        elif ch == "\\":
            if i + 1 == len(source):
                # fnmatch(3) calls such a pattern invalid and matches nothing with it.
                raise PatternError(i, "a glob cannot end in a lone backslash (write \\\\)")
            i += 1
            out.append(_literal(source[i]))
        else:
            out.append(_literal(ch))
        i += 1
    return "".join(out)


def _translate_bracket(source: str, start: int) -> tuple[str | None, int]:
    """The RE2 class for the bracket expression at ``start`` and the offset after it, or
    ``(None, start)`` when it is not terminated."""
    i = start + 1
    negate = source[i : i + 1] in ("!", "^")
    if negate:
        i += 1
    items: list[str] = []
    first = True
    while i < len(source):
        ch = source[i]
        if ch == "]" and not first:
            if not items:
                return ("[^\\x00-\\x{10ffff}]" if not negate else "(?s:.)"), i + 1
            return f"[{'^' if negate else ''}{''.join(items)}]", i + 1
        first = False
        if ch == "[" and source[i + 1 : i + 2] in (":", "=", "."):
            kind = source[i + 1]
            end = source.find(kind + "]", i + 2)
            if end == -1:
                return None, start
            name = source[i + 2 : end]
            if kind != ":":
                raise PatternError(i, f"[{kind}{name}{kind}] is not supported in a glob")
            if name not in _POSIX_CLASSES:
                raise PatternError(i, f"unknown character class [:{name}:]")
            items.append(f"[:{name}:]")
            i = end + 2
            continue
        if ch == "\\" and i + 1 < len(source):
            i += 1
            ch = source[i]
        low = ch
        i += 1
        if source[i : i + 1] == "-" and i + 1 < len(source) and source[i + 1] != "]":
            high = source[i + 1]
            i += 2
            if high == "\\" and i < len(source):
                high = source[i]
                i += 1
            if ord(low) <= ord(high):
                items.append(f"{_literal(low)}-{_literal(high)}")
            # A reversed range matches nothing (glibc), so it adds nothing.
            continue
        items.append(_literal(low))
    return None, start
