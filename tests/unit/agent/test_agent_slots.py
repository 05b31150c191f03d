"""Slot decisions (reference §9 cases 9, 10, and the §5.6 reclaimer fix)."""

from __future__ import annotations

import pytest

from discovery.agent import naming, slots

FOUR = {
    "instance-a-0": "C:config-a-1:node-a",
    "instance-a-1": "node-a",
    "instance-a-2": "node-b",
}


def test_health_per_slot() -> None:
    parsed = naming.parse_device_usage({"instance-a-1": "node-b"}, 3)
    assert slots.instance_health("instance-a", parsed, "node-a") == [
        ("instance-a-0", "Healthy"),
        ("instance-a-1", "Unhealthy"),
        ("instance-a-2", "Healthy"),
    ]
    parsed = naming.parse_device_usage(
        {"instance-a-0": "C:config-a-0:node-a", "instance-a-1": "node-b", "instance-a-2": "node-a"},
        3,
    )
    assert slots.instance_health("instance-a", parsed, "node-a") == [
        ("instance-a-0", "Unhealthy"),
        ("instance-a-1", "Unhealthy"),
        ("instance-a-2", "Healthy"),
    ]


@pytest.mark.parametrize("device_id", ["instance-a-0", "instance-a-2", "instance-a-4", "bogus"])
def test_claim_refuses_slots_held_elsewhere_or_unknown(device_id: str) -> None:
    with pytest.raises(slots.SlotUnavailable):
        slots.claim_instance_slots(FOUR, "instance-a", 4, [device_id], "node-a")


def test_claim_free_slot_keeps_everybody_elses() -> None:
    assert slots.claim_instance_slots(FOUR, "instance-a", 4, ["instance-a-3"], "node-a") == {
        **FOUR,
        "instance-a-3": "node-a",
    }


def test_claim_own_slot_again_is_idempotent() -> None:
    assert slots.claim_instance_slots(FOUR, "instance-a", 4, ["instance-a-1"], "node-a") == FOUR


def test_claim_is_all_or_nothing() -> None:
    with pytest.raises(slots.SlotUnavailable):
        slots.claim_instance_slots(
            FOUR, "instance-a", 4, ["instance-a-3", "instance-a-2"], "node-a"
        )


def test_configuration_claim_takes_first_free_slot_and_is_idempotent() -> None:
    usage, index = slots.claim_configuration_slot(FOUR, "instance-a", 4, "config-a-0", "node-a")
    assert index == 3
    assert usage == {**FOUR, "instance-a-3": "C:config-a-0:node-a"}
    again, index = slots.claim_configuration_slot(usage, "instance-a", 4, "config-a-0", "node-a")
    assert (again, index) == (usage, 3)
    with pytest.raises(slots.SlotUnavailable):
        slots.claim_configuration_slot(usage, "instance-a", 4, "config-a-2", "node-a")


def test_release_frees_only_own_slots() -> None:
    assert slots.release_slots(FOUR, ["instance-a-1", "instance-a-2", "missing"], "node-a") == {
        "instance-a-0": "C:config-a-1:node-a",
        "instance-a-2": "node-b",
    }
    assert slots.release_node(FOUR, "node-a") == {"instance-a-2": "node-b"}


def test_vdevs_one_free_per_instance_plus_held_ones_stable_ids() -> None:
    instances = {
        "i-1": naming.parse_device_usage({}, 2),
        "i-2": naming.parse_device_usage({"i-2-0": "node-b"}, 1),
    }
    first = slots.assign_vdevs("cfg", {}, instances, "node-a")
    assert first == {"cfg-0": slots.FreeVdev("i-1")}
    # kubelet allocates cfg-0 -> slot 0 of i-1; the held vdev keeps its id, a new free one appears.
    instances["i-1"] = naming.parse_device_usage({"i-1-0": "C:cfg-0:node-a"}, 2)
    second = slots.assign_vdevs("cfg", first, instances, "node-a")
    assert second == {"cfg-0": slots.UsedVdev("i-1", 0), "cfg-1": slots.FreeVdev("i-1")}
    # A new Instance with a free slot gets the smallest unused number; existing ids stay.
    instances["i-3"] = naming.parse_device_usage({}, 1)
    third = slots.assign_vdevs("cfg", second, instances, "node-a")
    assert third == {
        "cfg-0": slots.UsedVdev("i-1", 0),
        "cfg-1": slots.FreeVdev("i-1"),
        "cfg-2": slots.FreeVdev("i-3"),
    }


