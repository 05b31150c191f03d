"""Whether a Configuration may be admitted, and the AdmissionReview wire format: pure.

``check(configuration)`` returns the problems found without asking anyone, each naming its
field (``spec.capacity``, ``spec.discoveryHandler.discoveryDetails: udevRules[0]``):

* the Configuration deserializes as Akri reads it: ``spec.discoveryHandler.name`` a
  non-empty string, ``discoveryDetails`` a string, ``discoveryProperties`` a list of
  ``{name, value | valueFrom}`` (``valueFrom`` one ``configMapKeyRef``/``secretKeyRef`` with a
  ``key`` and a ``name``), ``capacity`` an integer between 0 and 1024, ``brokerProperties``
  strings to strings, the service specs mappings. The CRD (``manifests/crds``) validates only
  what Akri's own CRD does, so an Akri user's Configuration applies; these checks are the
  stricter ones, each with a message naming the field;
* ``discoveryDetails`` parse for the built-in handlers (``debugEcho``, ``udev``, ``opcua``,
  ``onvif``) with the very parsers the handlers run (``discovery.handlers.<name>
  .parse_details``), so what is admitted is what the handler accepts; details for other
  handlers are theirs to judge;
* the broker spec is exactly one of ``brokerPodSpec``/``brokerJobSpec`` and the broker
  objects can be built from it (``brokerobjects``); ``brokerSpec: {}`` is refused too.

Whether the broker spec is a valid PodSpec/JobSpec, and the service specs valid ServiceSpecs,
only the apiserver can say in full: ``samples(configuration)`` are the objects the broker
controller would create for it (for a stand-in Instance), which the webhook creates with
``dryRun=All`` and ``fieldValidation=Strict``; ``explain_refusal`` turns the apiserver's
answer into the Configuration's field names (``spec.containers[0].image`` ->
``spec.brokerSpec.brokerPodSpec.containers[0].image``).

Updates are checked only when ``spec`` changed: an agent adding or removing its finalizer on
a Configuration admitted before this webhook existed must not be refused.

Nesting is bounded (``nesting_problems``, ``inputbounds.nesting.MAX_DEPTH`` levels) before
anything walks the object: comparisons, the broker objects' deep copies and their encoding
recurse (a broker spec ~900 deep was a ``RecursionError``, a 500), so a deeper Configuration
is refused naming its top-level field; ``discoveryDetails`` are bounded by their parser.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Callable, Mapping
from typing import Any

from discovery import details, handlers, sdk
from inputbounds import nesting
from managers import brokerobjects as objects

REVIEW_API_VERSION = "admission.k8s.io/v1"
MAX_CAPACITY = 1024
SAMPLE_DIGEST = "000000"
SAMPLE_NODE = "broker-node"
_PROPERTY_NAME = re.compile(r"^[_A-Za-z][_A-Za-z0-9]*$")


@dataclasses.dataclass(frozen=True, slots=True)
class Problem:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    uid: str
    operation: str
    namespace: str
    object: Mapping[str, Any] | None
    old_object: Mapping[str, Any] | None
    api_version: str


class BadReview(ValueError):
    """The body is not an AdmissionReview request we can answer."""


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    """An object the broker controller would create, to be created with ``dryRun``."""

    kind: str  # "pods", "jobs", "services"
    body: dict[str, Any]
    field: str  # the Configuration field it comes from
    spec_prefix: str  # how its ``spec.`` is spelled in the Configuration


# --- AdmissionReview ---------------------------------------------------------------------


def parse_review(doc: object) -> Request:
    if not isinstance(doc, Mapping):
        raise BadReview("the body is not a JSON object")
    api_version = doc.get("apiVersion")
    if doc.get("kind") != "AdmissionReview" or api_version not in (
        "admission.k8s.io/v1",
        "admission.k8s.io/v1beta1",
    ):
        raise BadReview("not an admission.k8s.io/v1 AdmissionReview")
    request = doc.get("request")
    if not isinstance(request, Mapping):
        raise BadReview("the AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("the AdmissionReview request has no uid")
    obj, old = request.get("object"), request.get("oldObject")
    return Request(
        uid=uid,
        operation=str(request.get("operation") or ""),
        namespace=str(request.get("namespace") or ""),
        object=obj if isinstance(obj, Mapping) else None,
        old_object=old if isinstance(old, Mapping) else None,
        api_version=str(api_version),
    )


def nesting_problems(request: Request) -> list[Problem]:
    """The top-level fields of the Configuration that nest deeper than the bound (counted
    from the object itself). Only the new object: an old one that deep does not stop an
    update (``needs_check`` then checks the new one)."""
    limit = nesting.MAX_DEPTH
    return [
        Problem(str(key), f"nested deeper than {limit} levels")
        for key, value in (request.object or {}).items()
        if nesting.depth(value, limit - 1) > limit - 1
    ]


def needs_check(request: Request) -> bool:
    """CREATE always; UPDATE only when ``spec`` changed (metadata-only writes such as the
    agents' finalizers pass), or when the old spec nests too deep to compare."""
    if request.operation == "CREATE":
        return True
    if request.operation == "UPDATE":
        old = (request.old_object or {}).get("spec")
        if nesting.depth(old) > nesting.MAX_DEPTH:
            return True
        return (request.object or {}).get("spec") != old
    return False


def response(
    request: Request, problems: list[Problem], warnings: list[str] | None = None
) -> dict[str, Any]:
    answer: dict[str, Any] = {"uid": request.uid, "allowed": not problems}
    if problems:
        answer["status"] = {
            "status": "Failure",
            "code": 422,
            "reason": "Invalid",
            "message": "; ".join(str(p) for p in problems),
        }
    if warnings:
        answer["warnings"] = [w[:1024] for w in warnings[:16]]
    return {"apiVersion": request.api_version, "kind": "AdmissionReview", "response": answer}


# --- static checks ---------------------------------------------------------------------------


def _kind(value: object) -> str:
    return type(value).__name__ if value is not None else "null"


def details_parser(handler: str) -> Callable[[str], object] | None:
    """The built-in handler's own ``parse_details``, or None for other handlers."""
    target = handlers.BUILTIN.get(handler)
    if target is None:
        return None
    module = importlib.import_module(target.partition(":")[0])
    parser: Callable[[str], object] = module.parse_details
    return parser


def _check_handler(
    spec: Mapping[str, Any], problems: list[Problem], warnings: list[str] | None = None
) -> None:
    field = "spec.discoveryHandler"
    handler = spec.get("discoveryHandler")
    if not isinstance(handler, Mapping):
        problems.append(Problem(field, f"required, a mapping (got {_kind(handler)})"))
        return
    name = handler.get("name")
    if not isinstance(name, str) or not name:
        problems.append(Problem(f"{field}.name", "required, a non-empty string"))
        return
    text = handler.get("discoveryDetails", "")
    if text is None:
        text = ""
    if not isinstance(text, str):
        problems.append(
            Problem(f"{field}.discoveryDetails", f"must be a string, not {_kind(text)}")
        )
        return
    parser = details_parser(name)
    if parser is not None:
        try:
            parsed = parser(text)
        except details.DetailsError as e:
            where = f"{field}.discoveryDetails"
            problems.append(
                Problem(
                    f"{where}: {e.field}" if e.field else where,
                    f"{e.message} (the {name} discovery handler would refuse it)",
                )
            )
        else:
            if warnings is not None:
                where = f"{field}.discoveryDetails"
                warnings.extend(f"{where}: {w}" for w in sdk.details_warnings(parsed))
    _check_properties(handler.get("discoveryProperties"), f"{field}.discoveryProperties", problems)


def _check_properties(value: object, field: str, problems: list[Problem]) -> None:
    if value is None:
        return
    if not isinstance(value, list):
        problems.append(Problem(field, f"must be a list, not {_kind(value)}"))
        return
    for index, item in enumerate(value):
        where = f"{field}[{index}]"
        if not isinstance(item, Mapping):
            problems.append(Problem(where, "must be a mapping"))
            continue
        name = item.get("name")
        if not isinstance(name, str) or not _PROPERTY_NAME.match(name):
            problems.append(Problem(f"{where}.name", "required, matching ^[_A-Za-z][_A-Za-z0-9]*$"))
        given = [k for k in ("value", "valueFrom") if item.get(k) is not None]
        if len(given) > 1:
            problems.append(Problem(where, "give value or valueFrom, not both"))
        if item.get("value") is not None and not isinstance(item.get("value"), str):
            problems.append(Problem(f"{where}.value", "must be a string"))
        source = item.get("valueFrom")
        if source is not None:
            refs = [
                k
                for k in ("configMapKeyRef", "secretKeyRef")
                if isinstance(source, Mapping) and source.get(k) is not None
            ]
            if len(refs) != 1:
                problems.append(
                    Problem(
                        f"{where}.valueFrom", "give exactly one of configMapKeyRef, secretKeyRef"
                    )
                )
            for ref in refs:
                _check_key_ref(source[ref], f"{where}.valueFrom.{ref}", problems)


def _check_key_ref(value: object, field: str, problems: list[Problem]) -> None:
    """A key selector as Akri's agent reads it: which key of which object."""
    if not isinstance(value, Mapping):
        problems.append(Problem(field, f"must be a mapping, not {_kind(value)}"))
        return
    for key in ("key", "name"):
        if not isinstance(value.get(key), str) or not value[key]:
            problems.append(Problem(f"{field}.{key}", "required, a non-empty string"))


def _check_broker_spec(spec: Mapping[str, Any], problems: list[Problem]) -> None:
    """``brokerSpec`` is one broker kind (Akri reads it as an enum); both are ``brokerobjects``'s
    refusal, neither is refused here (leave ``brokerSpec`` out for no broker)."""
    broker = spec.get("brokerSpec")
    if isinstance(broker, Mapping) and all(
        broker.get(k) is None for k in ("brokerPodSpec", "brokerJobSpec")
    ):
        problems.append(
            Problem(
                "spec.brokerSpec",
                "give brokerPodSpec or brokerJobSpec (leave brokerSpec out for no broker)",
            )
        )


def _check_capacity(spec: Mapping[str, Any], problems: list[Problem]) -> None:
    capacity = spec.get("capacity", 1)
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        problems.append(Problem("spec.capacity", f"must be an integer, not {_kind(capacity)}"))
    elif capacity < 0:
        problems.append(Problem("spec.capacity", f"must not be negative, got {capacity}"))
    elif capacity > MAX_CAPACITY:
        problems.append(Problem("spec.capacity", f"must be at most {MAX_CAPACITY}, got {capacity}"))


def _check_broker_properties(spec: Mapping[str, Any], problems: list[Problem]) -> None:
    value = spec.get("brokerProperties")
    if value is None:
        return
    if not isinstance(value, Mapping):
        problems.append(Problem("spec.brokerProperties", f"must be a mapping, not {_kind(value)}"))
        return
    for key, item in value.items():
        if not isinstance(item, str):
            problems.append(Problem(f"spec.brokerProperties.{key}", "must be a string"))


def sample_instance(configuration: Mapping[str, Any]) -> dict[str, Any]:
    """A stand-in Instance of ``configuration``, as the agent would make for a device."""
    name = objects.name_of(configuration) or "configuration"
    return {
        "apiVersion": objects.API_VERSION,
        "kind": "Instance",
        "metadata": {
            "name": f"{name}-{SAMPLE_DIGEST}",
            "namespace": objects.namespace_of(configuration) or "default",
            "uid": "00000000-0000-0000-0000-000000000000",
        },
        "spec": {
            "configurationName": name,
            "cdiName": f"akri.sh/{name}={SAMPLE_DIGEST}",
            "capacity": 1,
            "brokerProperties": {},
            "shared": False,
            "nodes": [SAMPLE_NODE],
            "deviceUsage": {},
        },
    }


def samples(configuration: Mapping[str, Any]) -> list[Sample]:
    """The objects the controller would create (for a stand-in Instance); ``SpecError``
    when they cannot be built."""
    config = {
        **configuration,
        "metadata": {
            **objects.meta(configuration),
            "uid": objects.uid_of(configuration) or "00000000-0000-0000-0000-000000000001",
        },
    }
    instance = sample_instance(config)
    found: list[Sample] = []
    kind = objects.broker_kind(config)
    if kind is not None and kind[0] == "pod":
        body = objects.broker_pod(config, instance, SAMPLE_NODE)
        found.append(Sample("pods", body, objects.POD_SPEC_FIELD, objects.POD_SPEC_FIELD))
    elif kind is not None:
        body = objects.broker_job(config, instance)
        found.append(Sample("jobs", body, objects.JOB_SPEC_FIELD, objects.JOB_SPEC_FIELD))
    service = objects.instance_service(config, instance)
    if service is not None:
        field = objects.INSTANCE_SERVICE_FIELD
        found.append(Sample("services", service, field, field))
    service = objects.configuration_service(config)
    if service is not None:
        field = objects.CONFIGURATION_SERVICE_FIELD
        found.append(Sample("services", service, field, field))
    return found


def check(configuration: Mapping[str, Any], warnings: list[str] | None = None) -> list[Problem]:
    """Everything wrong that can be seen without the apiserver, each naming its field.

    What is admitted but worth saying (unknown keys in ``discoveryDetails``, ignored as Akri
    ignores them) is appended to ``warnings``: admission warnings, shown by kubectl.
    """
    spec = configuration.get("spec")
    if not isinstance(spec, Mapping):
        return [Problem("spec", f"required, a mapping (got {_kind(spec)})")]
    problems: list[Problem] = []
    _check_handler(spec, problems, warnings)
    _check_capacity(spec, problems)
    _check_broker_spec(spec, problems)
    _check_broker_properties(spec, problems)
    for key in ("instanceServiceSpec", "configurationServiceSpec"):
        value = spec.get(key)
        if value is not None and not isinstance(value, Mapping):
            problems.append(Problem(f"spec.{key}", f"must be a mapping, not {_kind(value)}"))
    if any(
        p.field.startswith("spec.instanceServiceSpec")
        or p.field.startswith("spec.configurationServiceSpec")
        for p in problems
    ):
        return problems
    try:
        samples(configuration)
    except objects.SpecError as e:
        # The Instances' names are the Configuration's name plus a suffix.
        field = "metadata.name" if e.field == "Instance name" else e.field
        problems.append(Problem(field, e.message))
    return problems


# --- the apiserver's verdict on a sample -----------------------------------------------------

_KIND_NAMES = {"pods": "PodSpec", "jobs": "JobSpec", "services": "ServiceSpec"}
_INVALID_PREFIX = re.compile(r'^[A-Za-z.]+ "[^"]*" is invalid: ')
_SPEC_FIELD = re.compile(r"(?<![\w.\]])spec\.")


def explain_refusal(sample: Sample, message: str) -> Problem:
    """The apiserver's refusal of a sample, in the Configuration's field names."""
    text = _INVALID_PREFIX.sub("", message.strip())
    text = _SPEC_FIELD.sub(f"{sample.spec_prefix}.", text)
    return Problem(sample.field, f"not a valid {_KIND_NAMES[sample.kind]}: {text}")
