"""The webhook's decisions on a Configuration (table tests): each problem names its field,
discovery details go through the handlers' own parsers, updates that keep the spec pass, and
the apiserver's refusals of a sample broker are told in the Configuration's field names."""

from __future__ import annotations

from typing import Any

import pytest

from managers import configvalidating as cv

POD = {"containers": [{"name": "broker", "image": "nginx"}]}


def configuration(
    handler: str = "debugEcho", details: str = "descriptions: [a]", **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "akri.sh/v0",
        "kind": "Configuration",
        "metadata": {"name": "cfg", "namespace": "default"},
        "spec": {"discoveryHandler": {"name": handler, "discoveryDetails": details}, **spec},
    }


def test_a_name_too_long_for_its_instances_labels_is_the_configurations_name() -> None:
    config = configuration(brokerSpec={"brokerPodSpec": POD})
    config["metadata"]["name"] = "c" * 60  # a label itself, but not with "-<hash>" appended
    (problem,) = cv.check(config)
    assert problem.field == "metadata.name"
    assert "c" * 60 + "-000000" in problem.message


@pytest.mark.parametrize(
    ("config", "field", "text"),
    [
        (
            configuration("debugEcho", ""),
            "spec.discoveryHandler.discoveryDetails: descriptions",
            "required",
        ),
        (
            configuration("debugEcho", "descriptons: [a]"),
            "spec.discoveryHandler.discoveryDetails: descriptions",
            "required",
        ),
        (
            configuration("udev", 'udevRules: ["TYPO==\\"x\\""]'),
            "spec.discoveryHandler.discoveryDetails: udevRules[0]",
            "TYPO",
        ),
        (
            configuration("udev", "udevRules: []\npermissions: xyz"),
            "spec.discoveryHandler.discoveryDetails: permissions",
            "valid permission combination",
        ),
        (
            configuration("onvif", "discoveryTimeoutSeconds: -1"),
            "spec.discoveryHandler.discoveryDetails: discoveryTimeoutSeconds",
            "between",
        ),
        (configuration("onvif", "{"), "spec.discoveryHandler.discoveryDetails", "not valid YAML"),
        (configuration(capacity=-1), "spec.capacity", "must not be negative"),
        (configuration(capacity=True), "spec.capacity", "integer"),
        (configuration(capacity="2"), "spec.capacity", "integer"),
        (configuration(capacity=5000), "spec.capacity", "at most 1024"),
        (
            configuration(brokerSpec={"brokerPodSpec": POD, "brokerJobSpec": {}}),
            "spec.brokerSpec",
            "not both",
        ),
        (
            configuration(brokerSpec={"brokerPodSpec": "nginx"}),
            "spec.brokerSpec.brokerPodSpec",
            "PodSpec",
        ),
        (
            configuration(brokerSpec={"brokerPodSpec": {"containers": []}}),
            "spec.brokerSpec.brokerPodSpec.containers",
            "at least one",
        ),
        (
            configuration(brokerSpec={"brokerJobSpec": {"parallelism": 1}}),
            "spec.brokerSpec.brokerJobSpec.template",
            "mapping",
        ),
        (configuration(brokerProperties={"A": 1}), "spec.brokerProperties.A", "string"),
        (configuration(instanceServiceSpec=[1]), "spec.instanceServiceSpec", "mapping"),
        (
            configuration(
                brokerSpec={"brokerPodSpec": POD}, configurationServiceSpec={"selector": "x"}
            ),
            "spec.configurationServiceSpec.selector",
            "mapping",
        ),
        (
            {"metadata": {"name": "cfg"}, "spec": {"discoveryHandler": {"discoveryDetails": ""}}},
            "spec.discoveryHandler.name",
            "required",
        ),
        ({"metadata": {"name": "cfg"}, "spec": {}}, "spec.discoveryHandler", "required"),
        ({"metadata": {"name": "cfg"}}, "spec", "required"),
        (
            configuration(details=None)
            | {"spec": {"discoveryHandler": {"name": "x", "discoveryDetails": 3}}},
            "spec.discoveryHandler.discoveryDetails",
            "string",
        ),
        (
            configuration()
            | {
                "spec": {
                    "discoveryHandler": {
                        "name": "debugEcho",
                        "discoveryDetails": "descriptions: [a]",
                        "discoveryProperties": [{"name": "1x", "value": "v"}],
                    }
                }
            },
            "spec.discoveryHandler.discoveryProperties[0].name",
            "required",
        ),
        (
            configuration()
            | {
                "spec": {
                    "discoveryHandler": {
                        "name": "debugEcho",
                        "discoveryDetails": "descriptions: [a]",
                        "discoveryProperties": [
                            {
                                "name": "x",
                                "value": "v",
                                "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}},
                            }
                        ],
                    }
                }
            },
            "spec.discoveryHandler.discoveryProperties[0]",
            "not both",
        ),
        # Checks Akri's CRD does not make (so neither does ours): the webhook's, with a message.
        (
            configuration()
            | {
                "spec": {
                    "discoveryHandler": {
                        "name": "debugEcho",
                        "discoveryDetails": "descriptions: [a]",
                        "discoveryProperties": [
                            {"name": "x", "valueFrom": {"configMapKeyRef": {"name": "cm"}}}
                        ],
                    }
                }
            },
            "spec.discoveryHandler.discoveryProperties[0].valueFrom.configMapKeyRef.key",
            "required",
        ),
        (
            configuration()
            | {
                "spec": {
                    "discoveryHandler": {
                        "name": "debugEcho",
                        "discoveryDetails": "descriptions: [a]",
                        "discoveryProperties": [
                            {"name": "x", "valueFrom": {"secretKeyRef": {"name": "", "key": "k"}}}
                        ],
                    }
                }
            },
            "spec.discoveryHandler.discoveryProperties[0].valueFrom.secretKeyRef.name",
            "required",
        ),
        (configuration(brokerSpec={}), "spec.brokerSpec", "give brokerPodSpec or brokerJobSpec"),
        (
            {"metadata": {"name": "cfg"}, "spec": {"discoveryHandler": {"name": ""}}},
            "spec.discoveryHandler.name",
            "required, a non-empty string",
        ),
        (
            {
                "metadata": {"name": "c" * 70, "namespace": "default"},
                "spec": {
                    "discoveryHandler": {
                        "name": "debugEcho",
                        "discoveryDetails": "descriptions: []",
                    },
                    "brokerSpec": {"brokerPodSpec": POD},
                },
            },
            "metadata.name",
            "label value",
        ),
    ],
)
def test_problems_name_their_field(config: dict[str, Any], field: str, text: str) -> None:
    problems = cv.check(config)
    assert [p.field for p in problems] == [field], problems
    assert text in problems[0].message


