"""Cache agents: which components' responses are cached (reference §2.6).

The set is the defaults (kubelet, kube-proxy, flanneld, coredns, raven-agent-ds,
yurttunnel-agent, yurthub, ``multiplexer-proxy-<node>``), plus ``--cache-agents``, plus the
``cache_agents`` key of ConfigMap ``yurt-hub-cfg`` (label
``openyurt.io/configmap-name=yurt-hub-cfg``, namespace ``kube-system`` by default), applied live;
``*`` anywhere caches every component. Deleting the ConfigMap (or its key) reverts to defaults
plus the flag.

``follow_configmap`` keeps the set current. It lists and watches the ConfigMap THROUGH THE
HUB'S OWN PROXY (``yurthub.following``) with a ``yurthub/...`` User-Agent, so the answers are
themselves cached under component ``yurthub`` and the configured agents survive a restart while
the cloud is down (YurtHub does the same with its informers, reference §1.1). The same watch
feeds the response filters' per-filter additions (``also``) and the other ConfigMaps of the hub
labelled the same way (``others``: the pool's ``leader-hub-<pool>``, which the manager labels
``openyurt.io/configmap-name=leader-hub-<pool>``): one label selector
(``openyurt.io/configmap-name in (leader-hub-<pool>,yurt-hub-cfg)``) names them all, so a hub
holds one ConfigMap watch upstream, not one per ConfigMap.

Dangers: the loop runs for the hub's lifetime and must never spin: every failure waits with a
capped backoff; a 410 Gone relists; cancellation ends it.
"""

from __future__ import annotations

import dataclasses
import logging
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import aiohttp

from yurthub import following, pacing

logger = logging.getLogger(__name__)

DEFAULT_AGENTS = (
    "kubelet",
    "kube-proxy",
    "flanneld",
    "coredns",
    "raven-agent-ds",
    "yurttunnel-agent",
    "yurthub",
)
WILDCARD = "*"
CONFIGMAP_NAME = "yurt-hub-cfg"
CONFIGMAP_LABEL = "openyurt.io/configmap-name"
CONFIGMAP_KEY = "cache_agents"
USER_AGENT = following.USER_AGENT
"""The hub's own component is ``yurthub``: a default agent, so its reads are cached."""
MAX_LIST_BYTES = 4 << 20
"""ConfigMaps are at most 1 MiB each: a bigger item is not what we asked for."""


def parse_agents(text: str) -> tuple[str, ...]:
    """A comma list: trimmed, lower-cased, de-duplicated in order."""
    out: list[str] = []
    for raw in text.split(","):
        agent = raw.strip().lower()
        if agent and agent not in out:
            out.append(agent)
    return tuple(out)


@dataclasses.dataclass(frozen=True, slots=True)
class Agents:
    names: frozenset[str]
    wildcard: bool

    @classmethod
    def build(
        cls, *, node_name: str, extra: Iterable[str] = (), configured: Iterable[str] = ()
    ) -> Agents:
        names = set(DEFAULT_AGENTS)
        if node_name:
            names.add(f"multiplexer-proxy-{node_name}")
        names.update(a.strip().lower() for a in extra if a.strip())
        names.update(a.strip().lower() for a in configured if a.strip())
        wildcard = WILDCARD in names
        names.discard(WILDCARD)
        return cls(frozenset(names), wildcard)

    def allows(self, component: str) -> bool:
        """``component`` is already the truncated User-Agent; truncate again to be safe."""
        if not component:
            return False
        return self.wildcard or component.split("/", 1)[0].lower() in self.names


class AgentSet:
    """The live agent set: flag + defaults, and whatever the ConfigMap says right now."""

    def __init__(self, *, node_name: str, flag_agents: Iterable[str] = ()) -> None:
        self._node_name = node_name
        self._flag = tuple(flag_agents)
        self._configured: tuple[str, ...] = ()
        self.current = Agents.build(node_name=node_name, extra=self._flag)

    @property
    def configured(self) -> tuple[str, ...]:
        return self._configured

    def allows(self, component: str) -> bool:
        return self.current.allows(component)

    def apply_configmap(self, data: Mapping[str, Any] | None) -> bool:
        """Take ``cache_agents`` from the ConfigMap's data (None: deleted). True if it changed."""
        raw = data.get(CONFIGMAP_KEY) if data else None
        configured = parse_agents(raw) if isinstance(raw, str) else ()
        if configured == self._configured:
            return False
        self._configured = configured
        self.current = Agents.build(
            node_name=self._node_name, extra=self._flag, configured=configured
        )
        logger.info(
            "cache agents now: %s%s",
            ", ".join(sorted(self.current.names)),
            " and every other component (*)" if self.current.wildcard else "",
        )
        return True


