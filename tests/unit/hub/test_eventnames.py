"""The names of the Events the hub makes itself (``yurthub.eventnames``): a valid DNS subdomain
for every valid node name, up to the longest, deterministic and distinct per node."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from yurthub import eventnames
from yurthub.cache import eventfolding
from yurthub.outages import records

SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
"""Kubernetes' IsDNS1123Subdomain, less its length (checked apart)."""


def valid(name: str) -> bool:
    return len(name) <= 253 and SUBDOMAIN.fullmatch(name) is not None


def long_node(length: int, pattern: str = "a") -> str:
    """A valid node name of ``length`` characters built from ``pattern``."""
    name = (pattern * length)[:length]
    return name[:-1] + "z"  # ends with a letter


NODES = [
    "edge-1",
    "n",
    long_node(180),
    long_node(220),
    long_node(224),  # the longest for which the EdgeOutageEnded name just fits
    long_node(225),
    long_node(253),
    long_node(253, "ab.c-"),  # dots and dashes wherever the cut falls
    long_node(253, "a-"),
    long_node(253, "a."),
    long_node(252, "x.") + "9",
    *(long_node(n, "a-b.") for n in range(190, 254)),
]


def edge_outage(node: str) -> str:
    return records.event_name(node, "0123456789abcdef")


def offline_events_dropped(node: str) -> str:
    bounds = eventfolding.Bounds(1000, 1 << 20)
    event = eventfolding.summary(node, 3, 1.0, 2.0, bounds, unique="18a2b3c4d5e6f708")
    name: str = event["metadata"]["name"]
    return name


@pytest.mark.parametrize("node", NODES, ids=lambda n: f"{len(n)}-{n[:6]}")
@pytest.mark.parametrize("name_of", [edge_outage, offline_events_dropped])
def test_every_event_name_the_hub_makes_is_valid_for_any_valid_node(
    node: str, name_of: Callable[[str], str]
) -> None:
    assert valid(node)
    name = name_of(node)
    assert valid(name), (len(name), name)
    assert name == name_of(node)  # deterministic: a retried post is a 409


@pytest.mark.parametrize(
    ("node", "what", "expected"),
    [
        ("edge-1", "edge-outage-ab12", "edge-1.edge-outage-ab12"),  # fits: as it always was
        (long_node(224), "edge-outage-" + "f" * 16, long_node(224) + ".edge-outage-" + "f" * 16),
    ],
)
def test_a_name_that_fits_is_left_as_it_was(node: str, what: str, expected: str) -> None:
    assert eventnames.on_node(node, what) == expected


def test_long_names_sharing_their_start_get_distinct_names() -> None:
    common = "a" * 240
    nodes = [f"{common}{suffix}" for suffix in ("-node-01", "-node-02", ".x", "bbbbbbbbbbbbz")]
    names = {edge_outage(n) for n in nodes}
    assert len(names) == len(nodes)
    assert all(valid(n) for n in names)
    assert all(n.endswith(".edge-outage-0123456789abcdef") for n in names)


def test_a_long_name_keeps_the_nodes_start_and_is_at_most_253() -> None:
    node = long_node(253, "edge-")
    name = edge_outage(node)
    assert len(name) <= 253 and name.startswith("edge-edge-")
