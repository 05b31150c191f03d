"""The kind registry: which resources the simulated apiserver serves, and how each behaves.

A ``ResourceType`` is one group/version/resource as discovery shows it, plus the
few behaviour flags storage and the HTTP layer need (scope, subresources,
whether spec changes bump ``generation``, whether PUT may create...). The
``Registry`` holds the built-in types and grows and shrinks as
CustomResourceDefinitions are created and deleted.

Invariants: a (group, version, resource) triple maps to exactly one type; every
type names a ``storage`` (group, resource) bucket, and two types share a bucket
only when they are versions of the same objects (core/v1 and events.k8s.io/v1
events; the versions of one CRD). The registry lives in the shared ``State``,
so apiservers over one state agree on what they serve.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
READ_WRITE_SUB = ("get", "patch", "update")

# Subresource name -> the verbs discovery advertises for it.
SUBRESOURCE_VERBS: dict[str, tuple[str, ...]] = {
    "status": READ_WRITE_SUB,
    "scale": READ_WRITE_SUB,
    "approval": READ_WRITE_SUB,
    "finalize": ("update",),
    "log": ("get",),
    "exec": ("create", "get"),
    "binding": ("create",),
    "eviction": ("create",),
    "token": ("create",),
}
# Subresource name -> the kind discovery reports for it (None: the parent's kind).
SUBRESOURCE_KINDS: dict[str, tuple[str, str, str] | None] = {
    "status": None,
    "approval": None,
    "finalize": None,
    "scale": ("autoscaling", "v1", "Scale"),
    "log": ("", "", "Pod"),
    "exec": ("", "", "PodExecOptions"),
    "binding": ("", "", "Binding"),
    "eviction": ("policy", "v1", "Eviction"),
    "token": ("authentication.k8s.io", "v1", "TokenRequest"),
}

GroupResource = tuple[str, str]

_VERSION_RE = re.compile(r"v(\d+)(?:(alpha|beta)(\d+))?")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key putting versions in kube-aware order: v2, v1, v1beta2, v1beta1, v1alpha1, other."""
    m = _VERSION_RE.fullmatch(version)
    if m is None:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0), "")


