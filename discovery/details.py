"""Parsing and validating ``discoveryDetails`` text, with errors that name the bad field.

Akri parses details as YAML (so JSON works too). Handlers describe their schema with the
small checkers here; each raises :class:`DetailsError` carrying a dotted field path
(``udevRules[2]``, ``applicationNames.action``), which the SDK turns into gRPC
``INVALID_ARGUMENT`` and ``edgehub discover`` into a one-line error.

Invariants:
  * Empty text means an empty mapping: handlers whose fields are all optional accept it,
    handlers with required fields report the missing field by name.
  * Unknown keys are errors (a typo such as ``descriptons`` must not silently discover
    nothing).
  * Input is bounded (:data:`MAX_DETAILS_BYTES`) and YAML aliases are refused, so a hostile
    Configuration cannot make the handler expand a "billion laughs" document; so is nesting
    (``inputbounds.nesting.MAX_DEPTH`` levels: PyYAML's composer recurses, and 5,000 nested
    ``[`` were a ``RecursionError``), reported as invalid YAML naming the place.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import yaml

from inputbounds import nesting

MAX_DETAILS_BYTES = 256 * 1024


class DetailsError(ValueError):
    """``discoveryDetails`` are invalid; ``field`` names where (``""`` for the whole text)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


class _NoAliasLoader(nesting.BoundedSafeLoader):
    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases are not allowed in discoveryDetails", event.start_mark
            )
        return super().compose_node(parent, index)


def load(text: str) -> dict[str, Any]:
    """Parse details text (YAML or JSON) into a mapping; empty text is ``{}``."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_DETAILS_BYTES:
        raise DetailsError("", f"discoveryDetails larger than {MAX_DETAILS_BYTES} bytes")
    try:
        value = yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise DetailsError("", f"discoveryDetails are not valid YAML{where}: {problem}") from e
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DetailsError("", f"discoveryDetails must be a mapping, not {_kind(value)}")
    return mapping(value, "", None)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def join(parent: str, key: str | int) -> str:
    """The dotted path of ``key`` below ``parent`` (``a.b``, ``a[3]``)."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def mapping(value: object, field: str, allowed: Collection[str] | None) -> dict[str, Any]:
    """``value`` as a string-keyed mapping; keys outside ``allowed`` are errors."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DetailsError(field, f"expected a mapping, got {_kind(value)}")
    for key in value:
        if not isinstance(key, str):
            raise DetailsError(field, f"keys must be strings, got {key!r}")
        if allowed is not None and key not in allowed:
            expected = ", ".join(sorted(allowed)) or "no keys"
            raise DetailsError(join(field, key), f"unknown key (expected {expected})")
    return dict(value)


def required(values: Mapping[str, Any], key: str, parent: str = "") -> Any:
    if key not in values:
        raise DetailsError(join(parent, key), "required")
    return values[key]


def string(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise DetailsError(field, f"expected a string, got {_kind(value)}")
    return value


def string_list(value: object, field: str) -> list[str]:
    if not isinstance(value, list):
        raise DetailsError(field, f"expected a list of strings, got {_kind(value)}")
    return [string(item, join(field, i)) for i, item in enumerate(value)]


def boolean(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise DetailsError(field, f"expected true or false, got {_kind(value)}")
    return value


def number(value: object, field: str, *, minimum: float, maximum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DetailsError(field, f"expected a number, got {_kind(value)}")
    if not minimum <= value <= maximum:
        raise DetailsError(field, f"must be between {minimum:g} and {maximum:g}, got {value:g}")
    return float(value)


def choice(value: object, field: str, choices: Collection[str]) -> str:
    text = string(value, field)
    if text not in choices:
        raise DetailsError(field, f"expected one of {', '.join(choices)}, got {text!r}")
    return text
