"""Metric label values, bounded: what a request may put in a label, and what it may not.

PURE: sets of names in, names out; no I/O.

Why: any local process can send any User-Agent, method or URL. Used as label values as sent,
they made one series per distinct string (3,000 odd requests: a 27.8 MB ``/metrics``, seconds of
scraping). So every label is one of a known set, else ``other``:

- component / client: the components the hub knows (``KNOWN_COMPONENTS``, the configured cache
  agents, this node's ``multiplexer-proxy-<node>``). YurtHub labels ``client`` with the whole
  User-Agent, versions included **[quirk]**: one series per kubelet upgrade, and unbounded.
- verb: the apiserver's verbs and the HTTP methods of non-resource requests.
- resource / subresource: what Kubernetes itself serves (``BUILTIN_*``) plus what the
  apiserver's own discovery lists (``learn``, fed by ``apiresources``), at most
  ``MAX_LEARNED`` names: CRDs get their name, typos and probes do not.
- code: an HTTP status code (100-599).

Dangers: ``Bounds`` is read on the event loop per request and written only there too (``learn``
replaces its sets whole), so a scrape thread never sees it half-changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from yurthub import requestinfo

OTHER = "other"

KNOWN_COMPONENTS = frozenset(
    {
        # YurtHub's default cache agents, and the hub's own clients
        "kubelet",
        "kube-proxy",
        "flanneld",
        "coredns",
        "raven-agent-ds",
        "yurttunnel-agent",
        "yurthub",
        "edgehub",
        "edgehub-agent",
        "edgehub-heartbeat",
        # what else commonly runs on a node or talks to it
        "kubectl",
        "calico-node",
        "cilium-agent",
        "kube-controller-manager",
        "kube-scheduler",
        "kubeadm",
        "containerd",
        "helm",
        "go-http-client",
        "python",
        "okhttp",
    }
)

VERBS = requestinfo.KNOWN_VERBS | {"post", "put", "head", "options"}
"""The apiserver's verbs, plus the lower-cased methods of non-resource requests."""

BUILTIN_RESOURCES = frozenset(
    {
        # core
        "bindings",
        "componentstatuses",
        "configmaps",
        "endpoints",
        "events",
        "limitranges",
        "namespaces",
        "nodes",
        "persistentvolumeclaims",
        "persistentvolumes",
        "pods",
        "podtemplates",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "serviceaccounts",
        "services",
        # the standard groups
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
        "mutatingadmissionpolicies",
        "mutatingadmissionpolicybindings",
        "customresourcedefinitions",
        "apiservices",
        "controllerrevisions",
        "daemonsets",
        "deployments",
        "replicasets",
        "statefulsets",
        "selfsubjectreviews",
        "tokenreviews",
        "localsubjectaccessreviews",
        "selfsubjectaccessreviews",
        "selfsubjectrulesreviews",
        "subjectaccessreviews",
        "horizontalpodautoscalers",
        "cronjobs",
        "jobs",
        "certificatesigningrequests",
        "clustertrustbundles",
        "leases",
        "leasecandidates",
        "endpointslices",
        "flowschemas",
        "prioritylevelconfigurations",
        "ingressclasses",
        "ingresses",
        "networkpolicies",
        "ipaddresses",
        "servicecidrs",
        "runtimeclasses",
        "poddisruptionbudgets",
        "clusterrolebindings",
        "clusterroles",
        "rolebindings",
        "roles",
        "priorityclasses",
        "csidrivers",
        "csinodes",
        "csistoragecapacities",
        "storageclasses",
        "volumeattachments",
        "volumeattributesclasses",
        "deviceclasses",
        "resourceclaims",
        "resourceclaimtemplates",
        "resourceslices",
        "storageversions",
        "storageversionmigrations",
        # this project's own (Akri, OpenYurt)
        "configurations",
        "instances",
        "nodepools",
        "nodebuckets",
    }
)

BUILTIN_SUBRESOURCES = frozenset(
    {
        "status",
        "scale",
        "binding",
        "eviction",
        "log",
        "exec",
        "attach",
        "portforward",
        "proxy",
        "token",
        "approval",
        "ephemeralcontainers",
        "resize",
        "finalize",
    }
)

MAX_LEARNED = 4096
"""Resource (and subresource) names taken from discovery at most: a cluster with thousands of
CRDs keeps its labels, a misbehaving apiserver cannot grow them without end."""


class Bounds:
    """The label values one hub allows. Create once per hub; ``learn`` as discovery says."""

    def __init__(self, components: Iterable[str] = ()) -> None:
        self.components = KNOWN_COMPONENTS | frozenset(c for c in components if c and c != "*")
        self.resources = BUILTIN_RESOURCES
        self.subresources = BUILTIN_SUBRESOURCES

    def component(self, name: str) -> str:
        return name if name in self.components else OTHER

    def verb(self, name: str) -> str:
        return name if name in VERBS else OTHER

    def resource(self, name: str) -> str:
        return name if not name or name in self.resources else OTHER

    def subresource(self, name: str) -> str:
        return name if not name or name in self.subresources else OTHER

    @staticmethod
    def code(status: int) -> str:
        return str(status) if 100 <= status <= 599 else OTHER

    def learn(self, resources: Iterable[str], subresources: Iterable[str]) -> None:
        """Add names the apiserver's discovery listed (bounded by ``MAX_LEARNED``)."""
        self.resources = _bounded(BUILTIN_RESOURCES, self.resources, resources)
        self.subresources = _bounded(BUILTIN_SUBRESOURCES, self.subresources, subresources)


def _bounded(
    builtin: frozenset[str], current: frozenset[str], new: Iterable[str]
) -> frozenset[str]:
    names = set(current)
    room = MAX_LEARNED + len(builtin) - len(names)
    for name in new:
        if room <= 0:
            break
        if name and name not in names and _plausible(name):
            names.add(name)
            room -= 1
    return frozenset(names)


def _plausible(name: str) -> bool:
    # A DNS label, as Kubernetes resource names are: nothing that could break the exposition.
    return len(name) <= 63 and name.replace("-", "").isalnum() and name.isascii()


def aggregated_names(document: Any) -> tuple[set[str], set[str]]:
    """(resources, subresources) an ``APIGroupDiscoveryList`` (aggregated discovery, v2 or
    v2beta1) lists; anything it cannot read is skipped."""
    resources: set[str] = set()
    subresources: set[str] = set()
    if not isinstance(document, Mapping):
        return resources, subresources
    for group in _dicts(document.get("items")):
        for version in _dicts(group.get("versions")):
            for resource in _dicts(version.get("resources")):
                name = resource.get("resource")
                if isinstance(name, str):
                    resources.add(name)
                for sub in _dicts(resource.get("subresources")):
                    sub_name = sub.get("subresource")
                    if isinstance(sub_name, str):
                        subresources.add(sub_name)
    return resources, subresources


def _dicts(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []
