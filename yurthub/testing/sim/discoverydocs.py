"""Discovery documents built from the kind registry: /version, /api, /apis, group/version lists,
and the aggregated ``apidiscovery.k8s.io/v2`` form that kubectl 1.32 asks for first.

Pure: the registry in, plain dicts out. Because CRD types come and go with the
registry, these are computed per request (cheap: a few dozen entries).
"""

from __future__ import annotations

import platform
from typing import Any

from yurthub.testing.sim import resources

KUBE_VERSION = "v1.32.4"


def version() -> dict[str, Any]:
    major, minor, _ = KUBE_VERSION.lstrip("v").split(".")
    return {
        "major": major,
        "minor": minor,
        "gitVersion": KUBE_VERSION,
        "gitCommit": "59526cd4867447956156ae3a602fcbac10a2c335",
        "gitTreeState": "clean",
        "buildDate": "2025-04-22T16:02:27Z",
        "goVersion": "go1.23.6",
        "compiler": "gc",
        "platform": f"linux/{'arm64' if platform.machine() in ('aarch64', 'arm64') else 'amd64'}",
    }


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group_entry(group: str, versions: list[str]) -> dict[str, Any]:
    gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list(registry: resources.Registry) -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_entry(g, vs) for g, vs in registry.groups() if g],
    }


def api_group(registry: resources.Registry, group: str) -> dict[str, Any] | None:
    for g, vs in registry.groups():
        if g == group and g:
            entry = _group_entry(g, vs)
            return {"kind": "APIGroup", "apiVersion": "v1", **entry}
    return None


def _sub_kind(rt: resources.ResourceType, sub: str) -> tuple[str, str, str]:
    found = resources.SUBRESOURCE_KINDS.get(sub)
    if found is None:
        return (rt.group, rt.version, rt.kind)
    group, version, kind = found
    if not group and not version:
        return ("", "v1", kind)
    return found


def resource_list(registry: resources.Registry, group: str, version: str) -> dict[str, Any] | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    entries: list[dict[str, Any]] = []
    for rt in types:
        entry: dict[str, Any] = {
            "name": rt.resource,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": list(rt.verbs),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        entries.append(entry)
        for sub in sorted(rt.subresources):
            g, v, kind = _sub_kind(rt, sub)
            sub_entry: dict[str, Any] = {
                "name": f"{rt.resource}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": kind,
                "verbs": list(resources.SUBRESOURCE_VERBS.get(sub, ("get",))),
            }
            if (g, v) != (rt.group, rt.version):
                sub_entry["group"], sub_entry["version"] = g, v
            entries.append(sub_entry)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }


def _aggregated_version(registry: resources.Registry, group: str, v: str) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for rt in registry.in_group_version(group, v):
        entry: dict[str, Any] = {
            "resource": rt.resource,
            "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
            "scope": "Namespaced" if rt.namespaced else "Cluster",
            "singularResource": rt.singular,
            "verbs": list(rt.verbs),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        subs = []
        for sub in sorted(rt.subresources):
            g, sv, kind = _sub_kind(rt, sub)
            subs.append(
                {
                    "subresource": sub,
                    "responseKind": {"group": g, "version": sv, "kind": kind},
                    "verbs": list(resources.SUBRESOURCE_VERBS.get(sub, ("get",))),
                }
            )
        if subs:
            entry["subresources"] = subs
        items.append(entry)
    return {"version": v, "resources": items, "freshness": "Current"}


def aggregated(
    registry: resources.Registry, *, legacy: bool, version: str = "v2"
) -> dict[str, Any]:
    """``APIGroupDiscoveryList``: the core group for /api, every named group for /apis."""
    groups = [(g, vs) for g, vs in registry.groups() if (g == "") == legacy]
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": f"apidiscovery.k8s.io/{version}",
        "metadata": {},
        "items": [
            {
                "metadata": {"name": g} if g else {},
                "versions": [_aggregated_version(registry, g, v) for v in vs],
            }
            for g, vs in groups
        ],
    }
