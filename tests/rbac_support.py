"""Checking RBAC rules against what a component really asked the simulated apiserver: its
requests from the simulator's audit log, and those no rule grants."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from yurthub.testing import simapiserver

Request = tuple[str, str, str, str | None, str]
"""(verb, group, resource[/subresource], namespace, name), as the audit log records it."""


def requests_of(sim: simapiserver.SimApiserver, user: str) -> set[Request]:
    return {
        (r.verb, r.group, r.rbac[2], r.namespace, r.name) for r in sim.audit_log() if r.user == user
    }


def granted(
    rules: Iterable[Mapping[str, Any]], verb: str, group: str, resource: str, name: str
) -> bool:
    return any(
        group in rule["apiGroups"]
        and resource in rule["resources"]
        and verb in rule["verbs"]
        and (not rule.get("resourceNames") or name in rule["resourceNames"])
        for rule in rules
    )


def denied(
    seen: Iterable[Request],
    cluster_rules: Sequence[Mapping[str, Any]],
    role_rules: Sequence[Mapping[str, Any]] = (),
    namespace: str | None = None,
) -> list[Request]:
    """The requests neither the ClusterRole's rules nor (in ``namespace``) the Role's grant."""
    return sorted(
        r
        for r in seen
        if not granted(cluster_rules, r[0], r[1], r[2], r[4])
        and not (r[3] == namespace and granted(role_rules, r[0], r[1], r[2], r[4]))
    )


def kinds(seen: Iterable[Request]) -> set[tuple[str, str, str]]:
    """(verb, group, resource) of the requests: what the scenario exercised."""
    return {(verb, group, resource) for verb, group, resource, _, _ in seen}
