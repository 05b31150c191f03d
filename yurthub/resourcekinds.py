"""Which ``kind`` a resource's objects have, for answers the hub builds itself offline.

An offline BOOKMARK (``proxy.localwatches``) and an offline list's envelope
(``proxy.locallists``) are made by the hub, not copied from the apiserver, so the hub has to name
the kind. client-go decodes every watch event's object by the ``kind`` it carries
(``rest/watch.Decoder`` calls ``runtime.Decode`` with no target type; the JSON and protobuf
serializers then fail with ``Object 'Kind' is missing``): a bookmark without one ends the
client's watch with an error, every bookmark interval.

``kind_for`` decides, best source first: Kubernetes' own resources (``BUILTIN_KINDS``, known
without any discovery, so kubelet's Node watch needs nothing cached), the kind the list being
answered recorded, the apiserver's discovery documents the hub keeps (``discovered``), then the
kind of any stored object or list of the resource. The built-in table comes first because it
cannot be wrong, while what the cache holds came, in the end, from bodies a client on the node
may have written offline. PURE throughout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard

MAX_DISCOVERED = 20_000
"""Resources ``discovered`` reads from one document at most (a large cluster serves a few
thousand); the rest are left out."""

BUILTIN_KINDS: Mapping[tuple[str, str], str] = {
    # core ("" group)
    ("", "bindings"): "Binding",
    ("", "componentstatuses"): "ComponentStatus",
    ("", "configmaps"): "ConfigMap",
    ("", "endpoints"): "Endpoints",
    ("", "events"): "Event",
    ("", "limitranges"): "LimitRange",
    ("", "namespaces"): "Namespace",
    ("", "nodes"): "Node",
    ("", "persistentvolumeclaims"): "PersistentVolumeClaim",
    ("", "persistentvolumes"): "PersistentVolume",
    ("", "pods"): "Pod",
    ("", "podtemplates"): "PodTemplate",
    ("", "replicationcontrollers"): "ReplicationController",
    ("", "resourcequotas"): "ResourceQuota",
    ("", "secrets"): "Secret",
    ("", "serviceaccounts"): "ServiceAccount",
    ("", "services"): "Service",
    # the standard groups
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): (
        "MutatingWebhookConfiguration"
    ),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): (
        "ValidatingWebhookConfiguration"
    ),
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"): "ValidatingAdmissionPolicy",
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"): (
        "ValidatingAdmissionPolicyBinding"
    ),
    ("admissionregistration.k8s.io", "mutatingadmissionpolicies"): "MutatingAdmissionPolicy",
    ("admissionregistration.k8s.io", "mutatingadmissionpolicybindings"): (
        "MutatingAdmissionPolicyBinding"
    ),
    ("apiextensions.k8s.io", "customresourcedefinitions"): "CustomResourceDefinition",
    ("apiregistration.k8s.io", "apiservices"): "APIService",
    ("apps", "controllerrevisions"): "ControllerRevision",
    ("apps", "daemonsets"): "DaemonSet",
    ("apps", "deployments"): "Deployment",
    ("apps", "replicasets"): "ReplicaSet",
    ("apps", "statefulsets"): "StatefulSet",
    ("autoscaling", "horizontalpodautoscalers"): "HorizontalPodAutoscaler",
    ("batch", "cronjobs"): "CronJob",
    ("batch", "jobs"): "Job",
    ("certificates.k8s.io", "certificatesigningrequests"): "CertificateSigningRequest",
    ("certificates.k8s.io", "clustertrustbundles"): "ClusterTrustBundle",
    ("coordination.k8s.io", "leases"): "Lease",
    ("coordination.k8s.io", "leasecandidates"): "LeaseCandidate",
    ("discovery.k8s.io", "endpointslices"): "EndpointSlice",
    ("events.k8s.io", "events"): "Event",
    ("flowcontrol.apiserver.k8s.io", "flowschemas"): "FlowSchema",
    ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations"): ("PriorityLevelConfiguration"),
    ("internal.apiserver.k8s.io", "storageversions"): "StorageVersion",
    ("networking.k8s.io", "ingressclasses"): "IngressClass",
    ("networking.k8s.io", "ingresses"): "Ingress",
    ("networking.k8s.io", "ipaddresses"): "IPAddress",
    ("networking.k8s.io", "networkpolicies"): "NetworkPolicy",
    ("networking.k8s.io", "servicecidrs"): "ServiceCIDR",
    ("node.k8s.io", "runtimeclasses"): "RuntimeClass",
    ("policy", "poddisruptionbudgets"): "PodDisruptionBudget",
    ("rbac.authorization.k8s.io", "clusterrolebindings"): "ClusterRoleBinding",
    ("rbac.authorization.k8s.io", "clusterroles"): "ClusterRole",
    ("rbac.authorization.k8s.io", "rolebindings"): "RoleBinding",
    ("rbac.authorization.k8s.io", "roles"): "Role",
    ("resource.k8s.io", "deviceclasses"): "DeviceClass",
    ("resource.k8s.io", "resourceclaims"): "ResourceClaim",
    ("resource.k8s.io", "resourceclaimtemplates"): "ResourceClaimTemplate",
    ("resource.k8s.io", "resourceslices"): "ResourceSlice",
    ("scheduling.k8s.io", "priorityclasses"): "PriorityClass",
    ("storage.k8s.io", "csidrivers"): "CSIDriver",
    ("storage.k8s.io", "csinodes"): "CSINode",
    ("storage.k8s.io", "csistoragecapacities"): "CSIStorageCapacity",
    ("storage.k8s.io", "storageclasses"): "StorageClass",
    ("storage.k8s.io", "volumeattachments"): "VolumeAttachment",
    ("storage.k8s.io", "volumeattributesclasses"): "VolumeAttributesClass",
    ("storagemigration.k8s.io", "storageversionmigrations"): "StorageVersionMigration",
    # this project's own (Akri, OpenYurt): CRDs, but their kinds are fixed here
    ("akri.sh", "configurations"): "Configuration",
    ("akri.sh", "instances"): "Instance",
    ("apps.openyurt.io", "nodepools"): "NodePool",
    ("apps.openyurt.io", "nodebuckets"): "NodeBucket",
}
"""(group, resource) -> kind of what Kubernetes serves itself: the same in every version."""

Discovered = Mapping[tuple[str, str, str], str]
"""(group, version, resource) -> kind, as ``discovered`` reads it."""


def kind_for(
    group: str,
    version: str,
    resource: str,
    *,
    listed: str = "",
    discovered: Discovered | None = None,
    stored: Iterable[str] = (),
) -> str:
    """The kind of ``resource``'s objects in ``group``/``version``, "" when nothing names it.

    ``listed``: the item kind the list being answered recorded; ``discovered``: what the
    apiserver's discovery said (``discovered``); ``stored``: kinds of the resource's stored
    objects and other lists (read lazily: the first non-empty one is taken). PURE."""
    builtin = BUILTIN_KINDS.get((group, resource))
    if builtin is not None:
        return builtin
    if listed:
        return listed
    if discovered is not None:
        found = discovered.get((group, version, resource))
        if found:
            return found
    return next((kind for kind in stored if kind), "")


def discovered(document: Any) -> dict[tuple[str, str, str], str]:
    """(group, version, resource) -> kind a discovery document names: aggregated
    (``APIGroupDiscoveryList``, v2 or v2beta1: ``/api``, ``/apis``) or legacy
    (``APIResourceList``: ``/api/v1``, ``/apis/<group>/<version>``). Subresources, and
    anything it cannot read, are left out; at most ``MAX_DISCOVERED`` entries. PURE."""
    if not isinstance(document, Mapping):
        return {}
    if document.get("kind") == "APIResourceList":
        return _legacy(document)
    return _aggregated(document)


def _legacy(document: Mapping[str, Any]) -> dict[tuple[str, str, str], str]:
    out: dict[tuple[str, str, str], str] = {}
    group_version = document.get("groupVersion")
    if not isinstance(group_version, str):
        return out
    group, _, version = group_version.rpartition("/")
    for resource in _dicts(document.get("resources")):
        name, kind = resource.get("name"), resource.get("kind")
        if _named(name) and isinstance(kind, str) and kind and len(out) < MAX_DISCOVERED:
            out[group, version, name] = kind
    return out


def _aggregated(document: Mapping[str, Any]) -> dict[tuple[str, str, str], str]:
    out: dict[tuple[str, str, str], str] = {}
    for group_doc in _dicts(document.get("items")):
        meta = group_doc.get("metadata")
        group = meta.get("name", "") if isinstance(meta, Mapping) else ""
        if not isinstance(group, str):
            continue
        for version_doc in _dicts(group_doc.get("versions")):
            version = version_doc.get("version")
            if not isinstance(version, str) or not version:
                continue
            for resource in _dicts(version_doc.get("resources")):
                name, response = resource.get("resource"), resource.get("responseKind")
                kind = response.get("kind") if isinstance(response, Mapping) else None
                if _named(name) and isinstance(kind, str) and kind and len(out) < MAX_DISCOVERED:
                    out[group, version, name] = kind
    return out


def _named(name: object) -> TypeGuard[str]:
    """A resource's name (``pods``), not a subresource's (``pods/status``)."""
    return isinstance(name, str) and bool(name) and "/" not in name


def _dicts(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []
