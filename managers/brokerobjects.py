"""The objects a broker is made of, built from a Configuration and an Instance: pure.

Akri's shapes (reference §7.2-§7.4), so tools and selectors written for Akri keep working:

* broker Pod ``<instance>-pod`` (shared Instance: ``<node>-<instance>-pod``; dots in the
  Instance name become dashes) in the Instance's namespace, labels ``app=<name>``,
  ``controller=akri.sh``, ``akri.sh/configuration``, ``akri.sh/instance``,
  ``akri.sh/target-node``; its spec is ``brokerSpec.brokerPodSpec`` with every
  ``{{PLACEHOLDER}}`` resource limit/request renamed to the Instance's device-plugin resource
  ``akri.sh/<instance>`` (so kubelet allocates it a slot) and a required node affinity to its
  node; controlled by the Instance (``controller``, ``blockOwnerDeletion``).
* broker Job ``<instance>-<configuration generation>-job`` from ``brokerJobSpec``, labels
  ``app``, ``controller``, ``akri.sh/configuration``, ``akri.sh/instance``; its pod template
  gets the two ``akri.sh/`` labels and the resource; no node affinity (the resource exists only
  on the Instance's nodes); controlled by the Instance.
* Instance Service ``<instance>-svc`` from ``instanceServiceSpec`` selecting
  ``controller=akri.sh,akri.sh/instance=<instance>`` (plus the user's selector), controlled by
  the Instance; Configuration Service ``<config>-svc`` from ``configurationServiceSpec``
  selecting ``controller=akri.sh,akri.sh/configuration=<config>``, controlled by the
  Configuration.

Where Akri misbehaves, these builders do what a user expects instead ([quirk] in the reference;
docs/brokers.md lists them):

* Akri *appends* its node term to ``nodeSelectorTerms``, which Kubernetes ORs: a broker spec
  with its own required affinity could land on any node matching it. Here the node requirement
  is added to *every* term (AND), so the broker always runs on its node.
* A broker spec without ``{{PLACEHOLDER}}`` would get no slot (and no device properties, which
  only an allocation delivers): its first container then asks for one
  (``akri.sh/<instance>: "1"``).
* Job pod templates also get ``controller=akri.sh``, so an ``instanceServiceSpec`` with a Job
  broker selects the Job's pods (Akri's Service selected nothing).
* Instance Services also carry ``akri.sh/configuration``, so they are found by Configuration.
* ``app=<name>`` is cut to 63 characters (with a hash) when the name is longer; Akri's was
  refused by the apiserver.

Every object carries ``edgehub/template-hash``: a digest of what it was built from (its labels
and spec, plus the Instance's ``brokerProperties``, which reach the broker as environment at
allocation time). ``brokerplanning`` compares it to decide what to recreate.

Danger: the builders never trust the shape of user input; anything malformed in a place they
must edit raises ``SpecError`` naming the field (``spec.brokerSpec.brokerPodSpec.containers[0]
.resources``), and everything else is left for the apiserver to judge.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

API_VERSION = "akri.sh/v0"
CONFIGURATION_LABEL = "akri.sh/configuration"
INSTANCE_LABEL = "akri.sh/instance"
TARGET_NODE_LABEL = "akri.sh/target-node"
CONTROLLER_LABEL = "controller"
CONTROLLER_VALUE = "akri.sh"
APP_LABEL = "app"
PLACEHOLDER = "{{PLACEHOLDER}}"
HASH_ANNOTATION = "edgehub/template-hash"
RESOURCE_PREFIX = "akri.sh/"

POD_SPEC_FIELD = "spec.brokerSpec.brokerPodSpec"
JOB_SPEC_FIELD = "spec.brokerSpec.brokerJobSpec"
INSTANCE_SERVICE_FIELD = "spec.instanceServiceSpec"
CONFIGURATION_SERVICE_FIELD = "spec.configurationServiceSpec"

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
MAX_LABEL_VALUE = 63

JSONObject = dict[str, Any]


class SpecError(ValueError):
    """A broker cannot be built; ``field`` names where (``spec.brokerSpec.brokerPodSpec...``)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


# --- reading the inputs ---------------------------------------------------------------------


def meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    value = (obj or {}).get("metadata")
    return value if isinstance(value, Mapping) else {}


def spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    value = (obj or {}).get("spec")
    return value if isinstance(value, Mapping) else {}


def name_of(obj: Mapping[str, Any] | None) -> str:
    return str(meta(obj).get("name") or "")


def namespace_of(obj: Mapping[str, Any] | None) -> str:
    return str(meta(obj).get("namespace") or "")


def uid_of(obj: Mapping[str, Any] | None) -> str:
    return str(meta(obj).get("uid") or "")


def deleting(obj: Mapping[str, Any] | None) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def labels_of(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    value = meta(obj).get("labels")
    return value if isinstance(value, Mapping) else {}


def template_hash(obj: Mapping[str, Any] | None) -> str | None:
    annotations = meta(obj).get("annotations")
    if not isinstance(annotations, Mapping):
        return None
    value = annotations.get(HASH_ANNOTATION)
    return value if isinstance(value, str) else None


def broker_kind(configuration: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """``("pod", brokerPodSpec)``, ``("job", brokerJobSpec)`` or None (no broker)."""
    broker = spec(configuration).get("brokerSpec")
    if broker is None:
        return None
    if not isinstance(broker, Mapping):
        raise SpecError("spec.brokerSpec", "expected a mapping")
    pod, job = broker.get("brokerPodSpec"), broker.get("brokerJobSpec")
    if pod is not None and job is not None:
        raise SpecError("spec.brokerSpec", "give brokerPodSpec or brokerJobSpec, not both")
    if pod is not None:
        if not isinstance(pod, Mapping):
            raise SpecError(POD_SPEC_FIELD, "expected a mapping (a PodSpec)")
        return "pod", pod
    if job is not None:
        if not isinstance(job, Mapping):
            raise SpecError(JOB_SPEC_FIELD, "expected a mapping (a JobSpec)")
        return "job", job
    return None


def service_spec(configuration: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    value = spec(configuration).get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise SpecError(f"spec.{key}", "expected a mapping (a ServiceSpec)")
    return value


def instance_nodes(instance: Mapping[str, Any]) -> list[str]:
    """``spec.nodes`` in order, without duplicates or non-strings."""
    nodes = spec(instance).get("nodes")
    seen: list[str] = []
    for node in nodes if isinstance(nodes, list) else ():
        if isinstance(node, str) and node and node not in seen:
            seen.append(node)
    return seen


def instance_capacity(instance: Mapping[str, Any], default: int = 1) -> int:
    value = spec(instance).get("capacity")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return default
    return value


def shared(instance: Mapping[str, Any]) -> bool:
    return spec(instance).get("shared") is True


def broker_properties(instance: Mapping[str, Any]) -> Mapping[str, Any]:
    value = spec(instance).get("brokerProperties")
    return value if isinstance(value, Mapping) else {}


def generation(configuration: Mapping[str, Any]) -> int:
    value = meta(configuration).get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# --- names and labels ---------------------------------------------------------------------


def _normalized(instance: str) -> str:
    return instance.replace(".", "-")


def pod_name(instance: str, node: str, is_shared: bool) -> str:
    """Akri's ``create_broker_app_name``: ``[<node>-]<instance>-pod``."""
    base = _normalized(instance)
    return f"{node}-{base}-pod" if is_shared else f"{base}-pod"


def job_name(instance: str, config_generation: int) -> str:
    return f"{_normalized(instance)}-{config_generation}-job"


def instance_service_name(instance: str) -> str:
    return f"{_normalized(instance)}-svc"


def configuration_service_name(configuration: str) -> str:
    return f"{_normalized(configuration)}-svc"


def resource_name(instance: str) -> str:
    """The Instance's device-plugin resource, advertised by the agent on its nodes."""
    return f"{RESOURCE_PREFIX}{instance}"


def _digest(data: object, length: int = 16) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def app_label(name: str) -> str:
    """``name`` as an ``app`` label value: cut to 63 characters with a hash when longer."""
    if len(name) <= MAX_LABEL_VALUE and _LABEL_VALUE.match(name):
        return name
    stem = name[: MAX_LABEL_VALUE - 9].rstrip("-_.")
    return f"{stem}-{_digest(name, 8)}"


def _label(field: str, value: str) -> str:
    """A name that must be a label value as it is (selectors depend on it)."""
    if len(value) > MAX_LABEL_VALUE or not _LABEL_VALUE.match(value):
        raise SpecError(
            field,
            f"{value!r} cannot be a label value (at most {MAX_LABEL_VALUE} characters, "
            "alphanumerics, '-', '_' or '.', starting and ending alphanumeric)",
        )
    return value


def owner_reference(obj: Mapping[str, Any], kind: str) -> JSONObject:
    """A controlling reference to an Instance or Configuration (Akri's ``OwnershipInfo``)."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": name_of(obj),
        "uid": uid_of(obj),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The controlling owner reference of ``obj`` when it is an akri.sh Instance or
    Configuration: what makes an object ours. Anything else is never touched."""
    owners = meta(obj).get("ownerReferences")
    for owner in owners if isinstance(owners, list) else ():
        if (
            isinstance(owner, Mapping)
            and owner.get("controller") is True
            and owner.get("apiVersion") == API_VERSION
            and owner.get("kind") in ("Instance", "Configuration")
        ):
            return owner
    return None


# --- editing the user's specs --------------------------------------------------------------


def _mapping(value: object, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpecError(field, "expected a mapping")
    return value


def _list(value: object, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise SpecError(field, "expected a list")
    return value


def with_device(pod_spec: Mapping[str, Any], resource: str, field: str) -> JSONObject:
    """A copy of ``pod_spec`` whose ``{{PLACEHOLDER}}`` limits/requests name ``resource``;
    without any placeholder, the first container asks for one of it."""
    result = copy.deepcopy(dict(pod_spec))
    found = False
    for list_key in ("initContainers", "containers"):
        containers = result.get(list_key)
        if containers is None:
            continue
        for index, container in enumerate(_list(containers, f"{field}.{list_key}")):
            where = f"{field}.{list_key}[{index}]"
            container = _mapping(container, where)
            resources = container.get("resources")
            if resources is None:
                continue
            resources = _mapping(resources, f"{where}.resources")
            for kind in ("limits", "requests"):
                amounts = resources.get(kind)
                if amounts is None:
                    continue
                amounts = _mapping(amounts, f"{where}.resources.{kind}")
                if PLACEHOLDER in amounts:
                    amounts[resource] = amounts.pop(PLACEHOLDER)
                    found = True
    if not found:
        containers = _list(result.get("containers"), f"{field}.containers")
        if not containers:
            raise SpecError(f"{field}.containers", "at least one container is required")
        first = _mapping(containers[0], f"{field}.containers[0]")
        resources = first.setdefault("resources", {})
        resources = _mapping(resources, f"{field}.containers[0].resources")
        for kind in ("limits", "requests"):
            amounts = _mapping(
                resources.setdefault(kind, {}), f"{field}.containers[0].resources.{kind}"
            )
            amounts.setdefault(resource, "1")
    return result


def with_node(pod_spec: JSONObject, node: str, field: str) -> JSONObject:
    """``pod_spec`` (edited in place) required to run on ``node``: the requirement joins
    every existing node selector term (terms are ORed: appending one would widen them)."""
    requirement = {"key": "metadata.name", "operator": "In", "values": [node]}
    affinity = _mapping(pod_spec.setdefault("affinity", {}), f"{field}.affinity")
    node_affinity = _mapping(
        affinity.setdefault("nodeAffinity", {}), f"{field}.affinity.nodeAffinity"
    )
    where = f"{field}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = _mapping(
        node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {}), where
    )
    terms = _list(required.setdefault("nodeSelectorTerms", []), f"{where}.nodeSelectorTerms")
    if not terms:
        terms.append({})
    for index, term in enumerate(terms):
        term = _mapping(term, f"{where}.nodeSelectorTerms[{index}]")
        fields = _list(
            term.setdefault("matchFields", []),
            f"{where}.nodeSelectorTerms[{index}].matchFields",
        )
        fields.append(dict(requirement, values=[node]))
    return pod_spec


def _stamped(body: JSONObject, digest_of: object) -> JSONObject:
    body["metadata"].setdefault("annotations", {})[HASH_ANNOTATION] = _digest(digest_of)
    return body


# --- the objects -----------------------------------------------------------------------------


def broker_pod(
    configuration: Mapping[str, Any], instance: Mapping[str, Any], node: str
) -> JSONObject:
    """The broker Pod of ``instance`` on ``node``; ``SpecError`` when it cannot be built."""
    kind = broker_kind(configuration)
    if kind is None or kind[0] != "pod":
        raise SpecError(POD_SPEC_FIELD, "the Configuration has no brokerPodSpec")
    instance_name = name_of(instance)
    name = pod_name(instance_name, node, shared(instance))
    pod_spec = with_device(kind[1], resource_name(instance_name), POD_SPEC_FIELD)
    with_node(pod_spec, node, POD_SPEC_FIELD)
    labels = {
        APP_LABEL: app_label(name),
        CONTROLLER_LABEL: CONTROLLER_VALUE,
        CONFIGURATION_LABEL: _label("metadata.name", name_of(configuration)),
        INSTANCE_LABEL: _label("Instance name", instance_name),
        TARGET_NODE_LABEL: _label("node name", node),
    }
    body: JSONObject = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace_of(instance),
            "labels": labels,
            "ownerReferences": [owner_reference(instance, "Instance")],
        },
        "spec": pod_spec,
    }
    return _stamped(body, [labels, pod_spec, dict(broker_properties(instance))])


def broker_job(configuration: Mapping[str, Any], instance: Mapping[str, Any]) -> JSONObject:
    """The broker Job of ``instance``; its name carries the Configuration's generation."""
    kind = broker_kind(configuration)
    if kind is None or kind[0] != "job":
        raise SpecError(JOB_SPEC_FIELD, "the Configuration has no brokerJobSpec")
    instance_name = name_of(instance)
    name = job_name(instance_name, generation(configuration))
    job_spec = copy.deepcopy(dict(kind[1]))
    template = _mapping(job_spec.get("template"), f"{JOB_SPEC_FIELD}.template")
    template_meta = _mapping(
        template.setdefault("metadata", {}), f"{JOB_SPEC_FIELD}.template.metadata"
    )
    template_labels = _mapping(
        template_meta.setdefault("labels", {}), f"{JOB_SPEC_FIELD}.template.metadata.labels"
    )
    configuration_label = _label("metadata.name", name_of(configuration))
    instance_label = _label("Instance name", instance_name)
    template_labels.update(
        {
            CONFIGURATION_LABEL: configuration_label,
            INSTANCE_LABEL: instance_label,
            CONTROLLER_LABEL: CONTROLLER_VALUE,
        }
    )
    template["spec"] = with_device(
        _mapping(template.get("spec"), f"{JOB_SPEC_FIELD}.template.spec"),
        resource_name(instance_name),
        f"{JOB_SPEC_FIELD}.template.spec",
    )
    labels = {
        APP_LABEL: app_label(name),
        CONTROLLER_LABEL: CONTROLLER_VALUE,
        CONFIGURATION_LABEL: configuration_label,
        INSTANCE_LABEL: instance_label,
    }
    body: JSONObject = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace_of(instance),
            "labels": labels,
            "ownerReferences": [owner_reference(instance, "Instance")],
        },
        "spec": job_spec,
    }
    # The name (the generation) is left out: a Configuration change that leaves the Job
    # as it was does not run it again.
    return _stamped(body, [job_spec, dict(broker_properties(instance))])


