"""udev rule parsing and matching for the udev discovery handler (pure: no pyudev here).

A rule is a comma-separated list of match terms ``FIELD[{key}]OP"value"`` (Akri reference
§8.2). Only matching is supported: ``==`` and ``!=`` on ``DEVPATH KERNEL KERNELS SUBSYSTEM
SUBSYSTEMS DRIVER DRIVERS TAG TAGS ATTR{k} ATTRS{k} ENV{k}``. Assignment operators, udev's
action keys (``NAME``, ``RUN{}``, ...) and unknown names are parse errors that give the
1-based column, so a Configuration author sees exactly what to fix.

Matching semantics (kept from Akri so existing Configurations find the same devices):
  * a glob (glibc ``fnmatch(3)``, as libudev) for what Akri hands to libudev's enumerator:
    ``==`` on DEVPATH, KERNEL, SUBSYSTEM, TAG, ATTR, ENV and ``!=`` on SUBSYSTEM and ATTR;
  * a regular expression that must match the whole value for everything else: ``!=`` on
    DEVPATH/KERNEL/ENV/TAG, DRIVER, and the ancestor-walking SUBSYSTEMS, ATTRS, DRIVERS,
    KERNELS and TAGS.

Every value is compiled once, at parse time, by ``discovery.patterns`` on RE2: matching is
linear-time whatever a Configuration says, and regular expressions mean what they mean in
Akri's Rust ``regex`` (constructs where the two engines disagree are parse errors). A value
is at most ``patterns.MAX_PATTERN_BYTES`` long and a rule has at most ``MAX_TERMS`` terms.

Deliberate differences from Akri ([quirk]s, decided for the careful user):
  * Every term must hold (AND, as in udev). Akri passes repeated ``KERNEL==``/``SUBSYSTEM==``/
    ``ENV==`` terms to libudev, which ORs them.
  * ``DEVPATH==`` restricts the result; Akri's libudev ``add_syspath`` *adds* that device.
  * Glob values support udev's ``|`` alternatives (``KERNEL=="video*|vbi*"``).
  * An invalid regular expression is a parse error (Akri's handler panics).
  * Values may contain any printable character except ``"`` (Akri rejects ``( ) + ^ , = @``
    and others, which makes real attribute values unmatchable).
  * A trailing comma is accepted, as udev does.

:func:`enumerator_matches` lists the terms that can be pre-filtered by libudev. Libudev ORs
some of them, so it yields a superset; :func:`matches` is always applied afterwards and
is the only source of truth.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterable, Iterator
from typing import Protocol

from discovery import patterns


class Field(enum.Enum):
    DEVPATH = "DEVPATH"
    KERNEL = "KERNEL"
    KERNELS = "KERNELS"
    SUBSYSTEM = "SUBSYSTEM"
    SUBSYSTEMS = "SUBSYSTEMS"
    DRIVER = "DRIVER"
    DRIVERS = "DRIVERS"
    TAG = "TAG"
    TAGS = "TAGS"
    ATTR = "ATTR"
    ATTRS = "ATTRS"
    ENV = "ENV"


KEYED = frozenset({Field.ATTR, Field.ATTRS, Field.ENV})

# udev keys that exist but are not matches we can evaluate against enumerated devices.
UNSUPPORTED = frozenset(
    {
        "ACTION", "NAME", "SYMLINK", "PROGRAM", "RESULT", "TEST", "CONST", "SECLABEL",
        "SYSCTL", "LABEL", "GOTO", "GROUP", "IMPORT", "OPTIONS", "OWNER", "MODE", "RUN",
        "WAIT_FOR",
    }
)  # fmt: skip

ASSIGNMENTS = ("+=", "-=", ":=", "=")

MAX_TERMS = 64
"""Terms in one rule: each costs one match per device (and ancestor) scanned."""


class Op(enum.Enum):
    EQ = "=="
    NE = "!="


class RuleError(ValueError):
    """A rule does not parse; ``column`` is 1-based."""

    def __init__(self, column: int, message: str) -> None:
        self.column = column
        self.message = message
        super().__init__(f"column {column}: {message}")


@dataclasses.dataclass(frozen=True, slots=True)
class Term:
    field: Field
    key: str | None
    op: Op
    value: str
    column: int
    pattern: patterns.Pattern
    """``value`` compiled: a glob or a regular expression (see :func:`uses_glob`)."""

    def __str__(self) -> str:
        key = f"{{{self.key}}}" if self.key is not None else ""
        return f'{self.field.value}{key}{self.op.value}"{self.value}"'


def uses_glob(field: Field, op: Op) -> bool:
    """Whether ``field op`` compares with a glob (else a whole-value regular expression)."""
    if op is Op.EQ:
        return field in (
            Field.DEVPATH, Field.KERNEL, Field.SUBSYSTEM, Field.TAG, Field.ATTR, Field.ENV
        )  # fmt: skip
    return field in (Field.SUBSYSTEM, Field.ATTR)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _is_text(ch: str) -> bool:
    return ch.isprintable() and ch != '"'


def parse(rule: str) -> tuple[Term, ...]:
    """Parse one rule; the empty rule (or only spaces) has no terms and matches everything."""
    terms: list[Term] = []
    pos = _skip_spaces(rule, 0)
    while pos < len(rule):
        if len(terms) == MAX_TERMS:
            raise RuleError(pos + 1, f"a rule has at most {MAX_TERMS} terms")
        term, pos = _parse_term(rule, pos)
        terms.append(term)
        pos = _skip_spaces(rule, pos)
        if pos >= len(rule):
            break
        if rule[pos] != ",":
            raise RuleError(pos + 1, f"expected ',' between terms, found {rule[pos]!r}")
        pos = _skip_spaces(rule, pos + 1)
    return tuple(terms)


def _skip_spaces(rule: str, pos: int) -> int:
    while pos < len(rule) and rule[pos] in " \t":
        pos += 1
    return pos


def _parse_term(rule: str, start: int) -> tuple[Term, int]:
    found = _NAME.match(rule, start)
    if found is None:
        raise RuleError(start + 1, f"expected a field name, found {rule[start]!r}")
    name = found.group(0)
    pos = found.end()
    if name in UNSUPPORTED:
        raise RuleError(
            start + 1,
            f"unsupported field {name}: only match fields are allowed "
            f"({', '.join(f.value for f in Field)})",
        )
    try:
        field = Field(name)
    except ValueError:
        raise RuleError(
            start + 1,
            f"unknown field {name!r} (supported: {', '.join(f.value for f in Field)})",
        ) from None
    key: str | None = None
    if pos < len(rule) and rule[pos] == "{":
        end = pos + 1
        while end < len(rule) and rule[end] != "}" and _is_text(rule[end]):
            end += 1
        if end >= len(rule) or rule[end] != "}":
            raise RuleError(pos + 1, f"unterminated {{key}} after {name}")
        key = rule[pos + 1 : end]
        if not key.strip():
            raise RuleError(pos + 1, f"empty {{key}} after {name}")
        pos = end + 1
    if field in KEYED and key is None:
        raise RuleError(start + 1, f"{name} needs a key, e.g. {name}{{idVendor}}")
    if field not in KEYED and key is not None:
        raise RuleError(start + 1, f"{name} takes no {{key}}")

    op_text = rule[pos : pos + 2]
    if op_text in ("==", "!="):
        op = Op(op_text)
        pos += 2
    else:
        for assignment in ASSIGNMENTS:
            if rule.startswith(assignment, pos):
                raise RuleError(
                    pos + 1,
                    f"assignment operator {assignment!r} is not supported: "
                    "discovery only matches devices (use == or !=)",
                )
        shown = rule[pos] if pos < len(rule) else "end of rule"
        hint = " (no spaces inside a term)" if shown in " \t" else ""
        raise RuleError(pos + 1, f"expected == or != after {name}, found {shown!r}{hint}")

    if pos >= len(rule) or rule[pos] != '"':
        raise RuleError(pos + 1, "expected a value in double quotes (no spaces inside a term)")
    end = pos + 1
    while end < len(rule) and rule[end] != '"':
        if not _is_text(rule[end]):
            raise RuleError(end + 1, f"control character {rule[end]!r} in value")
        end += 1
    if end >= len(rule):
        raise RuleError(pos + 1, "unterminated value: missing closing '\"'")
    value = rule[pos + 1 : end]
    glob = uses_glob(field, op)
    try:
        pattern = patterns.glob(value) if glob else patterns.regex(value)
    except patterns.PatternError as e:
        what = "glob" if glob else "regular expression"
        raise RuleError(pos + 2 + e.offset, f"invalid {what}: {e.message}") from e
    return Term(field, key, op, value, start + 1, pattern), end + 1


# --------------------------------------------------------------------------- matching


class DeviceView(Protocol):
    """What matching needs from a device (pyudev devices are adapted to this)."""

    @property
    def devpath(self) -> str: ...
    @property
    def sys_name(self) -> str: ...
    @property
    def subsystem(self) -> str | None: ...
    @property
    def driver(self) -> str | None: ...
    @property
    def tags(self) -> tuple[str, ...]: ...
    @property
    def parent(self) -> DeviceView | None: ...
    def property(self, key: str) -> str | None: ...
    def attribute(self, key: str) -> str | None: ...


def _lineage(device: DeviceView) -> Iterator[DeviceView]:
    current: DeviceView | None = device
    while current is not None:
        yield current
        current = current.parent


def _own_value(term: Term, device: DeviceView) -> Iterable[str]:
    """The value(s) of ``term.field`` on one device (several for tags; none if absent)."""
    match term.field:
        case Field.DEVPATH:
            return (device.devpath,)
        case Field.KERNEL | Field.KERNELS:
            return (device.sys_name,)
        case Field.SUBSYSTEM | Field.SUBSYSTEMS:
            return () if device.subsystem is None else (device.subsystem,)
        case Field.DRIVER | Field.DRIVERS:
            return () if device.driver is None else (device.driver,)
        case Field.TAG | Field.TAGS:
            return device.tags
        case Field.ATTR | Field.ATTRS:
            value = device.attribute(term.key or "")
            return () if value is None else (value,)
        case Field.ENV:
            value = device.property(term.key or "")
            return () if value is None else (value,)


def _compare(term: Term, value: str) -> bool:
    return term.pattern.fullmatch(value)


def term_matches(term: Term, device: DeviceView) -> bool:
    if term.field in (Field.KERNELS, Field.SUBSYSTEMS, Field.DRIVERS, Field.ATTRS, Field.TAGS):
        found = any(
            _compare(term, value) for dev in _lineage(device) for value in _own_value(term, dev)
        )
    else:
        values = tuple(_own_value(term, device))
        if not values and term.field is Field.DRIVER:
            # No driver: only DRIVER!= passes (Akri).
            return term.op is Op.NE
        found = any(_compare(term, value) for value in values)
    return found if term.op is Op.EQ else not found


def matches(terms: Iterable[Term], device: DeviceView) -> bool:
    return all(term_matches(term, device) for term in terms)


@dataclasses.dataclass(frozen=True, slots=True)
class EnumeratorMatch:
    """One libudev enumerator filter (``method`` is the pyudev ``Enumerator`` method)."""

    method: str
    args: tuple[str, ...]
    nomatch: bool = False


def enumerator_matches(terms: Iterable[Term]) -> list[EnumeratorMatch]:
    """The libudev pre-filters for ``terms`` (a superset of the result, see module doc).

    Values with ``|`` alternatives are not pushed: libudev's fnmatch has no alternation.
    """
    out: list[EnumeratorMatch] = []
    for term in terms:
        if "|" in term.value:
            continue
        if term.op is Op.EQ:
            match term.field:
                case Field.KERNEL:
                    out.append(EnumeratorMatch("match_sys_name", (term.value,)))
                case Field.TAG:
                    out.append(EnumeratorMatch("match_tag", (term.value,)))
                case Field.SUBSYSTEM:
                    out.append(EnumeratorMatch("match_subsystem", (term.value,)))
                case Field.ATTR:
                    out.append(EnumeratorMatch("match_attribute", (term.key or "", term.value)))
                case Field.ENV:
                    out.append(EnumeratorMatch("match_property", (term.key or "", term.value)))
        else:
            match term.field:
                case Field.SUBSYSTEM:
                    out.append(EnumeratorMatch("match_subsystem", (term.value,), nomatch=True))
                case Field.ATTR:
                    out.append(
                        EnumeratorMatch(
                            "match_attribute", (term.key or "", term.value), nomatch=True
                        )
                    )
    return out
