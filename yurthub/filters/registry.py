"""Which filters a request gets: YurtHub's table, the ConfigMap's additions, the flags.

PURE: plain strings in, filter names out; no I/O (the ConfigMap's data is handed in by the
follower in ``cache/agents.py``).

The table (reference §6): each filter has default components and, per resource, the verbs it
applies to. A request ``component/verb/resource`` (component = the User-Agent before ``/``,
aliased as ``requestinfo.component_of`` does) gets every filter whose components include it
and whose resource lists that verb. ConfigMap ``yurt-hub-cfg`` adds components per filter
(``servicetopology: "cilium, traefik"``), applied live; it cannot remove a default, and deleting
the ConfigMap (or the key) returns to the defaults.

Never filtered: the hub's own requests (component ``yurthub``/``edgehub``, or
``multiplexer-proxy-<node>``): the hub's informers must see what the cloud has (the service
topology input is a list of services, which a filter must not thin out).

Switches: ``--enable-resource-filter=false`` turns every filter off; ``--disabled-resource-filters``
names filters to turn off (``*`` all); ``--working-mode=cloud`` turns off the filters that only
make sense on an edge node (``discardcloudservice``, ``forwardkubesvctraffic``,
``serviceenvupdater``).

The chain order is the table order below (YurtHub's is a set's random order): filters rarely
touch the same object, and where they do (``servicetopology`` and ``forwardkubesvctraffic`` on
the ``default/kubernetes`` slice) the later one's rewrite is the one that must win.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import Any

logger = logging.getLogger(__name__)

MASTERSERVICE = "masterservice"
DISCARDCLOUDSERVICE = "discardcloudservice"
NODEPORTISOLATION = "nodeportisolation"
SERVICETOPOLOGY = "servicetopology"
FORWARDKUBESVCTRAFFIC = "forwardkubesvctraffic"
INCLUSTERCONFIG = "inclusterconfig"
SERVICEENVUPDATER = "serviceenvupdater"

WILDCARD = "*"


@dataclasses.dataclass(frozen=True, slots=True)
class Spec:
    """One filter's row of the table."""

    name: str
    components: frozenset[str]
    """Default components (truncated User-Agents)."""
    verbs: Mapping[str, frozenset[str]]
    """resource -> verbs."""
    cloud: bool
    """Also runs when ``--working-mode=cloud``."""


def _spec(name: str, components: str, verbs: dict[str, str], *, cloud: bool) -> Spec:
    return Spec(
        name,
        frozenset(components.split(",")),
        {resource: frozenset(v.split(",")) for resource, v in verbs.items()},
        cloud,
    )


SPECS: tuple[Spec, ...] = (
    _spec(MASTERSERVICE, "kubelet", {"services": "list,watch"}, cloud=True),
    _spec(DISCARDCLOUDSERVICE, "kube-proxy", {"services": "list,watch"}, cloud=False),
    _spec(NODEPORTISOLATION, "kube-proxy", {"services": "list,watch"}, cloud=True),
    _spec(
        SERVICETOPOLOGY,
        "kube-proxy,coredns,nginx-ingress-controller",
        {"endpoints": "list,watch", "endpointslices": "list,watch"},
        cloud=True,
    ),
    _spec(FORWARDKUBESVCTRAFFIC, "kube-proxy", {"endpointslices": "list,watch"}, cloud=False),
    _spec(INCLUSTERCONFIG, "kubelet", {"configmaps": "get,list,watch"}, cloud=True),
    _spec(SERVICEENVUPDATER, "kubelet", {"pods": "list,watch,get,patch"}, cloud=False),
)
NAMES: tuple[str, ...] = tuple(s.name for s in SPECS)
POINTING_AT_THE_HUB: tuple[str, ...] = (
    MASTERSERVICE,
    FORWARDKUBESVCTRAFFIC,
    INCLUSTERCONFIG,
    SERVICEENVUPDATER,
)
"""The filters that send pods to the hub's address (``inclusterconfig`` through
``masterservice``: it hands kube-proxy to InClusterConfig, which is the hub only when the
``kubernetes`` Service is). They run only where pods reach the hub's secure port
(``inputs.pods_cannot_reach``); elsewhere they would cut every in-cluster client off the
apiserver, so they stay off and the hub says why (``runtime.Filters.inactive``)."""
_BY_NAME = {s.name: s for s in SPECS}