@dataclasses.dataclass(frozen=True, slots=True)
class PrinterColumn:
    """A CRD ``additionalPrinterColumns`` entry (or a built-in column of the same shape)."""

    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0
    format: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ResourceType:
    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool
    singular: str
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    verbs: tuple[str, ...] = ALL_VERBS
    has_generation: bool = False
    allow_create_on_update: bool = False
    return_deleted_object: bool = False
    # Reviews (SelfSubjectReview, ...) are answered, never stored.
    virtual: bool = False
    # The bucket the objects live in; versions of the same objects share it.
    storage_group: str | None = None
    crd_name: str | None = None
    printer_columns: tuple[PrinterColumn, ...] = ()
    # A CRD version's openAPIV3Schema, for defaulting and pruning.
    schema: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False)
    preserve_unknown_fields: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def storage(self) -> GroupResource:
        return (self.storage_group if self.storage_group is not None else self.group, self.resource)

    @property
    def qualified(self) -> str:
        """``pods`` or ``deployments.apps``: how errors name the resource."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def custom(self) -> bool:
        return self.crd_name is not None


def _t(
    group: str,
    resource: str,
    kind: str,
    *,
    version: str = "v1",
    namespaced: bool = True,
    short: tuple[str, ...] = (),
    categories: tuple[str, ...] = (),
    sub: Iterable[str] = (),
    verbs: tuple[str, ...] = ALL_VERBS,
    **flags: Any,
) -> ResourceType:
    return ResourceType(
        group=group,
        version=version,
        resource=resource,
        kind=kind,
        namespaced=namespaced,
        singular=kind.lower(),
        short_names=short,
        categories=categories,
        subresources=frozenset(sub),
        verbs=verbs,
        **flags,
    )


ALL = ("all",)
EXTENSIONS = ("api-extensions",)
CREATE_ONLY = ("create",)


def _workload(
    group: str, resource: str, kind: str, short: tuple[str, ...] = (), *, scale: bool = False
) -> ResourceType:
    """A workload (Deployment, Job, ...): in ``all``, with a status (and a scale), and its spec
    changes bump ``generation``."""
    sub = ("status", "scale") if scale else ("status",)
    return _t(group, resource, kind, short=short, categories=ALL, sub=sub, has_generation=True)


def _review(group: str, resource: str, kind: str) -> ResourceType:
    """A review (TokenReview, SelfSubjectAccessReview, ...): cluster-wide, created and answered,
    never stored."""
    return _t(group, resource, kind, namespaced=False, verbs=CREATE_ONLY, virtual=True)


def _admission(resource: str, kind: str, **options: Any) -> ResourceType:
    """An admissionregistration.k8s.io configuration: cluster-wide, with a ``generation``."""
    group = "admissionregistration.k8s.io"
    return _t(group, resource, kind, namespaced=False, has_generation=True, **options)


def builtin_types() -> list[ResourceType]:
    """The built-in kinds (all v1), in the order discovery lists them."""
    return [
        # core/v1
        _t("", "configmaps", "ConfigMap", short=("cm",)),
        _t("", "endpoints", "Endpoints", short=("ep",), allow_create_on_update=True),
        _t("", "events", "Event", short=("ev",), allow_create_on_update=True),
        _t("", "limitranges", "LimitRange", short=("limits",)),
        _t(
            "",
            "namespaces",
            "Namespace",
            namespaced=False,
            short=("ns",),
            sub=("status", "finalize"),
            verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
            return_deleted_object=True,
        ),
        _t("", "nodes", "Node", namespaced=False, short=("no",), sub=("status",)),
        _t("", "persistentvolumeclaims", "PersistentVolumeClaim", short=("pvc",), sub=("status",)),
        _t(
            "",
            "persistentvolumes",
            "PersistentVolume",
            namespaced=False,
            short=("pv",),
            sub=("status",),
        ),
        _t(
            "",
            "pods",
            "Pod",
            short=("po",),
            categories=ALL,
            sub=("status", "log", "exec", "binding", "eviction"),
            return_deleted_object=True,
        ),
        _t("", "podtemplates", "PodTemplate"),
        _workload("", "replicationcontrollers", "ReplicationController", ("rc",), scale=True),
        _t("", "resourcequotas", "ResourceQuota", short=("quota",), sub=("status",)),
        _t("", "secrets", "Secret"),
        _t("", "serviceaccounts", "ServiceAccount", short=("sa",), sub=("token",)),
        _t("", "services", "Service", short=("svc",), categories=ALL, sub=("status",)),
        _admission("mutatingwebhookconfigurations", "MutatingWebhookConfiguration"),
        _admission("validatingwebhookconfigurations", "ValidatingWebhookConfiguration"),
        # apps/v1
        _t("apps", "controllerrevisions", "ControllerRevision"),
        _workload("apps", "daemonsets", "DaemonSet", ("ds",)),
        _workload("apps", "deployments", "Deployment", ("deploy",), scale=True),
        _workload("apps", "replicasets", "ReplicaSet", ("rs",), scale=True),
        _workload("apps", "statefulsets", "StatefulSet", ("sts",), scale=True),
        # events.k8s.io/v1 shares storage with core/v1 events (converted on the way out).
        _t(
            "events.k8s.io",
            "events",
            "Event",
            short=("ev",),
            storage_group="",
            allow_create_on_update=True,
        ),
        _review("authentication.k8s.io", "selfsubjectreviews", "SelfSubjectReview"),
        _review("authentication.k8s.io", "tokenreviews", "TokenReview"),
        _review("authorization.k8s.io", "selfsubjectaccessreviews", "SelfSubjectAccessReview"),
        _review("authorization.k8s.io", "selfsubjectrulesreviews", "SelfSubjectRulesReview"),
        _review("authorization.k8s.io", "subjectaccessreviews", "SubjectAccessReview"),
        _workload("batch", "cronjobs", "CronJob", ("cj",)),
        _workload("batch", "jobs", "Job"),
        _t(
            "certificates.k8s.io",
            "certificatesigningrequests",
            "CertificateSigningRequest",
            namespaced=False,
            short=("csr",),
            sub=("approval", "status"),
        ),
        _t("networking.k8s.io", "ingresses", "Ingress", short=("ing",), sub=("status",)),
        _t("networking.k8s.io", "networkpolicies", "NetworkPolicy", short=("netpol",)),
        _t(
            "policy", "poddisruptionbudgets", "PodDisruptionBudget", short=("pdb",), sub=("status",)
        ),
        _t(
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "ClusterRoleBinding",
            namespaced=False,
        ),
        _t("rbac.authorization.k8s.io", "clusterroles", "ClusterRole", namespaced=False),
        _t("rbac.authorization.k8s.io", "rolebindings", "RoleBinding"),
        _t("rbac.authorization.k8s.io", "roles", "Role"),
        _t("storage.k8s.io", "storageclasses", "StorageClass", namespaced=False, short=("sc",)),
        _t(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            namespaced=False,
            short=("crd", "crds"),
            categories=EXTENSIONS,
            sub=("status",),
            has_generation=True,
        ),
        _t(
            "scheduling.k8s.io", "priorityclasses", "PriorityClass", namespaced=False, short=("pc",)
        ),
        _t("coordination.k8s.io", "leases", "Lease", allow_create_on_update=True),
        _t("node.k8s.io", "runtimeclasses", "RuntimeClass", namespaced=False),
        _t("discovery.k8s.io", "endpointslices", "EndpointSlice"),
        _admission(
            "validatingadmissionpolicies",
            "ValidatingAdmissionPolicy",
            categories=EXTENSIONS,
            sub=("status",),
        ),
        _admission(
            "validatingadmissionpolicybindings",
            "ValidatingAdmissionPolicyBinding",
            categories=EXTENSIONS,
        ),
    ]


class Registry:
    """The served types: built-ins first, then one entry per served version of each CRD."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._by_kind: dict[tuple[str, str], ResourceType] = {}
        self._groups: dict[str, list[str]] = {}
        for rt in builtin_types():
            self._add(rt)

    def _add(self, rt: ResourceType) -> None:
        self._types[(rt.group, rt.version, rt.resource)] = rt
        self._by_kind[(rt.api_version, rt.kind)] = rt
        versions = self._groups.setdefault(rt.group, [])
        if rt.version not in versions:
            versions.append(rt.version)
            versions.sort(key=version_priority)

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(list(self._types.values()))

    def get(self, group: str, version: str, resource: str) -> ResourceType | None:
        return self._types.get((group, version, resource))

    def for_kind(self, api_version: str, kind: str) -> ResourceType | None:
        return self._by_kind.get((api_version, kind))

    def groups(self) -> list[tuple[str, list[str]]]:
        """(group, versions) in discovery order; versions preferred-first."""
        return [(g, list(vs)) for g, vs in self._groups.items() if vs]

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self._types.values() if rt.group == group and rt.version == version]

    def versions_of(self, storage: GroupResource) -> list[ResourceType]:
        return [rt for rt in self._types.values() if rt.storage == storage]

    def resolve(self, ref: str) -> ResourceType:
        """A type from "pods", "deployments.apps", "leases.v1.coordination.k8s.io" or a kind.

        Raises ``KeyError`` naming the reference when nothing matches.
        """
        resource, _, rest = ref.partition(".")
        candidates = [rt for rt in self._types.values() if rt.storage_group is None]
        for rt in candidates:
            if rest and (rest == rt.group or rest == f"{rt.version}.{rt.group}".rstrip(".")):
                if resource in (rt.resource, rt.singular) or resource.lower() == rt.kind.lower():
                    return rt
            elif not rest and rt.group == "" and resource in (rt.resource, rt.singular, rt.kind):
                return rt
        for rt in candidates:
            if not rest and resource in (rt.resource, rt.kind, *rt.short_names):
                return rt
        raise KeyError(f"no resource type {ref!r} is served")

    # --- CRDs --------------------------------------------------------------------------------

    def install_crd(self, crd: Mapping[str, Any]) -> list[ResourceType]:
        """Serve every ``served`` version of ``crd``; replaces what an older spec served."""
        name = str(crd["metadata"]["name"])
        self.remove_crd(name)
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group = str(spec.get("group", ""))
        namespaced = spec.get("scope", "Namespaced") == "Namespaced"
        served: list[ResourceType] = []
        versions = list(spec.get("versions") or [])
        # Discovery orders versions by "kube-aware" priority: the first is the preferred one.
        versions.sort(key=lambda v: version_priority(str(v.get("name", ""))))
        for v in versions:
            if not v.get("served", True):
                continue
            sub = v.get("subresources") or spec.get("subresources") or {}
            schema = (v.get("schema") or {}).get("openAPIV3Schema")
            columns = tuple(
                PrinterColumn(
                    name=str(c.get("name", "")),
                    type=str(c.get("type", "string")),
                    json_path=str(c.get("jsonPath", "")),
                    description=str(c.get("description", "")),
                    priority=int(c.get("priority", 0)),
                    format=str(c.get("format", "")),
                )
                for c in v.get("additionalPrinterColumns") or ()
            )
            rt = ResourceType(
                group=group,
                version=str(v.get("name")),
                resource=str(names.get("plural")),
                kind=str(names.get("kind")),
                namespaced=namespaced,
                singular=str(names.get("singular") or str(names.get("kind", "")).lower()),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=frozenset(k for k in ("status", "scale") if k in sub),
                has_generation=True,
                crd_name=name,
                printer_columns=columns,
                schema=schema,
                preserve_unknown_fields=bool(
                    schema and schema.get("x-kubernetes-preserve-unknown-fields")
                ),
            )
            self._add(rt)
            served.append(rt)
        return served

    def remove_crd(self, name: str) -> list[ResourceType]:
        gone = [rt for rt in self._types.values() if rt.crd_name == name]
        for rt in gone:
            del self._types[(rt.group, rt.version, rt.resource)]
            self._by_kind.pop((rt.api_version, rt.kind), None)
        for rt in gone:
            if not any(
                t.group == rt.group and t.version == rt.version for t in self._types.values()
            ):
                versions = self._groups.get(rt.group, [])
                if rt.version in versions:
                    versions.remove(rt.version)
                if not versions:
                    self._groups.pop(rt.group, None)
        return gone

    def crd_types(self, name: str) -> list[ResourceType]:
        return [rt for rt in self._types.values() if rt.crd_name == name]
