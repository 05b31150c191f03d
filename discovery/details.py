"""Parsing and validating ``discoveryDetails`` text, with errors that name the bad field.

Akri parses details as YAML (so JSON works too) with serde_yaml into each handler's struct;
edgehub reads them the same way, so a Configuration Akri accepts is accepted here:

  * A field Akri declares as a string takes any scalar as its text, as serde_yaml does:
    ``[1, yes, 0x1F, 1.50, ~]`` is ``["1", "yes", "0x1F", "1.50", "~"]``. :func:`load`
    therefore keeps every scalar as :class:`Scalar` (a ``str`` holding the text as written,
    quotes and escapes resolved, plus whether it was plain); the checkers give it a type.
  * Booleans, numbers and nulls follow YAML 1.2's core schema, as serde_yaml: only a plain
    ``true``/``True``/``TRUE``/``false``/... is a boolean (``yes`` is not), ``0x1F`` and
    ``0o17`` are integers, ``~``/``null``/empty is null; a quoted ``"true"`` is a string.
  * Unknown keys are accepted, as serde's structs accept them, and each is reported once in
    :func:`warnings_of` (a typo such as ``descriptons`` must not pass silently): handlers log
    them, the Configuration webhook returns them as admission warnings. Enum-like keys (a
    choice between variants) stay errors, as in serde.
  * Aliases and anchors are followed (serde_yaml does); ``<<`` is an ordinary key, not a
    merge (serde_yaml has no merge keys). PyYAML composes an alias as a reference to the
    anchored node, nothing is copied, and the checkers walk only the fields a handler declares,
    so an alias "bomb" costs nothing it would not cost written out once.
  * Empty text means an empty mapping: handlers whose fields are all optional accept it,
    handlers with required fields report the missing field by name.
  * Input is bounded (:data:`MAX_DETAILS_BYTES`), and so is nesting
    (``inputbounds.nesting.MAX_DEPTH`` levels: PyYAML's composer recurses, and 5,000 nested
    ``[`` were a ``RecursionError``), reported as invalid YAML naming the place.
"""

from __future__ import annotations

import re
import typing
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


class Scalar(str):
    """A YAML scalar as written (quotes and escapes resolved); ``plain`` if it was unquoted."""

    __slots__ = ("plain",)
    plain: bool

    def __new__(cls, text: str, plain: bool = False) -> Scalar:
        made = super().__new__(cls, text)
        made.plain = plain
        return made


class _Mapping(dict[str, Any]):
    """A loaded mapping; all of one document's share the list its warnings go to."""

    __slots__ = ("warnings",)
    warnings: list[str]


class _Loader(nesting.BoundedSafeLoader):
    """Scalars stay text (``Scalar``); mappings note their document's warnings; no merges."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.document_warnings: list[str] = []

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.ScalarNode):
            return Scalar(node.value, plain=node.style is None)
        return super().construct_object(node, deep)

    def flatten_mapping(self, node: Any) -> None:
        """serde_yaml has no merge keys: ``<<`` stays a key like any other."""

    def construct_yaml_map(self, node: Any) -> Any:
        data = _Mapping()
        data.warnings = self.document_warnings
        yield data
        # Every scalar key is a Scalar (a str); a list or mapping key is refused as unhashable.
        data.update(typing.cast(dict[str, Any], self.construct_mapping(node)))


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_yaml_map)


def load(text: str) -> dict[str, Any]:
    """Parse details text (YAML or JSON) into a mapping; empty text is ``{}``."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_DETAILS_BYTES:
        raise DetailsError("", f"discoveryDetails larger than {MAX_DETAILS_BYTES} bytes")
    loader = _Loader(text)
    try:
        value = loader.get_single_data()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise DetailsError("", f"discoveryDetails are not valid YAML{where}: {problem}") from e
    finally:
        loader.dispose()
    if value is None or is_null(value):
        empty = _Mapping()
        empty.warnings = loader.document_warnings
        return empty
    if not isinstance(value, dict):
        raise DetailsError("", f"discoveryDetails must be a mapping, not {_kind(value)}")
    return mapping(value, "", None)


def warnings_of(values: Mapping[str, Any]) -> tuple[str, ...]:
    """The warnings (unknown keys) noted so far in the document ``values`` was loaded from."""
    found = getattr(values, "warnings", None)
    return tuple(found) if isinstance(found, list) else ()


def warn(values: Mapping[str, Any], message: str) -> None:
    """Note ``message`` among the warnings of the document ``values`` was loaded from."""
    sink = getattr(values, "warnings", None)
    if isinstance(sink, list) and message not in sink:
        sink.append(message)


