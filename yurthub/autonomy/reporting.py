"""Keeps the node's ``Autonomy`` condition in the cloud equal to ``conditions.desired``.

Every heartbeat interval, while a server is healthy, the reporter reads the node as kubelet
last saw it through the hub (the cached ``kubelet/nodes.v1.core/<node>``; the cloud's copy when
the cache has none), computes the desired condition from its autonomy annotations, the
cache's failed writes and the last ended outage, and only when it differs PATCHes
``nodes/<node>/status`` (strategic merge: this condition alone) on a healthy server with the
hub's own identity. Kubelet's own
node GET is not involved: it stays local-first (``proxy/routing.py``), as before.

Invariants: at most one request in flight; one log line per condition actually written;
offline nothing is attempted (the next tick after the cloud is back writes what changed
meanwhile). After a write, a cached node older than the one the write returned is not
trusted with the same desired condition (kubelet's watch has not brought the update yet),
so a stale cache costs no second write.

Dangers: the hub's identity must be allowed to patch its node's status (a node identity is:
Node authorizer + NodeRestriction). A refusal is logged once per distinct answer, then at
debug, and retried every tick (the reporter never stops the hub).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from nodeautonomy import marking
from yurthub import health, settings
from yurthub.autonomy import conditions
from yurthub.proxy import upstream

log = logging.getLogger(__name__)

USER_AGENT = "edgehub-autonomy"
PATCH_TYPE = "application/strategic-merge-patch+json"
_MAX_NODE_BYTES = 4 << 20

HealthyServer = Callable[[], str | None]
"""A server the health checker thinks healthy now, or None (offline)."""
CachedNode = Callable[[], Awaitable[bytes | None]]
"""The node kubelet last read through the hub (its cached JSON), or None."""
CacheView = Callable[[], conditions.CacheHealth]
LastOutageView = Callable[[], conditions.LastOutage | None]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _older(resource_version: str, than: str) -> bool:
    """``resource_version`` is known to be older than ``than`` (etcd's are integers)."""
    return resource_version.isdigit() and than.isdigit() and int(resource_version) < int(than)


def _resource_version(node: Mapping[str, Any]) -> str:
    meta = node.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""


class Reporter:
    def __init__(
        self,
        hub: settings.HubSettings,
        client: upstream.Upstream,
        healthy_server: HealthyServer,
        *,
        cached_node: CachedNode | None,
        cache_health: CacheView,
        last_outage: LastOutageView = lambda: None,
    ) -> None:
        """``last_outage``: the node's last ended outage (the hub's ``outages.recording``)."""
        self._node_name = hub.node_name
        self._interval = hub.heartbeat.interval
        self._timeout = hub.heartbeat.timeout
        self._client = client
        self._healthy_server = healthy_server
        self._cached_node = cached_node
        self._cache_health = cache_health
        self._last_outage = last_outage
        self._written: tuple[conditions.Condition, str] | None = None
        self._last_problem = ""
        self.writes = 0
        """Conditions written since start (tests)."""

    async def run(self) -> None:
        """Check every heartbeat interval until cancelled."""
        while True:
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:
                # A malformed node or a bug costs one check, never the hub.
                log.exception("checking the Autonomy condition failed")
            await asyncio.sleep(self._interval)

    async def check(self) -> bool:
        """One look; True when a condition was written."""
        server = self._healthy_server()
        if server is None:
            return False
        node, from_cache = await self._node(server)
        if node is None:
            return False
        want = conditions.desired(marking.of_node(node), self._cache_health(), self._last_outage())
        if not conditions.needs_update(node, want):
            return False
        if from_cache and self._written is not None:
            written, version = self._written
            if written == want and _older(_resource_version(node), version):
                return False  # our write is not in the cache yet
        return await self._write(server, node, want)

    async def _node(self, server: str) -> tuple[dict[str, Any] | None, bool]:
        if self._cached_node is not None:
            raw = await self._cached_node()
            if raw is not None:
                node = _object(raw)
                if node is not None:
                    return node, True
        status, body = await self._call(server, "GET", None)
        if status == 404:
            log.debug("node %s is not registered yet", self._node_name)
            return None, False
        if status != 200:
            self._problem(f"reading node {self._node_name}: HTTP {status}")
            return None, False
        return _object(body), False

    async def _write(
        self, server: str, node: Mapping[str, Any], want: conditions.Condition
    ) -> bool:
        patch = conditions.status_patch(node, want, _now())
        status, body = await self._call(server, "PATCH", orjson.dumps(patch))
        if status != 200:
            self._problem(f"updating the Autonomy condition of {self._node_name}: HTTP {status}")
            return False
        updated = _object(body) or {}
        self._written = (want, _resource_version(updated))
        self._last_problem = ""
        self.writes += 1
        log.info(
            "node %s: Autonomy condition %s (%s): %s",
            self._node_name,
            want.status,
            want.reason,
            want.message,
        )
        return True

    async def _call(self, server: str, method: str, body: bytes | None) -> tuple[int, bytes]:
        path = f"/api/v1/nodes/{self._node_name}" + ("/status" if method == "PATCH" else "")
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if body is not None:
            headers["Content-Type"] = PATCH_TYPE
        status, answer = await self._client.call_as_hub(
            server,
            method,
            path,
            data=body,
            headers=headers,
            within=self._timeout,
            limit=_MAX_NODE_BYTES,
        )
        return (0, b"") if answer is None else (status, answer)

    def _problem(self, text: str) -> None:
        if text != self._last_problem and not text.endswith("HTTP 0"):
            log.warning("%s", text)
        else:
            log.debug("%s", text)
        self._last_problem = text


def _object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def first_healthy(checker: health.HealthChecker) -> HealthyServer:
    """The first server ``checker`` thinks healthy, in ``--server-addr`` order."""
    return lambda: next((s for s in checker.servers if checker.is_healthy(s)), None)