def _service(
    name: str,
    namespace: str,
    service: Mapping[str, Any],
    labels: dict[str, str],
    selector: dict[str, str],
    owner: JSONObject,
    field: str,
) -> JSONObject:
    service_spec_copy = copy.deepcopy(dict(service))
    user_selector = service_spec_copy.get("selector")
    if user_selector is None:
        user_selector = {}
    service_spec_copy["selector"] = {**_mapping(user_selector, f"{field}.selector"), **selector}
    body: JSONObject = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [owner],
        },
        "spec": service_spec_copy,
    }
    return _stamped(body, [labels, service_spec_copy])


def instance_service(
    configuration: Mapping[str, Any], instance: Mapping[str, Any]
) -> JSONObject | None:
    """The Instance Service, or None when the Configuration has no ``instanceServiceSpec``."""
    service = service_spec(configuration, "instanceServiceSpec")
    if service is None:
        return None
    instance_name = name_of(instance)
    name = instance_service_name(instance_name)
    instance_label = _label("Instance name", instance_name)
    labels = {
        APP_LABEL: app_label(name),
        CONTROLLER_LABEL: CONTROLLER_VALUE,
        INSTANCE_LABEL: instance_label,
        CONFIGURATION_LABEL: _label("metadata.name", name_of(configuration)),
    }
    selector = {CONTROLLER_LABEL: CONTROLLER_VALUE, INSTANCE_LABEL: instance_label}
    return _service(
        name,
        namespace_of(instance),
        service,
        labels,
        selector,
        owner_reference(instance, "Instance"),
        INSTANCE_SERVICE_FIELD,
    )


