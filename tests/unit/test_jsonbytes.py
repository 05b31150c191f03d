"""Kept JSON is as big as its text (orjson hands over its whole output buffer)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import orjson

from yurthub import jsonbytes
from yurthub.pool import watchcache

SLICE = {
    "kind": "EndpointSlice",
    "apiVersion": "discovery.k8s.io/v1",
    "metadata": {"name": "web-x1", "namespace": "default", "resourceVersion": "7"},
    "addressType": "IPv4",
    "endpoints": [{"addresses": [f"10.0.0.{i}"], "nodeName": f"n{i}"} for i in range(8)],
}


def _held_per_object(make: Callable[[], object], n: int = 500) -> float:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [make() for _ in range(n)]
        return (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()


def test_the_same_bytes_in_a_bytes_of_their_own_length() -> None:
    objs: tuple[Any, ...] = (SLICE, {"a": "x" * 5000}, [], "é")
    for obj in objs:
        assert jsonbytes.dumps(obj) == orjson.dumps(obj)
    size = len(orjson.dumps(SLICE))
    assert _held_per_object(lambda: jsonbytes.dumps(SLICE)) < size + 100


def test_the_pool_keeps_each_object_at_about_its_size() -> None:
    size = len(orjson.dumps(SLICE))
    held = _held_per_object(
        lambda: watchcache.entry_of("endpointslices", SLICE, "EndpointSlice", "discovery.k8s.io/v1")
    )
    assert held < 2 * size + 1024, held  # the JSON, the label and field maps, the entry
