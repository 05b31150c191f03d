"""Cache agents: which components' responses are cached (reference §2.6).

The set is the defaults (kubelet, kube-proxy, flanneld, coredns, raven-agent-ds,
yurttunnel-agent, yurthub, ``multiplexer-proxy-<node>``), plus ``--cache-agents``, plus the
``cache_agents`` key of ConfigMap ``yurt-hub-cfg`` (label
``openyurt.io/configmap-name=yurt-hub-cfg``, namespace ``kube-system`` by default), applied live;
``*`` anywhere caches every component. Deleting the ConfigMap (or its key) reverts to defaults
plus the flag.

``follow_configmap`` keeps the set current. It lists and watches the ConfigMap THROUGH THE
HUB'S OWN PROXY with a ``yurthub/...`` User-Agent, so the answers are themselves cached under
component ``yurthub`` and the configured agents survive a restart while the cloud is down
(YurtHub does the same with its informers, reference §1.1).

Dangers: the loop runs for the hub's lifetime and must never spin: every failure waits with a
capped backoff; a 410 Gone relists; cancellation ends it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp
import orjson

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
SHORT_WATCH = 1.0
"""Seconds: a watch that ends sooner without an event counts as a failure (backoff, relist)."""
USER_AGENT = "yurthub/edgehub"
MAX_LIST_BYTES = 4 << 20
"""The hub's own component is ``yurthub``: a default agent, so its reads are cached."""


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


class _Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


async def follow_configmap(
    agent_set: AgentSet,
    session: aiohttp.ClientSession,
    proxy_url: str,
    *,
    namespace: str = "kube-system",
    max_backoff: float = 30.0,
) -> None:
    """List+watch ``yurt-hub-cfg`` through the hub forever (until cancelled)."""
    selector = f"{CONFIGMAP_LABEL}={CONFIGMAP_NAME}"
    base = f"{proxy_url.rstrip('/')}/api/v1/namespaces/{urllib.parse.quote(namespace)}/configmaps"
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    first_backoff = min(0.5, max_backoff)
    backoff = first_backoff
    while True:
        try:
            rv = await _list(agent_set, session, base, selector, headers)
            backoff = first_backoff
            while True:
                rv = await _watch(agent_set, session, base, selector, headers, rv)
        except asyncio.CancelledError:
            raise
        except _Gone:
            continue
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            logger.debug("following %s/%s: %s", namespace, CONFIGMAP_NAME, e)
        await asyncio.sleep(backoff * (1 + random.random() / 2))
        backoff = min(backoff * 2, max_backoff)


async def _list(
    agent_set: AgentSet,
    session: aiohttp.ClientSession,
    base: str,
    selector: str,
    headers: Mapping[str, str],
) -> str:
    async with session.get(base, params={"labelSelector": selector}, headers=headers) as resp:
        if resp.status != 200:
            raise ValueError(f"list configmaps: HTTP {resp.status}")
        # ConfigMaps are at most 1 MiB each and the selector matches one or two: a bigger answer
        # is not what we asked for.
        raw = bytearray()
        async for chunk in resp.content.iter_chunked(1 << 16):
            raw += chunk
            if len(raw) > MAX_LIST_BYTES:
                raise ValueError(f"the ConfigMap list is larger than {MAX_LIST_BYTES} bytes")
        body = _mapping(orjson.loads(raw), "the ConfigMap list")
    items = body.get("items") or []
    if not isinstance(items, list):
        raise ValueError("the ConfigMap list's items are not a list")
    found = None
    for item in items:
        obj = _mapping(item, "a ConfigMap")
        if _mapping(obj.get("metadata"), "metadata").get("name") == CONFIGMAP_NAME:
            found = _mapping(obj.get("data"), "the ConfigMap's data")
    agent_set.apply_configmap(found)
    return str(_mapping(body.get("metadata"), "metadata").get("resourceVersion") or "")


async def _watch(
    agent_set: AgentSet,
    session: aiohttp.ClientSession,
    base: str,
    selector: str,
    headers: Mapping[str, str],
    rv: str,
) -> str:
    params = {
        "watch": "true",
        "labelSelector": selector,
        "allowWatchBookmarks": "true",
        "timeoutSeconds": str(random.randint(300, 600)),
    }
    if rv:
        params["resourceVersion"] = rv
    started = time.monotonic()
    events = 0
    async with session.get(base, params=params, headers=headers, timeout=None) as resp:
        if resp.status == 410:
            raise _Gone
        if resp.status != 200:
            raise ValueError(f"watch configmaps: HTTP {resp.status}")
        async for line in resp.content:
            if not line.strip():
                continue
            events += 1
            event = _mapping(orjson.loads(line), "a watch event")
            obj = _mapping(event.get("object"), "a watch event's object")
            kind = event.get("type")
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise _Gone
                raise ValueError(f"watch error: {obj.get('message', '')}")
            meta = _mapping(obj.get("metadata"), "metadata")
            rv = str(meta.get("resourceVersion") or rv)
            if kind == "BOOKMARK" or meta.get("name") != CONFIGMAP_NAME:
                continue
            deleted = kind == "DELETED"
            agent_set.apply_configmap(None if deleted else _mapping(obj.get("data"), "data"))
    if not events and time.monotonic() - started < SHORT_WATCH:
        # client-go's "very short watch": a server that ends every watch at once is asked again
        # after the backoff, not in a tight loop.
        raise ValueError("the watch ended at once without an event")
    return rv


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    """``value`` as a JSON object (absent: empty). Any other shape is a ``ValueError``, which
    the follower retries: a body it cannot read must never end it (and with it the hub)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not a JSON object")
    return value
