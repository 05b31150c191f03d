"""Pool-scoped resources as ``group/version/resource`` (reference §8.1).

PURE. The spelling is YurtHub's and the ``leader-hub-<pool>`` ConfigMap's: the core group is
empty (``/v1/services``), other groups are named (``discovery.k8s.io/v1/endpointslices``). A
list is comma separated; blanks are skipped; a duplicate is kept once.

Difference from YurtHub on purpose: ``--pool-scope-resources`` replaces the defaults instead of
appending to them (YurtHub's flag ``Set`` appends, so the defaults can never be left out from
the command line); an empty value turns the multiplexer off.
"""

from __future__ import annotations

import dataclasses
import re

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


class GvrError(ValueError):
    """A resource that is not ``group/version/resource``; the message names it."""


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Gvr:
    group: str
    version: str
    resource: str

    def __str__(self) -> str:
        return f"{self.group}/{self.version}/{self.resource}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str = "") -> str:
        """The collection's URL path (all namespaces when ``namespace`` is empty)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace:
            base += f"/namespaces/{namespace}"
        return f"{base}/{self.resource}"


SERVICES = Gvr("", "v1", "services")
ENDPOINTSLICES = Gvr("discovery.k8s.io", "v1", "endpointslices")
DEFAULTS: tuple[Gvr, ...] = (SERVICES, ENDPOINTSLICES)
NODEPOOLS = Gvr("apps.openyurt.io", "v1beta2", "nodepools")
"""Read by the response filters (servicetopology) of every hub: the same for the whole pool."""


def parse_one(text: str) -> Gvr:
    item = text.strip()
    parts = item.split("/")
    if len(parts) != 3:
        raise GvrError(f"{item!r} is not group/version/resource (core group: /v1/services)")
    group, version, resource = parts
    if group and (len(group) > 253 or not _DNS_SUBDOMAIN.fullmatch(group)):
        raise GvrError(f"{item!r}: the group {group!r} is not a DNS subdomain")
    if not version or not _DNS_LABEL.fullmatch(version):
        raise GvrError(f"{item!r}: the version {version!r} is not a lower-case DNS label")
    if not resource or len(resource) > 63 or not _DNS_LABEL.fullmatch(resource):
        raise GvrError(f"{item!r}: the resource {resource!r} is not a lower-case plural name")
    return Gvr(group, version, resource)


def parse_list(text: str) -> tuple[Gvr, ...]:
    """A comma list -> resources in order, duplicates once; raises ``GvrError``."""
    out: list[Gvr] = []
    for raw in text.split(","):
        if not raw.strip():
            continue
        gvr = parse_one(raw)
        if gvr not in out:
            out.append(gvr)
    return tuple(out)


def render_list(gvrs: tuple[Gvr, ...] | frozenset[Gvr]) -> str:
    """Sorted and comma joined: the ConfigMap's ``pool-scoped-metadata`` value."""
    return ",".join(str(g) for g in sorted(gvrs))


def keys(gvrs: tuple[Gvr, ...] | frozenset[Gvr]) -> frozenset[str]:
    """The ``group/version/resource`` strings ``requestinfo.pool_scope`` compares with."""
    return frozenset(str(g) for g in gvrs)
