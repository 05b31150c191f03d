"""The ``leader-hub-<pool>`` ConfigMap read, and where this hub's pool-scoped data comes from.

PURE. ``edgehub manager``'s ``hubleaderconfig`` controller (or OpenYurt's yurt-manager) writes
the ConfigMap in the hubs' namespace (``--namespace``, label
``openyurt.io/configmap-name=leader-hub-<pool>``) with:

- ``leaders``: ``<node>/<ip>`` pairs, comma separated (sorted);
- ``pool-scoped-metadata``: ``group/version/resource`` list (``gvrs``);
- ``interconnectivity``, ``enable-leader-election``: ``"true"`` or ``"false"``.

``parse`` reads the whole ConfigMap or refuses it with one ``ConfigMapError`` naming the bad
key: the caller keeps the last good configuration (reference: YurtHub would half-apply it).

Source (reference §8.3): a follower, i.e. a hub that reads pool-scoped resources from a leader,
is one with leader election enabled, at least one leader, and not itself a leader. Difference
from YurtHub on purpose: ``interconnectivity: "false"`` (the pool's nodes cannot reach each
other) also means no follower, where YurtHub ignores the key and would dial leaders it cannot
reach, once per leader change and health check.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import re
from collections.abc import Mapping

from yurthub.pool import gvrs

PREFIX = "leader-hub-"
LABEL = "openyurt.io/configmap-name"
KEY_LEADERS = "leaders"
KEY_METADATA = "pool-scoped-metadata"
KEY_INTERCONNECTIVITY = "interconnectivity"
KEY_ENABLE = "enable-leader-election"

MAX_LEADERS = 64
"""More leaders than any pool needs; a bigger list is refused (each one is probed)."""

_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def name_for(pool: str) -> str:
    return f"{PREFIX}{pool}"


class ConfigMapError(ValueError):
    """The ConfigMap cannot be used; the message names the key and what is wrong."""


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Leader:
    node: str
    address: str
    """An IP literal (v4 or v6, normalised)."""

    def url(self, port: int) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"https://{host}:{port}"


@dataclasses.dataclass(frozen=True, slots=True)
class PoolConfig:
    leaders: tuple[Leader, ...] = ()
    resources: tuple[gvrs.Gvr, ...] | None = None
    """None: the key is absent (``--pool-scope-resources`` applies)."""
    interconnectivity: bool = True
    enable_leader_election: bool = False


class Source(enum.StrEnum):
    API = "api"
    """The cloud (through the hub's own proxy: load balancing, health, the cache offline)."""
    POOL = "pool"
    """A healthy leader hub, else the cloud."""


def parse(data: Mapping[str, object] | None) -> PoolConfig:
    """The ConfigMap's ``data`` -> ``PoolConfig``; raises ``ConfigMapError``."""
    data = data or {}
    if not isinstance(data, Mapping):
        raise ConfigMapError("data is not a map of strings")
    return PoolConfig(
        leaders=_leaders(_text(data, KEY_LEADERS, "")),
        resources=_resources(data),
        interconnectivity=_flag(data, KEY_INTERCONNECTIVITY, default=True),
        enable_leader_election=_flag(data, KEY_ENABLE, default=False),
    )


def source(config: PoolConfig, node_name: str) -> Source:
    if not config.enable_leader_election or not config.interconnectivity or not config.leaders:
        return Source.API
    if any(leader.node == node_name for leader in config.leaders):
        return Source.API
    return Source.POOL


def leaderless(config: PoolConfig) -> bool:
    """Whether ``config`` asks for leaders but names none: followers may keep reading from
    the leaders they had while those still answer (``leaders.Leaders.update``), rather than
    all going to the cloud at once because of a transient empty set."""
    return config.enable_leader_election and config.interconnectivity and not config.leaders


def is_leader(config: PoolConfig, node_name: str) -> bool:
    return config.enable_leader_election and any(
        leader.node == node_name for leader in config.leaders
    )


def _text(data: Mapping[str, object], key: str, default: str) -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise ConfigMapError(f"{key}: not a string")
    return value


def _flag(data: Mapping[str, object], key: str, *, default: bool) -> bool:
    if key not in data:
        return default
    value = _text(data, key, "").strip().lower()
    if value in ("true", "false"):
        return value == "true"
    raise ConfigMapError(f'{key}: {value[:32]!r} is neither "true" nor "false"')


def _leaders(text: str) -> tuple[Leader, ...]:
    out: list[Leader] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        node, slash, address = item.partition("/")
        if not slash or not node or not address:
            raise ConfigMapError(f"{KEY_LEADERS}: {item[:80]!r} is not <node>/<ip>")
        if len(node) > 253 or not _NODE_NAME.fullmatch(node):
            raise ConfigMapError(f"{KEY_LEADERS}: {node[:80]!r} is not a node name")
        try:
            ip = ipaddress.ip_address(address)
        except ValueError as e:
            raise ConfigMapError(f"{KEY_LEADERS}: {address[:80]!r} is not an IP address") from e
        if ip.is_unspecified or ip.is_multicast:
            raise ConfigMapError(f"{KEY_LEADERS}: {address!r} cannot be a leader's address")
        leader = Leader(node, str(ip))
        if any(existing.node == node for existing in out):
            raise ConfigMapError(f"{KEY_LEADERS}: node {node!r} is listed twice")
        out.append(leader)
    if len(out) > MAX_LEADERS:
        raise ConfigMapError(f"{KEY_LEADERS}: {len(out)} leaders, at most {MAX_LEADERS}")
    return tuple(sorted(out))


def _resources(data: Mapping[str, object]) -> tuple[gvrs.Gvr, ...] | None:
    if KEY_METADATA not in data:
        return None
    try:
        return gvrs.parse_list(_text(data, KEY_METADATA, ""))
    except gvrs.GvrError as e:
        raise ConfigMapError(f"{KEY_METADATA}: {e}") from e