@pytest.mark.parametrize(
    "config",
    [
        configuration(),
        configuration("debugEcho", "descriptions: []"),
        configuration("udev", 'udevRules: ["SUBSYSTEM==\\"video4linux\\""]'),
        configuration("opcua", ""),
        configuration("onvif", ""),
        configuration("my-own-handler", "whatever: [it, wants"),  # not ours to judge
        configuration(capacity=0, brokerSpec={"brokerPodSpec": POD}, brokerProperties={"A": "1"}),
        configuration(
            brokerSpec={"brokerJobSpec": {"template": {"spec": {"containers": [{"name": "j"}]}}}},
            instanceServiceSpec={"ports": [{"port": 80}]},
        ),
    ],
)
def test_good_configurations_pass(config: dict[str, Any]) -> None:
    assert cv.check(config) == []


def test_samples_are_what_the_controller_would_create() -> None:
    config = configuration(
        brokerSpec={"brokerPodSpec": POD},
        instanceServiceSpec={"ports": [{"port": 80}]},
        configurationServiceSpec={"ports": [{"port": 81}]},
    )
    found = cv.samples(config)
    assert [(s.kind, s.field) for s in found] == [
        ("pods", "spec.brokerSpec.brokerPodSpec"),
        ("services", "spec.instanceServiceSpec"),
        ("services", "spec.configurationServiceSpec"),
    ]
    pod = found[0].body
    assert pod["metadata"]["name"] == "cfg-000000-pod"
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"akri.sh/cfg-000000": "1"}
    assert cv.samples(configuration()) == []