def test_used_device_ids_are_unprefixed() -> None:
    parsed = {"instance-a": naming.parse_device_usage(FOUR, 4)}
    assert slots.used_device_ids(parsed, "node-a") == {
        "config-a-1": ("instance-a", "instance-a-0"),
        "instance-a-1": ("instance-a", "instance-a-1"),
    }


def test_stale_slots_respect_grace() -> None:
    held = ["a-0", "a-1", "cfg-0"]
    to_free, table = slots.stale_slots(held, {"a-0"}, {}, now=100.0, grace=20.0)
    assert to_free == []
    assert table == {"a-1": 100.0, "cfg-0": 100.0}
    to_free, table = slots.stale_slots(held, {"a-0", "cfg-0"}, table, now=115.0, grace=20.0)
    assert (to_free, table) == ([], {"a-1": 100.0})
    to_free, table = slots.stale_slots(held, {"a-0"}, table, now=121.0, grace=20.0)
    assert (to_free, table) == (["a-1"], {"cfg-0": 121.0})


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"capacity": 2, "deviceUsage": {"garbage": "node-a"}}, "spec.deviceUsage key 'garbage'"),
        ({"capacity": 2, "deviceUsage": {"inst-\u0661": "node-a"}}, "key 'inst-\u0661'"),
        ({"capacity": 2, "deviceUsage": {"other-0": "node-a"}}, "not a slot of inst"),
        ({"capacity": 2, "deviceUsage": {"inst-0": "C:node-a"}}, "spec.deviceUsage['inst-0']"),
        ({"capacity": 2, "deviceUsage": {"inst-0": 7}}, "spec.deviceUsage['inst-0'] is not a str"),
        ({"capacity": 2, "deviceUsage": ["inst-0"]}, "spec.deviceUsage is not a map"),
        ({"capacity": "2", "deviceUsage": {}}, "spec.capacity '2' is not an integer"),
        ({"capacity": 10**12, "deviceUsage": {}}, "spec.capacity 1000000000000 is outside 0..64"),
        ({"capacity": -1, "deviceUsage": {}}, "spec.capacity -1 is outside 0..64"),
        ({"capacity": True, "deviceUsage": {}}, "spec.capacity True is not an integer"),
    ],
)
def test_slot_table_names_what_is_wrong(spec: dict[str, object], message: str) -> None:
    with pytest.raises(slots.InvalidUsage) as caught:
        slots.slot_table("inst", spec, max_capacity=64)
    assert message in str(caught.value)


def test_slot_table_drops_slots_a_shrunk_capacity_lost() -> None:
    spec = {"capacity": 2, "deviceUsage": {"inst-0": "node-a", "inst-3": "node-b"}}
    assert slots.slot_table("inst", spec, 64) == (naming.NodeUsage("node-a"), None)
    assert slots.slot_table("inst", {}, 64) == ()


@pytest.mark.parametrize("bad", [{"instance-a-\u0663": "node-b"}, {"instance-a-0": "C:x"}])
def test_claims_on_a_malformed_map_fail_as_invalid_usage(bad: dict[str, str]) -> None:
    with pytest.raises(slots.InvalidUsage):
        slots.claim_instance_slots(bad, "instance-a", 4, ["instance-a-1"], "node-a")
    with pytest.raises(slots.InvalidUsage):
        slots.claim_configuration_slot(bad, "instance-a", 4, "config-a-0", "node-a")