def configuration_service(configuration: Mapping[str, Any]) -> JSONObject | None:
    """The Configuration Service, or None without ``configurationServiceSpec``."""
    service = service_spec(configuration, "configurationServiceSpec")
    if service is None:
        return None
    configuration_name = name_of(configuration)
    name = configuration_service_name(configuration_name)
    configuration_label = _label("metadata.name", configuration_name)
    labels = {
        APP_LABEL: app_label(name),
        CONTROLLER_LABEL: CONTROLLER_VALUE,
        CONFIGURATION_LABEL: configuration_label,
    }
    selector = {CONTROLLER_LABEL: CONTROLLER_VALUE, CONFIGURATION_LABEL: configuration_label}
    return _service(
        name,
        namespace_of(configuration),
        service,
        labels,
        selector,
        owner_reference(configuration, "Configuration"),
        CONFIGURATION_SERVICE_FIELD,
    )


def updated_service(current: Mapping[str, Any], desired: Mapping[str, Any]) -> JSONObject:
    """``current`` (as read, with its resourceVersion) rewritten to ``desired``: labels and
    owner merged over the current ones, the spec replaced except for what the apiserver
    allocated and the desired spec leaves open (cluster IPs; node ports it keeps itself)."""
    body = copy.deepcopy(dict(current))
    metadata = body.setdefault("metadata", {})
    desired_meta = desired["metadata"]
    metadata["labels"] = {**(metadata.get("labels") or {}), **desired_meta["labels"]}
    annotations = metadata.get("annotations")
    metadata["annotations"] = {
        **(annotations if isinstance(annotations, dict) else {}),
        **desired_meta["annotations"],
    }
    metadata["ownerReferences"] = copy.deepcopy(desired_meta["ownerReferences"])
    new_spec = copy.deepcopy(dict(desired["spec"]))
    current_spec = spec(current)
    for allocated in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
        if allocated not in new_spec and allocated in current_spec:
            new_spec[allocated] = copy.deepcopy(current_spec[allocated])
    body["spec"] = new_spec
    body.pop("status", None)
    return body
