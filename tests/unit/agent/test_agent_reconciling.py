"""Pure reconcile decisions: Instance content (§9 case 2), leave/delete (§9 cases 6, 7),
request specs and the capped back-off (§9 case 5). Trust: test_agent_trust.py."""

from __future__ import annotations

from typing import Any

import pytest

from discovery import devices
from discovery.agent import discovered, discovering, instances, reconciling

CONFIG: dict[str, Any] = {
    "apiVersion": "akri.sh/v0",
    "kind": "Configuration",
    "metadata": {"name": "my_config", "namespace": "ns", "uid": "uid-1"},
    "spec": {"discoveryHandler": {"name": "h"}, "brokerProperties": {"MY_EXTRA_KEY": "value"}},
}
LOCAL = devices.Device("my_local_device", {"MY_DEVICE_KEY": "device_value"})


def instance(name: str, nodes: list[str], config: str = "my_config", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "7"},
        "spec": {"configurationName": config, "nodes": nodes, **spec},
    }


def test_new_local_device_creates_the_akri_instance() -> None:
    named = discovered.name_devices("my_config", [(LOCAL, False)], "my_node")
    decided = reconciling.plan(CONFIG, named, True, [], "my_node")
    assert decided.leave == ()
    (desired,) = decided.join
    decision = instances.join(desired, "my_node")(None)
    assert isinstance(decision, instances.Create)
    assert decision.body == {
        "apiVersion": "akri.sh/v0",
        "kind": "Instance",
        "metadata": {
            "name": "my_config-e77db4",
            "namespace": "ns",
            "ownerReferences": [
                {
                    "apiVersion": "akri.sh/v0",
                    "kind": "Configuration",
                    "name": "my_config",
                    "uid": "uid-1",
                    "controller": True,
                }
            ],
            # The node's finalizer, as Akri's agent puts it on the Instances it serves.
            "finalizers": ["my_node"],
        },
        "spec": {
            "configurationName": "my_config",
            "cdiName": "akri.sh/my_config=e77db4",
            "capacity": 1,
            "brokerProperties": {"MY_DEVICE_KEY": "device_value", "MY_EXTRA_KEY": "value"},
            "shared": False,
            "nodes": ["my_node"],
            "deviceUsage": {},
        },
    }


def test_existing_up_to_date_instance_is_not_written() -> None:
    named = discovered.name_devices("my_config", [(LOCAL, False)], "my_node")
    (desired,) = reconciling.plan(CONFIG, named, True, [], "my_node").join
    created = instances.join(desired, "my_node")(None)
    assert isinstance(created, instances.Create)
    stored = {**created.body, "metadata": {**created.body["metadata"], "resourceVersion": "3"}}
    assert reconciling.plan(CONFIG, named, True, [stored], "my_node").join == ()


def test_shared_instance_gains_a_node_and_keeps_usage() -> None:
    shared = devices.Device("my_shared_device")
    named = discovered.name_devices("my_config", [(shared, True)], "node-b")
    current = instance(
        "my_config-4294ea",
        ["node-a"],
        cdiName="akri.sh/my_config=4294ea",
        capacity=1,
        brokerProperties={"MY_EXTRA_KEY": "value"},
        shared=True,
        deviceUsage={"my_config-4294ea-0": "node-a"},
    )
    current["metadata"]["ownerReferences"] = [dict(instances.owner_reference(CONFIG))]
    (desired,) = reconciling.plan(CONFIG, named, True, [current], "node-b").join
    decision = instances.join(desired, "node-b")(current)
    assert isinstance(decision, instances.Replace)
    assert decision.body["spec"]["nodes"] == ["node-a", "node-b"]
    assert decision.body["spec"]["deviceUsage"] == {"my_config-4294ea-0": "node-a"}
    assert decision.body["metadata"]["resourceVersion"] == "7"


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        (["node-a"], "delete"),
        (["node-a", "node-b"], ["node-b"]),
        (["node-b"], "nothing"),
    ],
)
def test_leave(nodes: list[str], expected: Any) -> None:
    current = instance("i", nodes, deviceUsage={"i-0": "node-a", "i-1": "C:v:node-b"})
    decision = instances.leave("node-a")(current)
    if expected == "delete":
        assert decision == instances.Delete("7")
    elif expected == "nothing":
        assert isinstance(decision, instances.NoChange)
    else:
        assert isinstance(decision, instances.Replace)
        assert decision.body["spec"]["nodes"] == expected
        assert decision.body["spec"]["deviceUsage"] == {"i-1": "C:v:node-b"}


def held(name: str, nodes: list[str], finalizers: list[str], **meta: Any) -> dict[str, Any]:
    obj = instance(name, nodes, deviceUsage={f"{name}-0": "node-a"})
    obj["metadata"].update(finalizers=finalizers, **meta)
    return obj


DELETING = {"deletionTimestamp": "2026-01-01T00:00:00Z"}


