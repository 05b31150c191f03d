"""``serviceenvupdater``: explicit ``KUBERNETES_SERVICE_HOST``/``_PORT`` env points at the hub.

PURE. Pods that set these variables themselves (CNI agents, operators that bypass the service
IP) would dial the cloud apiserver directly; kubelet sees them rewritten to the hub's address
and secure port (reference §6). Only variables that exist get a new value (none is added). A
``value`` wins over a ``valueFrom`` in kubelet, so one set from elsewhere is overridden too.
Kept off where pods cannot reach the hub's secure port (a loopback or unspecified address,
no serving certificate: ``registry.POINTING_AT_THE_HUB``, ``runtime.Filters.inactive``).

Difference from YurtHub, on purpose: init and ephemeral containers are rewritten too (YurtHub
only rewrites ``spec.containers``), since an init container that sets the variables to talk
to the apiserver (Cilium's ``config`` step does) would otherwise bypass the hub and fail
offline.
"""

from __future__ import annotations

from typing import Any

from yurthub.filters import inputs, objects

HOST, PORT = "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"
VARIABLE_PREFIX = "KUBERNETES_SERVICE_"
"""What both names start with: a body without it has nothing to rewrite."""
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def _env(env: list[Any], values: dict[str, str]) -> list[Any] | None:
    """The rewritten env list, or None when nothing changes."""
    changed = None
    for i, var in enumerate(env):
        if not isinstance(var, dict):
            continue
        name = var.get("name")
        want = values.get(name) if isinstance(name, str) else None
        if want is None or var.get("value") == want:
            continue
        if changed is None:
            changed = list(env)
        changed[i] = {**var, "value": want}
    return changed


def apply(obj: objects.Obj, kind: str, world: inputs.Inputs) -> objects.Obj | None:
    if kind != "Pod":
        return obj
    values = {HOST: world.hub_address.host, PORT: str(world.hub_address.port)}
    spec = objects.spec(obj)
    new_spec: dict[str, Any] | None = None
    for field in CONTAINER_LISTS:
        containers = objects.sequence(spec.get(field))
        new_list: list[Any] | None = None
        for i, container in enumerate(containers):
            if not isinstance(container, dict):
                continue
            env = _env(objects.sequence(container.get("env")), values)
            if env is None:
                continue
            if new_list is None:
                new_list = list(containers)
            new_list[i] = {**container, "env": env}
        if new_list is not None:
            if new_spec is None:
                new_spec = dict(spec)
            new_spec[field] = new_list
    if new_spec is None:
        return obj
    return {**obj, "spec": new_spec}
