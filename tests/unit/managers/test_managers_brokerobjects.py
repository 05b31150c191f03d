"""The broker objects built from a Configuration and an Instance: Akri's names, labels,
owners, placeholder and affinity, and where they deliberately differ."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from managers import brokerobjects as objects

POD_SPEC: dict[str, Any] = {
    "containers": [
        {
            "name": "broker",
            "image": "nginx:stable",
            "resources": {"limits": {"{{PLACEHOLDER}}": "1"}, "requests": {"cpu": "10m"}},
        }
    ],
    "initContainers": [
        {
            "name": "init",
            "image": "busybox",
            "resources": {"requests": {"{{PLACEHOLDER}}": "1"}},
        }
    ],
}


def configuration(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "akri.sh/v0",
        "kind": "Configuration",
        "metadata": {"name": "config-a", "namespace": "ns", "uid": "cfg-uid", "generation": 3},
        "spec": {"discoveryHandler": {"name": "debugEcho"}, **spec},
    }


def instance(
    name: str = "config-a-b494b6",
    nodes: list[str] | None = None,
    shared: bool = False,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "akri.sh/v0",
        "kind": "Instance",
        "metadata": {"name": name, "namespace": "ns", "uid": f"{name}-uid"},
        "spec": {
            "configurationName": "config-a",
            "capacity": 2,
            "shared": shared,
            "nodes": nodes if nodes is not None else ["node-a"],
            "brokerProperties": {"A": "1"},
            **spec,
        },
    }


@pytest.mark.parametrize(
    ("instance_name", "node", "shared", "expected"),
    [
        ("config-a-b494b6", "node-a", False, "config-a-b494b6-pod"),  # Akri's local fixture
        ("config-a-359973", "node-a", True, "node-a-config-a-359973-pod"),  # shared fixture
        ("cam.era-1a2b3c", "n.1", True, "n.1-cam-era-1a2b3c-pod"),  # dots of the Instance only
    ],
)
def test_pod_names_are_akris(instance_name: str, node: str, shared: bool, expected: str) -> None:
    assert objects.pod_name(instance_name, node, shared) == expected


def test_other_names() -> None:
    assert objects.job_name("config-a-b494b6", 7) == "config-a-b494b6-7-job"
    assert objects.instance_service_name("a.b-123456") == "a-b-123456-svc"
    assert objects.configuration_service_name("config-a") == "config-a-svc"
    assert objects.resource_name("config-a-b494b6") == "akri.sh/config-a-b494b6"


def test_broker_pod_has_akris_labels_owner_resource_and_affinity() -> None:
    pod = objects.broker_pod(
        configuration(brokerSpec={"brokerPodSpec": POD_SPEC}),
        instance(nodes=["node-a"], shared=True),
        "node-a",
    )
    meta = pod["metadata"]
    assert meta["name"] == "node-a-config-a-b494b6-pod"
    assert meta["namespace"] == "ns"
    assert meta["labels"] == {
        "app": "node-a-config-a-b494b6-pod",
        "controller": "akri.sh",
        "akri.sh/configuration": "config-a",
        "akri.sh/instance": "config-a-b494b6",
        "akri.sh/target-node": "node-a",
    }
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "akri.sh/v0",
            "kind": "Instance",
            "name": "config-a-b494b6",
            "uid": "config-a-b494b6-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    spec = pod["spec"]
    container, init = spec["containers"][0], spec["initContainers"][0]
    assert container["resources"] == {
        "limits": {"akri.sh/config-a-b494b6": "1"},
        "requests": {"cpu": "10m"},
    }
    assert init["resources"] == {"requests": {"akri.sh/config-a-b494b6": "1"}}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
    ]
    assert objects.template_hash(pod)
    # The Configuration's own spec is never edited.
    assert "{{PLACEHOLDER}}" in POD_SPEC["containers"][0]["resources"]["limits"]


def test_a_broker_without_placeholder_still_asks_for_one_slot() -> None:
    spec = {"containers": [{"name": "b", "image": "x"}, {"name": "c", "image": "y"}]}
    pod = objects.broker_pod(
        configuration(brokerSpec={"brokerPodSpec": spec}), instance(), "node-a"
    )
    first, second = pod["spec"]["containers"]
    assert first["resources"] == {
        "limits": {"akri.sh/config-a-b494b6": "1"},
        "requests": {"akri.sh/config-a-b494b6": "1"},
    }
    assert "resources" not in second


def test_node_requirement_joins_every_term_of_the_users_affinity() -> None:
    """Akri appended a term (ORed: the broker could land elsewhere); it is ANDed here."""
    spec = copy.deepcopy(POD_SPEC)
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                ]
            }
        }
    }
    pod = objects.broker_pod(configuration(brokerSpec={"brokerPodSpec": spec}), instance(), "n1")
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert len(terms) == 2
    for term in terms:
        assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]
        assert term["matchExpressions"][0]["key"] == "zone"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"containers": "oops"}, "spec.brokerSpec.brokerPodSpec.containers"),
        ({"containers": []}, "spec.brokerSpec.brokerPodSpec.containers"),
        (
            {"containers": [{"name": "b", "resources": []}]},
            "spec.brokerSpec.brokerPodSpec.containers[0].resources",
        ),
        (
            {"containers": [{"name": "b", "resources": {"limits": "1"}}]},
            "spec.brokerSpec.brokerPodSpec.containers[0].resources.limits",
        ),
        (
            {"containers": [{"name": "b"}], "affinity": {"nodeAffinity": []}},
            "spec.brokerSpec.brokerPodSpec.affinity.nodeAffinity",
        ),
    ],
)
def test_malformed_specs_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(objects.SpecError) as caught:
        objects.broker_pod(configuration(brokerSpec={"brokerPodSpec": spec}), instance(), "n")
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("broker", "field"),
    [
        ({"brokerPodSpec": {}, "brokerJobSpec": {}}, "spec.brokerSpec"),
        ({"brokerPodSpec": ["x"]}, "spec.brokerSpec.brokerPodSpec"),
        ({"brokerJobSpec": "x"}, "spec.brokerSpec.brokerJobSpec"),
        ("x", "spec.brokerSpec"),
    ],
)
def test_broker_kind_refuses_ambiguous_or_malformed_specs(broker: object, field: str) -> None:
    with pytest.raises(objects.SpecError) as caught:
        objects.broker_kind(configuration(brokerSpec=broker))
    assert caught.value.field == field


def test_broker_kind() -> None:
    assert objects.broker_kind(configuration()) is None
    assert objects.broker_kind(configuration(brokerSpec={})) is None
    assert objects.broker_kind(configuration(brokerSpec={"brokerPodSpec": POD_SPEC})) == (
        "pod",
        POD_SPEC,
    )


def test_hash_follows_spec_and_broker_properties_not_other_fields() -> None:
    base = configuration(brokerSpec={"brokerPodSpec": POD_SPEC})

    def digest(config: dict[str, Any], inst: dict[str, Any]) -> str | None:
        return objects.template_hash(objects.broker_pod(config, inst, "node-a"))

    reference = digest(base, instance())
    assert digest(base, instance()) == reference  # stable
    other_image = copy.deepcopy(base)
    other_image["spec"]["brokerSpec"]["brokerPodSpec"]["containers"][0]["image"] = "nginx:2"
    assert digest(other_image, instance()) != reference
    assert digest(base, instance(brokerProperties={"A": "2"})) != reference
    more_capacity = copy.deepcopy(base)
    more_capacity["spec"]["capacity"] = 9
    more_capacity["metadata"]["generation"] = 4
    assert digest(more_capacity, instance(capacity=9)) == reference


def test_job_carries_generation_in_its_name_but_not_in_its_hash() -> None:
    job_spec = {
        "parallelism": 2,
        "completions": 4,
        "template": {
            "metadata": {"labels": {"mine": "yes"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "j",
                        "image": "busybox",
                        "resources": {"limits": {"{{PLACEHOLDER}}": "1"}},
                    }
                ],
            },
        },
    }
    config = configuration(brokerSpec={"brokerJobSpec": job_spec})
    job = objects.broker_job(config, instance())
    assert job["metadata"]["name"] == "config-a-b494b6-3-job"
    assert job["metadata"]["labels"] == {
        "app": "config-a-b494b6-3-job",
        "controller": "akri.sh",
        "akri.sh/configuration": "config-a",
        "akri.sh/instance": "config-a-b494b6",
    }
    assert job["spec"]["parallelism"] == 2 and job["spec"]["completions"] == 4
    template = job["spec"]["template"]
    assert template["metadata"]["labels"] == {
        "mine": "yes",
        "akri.sh/configuration": "config-a",
        "akri.sh/instance": "config-a-b494b6",
        "controller": "akri.sh",
    }
    assert template["spec"]["containers"][0]["resources"]["limits"] == {
        "akri.sh/config-a-b494b6": "1"
    }
    assert "affinity" not in template["spec"]
    newer = copy.deepcopy(config)
    newer["metadata"]["generation"] = 4
    again = objects.broker_job(newer, instance())
    assert again["metadata"]["name"] == "config-a-b494b6-4-job"
    assert objects.template_hash(again) == objects.template_hash(job)


def test_job_without_template_names_the_field() -> None:
    with pytest.raises(objects.SpecError) as caught:
        objects.broker_job(configuration(brokerSpec={"brokerJobSpec": {}}), instance())
    assert caught.value.field == "spec.brokerSpec.brokerJobSpec.template"


def test_services_select_the_brokers() -> None:
    service_spec = {"type": "ClusterIP", "ports": [{"port": 80}], "selector": {"tier": "x"}}
    config = configuration(
        brokerSpec={"brokerPodSpec": POD_SPEC},
        instanceServiceSpec=service_spec,
        configurationServiceSpec={"ports": [{"port": 81}]},
    )
    svc = objects.instance_service(config, instance())
    assert svc is not None
    assert svc["metadata"]["name"] == "config-a-b494b6-svc"
    assert svc["metadata"]["labels"] == {
        "app": "config-a-b494b6-svc",
        "controller": "akri.sh",
        "akri.sh/instance": "config-a-b494b6",
        "akri.sh/configuration": "config-a",
    }
    assert svc["spec"]["selector"] == {
        "tier": "x",
        "controller": "akri.sh",
        "akri.sh/instance": "config-a-b494b6",
    }
    assert svc["metadata"]["ownerReferences"][0]["kind"] == "Instance"
    whole = objects.configuration_service(config)
    assert whole is not None
    assert whole["metadata"]["name"] == "config-a-svc"
    assert whole["spec"]["selector"] == {
        "controller": "akri.sh",
        "akri.sh/configuration": "config-a",
    }
    assert whole["metadata"]["ownerReferences"][0] == {
        "apiVersion": "akri.sh/v0",
        "kind": "Configuration",
        "name": "config-a",
        "uid": "cfg-uid",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert objects.instance_service(configuration(), instance()) is None
    assert objects.configuration_service(configuration()) is None


def test_updated_service_keeps_what_the_apiserver_allocated() -> None:
    config = configuration(
        brokerSpec={"brokerPodSpec": POD_SPEC}, instanceServiceSpec={"ports": [{"port": 8080}]}
    )
    desired = objects.instance_service(config, instance())
    assert desired is not None
    current = {
        "metadata": {
            "name": "config-a-b494b6-svc",
            "resourceVersion": "42",
            "labels": {"extra": "kept", "app": "old"},
            "annotations": {"note": "kept", objects.HASH_ANNOTATION: "old"},
        },
        "spec": {
            "clusterIP": "10.0.0.9",
            "clusterIPs": ["10.0.0.9"],
            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}],
            "sessionAffinity": "ClientIP",
        },
        "status": {"loadBalancer": {}},
    }
    body = objects.updated_service(current, desired)
    assert body["metadata"]["resourceVersion"] == "42"
    assert body["metadata"]["labels"]["extra"] == "kept"
    assert body["metadata"]["labels"]["app"] == "config-a-b494b6-svc"
    assert body["metadata"]["annotations"] == {
        "note": "kept",
        objects.HASH_ANNOTATION: objects.template_hash(desired),
    }
    assert body["spec"]["clusterIP"] == "10.0.0.9"
    assert body["spec"]["ports"] == [{"port": 8080}]
    assert "sessionAffinity" not in body["spec"]  # removed from the desired spec: removed
    assert "status" not in body


@pytest.mark.parametrize(
    ("owners", "ours"),
    [
        ([{"apiVersion": "akri.sh/v0", "kind": "Instance", "controller": True, "uid": "u"}], True),
        ([{"apiVersion": "akri.sh/v0", "kind": "Configuration", "controller": True}], True),
        ([{"apiVersion": "akri.sh/v0", "kind": "Instance"}], False),  # not controlling
        ([{"apiVersion": "batch/v1", "kind": "Job", "controller": True}], False),
        ([{"apiVersion": "example.com/v0", "kind": "Instance", "controller": True}], False),
        (None, False),
        ("junk", False),
    ],
)
def test_only_objects_controlled_by_akri_objects_are_ours(owners: object, ours: bool) -> None:
    obj = {"metadata": {"ownerReferences": owners}}
    assert (objects.controller_of(obj) is not None) is ours


def test_long_names_get_a_short_app_label_and_long_label_names_are_refused() -> None:
    long_node = "n" * 60
    label = objects.app_label(objects.pod_name("config-a-b494b6", long_node, True))
    assert len(label) <= 63 and label.startswith("nnn")
    assert objects.app_label("short") == "short"
    with pytest.raises(objects.SpecError, match="cannot be a label value"):
        objects.broker_pod(
            configuration(brokerSpec={"brokerPodSpec": POD_SPEC}),
            instance(nodes=["x" * 70], shared=True),
            "x" * 70,
        )


def test_reading_instances_tolerates_junk() -> None:
    assert objects.instance_nodes({"spec": {"nodes": ["a", "a", 3, "", "b"]}}) == ["a", "b"]
    assert objects.instance_nodes({"spec": {"nodes": "a"}}) == []
    assert objects.instance_capacity({"spec": {"capacity": True}}) == 1
    assert objects.instance_capacity({"spec": {"capacity": -2}}) == 1
    assert objects.instance_capacity({"spec": {"capacity": 0}}) == 0
    assert objects.instance_nodes({}) == []