@pytest.mark.parametrize(
    ("kind", "field", "message", "expected"),
    [
        (
            "pods",
            "spec.brokerSpec.brokerPodSpec",
            'Pod "cfg-000000-pod-x1" is invalid: spec.containers[0].image: Required value',
            "spec.brokerSpec.brokerPodSpec: not a valid PodSpec: "
            "spec.brokerSpec.brokerPodSpec.containers[0].image: Required value",
        ),
        (
            "jobs",
            "spec.brokerSpec.brokerJobSpec",
            'Job.batch "j" is invalid: [spec.template.spec.restartPolicy: Required value, '
            "spec.template.spec.containers[0].name: Required value]",
            "spec.brokerSpec.brokerJobSpec: not a valid JobSpec: "
            "[spec.brokerSpec.brokerJobSpec.template.spec.restartPolicy: Required value, "
            "spec.brokerSpec.brokerJobSpec.template.spec.containers[0].name: Required value]",
        ),
        (
            "pods",
            "spec.brokerSpec.brokerPodSpec",
            'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
            'unknown field "spec.containers[0].imagee"',
            'spec.brokerSpec.brokerPodSpec: not a valid PodSpec: Pod in version "v1" cannot be '
            "handled as a Pod: strict decoding error: unknown field "
            '"spec.brokerSpec.brokerPodSpec.containers[0].imagee"',
        ),
        (
            "services",
            "spec.instanceServiceSpec",
            'Service "s" is invalid: '
            "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535",
            "spec.instanceServiceSpec: not a valid ServiceSpec: "
            "spec.instanceServiceSpec.ports[0].port: Invalid value: 0: must be between 1 and 65535",
        ),
    ],
)
def test_refusals_are_told_in_the_configurations_fields(
    kind: str, field: str, message: str, expected: str
) -> None:
    sample = cv.Sample(kind, {}, field, field)
    assert str(cv.explain_refusal(sample, message)) == expected


def review(operation: str, obj: Any, old: Any = None) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "operation": operation,
            "namespace": "default",
            "object": obj,
            "oldObject": old,
        },
    }


@pytest.mark.parametrize(
    ("operation", "new_spec", "old_spec", "checked"),
    [
        ("CREATE", {"a": 1}, None, True),
        ("UPDATE", {"a": 1}, {"a": 2}, True),
        ("UPDATE", {"a": 1}, {"a": 1}, False),  # e.g. an agent's finalizer
        ("DELETE", None, {"a": 1}, False),
        ("CONNECT", None, None, False),
    ],
)
def test_only_spec_changes_are_checked(
    operation: str, new_spec: Any, old_spec: Any, checked: bool
) -> None:
    new = {"spec": new_spec} if new_spec is not None else None
    old = {"spec": old_spec, "metadata": {"finalizers": ["n"]}} if old_spec is not None else None
    assert cv.needs_check(cv.parse_review(review(operation, new, old))) is checked


@pytest.mark.parametrize(
    ("doc", "text"),
    [
        ([], "JSON object"),
        ({"kind": "Pod", "apiVersion": "v1"}, "AdmissionReview"),
        ({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}, "no request"),
        ({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {}}, "uid"),
    ],
)
def test_bad_reviews(doc: Any, text: str) -> None:
    with pytest.raises(cv.BadReview, match=text):
        cv.parse_review(doc)


def test_responses() -> None:
    request = cv.parse_review(review("CREATE", configuration()))
    assert cv.response(request, []) == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "u-1", "allowed": True},
    }
    denied = cv.response(
        request,
        [cv.Problem("spec.capacity", "must not be negative, got -1"), cv.Problem("spec.x", "y")],
        ["spec.brokerSpec was not checked: timeout"],
    )["response"]
    assert denied["allowed"] is False
    assert denied["status"]["code"] == 422
    assert denied["status"]["message"] == "spec.capacity: must not be negative, got -1; spec.x: y"
    assert denied["warnings"] == ["spec.brokerSpec was not checked: timeout"]


def _deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"x": value}
    return value


def test_deep_nesting_is_a_problem_not_a_crash() -> None:
    """Issue 27 item 6: 5,000 nested ``[`` in discoveryDetails raised ``RecursionError`` in
    the handler's parser; a broker spec nested ~900 deep did in the deep copies."""
    for handler in ("udev", "debugEcho", "opcua", "onvif"):
        (problem,) = cv.check(configuration(handler, "[" * 5_000 + "]" * 5_000))
        assert problem.field == "spec.discoveryHandler.discoveryDetails"
        assert "nested deeper than 200 levels" in problem.message
        assert f"the {handler} discovery handler would refuse it" in problem.message
    deep = configuration(brokerSpec={"brokerPodSpec": {**POD, "x": _deep(900)}})
    request = cv.parse_review(review("CREATE", deep))
    assert cv.nesting_problems(request) == [cv.Problem("spec", "nested deeper than 200 levels")]
    assert cv.nesting_problems(cv.parse_review(review("CREATE", configuration()))) == []
    # An old object that deep (admitted before the webhook) does not stop an update: the new
    # one is checked whatever the old one was.
    update = cv.parse_review(review("UPDATE", configuration(), old=deep))
    assert cv.nesting_problems(update) == [] and cv.needs_check(update)
