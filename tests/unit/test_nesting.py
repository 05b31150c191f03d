"""Nesting bounds (issue 27 item 6): ``inputbounds.nesting``, the one copy the hub, the agent
and the manager share."""

from __future__ import annotations

import sys
from typing import Any

import orjson
import pytest
import yaml

from inputbounds import nesting


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
def test_depth_counts_collections(value: Any, expected: int) -> None:
    assert nesting.depth(value) == expected
    nesting.check(value)


def test_past_the_limit_is_too_deep_without_recursing() -> None:
    # Deeper than Python's recursion limit: only an iterative count gets through.
    deep = nested_lists(sys.getrecursionlimit() * 5)
    assert nesting.depth(deep) == nesting.MAX_DEPTH + 1  # counting stopped there
    assert nesting.depth(deep, limit=10) == 11
    with pytest.raises(nesting.TooDeep, match="nested deeper than 200 levels") as caught:
        nesting.check(deep)
    assert isinstance(caught.value, ValueError) and caught.value.limit == 200
    with pytest.raises(nesting.TooDeep, match="deeper than 3 levels"):
        nesting.check({"a": {"b": {"c": {}}}}, limit=3)
    nesting.check({"a": {"b": {"c": {}}}}, limit=4)


def test_what_passes_the_bound_encodes() -> None:
    """The bound keeps below orjson's encoder limit, with room to wrap an object."""
    orjson.dumps({"items": [{"object": nested_lists(nesting.MAX_DEPTH)}]})
    with pytest.raises(TypeError):
        orjson.dumps(nested_lists(255))


@pytest.mark.parametrize(
    "text",
    [
        "[" * 5_000 + "]" * 5_000,
        "{a: " * 5_000 + "1" + "}" * 5_000,
        "".join(" " * i + "k:\n" for i in range(1_500)),
        "- " * 1_500 + "x",
    ],
)
def test_yaml_past_the_limit_is_a_yaml_error(text: str) -> None:
    with pytest.raises(yaml.YAMLError, match="nested deeper than 200 levels"):
        nesting.load_yaml(text)


def test_yaml_within_the_limit_loads_as_safe_load() -> None:
    text = "[" * 200 + "]" * 200
    assert nesting.load_yaml(text) == yaml.safe_load(text)
    doc = "a: {b: [1, 2, {c: d}]}\nlist:\n  - x\n  - y: z\n"
    assert nesting.load_yaml(doc) == yaml.safe_load(doc)
    assert nesting.load_yaml(b"k: v") == {"k": "v"}
    with pytest.raises(yaml.YAMLError):
        nesting.load_yaml("!!python/object:os.system {}")  # still the safe loader
