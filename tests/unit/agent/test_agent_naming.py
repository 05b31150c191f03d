"""Akri's naming vectors (reference §9 cases 1, 2, 8): a name that drifts breaks every Akri user."""

from __future__ import annotations

import pytest

from discovery.agent import naming


@pytest.mark.parametrize(
    ("device_id", "node", "expected"),
    [
        ("my_local_device", "my_node", "e77db4"),
        ("my_local_device", "my_other_node", "099763"),
        ("my_shared_device", None, "4294ea"),
        ("dev_1", None, "cb2ad7"),
        ("dev_2", None, "7bbc11"),
    ],
)
def test_device_hash(device_id: str, node: str | None, expected: str) -> None:
    assert naming.device_hash(device_id, node) == expected


def test_instance_and_cdi_names_of_a_local_device() -> None:
    digest = naming.device_hash("my_local_device", "my_node")
    assert naming.instance_name("my_config", digest) == "my_config-e77db4"
    assert naming.cdi_name("my_config", digest) == "akri.sh/my_config=e77db4"
    assert naming.cdi_kind("my_config") == "akri.sh/my_config"
    assert naming.split_cdi_name("akri.sh/my_config=e77db4") == ("my_config", "e77db4")
    assert naming.env_suffix(digest) == "E77DB4"
    assert naming.instance_digest("my-config-e77db4") == "e77db4"


@pytest.mark.parametrize("bad", ["akri.sh/x", "other/x=1", "akri.sh/=1", "x=1", "akri.sh/x="])
def test_split_cdi_name_rejects(bad: str) -> None:
    with pytest.raises(naming.NamingError):
        naming.split_cdi_name(bad)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("node-a", naming.NodeUsage("node-a")),
        ("C:vdev1:node-a", naming.ConfigurationUsage("vdev1", "node-a")),
        ("", None),
    ],
)
def test_parse_usage(value: str, expected: naming.SlotUsage) -> None:
    assert naming.parse_usage(value) == expected
    assert naming.format_usage(expected) == value


@pytest.mark.parametrize("bad", ["C:node-a", "a:b", "C::node-a", "X:v:n", "C:v:n:extra"])
def test_parse_usage_rejects(bad: str) -> None:
    with pytest.raises(naming.NamingError):
        naming.parse_usage(bad)


@pytest.mark.parametrize(
    ("slot", "expected"), [("my-other-slot-2", 2), ("instance-a-0", 0), ("x-17", 17)]
)
def test_slot_index(slot: str, expected: int) -> None:
    assert naming.slot_index(slot) == expected


@pytest.mark.parametrize(
    "bad",
    [
        "not-a-slot-id",
        "nodash",
        "x-",
        "x-1a",
        # Only ASCII digits (issue 14): int() takes these, str.isdigit() more still.
        "x-\u0663",  # ARABIC-INDIC DIGIT THREE: int() says 3
        "x-\uff11",  # FULLWIDTH DIGIT ONE
        "x-\u00b2",  # SUPERSCRIPT TWO: isdigit() but int() raises ValueError
        "x-+1",
        "x- 1",
        "x-01",  # not canonical: would alias x-1
        "x-" + "9" * 5000,  # int() refuses over 4300 digits (ValueError)
    ],
)
def test_slot_index_rejects(bad: str) -> None:
    with pytest.raises(naming.NamingError):
        naming.slot_index(bad)


def test_parse_device_usage_fills_free_slots() -> None:
    usage = {"slot-1": "node-a", "slot-3": "C:vdev1:node-a"}
    assert naming.parse_device_usage(usage, 4) == (
        None,
        naming.NodeUsage("node-a"),
        None,
        naming.ConfigurationUsage("vdev1", "node-a"),
    )


def test_parse_device_usage_strict_rejects_out_of_capacity() -> None:
    with pytest.raises(naming.NamingError):
        naming.parse_device_usage({"slot-1": "node-a", "slot-3": "C:vdev1:node-a"}, 1)


def test_parse_device_usage_lenient_drops_out_of_capacity() -> None:
    usage = {"slot-0": "node-a", "slot-3": "node-b"}
    assert naming.parse_device_usage(usage, 2, strict=False) == (naming.NodeUsage("node-a"), None)