RESOURCE_KINDS = {
    "services": "Service",
    "endpoints": "Endpoints",
    "endpointslices": "EndpointSlice",
    "configmaps": "ConfigMap",
    "pods": "Pod",
}
"""The kind a filtered resource's objects have (list items carry no kind of their own)."""


class UnknownFilter(ValueError):
    """A filter name that is not one of ``NAMES``."""


def parse_names(text: str) -> tuple[str, ...]:
    """``--disabled-resource-filters``: a comma list of filter names (or ``*``), checked.

    YurtHub ignores a name it does not know; a typo would then leave a filter on that the
    operator meant to turn off, so here it is an error naming the known filters.
    """
    names: list[str] = []
    for raw in text.split(","):
        name = raw.strip().lower()
        if not name or name in names:
            continue
        if name != WILDCARD and name not in _BY_NAME:
            raise UnknownFilter(
                f"unknown filter {name!r} in --disabled-resource-filters (known: "
                f"{', '.join(NAMES)}, or * for all)"
            )
        names.append(name)
    return tuple(names)


def _components(text: str) -> tuple[str, ...]:
    out: list[str] = []
    for raw in text.split(","):
        component = raw.strip().lower()
        if component and component not in out:
            out.append(component)
    return tuple(out)


class Approver:
    """The live decision ``(component, verb, resource) -> filter names``.

    Lookups are one dict access per request; the table is rebuilt when the ConfigMap changes.
    """

    def __init__(
        self,
        *,
        node_name: str,
        enabled: bool = True,
        disabled: Iterable[str] = (),
        cloud_mode: bool = False,
    ) -> None:
        off = set(disabled)
        self.active: tuple[Spec, ...] = ()
        if enabled and WILDCARD not in off:
            self.active = tuple(
                s for s in SPECS if s.name not in off and (s.cloud or not cloud_mode)
            )
        self._own = frozenset({"yurthub", "edgehub", f"multiplexer-proxy-{node_name}".lower()})
        self.additions: dict[str, tuple[str, ...]] = {}
        self.synced = False
        """True once the ConfigMap (or its absence) has been read."""
        self._table: dict[tuple[str, str, str], tuple[str, ...]] = {}
        self._rebuild()

    @property
    def names(self) -> tuple[str, ...]:
        """The filters that may run at all (enabled, not disabled, fit for the working mode)."""
        return tuple(s.name for s in self.active)

    def approve(self, component: str, verb: str, resource: str) -> tuple[str, ...]:
        """The filters for a request, in chain order; empty for the hub's own requests."""
        if component in self._own:
            return ()
        return self._table.get((component, verb, resource), ())

    def apply_configmap(self, data: Mapping[str, Any] | None) -> bool:
        """Take the per-filter additions from ``yurt-hub-cfg``'s data (None: deleted).

        True when the additions changed. Keys that are not filter names (``cache_agents``) are
        not ours; a filter that is off keeps its additions for when it is on again (a restart).
        """
        self.synced = True
        additions: dict[str, tuple[str, ...]] = {}
        for name in NAMES:
            raw = data.get(name) if data else None
            if not isinstance(raw, str):
                continue
            components = _components(raw)
            if WILDCARD in components:
                # A wildcard would filter every client's reads, even the hub's informers of
                # another node's tools; YurtHub has no wildcard here either.
                logger.warning("yurt-hub-cfg %s: '*' is not a component and is ignored", name)
                components = tuple(c for c in components if c != WILDCARD)
            if components:
                additions[name] = components
        if additions == self.additions:
            return False
        self.additions = additions
        self._rebuild()
        logger.info(
            "filter additions from yurt-hub-cfg now: %s",
            "; ".join(f"{n}: {', '.join(c)}" for n, c in additions.items()) or "none",
        )
        return True

    def _rebuild(self) -> None:
        table: dict[tuple[str, str, str], list[str]] = {}
        for spec in self.active:
            components = spec.components | set(self.additions.get(spec.name, ()))
            for component in components:
                for resource, verbs in spec.verbs.items():
                    for verb in verbs:
                        table.setdefault((component, verb, resource), []).append(spec.name)
        self._table = {key: tuple(names) for key, names in table.items()}
