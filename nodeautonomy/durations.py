"""Go's ``time.ParseDuration``: the syntax of ``node.openyurt.io/autonomy-duration``.

A duration is an optional sign and one or more ``<decimal><unit>`` parts (``90s``, ``1h30m``,
``1.5h``, ``300ms``); units ``ns``, ``us`` (``µs``/``μs``), ``ms``, ``s``, ``m``, ``h``. ``0``
alone needs no unit. No spaces, no days (``1d`` is an unknown unit, as in Go), at most
2^63-1 ns (about 292 years). Errors are ``ValueError`` with Go's wording, so an operator sees
the message ``kubectl`` users know.

Integer arithmetic throughout (nanoseconds): no overflow whatever the number of digits. Go
scales a fraction through a float64; here it is floored exactly, so a long fraction may come
out 1 ns apart from Go's (``0.3333333333333333333h``), never more.
"""

from __future__ import annotations

NANOSECOND = 1
MICROSECOND = 1_000 * NANOSECOND
MILLISECOND = 1_000 * MICROSECOND
SECOND = 1_000 * MILLISECOND
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE

_UNITS = {
    "ns": NANOSECOND,
    "us": MICROSECOND,
    "\u00b5s": MICROSECOND,  # micro sign
    "\u03bcs": MICROSECOND,  # Greek small letter mu
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
}
_MAX = (1 << 63) - 1
_DIGITS = frozenset("0123456789")


def _error(kind: str, text: str) -> ValueError:
    return ValueError(f'time: {kind} duration "{text}"')


def parse(text: str) -> int:
    """``text`` in nanoseconds (negative for ``-``); ValueError when Go would refuse it."""
    rest = text
    negative = False
    if rest[:1] in ("-", "+"):
        negative = rest[0] == "-"
        rest = rest[1:]
    if rest == "0":
        return 0
    if not rest:
        raise _error("invalid", text)
    total = 0
    while rest:
        whole, rest = _take_digits(rest)
        fraction = ""
        if rest[:1] == ".":
            fraction, rest = _take_digits(rest[1:])
            if not whole and not fraction:
                raise _error("invalid", text)
        elif not whole:
            raise _error("invalid", text)
        end = 0
        while end < len(rest) and rest[end] != "." and rest[end] not in _DIGITS:
            end += 1
        unit_text, rest = rest[:end], rest[end:]
        if not unit_text:
            raise ValueError(f'time: missing unit in duration "{text}"')
        unit = _UNITS.get(unit_text)
        if unit is None:
            raise ValueError(f'time: unknown unit "{unit_text}" in duration "{text}"')
        part = int(whole or "0") * unit
        if fraction:
            part += int(fraction) * unit // 10 ** len(fraction)
        total += part
        if total > _MAX + (1 if negative else 0):
            raise _error("invalid", text)
    return -total if negative else total


def _take_digits(text: str) -> tuple[str, str]:
    end = 0
    while end < len(text) and text[end] in _DIGITS:
        end += 1
    return text[:end], text[end:]


def format_seconds(seconds: int) -> str:
    """Whole seconds as Go's ``Duration.String`` prints them (``1h0m0s``; 90 -> ``1m30s``)."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{sign}{minutes}m{secs}s"
    return f"{sign}{secs}s"