@pytest.mark.parametrize(
    ("nodes", "finalizers", "meta", "nodes_after", "finalizers_after", "then"),
    [
        # Shared: this node leaves nodes and drops its finalizer, the other's stays.
        (["node-a", "node-b"], ["node-a", "node-b"], {}, ["node-b"], ["node-b"], None),
        # Last user: drop the finalizer, then (deciding again on what was written) delete.
        (["node-a"], ["node-a"], {}, ["node-a"], [], "delete"),
        # Not listed but holding the finalizer (Akri's agent would drop it): drop it only.
        (["node-b"], ["node-a", "node-b"], {}, ["node-b"], ["node-b"], None),
        # Terminating: only let go of it, nodes untouched.
        (["node-a"], ["node-a", "x.io/keep"], DELETING, ["node-a"], ["x.io/keep"], None),
    ],
)
def test_leave_drops_this_nodes_finalizer(
    nodes: list[str],
    finalizers: list[str],
    meta: dict[str, Any],
    nodes_after: list[str],
    finalizers_after: list[str],
    then: str | None,
) -> None:
    decision = instances.leave("node-a")(held("i", nodes, finalizers, **meta))
    assert isinstance(decision, instances.Replace)
    assert decision.body["metadata"]["finalizers"] == finalizers_after
    assert decision.body["spec"]["nodes"] == nodes_after
    assert decision.body["metadata"]["resourceVersion"] == "7"
    assert decision.decide_again == (then == "delete")
    if then == "delete":
        written = {
            **decision.body,
            "metadata": {**decision.body["metadata"], "resourceVersion": "8"},
        }
        assert instances.leave("node-a")(written) == instances.Delete("8")


def test_leave_without_this_nodes_finalizer_or_membership_changes_nothing() -> None:
    assert isinstance(
        instances.leave("node-a")(held("i", ["node-b"], ["node-b"])), instances.NoChange
    )
    assert isinstance(
        instances.leave("node-a")(held("i", ["node-a"], ["node-b"], **DELETING)),
        instances.NoChange,
    )


def test_join_adds_the_finalizer_and_lets_a_terminating_instance_go() -> None:
    named = discovered.name_devices("my_config", [(LOCAL, False)], "my_node")
    name = "my_config-e77db4"
    (desired,) = reconciling.plan(CONFIG, named, True, [], "my_node").join
    # An Instance Akri's agent created, without (yet) this node's finalizer: it is added.
    current = held(name, ["my_node"], ["other"])
    decision = instances.join(desired, "my_node")(current)
    assert isinstance(decision, instances.Replace)
    assert decision.body["metadata"]["finalizers"] == ["other", "my_node"]
    # Terminating with this node's finalizer while the device is back: only the finalizer goes.
    current = held(name, ["my_node"], ["my_node", "other"], **DELETING)
    assert [d.name for d in reconciling.plan(CONFIG, named, True, [current], "my_node").join] == [
        name
    ]
    decision = instances.join(desired, "my_node")(current)
    assert isinstance(decision, instances.Replace)
    assert decision.body["metadata"]["finalizers"] == ["other"]
    assert decision.body["spec"] == current["spec"]
    # Terminating without it: nothing this node can do.
    current = held(name, ["my_node"], ["other"], **DELETING)
    assert reconciling.plan(CONFIG, named, True, [current], "my_node").join == ()


def test_a_stale_finalizer_is_dropped_even_when_the_request_is_not_trusted() -> None:
    existing = [
        held("instance-1", ["node-a"], ["node-a"], **DELETING),
        held("instance-2", ["node-b"], ["node-a"]),
        held("instance-3", ["node-a"], ["node-a"]),  # served: untrusted keeps it
        held("instance-4", ["node-b"], ["node-b"]),
    ]
    assert reconciling.plan(CONFIG, {}, False, existing, "node-a").leave == (
        "instance-1",
        "instance-2",
    )
    assert reconciling.plan(CONFIG, {}, True, existing, "node-a").leave == (
        "instance-1",
        "instance-2",
        "instance-3",
    )


def test_vanished_instances_left_only_when_trusted_and_only_own_config_and_node() -> None:
    existing = [
        instance("instance-1", ["node-a"]),
        instance("instance-2", ["node-b"]),
        instance("instance-3", ["node-a"], config="config-2"),
    ]
    assert reconciling.plan(CONFIG, {}, True, existing, "node-a").leave == ("instance-1",)
    assert reconciling.plan(CONFIG, {}, False, existing, "node-a").leave == ()


def test_request_spec_changes_on_details_or_properties() -> None:
    base = {"discoveryHandler": {"name": "h", "discoveryDetails": "a"}}
    same = discovering.RequestSpec.of(base)
    assert same == discovering.RequestSpec.of(
        {"discoveryHandler": {"name": "h", "discoveryDetails": "a"}}
    )
    other = {
        "discoveryHandler": {
            "name": "h",
            "discoveryDetails": "a",
            "discoveryProperties": [{"name": "x", "value": "1"}],
        }
    }
    assert discovering.RequestSpec.of(other) != same
    assert discovering.RequestSpec.of(other).properties == [{"name": "x", "value": "1"}]


def test_capacity_change_is_applied_and_dropped_slots_are_forgotten() -> None:
    shared = devices.Device("my_shared_device")
    named = discovered.name_devices("my_config", [(shared, True)], "node-a")
    current = instance(
        "my_config-4294ea",
        ["node-a"],
        cdiName="akri.sh/my_config=4294ea",
        capacity=3,
        brokerProperties={"MY_EXTRA_KEY": "value"},
        shared=True,
        deviceUsage={"my_config-4294ea-0": "node-a", "my_config-4294ea-2": "node-b"},
    )
    current["metadata"]["ownerReferences"] = [dict(instances.owner_reference(CONFIG))]
    smaller = {**CONFIG, "spec": {**CONFIG["spec"], "capacity": 1}}
    (desired,) = reconciling.plan(smaller, named, True, [current], "node-a").join
    decision = instances.join(desired, "node-a")(current)
    assert isinstance(decision, instances.Replace)
    assert decision.body["spec"]["capacity"] == 1
    assert decision.body["spec"]["deviceUsage"] == {"my_config-4294ea-0": "node-a"}