# --- following the ConfigMap through the hub ---------------------------------------------------


class ConfigTarget(Protocol):
    """Something configured by ``yurt-hub-cfg``'s data (the agent set, the filter approver)."""

    def apply_configmap(self, data: Mapping[str, Any] | None) -> bool: ...


class _ConfigMapFollower:
    """``following.Target`` for the one ConfigMap: hands its data to every ``ConfigTarget``."""

    def __init__(self, targets: Sequence[ConfigTarget]) -> None:
        self._targets = targets
        self._found: Mapping[str, Any] | None = None

    def begin(self) -> None:
        self._found = None

    def add(self, obj: Mapping[str, Any]) -> None:
        if _mapping(obj.get("metadata"), "metadata").get("name") == CONFIGMAP_NAME:
            self._found = _mapping(obj.get("data"), "the ConfigMap's data")

    def commit(self) -> None:
        self._apply(self._found)

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        if _mapping(obj.get("metadata"), "metadata").get("name") != CONFIGMAP_NAME:
            return
        deleted = event_type == "DELETED"
        self._apply(None if deleted else _mapping(obj.get("data"), "data"))

    def mark_absent(self) -> None:
        self._apply(None)

    def _apply(self, data: Mapping[str, Any] | None) -> None:
        for target in self._targets:
            target.apply_configmap(data)


class _ByName:
    """``following.Target`` for several ConfigMaps of one watch: each item to the target of
    its name (others are ignored); lists begin, commit and go absent for all of them."""

    def __init__(self, targets: Mapping[str, following.Target]) -> None:
        self._targets = targets

    def _target(self, obj: Mapping[str, Any]) -> following.Target | None:
        return self._targets.get(str(_mapping(obj.get("metadata"), "metadata").get("name")))

    def begin(self) -> None:
        for target in self._targets.values():
            target.begin()

    def add(self, obj: Mapping[str, Any]) -> None:
        target = self._target(obj)
        if target is not None:
            target.add(obj)

    def commit(self) -> None:
        for target in self._targets.values():
            target.commit()

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        target = self._target(obj)
        if target is not None:
            target.apply(event_type, obj)

    def mark_absent(self) -> None:
        for target in self._targets.values():
            target.mark_absent()


def label_selector(names: Iterable[str]) -> str:
    """The selector naming ConfigMaps labelled ``openyurt.io/configmap-name=<their name>``.

    PURE."""
    unique = sorted(set(names))
    if len(unique) == 1:
        return f"{CONFIGMAP_LABEL}={unique[0]}"
    return f"{CONFIGMAP_LABEL} in ({','.join(unique)})"


async def follow_configmap(
    agent_set: ConfigTarget,
    session: aiohttp.ClientSession,
    proxy_url: str,
    *,
    namespace: str = "kube-system",
    max_backoff: float = 30.0,
    also: Sequence[ConfigTarget] = (),
    others: Mapping[str, following.Target] | None = None,
    cloud_healthy: Callable[[], bool] = lambda: True,
    pace: pacing.Settings | None = None,
) -> None:
    """List+watch ``yurt-hub-cfg`` through the hub forever (until cancelled); its data goes to
    ``agent_set`` and to every one of ``also`` (the filters read their additions from it: one
    watch for the whole hub); ConfigMaps named in ``others`` (same namespace, labelled with
    their name) come through the same watch to their own targets."""
    targets: dict[str, following.Target] = dict(others or {})
    targets[CONFIGMAP_NAME] = _ConfigMapFollower([agent_set, *also])
    names = sorted(targets)
    await following.follow(
        _ByName(targets),
        session,
        proxy_url,
        f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/configmaps",
        what=f"ConfigMap{'s' if len(names) > 1 else ''} {namespace}/{','.join(names)}",
        label_selector=label_selector(names),
        max_backoff=max_backoff,
        max_item=MAX_LIST_BYTES,
        cloud_healthy=cloud_healthy,
        pace=pace,
    )


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    """``value`` as a JSON object (absent: empty). Any other shape is a ``ValueError``, which
    the follower retries: a body it cannot read must never end it (and with it the hub)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not a JSON object")
    return value
