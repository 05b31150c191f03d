"""YurtHub's (Go pflag) flag spellings, translated for click, so an OpenYurt static Pod's
arguments work unchanged.

PURE: an argument list in, an argument list and the names of dropped flags out.

What pflag accepts and click does not:

- booleans with a value: ``--enable-dummy-if=false`` / ``=true`` (any of Go's
  ``strconv.ParseBool`` spellings) become ``--no-enable-dummy-if`` / ``--enable-dummy-if``;
- klog's ``--v=2`` (and ``--v 2``): our ``--v`` option (verbosity, mapped onto log levels);
- flags of any YurtHub release that this hub does not implement (``--profiling``,
  ``--gc-frequency``, ``--access-server-through-hub``, v0.x's ``--cert-mgr-mode``, klog's
  ``--logtostderr``, ...): accepted and dropped, with their value, and the caller warns once
  naming them, so nothing is silently ignored and an old manifest never crash-loops. The table
  (``yurthubflags.json``, generated from the releases' own ``options.go``) knows which of them
  take a value, so ``--gc-frequency 120`` drops both words and ``--profiling x`` only the first.

Everything else is left to click (``--flag=value`` and ``--flag value`` work as they are), so an
unknown flag is still an error. Nothing after ``--`` is touched.
"""

from __future__ import annotations

import enum
import importlib.resources
import json
from collections.abc import Iterable, Mapping
from typing import Any


class Kind(enum.Enum):
    BOOL = "bool"
    VALUE = "value"


TABLE = "yurthubflags.json"
"""Every flag of every YurtHub release read (``yurthubflags_generate.py`` writes it from the
releases' own sources): flag -> pflag type, first and last release, whether we build it."""


def kinds(table: Mapping[str, Any]) -> dict[str, Kind]:
    """PURE: {flag: Kind} of a parsed ``yurthubflags.json`` (a bool takes no separate value)."""
    flags: Mapping[str, Mapping[str, Any]] = table["flags"]
    return {name: Kind.BOOL if row["type"] == "bool" else Kind.VALUE for name, row in flags.items()}


def load_table() -> dict[str, Any]:
    """The committed table, read from beside this module."""
    data: dict[str, Any] = json.loads(
        importlib.resources.files(__package__).joinpath(TABLE).read_text()
    )
    return data


_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class PflagError(ValueError):
    """A pflag-style argument that has no meaning (e.g. ``--enable-dummy-if=maybe``)."""


def translate(
    args: Iterable[str],
    *,
    bool_flags: Iterable[str],
    value_flags: Iterable[str],
    plain_flags: Iterable[str] = (),
    yurthub: Mapping[str, Kind] | None = None,
) -> tuple[list[str], list[str]]:
    """(arguments for click, YurtHub flags dropped).

    ``bool_flags``: our on/off options (``--x/--no-x``) by name without dashes;
    ``value_flags``: our options taking a value; ``plain_flags``: our flags without a ``--no-``
    form (``--version``): ``=true`` sets them, ``=false`` leaves them out. ``yurthub``: the
    YurtHub flags to accept and drop (default: ``kinds(load_table())``); whatever else is left
    to click, which refuses what it does not know.
    """
    known = kinds(load_table()) if yurthub is None else yurthub
    bools, values, plain = frozenset(bool_flags), frozenset(value_flags), frozenset(plain_flags)
    out: list[str] = []
    dropped: list[str] = []
    items = list(args)
    i = 0
    while i < len(items):
        arg = items[i]
        i += 1
        if arg == "--":
            out.extend(items[i - 1 :])
            break
        if not arg.startswith("--") or len(arg) == 2:
            out.append(arg)
            continue
        name, has_value, value = arg[2:].partition("=")
        if name in bools:
            if not has_value or value in _TRUE:
                out.append(f"--{name}")
            elif value in _FALSE:
                out.append(f"--no-{name}")
            else:
                raise PflagError(f"--{name}={value}: not a boolean (true or false)")
            continue
        if name in plain:
            if not has_value or value in _TRUE:
                out.append(f"--{name}")
            elif value not in _FALSE:
                raise PflagError(f"--{name}={value}: not a boolean (true or false)")
            continue
        if name in values or (name.startswith("no-") and name[3:] in bools):
            out.append(arg)
            continue
        kind = known.get(name)
        if kind is None:
            out.append(arg)  # click reports it
            continue
        if name not in dropped:
            dropped.append(name)
        if kind is Kind.VALUE and not has_value and i < len(items):
            i += 1  # its value
    return out, dropped