_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_TRUE = frozenset({"true", "True", "TRUE"})
_FALSE = frozenset({"false", "False", "FALSE"})
_INT = re.compile(r"[-+]?(?:0x[0-9a-fA-F]+|0o[0-7]+|0b[01]+|[0-9]+)")
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")


def is_null(value: object) -> bool:
    """``None``, or a plain ``~``/``null``/``Null``/``NULL``/empty scalar (YAML 1.2 core)."""
    return value is None or (isinstance(value, Scalar) and value.plain and value in _NULLS)


def optional(values: Mapping[str, Any], key: str) -> Any:
    """``values[key]``, or ``None`` when it is absent or null (a serde ``Option``)."""
    value = values.get(key)
    return None if is_null(value) else value


def _kind(value: object) -> str:
    if is_null(value):
        return "null"
    if isinstance(value, Scalar):
        if value.plain and (value in _TRUE or value in _FALSE):
            return "a boolean"
        if value.plain and _parse_number(value) is not None:
            return "a number"
        return "a string"
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


def mapping(
    value: object, field: str, allowed: Collection[str] | None, *, variants: bool = False
) -> dict[str, Any]:
    """``value`` as a string-keyed mapping (null is empty, as serde reads a struct).

    Keys outside ``allowed`` are ignored, as serde's structs ignore them, with a warning in
    the document's :func:`warnings_of`; with ``variants`` (the keys name an enum's variants)
    they are errors, as in serde.
    """
    if is_null(value):
        return {}
    if not isinstance(value, dict):
        raise DetailsError(field, f"expected a mapping, got {_kind(value)}")
    sink = getattr(value, "warnings", None)
    for key in value:
        if not isinstance(key, str):
            raise DetailsError(field, f"keys must be strings, got {key!r}")
        if allowed is not None and key not in allowed:
            expected = ", ".join(sorted(allowed)) or "no keys"
            if variants:
                raise DetailsError(join(field, key), f"unknown key (expected {expected})")
            note = f"{join(field, key)}: unknown key, ignored (expected {expected})"
            if isinstance(sink, list) and note not in sink:
                sink.append(note)
    kept = _Mapping(value)
    kept.warnings = sink if isinstance(sink, list) else []
    return kept


def required(values: Mapping[str, Any], key: str, parent: str = "") -> Any:
    if key not in values:
        raise DetailsError(join(parent, key), "required")
    return values[key]


def string(value: object, field: str) -> str:
    """Any scalar, as its text (serde_yaml's ``String``: ``~`` is ``"~"``, ``1.50`` ``"1.50"``)."""
    if not isinstance(value, str):
        raise DetailsError(field, f"expected a string, got {_kind(value)}")
    return str(value)


def string_list(value: object, field: str) -> list[str]:
    """A list of scalars as their texts; an empty plain value is an empty list (serde_yaml)."""
    if isinstance(value, Scalar) and value.plain and value == "":
        return []
    if not isinstance(value, list):
        raise DetailsError(field, f"expected a list of strings, got {_kind(value)}")
    return [string(item, join(field, i)) for i, item in enumerate(value)]


def boolean(value: object, field: str) -> bool:
    """A plain ``true``/``false`` (any of YAML 1.2's spellings); ``yes`` and ``"true"`` are not."""
    if isinstance(value, bool):
        return value
    if isinstance(value, Scalar) and value.plain and (value in _TRUE or value in _FALSE):
        return value in _TRUE
    raise DetailsError(field, f"expected true or false, got {_kind(value)}")


def _parse_number(value: Scalar) -> float | None:
    text = str(value)
    if _INT.fullmatch(text):
        sign = -1 if text.startswith("-") else 1
        digits = text.lstrip("+-")
        base = {"0x": 16, "0o": 8, "0b": 2}.get(digits[:2], 10)
        return float(sign * int(digits[2:] if base != 10 else digits, base))
    if _FLOAT.fullmatch(text):
        return float(text)
    return None


def number(value: object, field: str, *, minimum: float, maximum: float) -> float:
    """A plain YAML 1.2 integer (``10``, ``0x1F``, ``0o17``, ``0b1``) or decimal number."""
    parsed: float | None = None
    if isinstance(value, Scalar) and value.plain:
        parsed = _parse_number(value)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        parsed = float(value)
    if parsed is None:
        raise DetailsError(field, f"expected a number, got {_kind(value)}")
    if not minimum <= parsed <= maximum:
        raise DetailsError(field, f"must be between {minimum:g} and {maximum:g}, got {value}")
    return parsed


def choice(value: object, field: str, choices: Collection[str]) -> str:
    text = string(value, field)
    if text not in choices:
        raise DetailsError(field, f"expected one of {', '.join(choices)}, got {text!r}")
    return text
