"""Nesting bounds (issue 27 item 6): ``yurthub.nesting`` and its agent/manager copy
``kubecontrol.nesting``, the same table on both."""

from __future__ import annotations

import sys
import types
from typing import Any

import orjson
import pytest
import yaml

import kubecontrol.nesting
import yurthub.nesting

MODULES = [yurthub.nesting, kubecontrol.nesting]


def nested_lists(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


def nested_dicts(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value, "b": [1, 2]}
    return value


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, 0),
        ("text", 0),
        ([], 1),
        ({}, 1),
        ({"a": []}, 2),
        ([1, {"a": [{"b": 2}]}, 3], 4),
        ({"wide": [[1]] * 10_000, "deep": {"x": {"y": {}}}}, 4),
        ((1, (2,)), 2),
        (nested_lists(200), 200),
        (nested_dicts(150), 151),
    ],
)
def test_depth_counts_collections(module: types.ModuleType, value: Any, expected: int) -> None:
    assert module.depth(value) == expected
    module.check(value)


@pytest.mark.parametrize("module", MODULES)
def test_past_the_limit_is_too_deep_without_recursing(module: types.ModuleType) -> None:
    # Deeper than Python's recursion limit: only an iterative count gets through.
    deep = nested_lists(sys.getrecursionlimit() * 5)
    assert module.depth(deep) == module.MAX_DEPTH + 1  # counting stopped there
    assert module.depth(deep, limit=10) == 11
    with pytest.raises(module.TooDeep, match="nested deeper than 200 levels") as caught:
        module.check(deep)
    assert isinstance(caught.value, ValueError) and caught.value.limit == 200
    with pytest.raises(module.TooDeep, match="deeper than 3 levels"):
        module.check({"a": {"b": {"c": {}}}}, limit=3)
    module.check({"a": {"b": {"c": {}}}}, limit=4)


@pytest.mark.parametrize("module", MODULES)
def test_what_passes_the_bound_encodes(module: types.ModuleType) -> None:
    """The bound keeps below orjson's encoder limit, with room to wrap an object."""
    orjson.dumps({"items": [{"object": nested_lists(module.MAX_DEPTH)}]})
    with pytest.raises(TypeError):
        orjson.dumps(nested_lists(255))


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize(
    "text",
    [
        "[" * 5_000 + "]" * 5_000,
        "{a: " * 5_000 + "1" + "}" * 5_000,
        "".join(" " * i + "k:\n" for i in range(1_500)),
        "- " * 1_500 + "x",
    ],
)
def test_yaml_past_the_limit_is_a_yaml_error(module: types.ModuleType, text: str) -> None:
    with pytest.raises(yaml.YAMLError, match="nested deeper than 200 levels"):
        module.load_yaml(text)


@pytest.mark.parametrize("module", MODULES)
def test_yaml_within_the_limit_loads_as_safe_load(module: types.ModuleType) -> None:
    text = "[" * 200 + "]" * 200
    assert module.load_yaml(text) == yaml.safe_load(text)
    doc = "a: {b: [1, 2, {c: d}]}\nlist:\n  - x\n  - y: z\n"
    assert module.load_yaml(doc) == yaml.safe_load(doc)
    assert module.load_yaml(b"k: v") == {"k": "v"}
    with pytest.raises(yaml.YAMLError):
        module.load_yaml("!!python/object:os.system {}")  # still the safe loader
